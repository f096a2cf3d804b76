"""The caption folder: the one dataset format every part of Polyseek reads and writes.

Layout::

    FOLDER/images/ (or FOLDER/media/)   the media files (sub-folders allowed)
    FOLDER/captions.tsv                 header "file<TAB>caption"; one row per caption, many rows per file
    FOLDER/splits.tsv                   optional; header "file<TAB>split"
    FOLDER/caption_sources.tsv          optional; header "file<TAB>caption<TAB>source"
    FOLDER/pairs.tsv                    optional; header "file<TAB>query<TAB>verdict<TAB>source"

``file`` is the path of a media file relative to the media folder, written with ``/``.

The two optional annotation tables (:func:`write_annotation_tables`) make a folder a complete backup of a library's
annotations; readers of the dataset format ignore them. ``caption_sources.tsv`` lists every caption with its
provenance (``source``: ``user``, ``imported``, or ``pseudo`` for the machine's guesses, which ``captions.tsv``
leaves out); ``pairs.tsv`` the queries the user accepted (``verdict`` ``accept``) or rejected (``reject``) for a
file, with their provenance. A table may name a file the media folder lacks (an item offline at export time).

Text rules (the format has no quoting and no escapes, so a row always splits into exactly two fields):

- every row has exactly one TAB; a row with more is malformed and rejected with its file and line;
- captions are plain text, normalised by :func:`normalize_caption` (strip, collapse any run of unicode
  whitespace - tabs and newlines included - into one space, keep everything else as is), so a caption can
  never hold a TAB or a newline; the writer normalises before writing and the reader after reading;
- file names holding a TAB, CR or LF, absolute paths and ``..`` parts are rejected by both sides;
- quotes are ordinary characters; files are UTF-8 (a leading BOM is ignored), LF or CRLF line ends.

Items are the files in the media folder that have a media extension or are named by a TSV row (files
are not opened here; the decoder reports unreadable ones). A caption or split row naming a file that is
not there is reported in :attr:`CaptionFolder.warnings` and dropped, never fatal. Without
``splits.tsv`` every item is in split ``"all"``; with it, files it does not list are in ``"unassigned"``.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from engine.files import atomic_write_text
from engine.types import CaptionSource

CAPTIONS_FILE = "captions.tsv"
SPLITS_FILE = "splits.tsv"
MEDIA_DIR_NAMES = ("images", "media")
CAPTIONS_HEADER = ("file", "caption")
SPLITS_HEADER = ("file", "split")
CAPTION_SOURCES_FILE = "caption_sources.tsv"
PAIRS_FILE = "pairs.tsv"
CAPTION_SOURCES_HEADER = ("file", "caption", "source")
PAIRS_HEADER = ("file", "query", "verdict", "source")
CAPTION = "caption"  # the kinds of annotation an export carries: a caption, a query accepted or rejected for a file
ACCEPT = "accept"
REJECT = "reject"
ANNOTATION_KINDS = (CAPTION, ACCEPT, REJECT)
DEFAULT_SPLIT = "all"  # the one split of a folder without splits.tsv
UNASSIGNED_SPLIT = "unassigned"  # files a splits.tsv does not list
MEDIA_EXTENSIONS = frozenset(
    {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".gif", ".apng", ".heic", ".heif", ".hif", ".avif",
     ".mp4", ".m4v", ".mov", ".webm", ".mkv", ".avi"}
)

CopyMode = bool | Literal["link"]
_DRIVE = re.compile(r"^[A-Za-z]:")  # a Windows absolute path written into a TSV


class CaptionFolderError(Exception):
    """A caption folder (or a file being imported into one) is missing or malformed."""


@dataclass(frozen=True, slots=True)
class Item:
    """One media file of a caption folder."""

    file: str  # relative to the media folder, '/'-separated: the key used in the TSV files
    path: Path  # absolute path on disk
    split: str


@dataclass
class CaptionFolder:
    """A loaded caption folder (or a view of one split of it).

    ``captions`` holds ``(item_index, text)`` pairs in file order; ``item_index`` indexes ``items``.
    ``warnings`` lists what was dropped while loading or importing (rows naming missing files).
    """

    root: Path
    media_dir: Path
    items: list[Item]
    captions: list[tuple[int, str]]
    warnings: list[str] = field(default_factory=list)

    def splits(self) -> list[str]:
        """The split names present among the items, sorted."""
        return sorted({item.split for item in self.items})

    def split(self, name: str) -> CaptionFolder:
        """A view holding only the items of split ``name`` and their captions (re-indexed)."""
        keep = [i for i, item in enumerate(self.items) if item.split == name]
        if not keep:
            raise CaptionFolderError(f"{self.root}: no split named {name!r} (splits: {self.splits()})")
        new_index = {old: new for new, old in enumerate(keep)}
        captions = [(new_index[i], text) for i, text in self.captions if i in new_index]
        return CaptionFolder(self.root, self.media_dir, [self.items[i] for i in keep], captions,
                             list(self.warnings))

    def captions_of(self, item_index: int) -> list[str]:
        """The captions of one item, in file order."""
        return [text for i, text in self.captions if i == item_index]

    def item_captions(self) -> list[tuple[Item, list[str]]]:
        """Every item with its captions (possibly none), in item order."""
        grouped: list[list[str]] = [[] for _ in self.items]
        for i, text in self.captions:
            grouped[i].append(text)
        return list(zip(self.items, grouped, strict=True))

    def caption_item_indices(self) -> list[int]:
        """For each caption, the index of its item (the ``caption_to_media`` array of the metrics)."""
        return [i for i, _ in self.captions]


@dataclass(frozen=True, slots=True)
class Annotation:
    """One annotation of a media file as an export carries it: a caption (``kind`` "caption", ``text`` the
    caption) or a judged pair (``kind`` "accept"/"reject", ``text`` the query). ``source`` is its provenance;
    None where the file does not say (a third party's captions)."""

    file: str
    kind: str
    text: str
    source: CaptionSource | None = None


def normalize_caption(text: str) -> str:
    """Strip and collapse every run of whitespace (unicode included) into one space; keep the rest."""
    return " ".join(text.split())


def check_file_key(file: str, where: str) -> str:
    """Validate a media key (relative '/'-path) and return it; raise :class:`CaptionFolderError`."""
    if not file:
        raise CaptionFolderError(f"{where}: empty file name")
    if any(c in file for c in "\t\r\n\0"):
        raise CaptionFolderError(f"{where}: file name {file!r} holds a tab, newline or NUL")
    if file.startswith(("/", "\\")) or ".." in file.split("/") or _DRIVE.match(file):
        raise CaptionFolderError(f"{where}: file name {file!r} is not a relative path in the media folder")
    return file


# ---------------------------------------------------------------- reading


def load_caption_folder(root: str | os.PathLike[str]) -> CaptionFolder:
    """Read a caption folder; raise :class:`CaptionFolderError` naming file and line on malformed rows."""
    root = Path(root).expanduser().resolve()
    media_dir = find_media_dir(root)
    caption_rows = _read_captions(root / CAPTIONS_FILE)
    split_rows = _read_splits(root / SPLITS_FILE)
    named = {file for _, file, _ in caption_rows} | set(split_rows or ())
    files = sorted(scan_media(media_dir, named))
    index_of = {f: i for i, f in enumerate(files)}
    split_of = {file: split for _, file, split in (split_rows or {}).values()}
    default = DEFAULT_SPLIT if split_rows is None else UNASSIGNED_SPLIT
    items = [Item(f, media_dir / f, split_of.get(f, default)) for f in files]
    captions = [(index_of[file], text) for _, file, text in caption_rows if file in index_of]
    warnings = _missing(root / SPLITS_FILE, (split_rows or {}).values(), index_of)
    warnings += _missing(root / CAPTIONS_FILE, caption_rows, index_of)
    return CaptionFolder(root, media_dir, items, captions, warnings)


def _missing(path: Path, rows: Iterable[tuple[int, str, str]], index_of: Mapping[str, int]) -> list[str]:
    """Warnings for the rows of ``path`` that name a file the media folder lacks."""
    return [f"{path}:{number}: {file!r} is not in the media folder; row ignored"
            for number, file, _ in rows if file not in index_of]


def find_media_dir(root: Path) -> Path:
    """``root/images`` or ``root/media``: exactly one must exist."""
    found = [root / name for name in MEDIA_DIR_NAMES if (root / name).is_dir()]
    if not found:
        raise CaptionFolderError(f"{root}: no media folder (expected {' or '.join(MEDIA_DIR_NAMES)}/)")
    if len(found) > 1:
        raise CaptionFolderError(f"{root}: both images/ and media/ exist; keep one")
    return found[0]


def scan_media(media_dir: Path, also: Set[str] = frozenset()) -> set[str]:
    """Keys of the files under ``media_dir`` with a media extension, or named in ``also``.

    Hidden files and folders are skipped; linked folders are followed without looping. Files are not
    opened: the decoder reports unreadable ones.
    """
    keys: set[str] = set()
    seen: set[tuple[int, int]] = set()  # linked folders are followed, but each folder is entered once
    for dirpath, dirnames, filenames in os.walk(media_dir, followlinks=True):
        stat = os.stat(dirpath)
        if (stat.st_dev, stat.st_ino) in seen:
            dirnames.clear()
            continue
        seen.add((stat.st_dev, stat.st_ino))
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        rel = Path(dirpath).relative_to(media_dir).as_posix()
        prefix = "" if rel == "." else rel + "/"
        for name in filenames:
            key = prefix + name
            is_media = os.path.splitext(name)[1].lower() in MEDIA_EXTENSIONS
            if not name.startswith(".") and (is_media or key in also):
                keys.add(key)
    return keys


def _tsv_rows(path: Path, header: tuple[str, ...]) -> Iterator[tuple[int, *tuple[str, ...]]]:
    """Yield ``(line_number, file, value, ...)`` for each non-blank data row of a TSV with ``header``'s columns."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CaptionFolderError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start})") from exc
    except OSError as exc:
        raise CaptionFolderError(f"{path}: cannot read ({exc.strerror})") from exc
    lines = text.split("\n")
    if tuple(lines[0].rstrip("\r").split("\t")) != header:
        raise CaptionFolderError(f"{path}:1: header must be {chr(9).join(header)!r}, found {lines[0]!r}")
    for number, line in enumerate(lines[1:], start=2):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != len(header):
            raise CaptionFolderError(f"{path}:{number}: expected {len(header)} tab-separated fields, found "
                                     f"{len(fields)}")
        yield number, check_file_key(fields[0], f"{path}:{number}"), *fields[1:]


def _read_splits(path: Path) -> dict[str, tuple[int, str, str]] | None:
    """``file -> (line, file, split)`` from splits.tsv, or None when there is none."""
    if not path.exists():
        return None
    split_of: dict[str, tuple[int, str, str]] = {}
    for number, file, value in _tsv_rows(path, SPLITS_HEADER):
        split = value.strip()
        if not split:
            raise CaptionFolderError(f"{path}:{number}: empty split name for {file!r}")
        if file in split_of and split_of[file][2] != split:
            raise CaptionFolderError(f"{path}:{number}: {file!r} is in {split_of[file][2]!r} and {split!r}")
        split_of.setdefault(file, (number, file, split))
    return split_of


def _read_captions(path: Path) -> list[tuple[int, str, str]]:
    """``(line, file, normalised caption)`` rows of captions.tsv."""
    if not path.exists():
        raise CaptionFolderError(f"{path}: missing (a caption folder needs {CAPTIONS_FILE})")
    rows = []
    for number, file, value in _tsv_rows(path, CAPTIONS_HEADER):
        text = normalize_caption(value)
        if not text:
            raise CaptionFolderError(f"{path}:{number}: empty caption for {file!r}")
        rows.append((number, file, text))
    return rows


# ---------------------------------------------------------------- writing


def write_caption_folder(
    dest: str | os.PathLike[str],
    media_paths: Sequence[str | os.PathLike[str]],
    captions: Iterable[tuple[int, str]],
    splits: Sequence[str] | None = None,
    copy_media: CopyMode = True,
    overwrite: bool = False,
) -> CaptionFolder:
    """Write a caption folder at ``dest`` and return it, loaded back.

    ``captions`` are ``(index into media_paths, text)``; ``splits`` (one name per media path) makes a
    splits.tsv. ``copy_media``: True copies each file to ``<media folder>/<its name>`` (``dest/images``
    unless ``dest`` already has ``images/`` or ``media/``); ``"link"`` makes
    symbolic links there instead; False means the files already lie under the media folder of ``dest``
    (``images/`` or ``media/``) and keep their relative paths. The TSVs are written atomically. An
    existing captions.tsv is only replaced with ``overwrite=True``; media already in the folder stay and
    load as items without captions.
    """
    # absolute but not resolved: a media file that is itself a link must stay inside the media folder
    dest = Path(os.path.abspath(Path(dest).expanduser()))
    if (dest / CAPTIONS_FILE).exists() and not overwrite:
        raise CaptionFolderError(f"{dest / CAPTIONS_FILE} exists; pass overwrite=True to replace it")
    if splits is not None and len(splits) != len(media_paths):
        raise CaptionFolderError(f"{len(splits)} split names for {len(media_paths)} media files")
    dest.mkdir(parents=True, exist_ok=True)
    sources = [Path(os.path.abspath(Path(p).expanduser())) for p in media_paths]
    keys = _place_media(dest, sources, copy_media)
    caption_rows = [(keys[_check_index(i, len(keys))], _clean_caption(t, keys[i])) for i, t in captions]
    if splits is not None:
        rows = [(key, clean_split(name, key)) for key, name in zip(keys, splits, strict=True)]
        atomic_write_text(dest / SPLITS_FILE, _tsv_text(SPLITS_HEADER, rows))
    else:
        (dest / SPLITS_FILE).unlink(missing_ok=True)
    atomic_write_text(dest / CAPTIONS_FILE, _tsv_text(CAPTIONS_HEADER, caption_rows))
    return load_caption_folder(dest)


def _check_index(index: int, n: int) -> int:
    if not 0 <= index < n:
        raise CaptionFolderError(f"caption refers to media index {index}, but there are {n} media files")
    return index


def _clean_caption(text: str, key: str) -> str:
    clean = normalize_caption(text)
    if not clean:
        raise CaptionFolderError(f"empty caption for {key!r}")
    return clean


def clean_split(name: str, key: str) -> str:
    """A split name without surrounding whitespace; :class:`CaptionFolderError` (naming ``key``) when it is empty
    or holds a TAB or a line break."""
    clean = name.strip()
    if not clean or any(c in clean for c in "\t\r\n"):
        raise CaptionFolderError(f"bad split name {name!r} for {key!r}")
    return clean


def _tsv_text(header: tuple[str, ...], rows: Iterable[tuple[str, ...]]) -> str:
    return "".join("\t".join(row) + "\n" for row in [header, *rows])


def _place_media(dest: Path, sources: list[Path], copy_media: CopyMode) -> list[str]:
    """Put the media files in place under ``dest`` and return their keys."""
    if copy_media is False:
        media_dir = find_media_dir(dest)
        return [_key_inside(media_dir, src) for src in sources]
    if any((dest / name).is_dir() for name in MEDIA_DIR_NAMES):
        media_dir = find_media_dir(dest)  # keep the folder's own images/ or media/
    else:
        media_dir = dest / MEDIA_DIR_NAMES[0]
        media_dir.mkdir()
    keys: list[str] = []
    seen: dict[str, Path] = {}
    for src in sources:
        key = check_file_key(src.name, str(src))
        if key in seen and seen[key] != src:
            raise CaptionFolderError(f"two media files share the name {key!r}: {seen[key]} and {src}")
        if not src.is_file():
            raise CaptionFolderError(f"{src}: media file not found")
        if key not in seen:
            _put_file(src, media_dir / key, copy_media)
        seen[key] = src
        keys.append(key)
    return keys


def _key_inside(media_dir: Path, src: Path) -> str:
    try:
        key = src.relative_to(media_dir).as_posix()
    except ValueError:
        raise CaptionFolderError(f"{src} is not inside {media_dir} (copy_media=False)") from None
    if not src.is_file():
        raise CaptionFolderError(f"{src}: media file not found")
    return check_file_key(key, str(src))


def _put_file(src: Path, target: Path, copy_media: CopyMode) -> None:
    """Copy or link ``src`` to ``target`` via a temporary name, so a crash never leaves half a file."""
    if target.exists() and target.resolve() == src.resolve():
        return  # already in place (the importer was pointed at the folder's own media)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        if copy_media == "link":
            tmp.symlink_to(src)
        else:
            shutil.copy2(src, tmp)
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise CaptionFolderError(f"cannot place {src} at {target} ({exc.strerror})") from exc


# ---------------------------------------------------------------- annotation tables (a folder as a backup)


def write_annotation_tables(dest: str | os.PathLike[str], annotations: Iterable[Annotation]) -> None:
    """Write ``caption_sources.tsv`` and ``pairs.tsv`` of ``annotations`` into the caption folder ``dest``
    (atomically each; texts normalised, empty ones left out; a missing provenance is written ``imported``)."""
    dest = Path(dest)
    captions: list[tuple[str, ...]] = []
    pairs: list[tuple[str, ...]] = []
    for a in annotations:
        text = normalize_caption(a.text)
        if not text:
            continue
        check_file_key(a.file, str(dest))
        source = (a.source or CaptionSource.IMPORTED).value
        if a.kind == CAPTION:
            captions.append((a.file, text, source))
        elif a.kind in (ACCEPT, REJECT):
            pairs.append((a.file, text, a.kind, source))
        else:
            raise CaptionFolderError(f"annotation kind {a.kind!r} for {a.file!r} is not one of {ANNOTATION_KINDS}")
    atomic_write_text(dest / CAPTION_SOURCES_FILE, _tsv_text(CAPTION_SOURCES_HEADER, captions))
    atomic_write_text(dest / PAIRS_FILE, _tsv_text(PAIRS_HEADER, pairs))


def read_annotation_tables(root: str | os.PathLike[str]) -> list[Annotation] | None:
    """The annotations of a folder's ``caption_sources.tsv`` and ``pairs.tsv``, in file order, or None when it has
    neither (a plain caption folder). :class:`CaptionFolderError` names file and line of a malformed row."""
    root = Path(root)
    paths = (root / CAPTION_SOURCES_FILE, root / PAIRS_FILE)
    if not any(p.exists() for p in paths):
        return None
    out: list[Annotation] = []
    if paths[0].exists():
        for number, file, text, source in _tsv_rows(paths[0], CAPTION_SOURCES_HEADER):
            where = f"{paths[0]}:{number}"
            out.append(Annotation(file, CAPTION, normalize_caption(text), caption_source(source, where)))
    if paths[1].exists():
        for number, file, query, verdict, source in _tsv_rows(paths[1], PAIRS_HEADER):
            where = f"{paths[1]}:{number}"
            if verdict not in (ACCEPT, REJECT):
                raise CaptionFolderError(f"{where}: verdict {verdict!r} is not {ACCEPT!r} or {REJECT!r}")
            out.append(Annotation(file, verdict, normalize_caption(query), caption_source(source, where)))
    return [a for a in out if a.text]


def caption_source(value: object, where: str) -> CaptionSource:
    """The provenance ``value`` names; :class:`CaptionFolderError` (naming ``where``) when it names none."""
    try:
        return CaptionSource(value)
    except ValueError:
        sources = ", ".join(s.value for s in CaptionSource)
        raise CaptionFolderError(f"{where}: provenance {value!r} is not one of {sources}") from None
