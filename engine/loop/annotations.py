"""A library's annotations exported to, and imported from, a caption folder or a COCO captions JSON.

An export is a complete backup of what the library knows about its items: every caption with its provenance
(the user's, imported, or the machine's guess), and every accepted and rejected (query, item) pair with its query
and provenance. The formats (:mod:`engine.library.captionfolder`) stay readable by other tools: a caption folder's
``captions.tsv`` and a COCO JSON's ``annotations`` hold only the user's and imported captions, the rest rides in
``caption_sources.tsv`` / ``pairs.tsv`` and in the JSON's ``machine_captions`` / ``pairs``. Importing an export
puts back exactly what it holds, each with its provenance; importing it again adds nothing; a third party's
captions come in as ``imported``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.files import content_hash
from engine.library.captionfolder import (
    ACCEPT,
    CAPTION,
    REJECT,
    Annotation,
    CaptionFolderError,
    check_file_key,
    load_caption_folder,
    normalize_caption,
    read_annotation_tables,
)
from engine.library.catalog import Catalog, MediaRecord, MediaStatus
from engine.library.importers import read_coco_annotations, write_coco_annotations
from engine.loop.errors import AnnotationError
from engine.loop.trainingset import write_linked_folder
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


class AnnotationCounts(int):
    """What an export wrote or an import added: an int, the number of captions (the user's and imported ones,
    so callers that only count keep working), with ``accepted`` and ``rejected`` pairs, ``machine`` captions and
    ``skipped``: the keys (or paths) of the items left out (an export: files missing or names unwritable; an
    import: files not in the library)."""

    accepted: int
    rejected: int
    machine: int
    skipped: tuple[str, ...]

    def __new__(cls, captions: int, accepted: int = 0, rejected: int = 0, machine: int = 0,
                skipped: Sequence[str] = ()) -> AnnotationCounts:
        made = super().__new__(cls, captions)
        made.accepted, made.rejected, made.machine, made.skipped = accepted, rejected, machine, tuple(skipped)
        return made

    def summary(self) -> str:
        """``"3 captions, 5 accepted and 5 rejected results"`` (and ``", 2 machine captions"`` where there are)."""
        machine = f", {self.machine} machine captions" if self.machine else ""
        return f"{int(self)} captions, {self.accepted} accepted and {self.rejected} rejected results{machine}"

    def to_json(self) -> dict[str, int]:
        return {"captions": int(self), "accepted": self.accepted, "rejected": self.rejected,
                "pairs": self.accepted + self.rejected, "machine_captions": self.machine}


def library_annotations_by_kind(catalog: Catalog) -> dict[int, list[Annotation]]:
    """Every item's annotations, every kind with its provenance (``Annotation.file`` left empty): captions then
    pairs, oldest first, each (kind, text) once per item. Items with only the machine's caption are left out
    (indexing makes those again); an item that is in keeps its machine caption."""
    out: dict[int, dict[tuple[str, str], Annotation]] = {}
    for caption in catalog.iter_captions():
        text = normalize_caption(caption.text)
        if text:
            out.setdefault(caption.media_id, {}).setdefault((CAPTION, text),
                                                            Annotation("", CAPTION, text, caption.source))
    for pair in catalog.pairs():
        query = normalize_caption(pair.query)
        kind = ACCEPT if pair.label > 0 else REJECT
        if query:
            out.setdefault(pair.media_id, {}).setdefault((kind, query), Annotation("", kind, query, pair.source))
    return {media_id: list(found.values()) for media_id, found in out.items()
            if any(a.kind != CAPTION or a.source != CaptionSource.PSEUDO for a in found.values())}


def _counts(annotations: Sequence[Annotation], skipped: Sequence[str] = ()) -> AnnotationCounts:
    kinds = [(a.kind, a.source == CaptionSource.PSEUDO) for a in annotations]
    return AnnotationCounts(kinds.count((CAPTION, False)), sum(k == ACCEPT for k, _ in kinds),
                            sum(k == REJECT for k, _ in kinds), kinds.count((CAPTION, True)), skipped)


def export_annotations(catalog: Catalog, dest: Path, fmt: str = "folder") -> AnnotationCounts:
    """Write the library's annotations (:func:`library_annotations_by_kind`: captions with their provenance,
    accepted and rejected pairs with their queries) as a caption folder (media are links to the library's files)
    or a COCO captions JSON; returns what it wrote. Keys are paths relative to the library's folders, which is
    what an import matches (and, in a COCO JSON, each item's content hash).

    Items whose files are missing or offline are exported too: their annotations are in the catalog. A COCO JSON
    holds them all; a caption folder cannot link to a file that is not there, so it leaves them out and names
    them in the result's ``skipped`` (so does either format for a name an annotation file cannot hold)."""
    if fmt not in ANNOTATION_FORMATS:
        raise AnnotationError(f"format: expected one of {', '.join(ANNOTATION_FORMATS)}, got {fmt!r}")
    annotations = library_annotations_by_kind(catalog)
    media = [m for m in catalog.iter_media() if m.id in annotations]
    keys = annotation_keys(catalog, media)
    usable, skipped = [], []
    for record in media:
        try:
            keys[record.id].encode("utf-8")
            check_file_key(keys[record.id], str(record.path))
        except (UnicodeEncodeError, CaptionFolderError):
            log.warning("%s: its name cannot be written to an annotation file; its annotations are skipped",
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
    rows = [Annotation(keys[r.id], a.kind, a.text, a.source) for r in usable for a in annotations[r.id]]
    dest = Path(dest)
    if fmt == "coco":
        write_coco_annotations(dest, [(keys[r.id], r.content_hash) for r in usable], rows)
    else:
        if not usable:
            if skipped:
                raise AnnotationError(f"{dest}: none of the {len(skipped)} annotated items' files is there (offline "
                                      "or missing) to link into a caption folder; export to a .json (COCO) file, "
                                      "which needs no files")
            raise AnnotationError(f"{dest}: the library has no annotations to export")
        index = {r.id: i for i, r in enumerate(usable)}
        captions = [(index[r.id], a.text) for r in usable for a in annotations[r.id]
                    if a.kind == CAPTION and a.source != CaptionSource.PSEUDO]
        write_linked_folder(dest, [(keys[r.id], r.path) for r in usable], captions, annotations=rows)
    return _counts(rows, skipped)


@dataclass(frozen=True, slots=True)
class _Entry:
    """One file of an import: its key, the file itself where the folder has it, its content hash where the
    JSON says, and its annotations."""

    key: str
    file: Path | None
    content_hash: str | None
    annotations: list[Annotation]


def import_annotations(catalog: Catalog, path: Path) -> AnnotationCounts:
    """Put the annotations of a caption folder or a COCO captions JSON on the library's items, each with the
    provenance the file gives (a third party's captions: ``imported``); returns what was added. An entry matches
    the item its relative path names (the longest trailing part of it that names exactly one item, so
    ``trip/IMG_1.jpg`` matches ``.../Photos/trip/IMG_1.jpg``) when that item holds the entry's content (the
    folder's file, or the JSON's ``content_hash``), else the item with that content, else the item at that path.

    What an item already has is skipped (a caption of the same text, a pair of the same query and verdict; the
    machine caption is replaced when it differs), so importing twice adds nothing. Entries that match no item are
    logged and named in the result's ``skipped``; an import none of whose entries match raises."""
    path = Path(path)
    entries = _coco_entries(path) if path.is_file() else _folder_entries(path)
    # every item, missing and offline ones too (restoring a backup while a drive is unplugged must reach its
    # items); where two items share content, a present one is preferred (it is listed last, so it wins)
    media = sorted(catalog.iter_media(), key=lambda m: (m.status != MediaStatus.MISSING, m.id))
    by_hash = {m.content_hash: m.id for m in media}
    hash_of = {m.id: m.content_hash for m in media}
    by_suffix = _suffix_index(catalog, media)
    state = _ItemState.read(catalog)
    added: list[Annotation] = []
    unmatched: list[str] = []
    with catalog.transaction(f"importing annotations from {path}"):
        for entry in entries:
            # the item at the entry's path when it holds the entry's content (two copies of one photo keep their
            # own annotations), else the item with that content, else the one at that path
            digest = entry.content_hash or (_safe_hash(entry.file) if entry.file is not None else None)
            media_id = _match_key(entry.key, by_suffix)
            if digest is not None and (media_id is None or hash_of[media_id] != digest):
                media_id = by_hash.get(digest, media_id)
            if media_id is None:
                unmatched.append(entry.key)
                continue
            added += [a for a in entry.annotations if state.add(catalog, media_id, a)]
    if entries and len(unmatched) == len(entries):
        raise AnnotationError(f"{path}: none of its {len(entries)} files is in the library (e.g. {entries[0].key!r})")
    if unmatched:
        log.warning("%s: %d files are not in the library and were skipped, e.g. %s", path, len(unmatched),
                    unmatched[0])
    return _counts(added, unmatched)


@dataclass
class _ItemState:
    """What each item has, read once, kept up to date as an import adds: caption texts (but the machine's),
    accepted queries, (query, label) pairs and the machine caption."""

    captions: dict[int, set[str]]
    accepted: dict[int, set[str]]
    pairs: dict[int, set[tuple[str, int]]]
    machine: dict[int, str]

    @classmethod
    def read(cls, catalog: Catalog) -> _ItemState:
        state = cls({}, {}, {}, {})
        for caption in catalog.iter_captions():
            text = normalize_caption(caption.text)
            if caption.source == CaptionSource.PSEUDO:
                state.machine[caption.media_id] = text
            else:
                state.captions.setdefault(caption.media_id, set()).add(text)
        for pair in catalog.pairs():
            query = normalize_caption(pair.query)
            state.pairs.setdefault(pair.media_id, set()).add((query, pair.label))
            if pair.label > 0:
                state.accepted.setdefault(pair.media_id, set()).add(query)
        return state

    def add(self, catalog: Catalog, media_id: int, a: Annotation) -> bool:
        """Add ``a`` to the item unless it has it; whether it was added."""
        if a.kind == CAPTION and a.source == CaptionSource.PSEUDO:
            if self.machine.get(media_id) == a.text:
                return False
            catalog.set_pseudo_caption(media_id, a.text)
            self.machine[media_id] = a.text
            return True
        if a.kind == CAPTION:
            have = self.captions.setdefault(media_id, set())
            # a third party's caption (no provenance) may be an older export's accepted query written as a caption
            if a.text in have or (a.source is None and a.text in self.accepted.get(media_id, ())):
                return False
            catalog.add_caption(media_id, a.text, a.source or CaptionSource.IMPORTED)
            have.add(a.text)
            return True
        label = 1 if a.kind == ACCEPT else -1
        judged = self.pairs.setdefault(media_id, set())
        if (a.text, label) in judged:
            return False
        catalog.add_pair(media_id, a.text, label, a.source or CaptionSource.IMPORTED)
        judged.add((a.text, label))
        if label > 0:
            self.accepted.setdefault(media_id, set()).add(a.text)
        return True


def _folder_entries(path: Path) -> list[_Entry]:
    """The entries of a caption folder: its items' captions (``captions.tsv``, no provenance) and, where the
    folder has them, its annotation tables (a row of ``captions.tsv`` they do not list keeps no provenance)."""
    try:
        folder = load_caption_folder(path)
        tables = read_annotation_tables(folder.root) or []
    except CaptionFolderError as exc:
        raise AnnotationError(f"{path}: not a caption folder or a COCO captions JSON ({exc})") from exc
    listed = {(a.file, a.text) for a in tables if a.kind == CAPTION}
    files = {item.file: item.path for item in folder.items}
    grouped: dict[str, list[Annotation]] = {}
    for item, texts in folder.item_captions():
        for text in texts:
            if (item.file, text) not in listed:
                grouped.setdefault(item.file, []).append(Annotation(item.file, CAPTION, text))
    for a in tables:
        grouped.setdefault(a.file, []).append(a)
    return [_Entry(key, files.get(key), None, found) for key, found in grouped.items()]


def _coco_entries(path: Path) -> list[_Entry]:
    """The entries of a COCO captions JSON (ours or anyone's)."""
    try:
        images, annotations = read_coco_annotations(path)
    except CaptionFolderError as exc:
        raise AnnotationError(str(exc)) from exc
    grouped: dict[str, list[Annotation]] = {}
    for a in annotations:
        grouped.setdefault(a.file, []).append(a)
    return [_Entry(key, None, images.get(key), found) for key, found in grouped.items()]


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
