"""A library's annotations exported to, and imported from, a caption folder or a COCO captions JSON.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from engine.files import content_hash
from engine.library.captionfolder import (
    CaptionFolder,
    CaptionFolderError,
    Item,
    check_file_key,
    export_coco_captions,
    load_caption_folder,
    read_coco_captions,
)
from engine.library.catalog import Catalog, MediaRecord, MediaStatus
from engine.loop.errors import AnnotationError
from engine.loop.trainingset import library_annotations, write_linked_folder
from engine.types import CaptionSource

log = logging.getLogger(__name__)


ANNOTATION_FORMATS = ("folder", "coco")




def annotation_keys(catalog: Catalog, media: Sequence[MediaRecord]) -> dict[int, str]:
    """A portable key per item: its path relative to its library folder, prefixed with that folder's name
    where two folders hold the same relative path (an item outside every folder: its file name)."""
    roots = catalog.roots()
    relative: dict[int, tuple[str, str]] = {}
    for record in media:
        root = next((r for r in roots if _is_under(record.path, r)), None)
        rel = record.path.relative_to(root).as_posix() if root is not None else record.path.name
        relative[record.id] = (root.name if root is not None else "", rel)
    counts: dict[str, int] = {}
    for _, rel in relative.values():
        counts[rel] = counts.get(rel, 0) + 1
    keys: dict[int, str] = {}
    used: set[str] = set()
    for media_id, (root_name, rel) in relative.items():
        key = rel if counts[rel] == 1 else f"{root_name or media_id}/{rel}"
        key = key if key not in used else f"{media_id}/{rel}"  # two folders of the same name
        keys[media_id] = key
        used.add(key)
    return keys


def _is_under(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
        return True
    except ValueError:
        return False


class AnnotationExport(int):
    """The number of captions an export wrote (an int, so callers that only count keep working), with
    ``skipped``: the keys (or paths) of the annotated items it had to leave out."""

    skipped: tuple[str, ...]

    def __new__(cls, captions: int, skipped: Sequence[str] = ()) -> AnnotationExport:
        made = super().__new__(cls, captions)
        made.skipped = tuple(skipped)
        return made


def export_annotations(catalog: Catalog, dest: Path, fmt: str = "folder") -> AnnotationExport:
    """Write the library's training captions (user, imported, accepted pairs) of every annotated item as a
    caption folder (media are links to the library's files) or a COCO captions JSON; returns the number of
    captions written. Keys are paths relative to the library's folders, which is what an import matches.

    Items whose files are missing or offline are exported too: their captions are in the catalog. A COCO JSON
    holds them all; a caption folder cannot link to a file that is not there, so it leaves them out and names
    them in the result's ``skipped`` (so does either format for a name an annotation file cannot hold)."""
    if fmt not in ANNOTATION_FORMATS:
        raise AnnotationError(f"format: expected one of {', '.join(ANNOTATION_FORMATS)}, got {fmt!r}")
    annotations = library_annotations(catalog)
    media = [m for m in catalog.iter_media() if m.id in annotations]
    keys = annotation_keys(catalog, media)
    usable, skipped = [], []
    for record in media:
        try:
            keys[record.id].encode("utf-8")
            check_file_key(keys[record.id], str(record.path))
        except (UnicodeEncodeError, CaptionFolderError):
            log.warning("%s: its name cannot be written to an annotation file; its captions are skipped",
                        record.path)
            skipped.append(str(record.path))
            continue
        if fmt == "folder" and not record.path.is_file():
            skipped.append(keys[record.id])
            continue
        usable.append(record)
    if skipped:
        log.warning("%d annotated items were not exported (files missing or names unwritable), e.g. %s",
                    len(skipped), skipped[0])
    captions = [(i, text) for i, record in enumerate(usable) for text in annotations[record.id]]
    dest = Path(dest)
    if fmt == "coco":
        items = [Item(keys[r.id], r.path, "all") for r in usable]
        export_coco_captions(CaptionFolder(dest.parent, dest.parent, items, captions), dest)
    else:
        if not usable:
            if skipped:
                raise AnnotationError(f"{dest}: none of the {len(skipped)} annotated items' files is there (offline "
                                      "or missing) to link into a caption folder; export to a .json (COCO) file, "
                                      "which needs no files")
            raise AnnotationError(f"{dest}: the library has no annotations to export")
        write_linked_folder(dest, [(keys[r.id], r.path) for r in usable], captions)
    return AnnotationExport(len(captions), skipped)


def import_annotations(catalog: Catalog, path: Path) -> int:
    """Add the captions of a caption folder or a COCO captions JSON to the library's items, with provenance
    ``imported``; returns how many were added. An entry matches an item by content (when the folder's file
    can be read), else by its relative path: the longest trailing part of it that names exactly one item
    (so ``trip/IMG_1.jpg`` matches ``.../Photos/trip/IMG_1.jpg``). Captions an item already has are skipped;
    entries that match nothing are logged."""
    from engine.library.captionfolder import normalize_caption

    path = Path(path)
    entries = _coco_entries(path) if path.is_file() else _folder_entries(path)
    # every item, missing and offline ones too (restoring a backup while a drive is unplugged must reach its
    # items); where two items share content, a present one is preferred (it is listed last, so it wins)
    media = sorted(catalog.iter_media(), key=lambda m: (m.status != MediaStatus.MISSING, m.id))
    by_hash = {m.content_hash: m.id for m in media}
    by_suffix = _suffix_index(catalog, media)
    existing = library_annotations(catalog)
    added = matched = 0
    unmatched: list[str] = []
    for key, file, texts in entries:
        media_id = by_hash.get(_safe_hash(file)) if file is not None else None
        media_id = media_id if media_id is not None else _match_key(key, by_suffix)
        if media_id is None:
            unmatched.append(key)
            continue
        matched += 1
        have = set(existing.get(media_id, []))
        for text in texts:
            text = normalize_caption(text)
            if text and text not in have:
                catalog.add_caption(media_id, text, CaptionSource.IMPORTED)
                have.add(text)
                added += 1
        existing[media_id] = list(have)
    if entries and not matched:
        raise AnnotationError(f"{path}: none of its {len(entries)} files is in the library (e.g. {entries[0][0]!r})")
    if unmatched:
        log.warning("%s: %d files are not in the library and were skipped, e.g. %s", path, len(unmatched),
                    unmatched[0])
    return added


def _folder_entries(path: Path) -> list[tuple[str, Path | None, list[str]]]:
    try:
        folder = load_caption_folder(path)
    except CaptionFolderError as exc:
        raise AnnotationError(f"{path}: not a caption folder or a COCO captions JSON ({exc})") from exc
    return [(item.file, item.path, texts) for item, texts in folder.item_captions() if texts]


def _coco_entries(path: Path) -> list[tuple[str, Path | None, list[str]]]:
    """``(file_name, None, captions)`` of a COCO captions JSON, read by the caption-folder importer's parser."""
    try:
        grouped, _ = read_coco_captions(path)
    except CaptionFolderError as exc:
        raise AnnotationError(str(exc)) from exc
    return [(key.replace("\\", "/"), None, texts) for key, texts in grouped.items() if texts]


def _safe_hash(path: Path) -> str | None:
    try:
        return content_hash(path)
    except OSError:  # a link to a file on another machine, say: match by path instead
        return None


def _suffix_index(catalog: Catalog, media: Sequence[MediaRecord]) -> dict[str, set[int]]:
    """Every trailing part of every item's path relative to its folder (and the folder's name) -> item ids."""
    roots = catalog.roots()
    index: dict[str, set[int]] = {}
    for record in media:
        root = next((r for r in roots if _is_under(record.path, r)), None)
        parts = (record.path.relative_to(root.parent) if root is not None else Path(record.path.name)).parts
        for start in range(len(parts)):
            index.setdefault("/".join(parts[start:]), set()).add(record.id)
    return index


def _match_key(key: str, by_suffix: dict[str, set[int]]) -> int | None:
    """The one item the longest trailing part of ``key`` names, or None."""
    parts = [p for p in key.split("/") if p not in ("", ".")]
    for start in range(len(parts)):
        ids = by_suffix.get("/".join(parts[start:]))
        if ids is not None:
            return next(iter(ids)) if len(ids) == 1 else None
    return None
