"""Finding media files under folders, by content, robust to unreadable folders and symlink loops."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from engine.media.errors import MediaError
from engine.media.sniff import sniff_format

log = logging.getLogger(__name__)

ErrorCallback = Callable[[Path, str], None]


def iter_media_files(roots: Iterable[Path], on_error: ErrorCallback | None = None) -> Iterator[Path]:
    """Yield every media file under ``roots`` (each root a folder or a file), recognised by content.

    Order: roots in the order given; inside a folder, entries sorted by name, depth first, so the output
    of one folder is sorted by path. Hidden entries (name starting with '.') are skipped, folders and
    files alike, except a root named explicitly. A symlink to a folder is followed only when it leads
    outside every root (a link into the tree is skipped: the walk reaches that folder by its real path),
    and every folder is entered at most once (tracked by device and inode), so a link back up the tree,
    two links to one folder or overlapping roots never loop or repeat. Problems (a missing root, an
    unreadable folder or file, a broken link) are passed to ``on_error(path, reason)`` (logged when it
    is None) and the walk goes on. Files that are not media by content are skipped silently unless their
    name claims a media format (``MEDIA_SUFFIXES``): those are listed, so indexing reports them as broken.
    """
    report = on_error or _log_problem
    roots = [Path(root) for root in roots]
    walk = _Walk(report, [Path(os.path.realpath(root)) for root in roots])
    for root in roots:
        try:
            root_stat = root.stat()
        except OSError as error:
            report(root, _reason(error, "does not exist"))
            continue
        if not os.path.isdir(root):
            if _is_media(root, report):
                yield root
        elif walk.first_visit(root_stat):
            yield from walk.files(root)


class _Walk:
    """The state shared by the walks of all roots: folders already entered, where the roots are."""

    def __init__(self, report: ErrorCallback, real_roots: list[Path]) -> None:
        self.report = report
        self.real_roots = real_roots
        self.seen_dirs: set[tuple[int, int]] = set()

    def first_visit(self, st: os.stat_result) -> bool:
        key = (st.st_dev, st.st_ino)
        if key in self.seen_dirs:
            return False
        self.seen_dirs.add(key)
        return True

    def link_leads_outside(self, entry: os.DirEntry[str]) -> bool:
        target = Path(os.path.realpath(entry.path))
        return not any(target.is_relative_to(root) for root in self.real_roots)

    def files(self, root: Path) -> Iterator[Path]:
        return _walk(root, self, self.report)


def _walk(root: Path, walk: _Walk, report: ErrorCallback) -> Iterator[Path]:
    # An explicit stack of sorted-entry iterators: deep trees cannot hit the recursion limit.
    stack = [iter(_sorted_entries(root, report))]
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            continue
        if entry.name.startswith("."):
            continue
        path = Path(entry.path)
        try:
            is_dir, is_file = entry.is_dir(), entry.is_file()
            if is_dir:
                st = entry.stat()
        except OSError as error:
            report(path, _reason(error, "cannot read"))
            continue
        if is_dir:
            if (not entry.is_symlink() or walk.link_leads_outside(entry)) and walk.first_visit(st):
                stack.append(iter(_sorted_entries(path, report)))
        elif is_file:
            if _is_media(path, report):
                yield path
        elif entry.is_symlink():
            report(path, "broken link")
        # Anything else (pipe, socket, device) is not media and is never opened.


def _sorted_entries(folder: Path, report: ErrorCallback) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(folder) as entries:
            return sorted(entries, key=lambda entry: entry.name)
    except OSError as error:
        report(folder, _reason(error, "cannot read folder"))
        return []


# A file with one of these names claims to be media: when its content is not, indexing records it as a failure
# with the reason ("not a media file") instead of skipping it silently, so the user learns of the broken file.
PHOTO_SUFFIXES = frozenset(".jpg .jpeg .jpe .png .webp .bmp .tif .tiff .heic .heif .hif .avif".split())
ANIMATION_SUFFIXES = frozenset(".gif .apng .webp".split())  # a .webp may be either
VIDEO_SUFFIXES = frozenset(".mp4 .m4v .mov .webm .mkv .avi".split())
MEDIA_SUFFIXES = PHOTO_SUFFIXES | ANIMATION_SUFFIXES | VIDEO_SUFFIXES


def _is_media(path: Path, report: ErrorCallback) -> bool:
    if path.suffix.lower() in MEDIA_SUFFIXES:
        return True
    try:
        return sniff_format(path) is not None
    except MediaError as error:
        report(path, error.reason)
        return False


def _reason(error: OSError, default: str) -> str:
    if isinstance(error, PermissionError):
        return "permission denied"
    if isinstance(error, FileNotFoundError):
        return default
    return f"{default} ({error.strerror or error})"


def _log_problem(path: Path, reason: str) -> None:
    log.warning("skipping %s: %s", path, reason)
