"""Incremental indexing of library folders: a generator of :class:`Progress` records, cancellable.

Steps: (1) walk the roots (files recognised by content) and stat every file; (2) compare with the catalog —
new, changed, unchanged and missing files; hash new and changed files so a moved file keeps its row, captions
and vectors; (3) extract features for every *pending* item in batches, reusing the feature store when the same
content was seen before (another library, a training folder, a move) — pending rows are also what an
interrupted run left, so indexing resumes where it stopped; (4) mark rows whose files are gone ``missing``;
(5) read the EXIF date taken and camera of items indexed before the catalog stored them (new items get theirs
from step 3's decode).

A scan never deletes a row: a missing item keeps its captions and pairs (the user's work) and gets them back
when its content shows up again; only the user purges missing items. A root that looks unplugged is not a
folder that was emptied: a root that does not exist, that is empty where it held items, or that sits on
another device than when it was added while none of its known files are there (an empty mount point, or
another drive mounted there) is *offline*: its rows are marked missing, it is not scanned, and it is reported
in :attr:`Indexer.offline`; the other roots are indexed as usual. A root whose device changed but whose files
are there (a drive that came back under a new device id, a folder copied to a new disk) is online and its new
device is recorded.

Every batch is committed as it is finished: its failures and pseudo captions, then its features, then its
rows marked indexed (see ``Indexer._store`` for why in that order), so a kill loses at most the batch in
flight, an item is never marked indexed without its features, and a resumed run ends where an uninterrupted
one would. A file that fails is recorded with its reason and retried only when its size or mtime change. A
file edited between hashing and decoding is not stored (its features would sit under the old content's
hash); it is recorded as changed and retried at the next scan. A folder or file that exists but cannot be
read keeps its rows: a permission or I/O problem is not a deletion, and treating it as one would delete the
user's captions with the rows.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from engine.features.extract import Extracted, FeatureExtractor
from engine.features.featurestore import FeatureStore
from engine.features.regional import pseudo_caption_from_record
from engine.files import content_hash
from engine.library.catalog import Catalog, MediaRecord
from engine.media import MediaError, iter_media_files, probe, read_capture
from engine.progress import CancelToken, Progress
from engine.types import CaptionSource

log = logging.getLogger(__name__)

BATCH = 32
HASH_CHUNK = 200  # files hashed, then recorded in one catalog transaction, between progress reports
HASH_THREADS = os.cpu_count() or 2
KNOWN_FILES_PROBED = 64  # known files of a root that moved to another device checked for presence


@dataclass(frozen=True, slots=True)
class OfflineRoot:
    """A library folder that looked unplugged at the last scan: skipped, its items kept (marked missing)."""

    path: Path
    reason: str
    items: int  # media rows under it, kept with their annotations


class Indexer:
    """Indexes folders into a catalog and the shared feature store."""

    def __init__(self, catalog: Catalog, features: FeatureStore,
                 extractor: Callable[[], FeatureExtractor]) -> None:
        self.catalog = catalog
        self.features = features
        self._extractor_factory = extractor
        self._extractor: FeatureExtractor | None = None
        self.offline: list[OfflineRoot] = []  # of the last :meth:`index` run

    @property
    def extractor(self) -> FeatureExtractor:
        if self._extractor is None:
            self._extractor = self._extractor_factory()
        return self._extractor

    def release(self) -> None:
        """Drop the feature extractor (and with it the backbone it runs) until the next index run needs one."""
        self._extractor = None

    def index(self, roots: Iterable[Path], cancel: CancelToken | None = None) -> Iterator[Progress]:
        """Index ``roots`` (folders or single files), yielding progress; raises Cancelled when cancelled."""
        cancel = cancel or CancelToken()
        yield from self.scan(roots, cancel)
        yield from self._extract_pending(cancel)
        yield from self._read_captures(cancel)

    def scan(self, roots: Iterable[Path], cancel: CancelToken | None = None) -> Iterator[Progress]:
        """Steps (1), (2) and (4) of the module docstring: walk ``roots``, record their new, changed and moved
        files in the catalog (hashed) and mark the gone ones missing; the recorded files are left pending."""
        cancel = cancel or CancelToken()
        self.offline = []
        roots = [Path(os.path.abspath(r)) for r in roots]
        roots, root_ids = self._online_roots(roots)
        yield Progress(0, 0, "looking for media")
        unreadable: set[str] = set()
        found = list(self._scan(roots, root_ids, cancel, unreadable))
        roots, root_ids = self._not_emptied(roots, root_ids, {rid for *_, rid in found})
        scanned = set(root_ids)
        found = [f for f in found if f[3] in scanned]
        for offline in self.offline:
            yield Progress(0, 0, f"{offline.path} is offline ({offline.reason}); its {offline.items} items are kept")
        plan = self.catalog.plan_scan(((p, s, m) for p, s, m, _ in found), root_ids)
        plan.missing = [p for p in plan.missing if not _inside(p, unreadable)]
        root_of = {p: rid for p, _, _, rid in found}
        touched = plan.new + plan.changed
        # Hashing runs on every core (hashlib releases the GIL): on one thread, the 12 MP photos of a camera
        # folder kept one core of two idle for 2-3 ms a photo before extraction could start.
        with ThreadPoolExecutor(max_workers=HASH_THREADS, thread_name_prefix="hash") as hashers:
            for start in range(0, len(touched), HASH_CHUNK):
                yield Progress(start, len(touched), f"checking {len(touched)} new or changed files")
                cancel.raise_if_cancelled()
                chunk = touched[start:start + HASH_CHUNK]
                hashed = [(e, d) for e, d in zip(chunk, hashers.map(_hash_or_none, [e.path for e in chunk]),
                                                  strict=True) if d is not None]
                # One transaction per chunk, not per file: a commit costs more than hashing a photo. The files
                # are read before the transaction opens so a slow disk never holds the catalog's write lock.
                with self.catalog.transaction("recording new and changed files"):
                    for entry, digest in hashed:
                        self.catalog.upsert_media(entry.path, entry.size, entry.mtime_ns, digest,
                                                  root_of[entry.path])
        gone = self.catalog.mark_missing(plan.missing)
        if gone:
            log.info("%d files are gone; they are kept as missing, with their annotations", gone)

    def _read_captures(self, cancel: CancelToken) -> Iterator[Progress]:
        """Read the date taken and camera of the items indexed before the catalog stored them (schema v5): once,
        a header read each; indexing reads them with the rest for every new item."""
        while batch := self.catalog.media_without_capture(HASH_CHUNK):
            cancel.raise_if_cancelled()
            captures = [(media.id, read_capture(media.path)) for media in batch]
            with self.catalog.transaction("recording dates taken"):
                for media_id, capture in captures:
                    self.catalog.set_capture(media_id, capture)
            yield Progress(0, 0, f"read the date taken of {len(batch)} items")

    def _online_roots(self, roots: list[Path]) -> tuple[list[Path], list[int]]:
        """The roots to scan and their ids; roots that are absent or on the wrong device go to :attr:`offline`
        (a root the library does not know yet is added, with its device, when it exists)."""
        online: list[Path] = []
        ids: list[int] = []
        for root in roots:
            known = self.catalog.root_id(root)
            try:
                device = os.stat(root).st_dev
            except OSError as error:
                if known is None:
                    raise FileNotFoundError(f"no such file or folder: {root}") from error
                single_file = self.catalog.root_media_paths(known, 2) == [root]
                self._go_offline(root, known, "file not found" if single_file else "not found: is its drive unplugged?")
                continue
            if known is not None and self._moved_away(root, known, device):
                self._go_offline(root, known, "on another device than when it was added, and none of its "
                                              "files are there: is its drive unplugged?")
                continue
            online.append(root)
            ids.append(self.catalog.add_root(root, device))
        return online, ids

    def _moved_away(self, root: Path, root_id: int, device: int) -> bool:
        """True when the root is on another device than the one recorded and none of its known files exist;
        a changed device with the files there is recorded (the drive came back under a new id)."""
        recorded = self.catalog.root_device(root_id)
        if recorded is None or recorded == device:
            return False
        known = self.catalog.root_media_paths(root_id, KNOWN_FILES_PROBED)
        if known and not any(os.path.exists(p) for p in known):
            return True
        log.info("%s is now on device %d (was %d); its files are there", root, device, recorded)
        self.catalog.set_root_device(root_id, device)
        return False

    def _not_emptied(self, roots: list[Path], root_ids: list[int], seen: set[int]) -> tuple[list[Path], list[int]]:
        """Drop (to :attr:`offline`) the roots where the scan found nothing but the library has items."""
        keep = [(r, i) for r, i in zip(roots, root_ids, strict=True)
                if i in seen or not self.catalog.root_media_paths(i, 1)]
        for root, root_id in zip(roots, root_ids, strict=True):
            if (root, root_id) not in keep:
                self._go_offline(root, root_id, "empty, where it held items: is its drive unplugged?")
        return [r for r, _ in keep], [i for _, i in keep]

    def _go_offline(self, root: Path, root_id: int, reason: str) -> None:
        marked = self.catalog.mark_root_missing(root_id)
        items = self.catalog.root_media_count(root_id)
        log.info("%s is offline (%s): skipped; %d items kept (%d marked missing now)", root, reason, items,
                    marked)
        self.offline.append(OfflineRoot(root, reason, items))

    def _scan(self, roots: list[Path], root_ids: list[int], cancel: CancelToken,
              unreadable: set[str]) -> Iterator[tuple[Path, int, int, int]]:
        """Every media file under ``roots`` with its size and mtime; ``unreadable`` collects the folders and
        files that exist but could not be listed or read (a vanished file or a broken link is not one)."""

        def report(path: Path, why: str) -> None:
            log.info("skipped %s: %s", path, why)
            if os.path.exists(path):
                unreadable.add(os.path.abspath(path))

        for root, root_id in zip(roots, root_ids, strict=True):
            for path in iter_media_files([root], on_error=report):
                cancel.raise_if_cancelled()
                try:
                    st = path.stat()
                except OSError:
                    continue  # vanished since it was listed
                yield Path(os.path.abspath(path)), st.st_size, st.st_mtime_ns, root_id

    def _extract_pending(self, cancel: CancelToken) -> Iterator[Progress]:
        pending = self.catalog.pending_media()
        total = len(pending)
        if not total:
            yield Progress(0, 0, "library is up to date")
            return
        done = 0
        backbone = self.extractor.backbone_id
        hashes = {m.content_hash for m in pending}
        cached = hashes - set(self.features.missing(hashes, backbone))
        reuse = [m for m in pending if m.content_hash in cached]
        fresh = [m for m in pending if m.content_hash not in cached]
        for start in range(0, len(reuse), 256):
            cancel.raise_if_cancelled()
            done += self._finish_cached(reuse[start:start + 256], backbone)
            yield Progress(done, total, f"indexed {done} of {total}")
        batches = [fresh[i:i + BATCH] for i in range(0, len(fresh), BATCH)]
        # Writes go to one writer thread so they overlap the backbone's next batch; at most one batch waits.
        # Leaving the block (cancelled or not) waits for the write in flight, so every batch ends committed.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="index-writer") as writer:
            written: Future | None = None
            extracted = self.extractor.iter_batches([[m.path for m in b] for b in batches])
            for batch, results in zip(batches, extracted, strict=False):
                if written is not None:
                    written.result()
                written = writer.submit(self._store, batch, results, backbone)
                done += len(batch)
                yield Progress(done, total, f"indexed {done} of {total}")
                cancel.raise_if_cancelled()
            if written is not None:
                written.result()

    def _store(self, batch: list[MediaRecord], results: list[Extracted | MediaError], backbone: str) -> None:
        # Three commits, in this order, because the catalog and the feature store are two files that cannot
        # commit together: (1) failures and pseudo captions, rows still pending; (2) the features; (3) the
        # rows marked ok. A kill after (2) leaves pending rows whose features and full pseudo captions (with
        # the colours, which need the pixels) are both stored, so the next run finishes them from the store
        # exactly as this run would have; a kill before (2) leaves them pending, to be extracted again.
        results = [_unless_changed(m, r) for m, r in zip(batch, results, strict=True)]
        ok = [(m, r) for m, r in zip(batch, results, strict=True) if isinstance(r, Extracted)]
        with self.catalog.transaction("storing failures and pseudo captions"):
            for media, result in zip(batch, results, strict=True):
                if isinstance(result, MediaError):
                    self.catalog.set_media_failed(media.id, str(result))
                else:
                    self.catalog.set_pseudo_caption(media.id, result.semantics.caption)
        self.features.put_many(((m.content_hash, r.record) for m, r in ok), backbone)
        with self.catalog.transaction("marking an indexed batch"):
            for media, result in ok:
                info = result.info
                self.catalog.set_media_ok(media.id, info.kind, info.format, info.width, info.height,
                                          info.n_frames, info.duration_s, backbone)
                self.catalog.set_capture(media.id, info.capture)

    def _finish_cached(self, batch: list[MediaRecord], backbone: str) -> int:
        """Items whose content already has features (moved, re-added, seen in another library)."""
        with self.catalog.transaction("reusing cached features"):
            for media in batch:
                try:
                    info = probe(media.path)
                except MediaError as error:
                    self.catalog.set_media_failed(media.id, str(error))
                    continue
                self.catalog.set_media_ok(media.id, info.kind, info.format, info.width, info.height,
                                          info.n_frames, info.duration_s, backbone)
                self.catalog.set_capture(media.id, info.capture)
                if not self.catalog.captions(media.id, sources=[CaptionSource.PSEUDO]):
                    self._restore_pseudo_caption(media, backbone)
        return len(batch)

    def _restore_pseudo_caption(self, media: MediaRecord, backbone: str) -> None:
        record = self.features.get(media.content_hash, backbone)
        if record is not None:
            caption = pseudo_caption_from_record(record, self.extractor.names)
            self.catalog.set_pseudo_caption(media.id, caption)


def _hash_or_none(path: Path) -> str | None:
    """The file's content hash, or None (logged) when it cannot be read."""
    try:
        return content_hash(path)
    except OSError as error:
        log.info("cannot read %s: %s", path, error)
        return None


def _inside(path: Path, folders: set[str]) -> bool:
    """True when ``path`` or one of its parents is in ``folders`` (absolute path strings)."""
    return bool(folders) and any(str(p) in folders for p in (path, *path.parents))


def _unless_changed(media: MediaRecord, result: Extracted | MediaError) -> Extracted | MediaError:
    """The result, or a MediaError when the file is no longer the one that was hashed.

    A file replaced or still being written after the scan would otherwise have the new content's features
    stored under the old content's hash (and reused for any file with that hash). The row keeps the scanned
    size and mtime, so the next scan sees the change and retries the file.
    """
    if isinstance(result, MediaError):
        return result
    try:
        st = os.stat(media.path)
    except OSError:
        return MediaError("file disappeared while it was being indexed")
    if (st.st_size, st.st_mtime_ns) != (media.size, media.mtime_ns):
        return MediaError("file changed while it was being indexed (retried at the next scan)")
    return result
