"""``Workspace.library``: the library's folders, their indexing and items, browsing, and pictures of items."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from engine import heap, paths
from engine.library import browse
from engine.library.browse import split_captions
from engine.library.catalog import MediaRecord, MediaStatus
from engine.library.indexer import OfflineRoot
from engine.media import prune_thumbnails, thumbnail
from engine.progress import CancelToken, Progress
from engine.search.starter import starter_graphs_ready
from engine.state import LibraryState
from engine.state.models import offer_starter
from engine.types import MediaDetails, SearchHit


class Library:
    """The library's folders, their indexing and items, browsing and pictures of items."""

    def __init__(self, state: LibraryState) -> None:
        self._state = state

    def roots(self) -> list[Path]:
        return self._state.catalog.roots()

    def add_root(self, path: Path) -> None:
        self._state.catalog.add_root(Path(path).resolve())

    def root_summary(self, path: Path) -> tuple[int, int, int]:
        """``(items, captions, pairs)`` :meth:`remove_root` would delete with the folder: its items and the user
        and imported annotations on them (:meth:`Catalog.root_summary`), for the question asked before."""
        return self._state.catalog.root_summary(Path(path).resolve())

    def remove_root(self, path: Path) -> Path | None:
        """Stop indexing a folder: its items leave the library (the files are not touched). Their user and imported
        captions and pairs are first written to a snapshot (``Workspace.annotations.restore_snapshot`` puts them
        back); returns its file, or None when they had none."""
        snapshot = self._state.catalog.remove_root(Path(path).resolve())
        self._state.invalidate()
        return snapshot

    def index(self, paths: list[Path] | None = None, cancel: CancelToken | None = None) -> Iterator[Progress]:
        """Index folders (default: every root of the library); a generator of progress records.

        A library folder that looks unplugged is skipped and reported by :meth:`offline_roots`, the others are
        indexed; a path that does not exist and is not a library folder raises FileNotFoundError."""
        state = self._state
        targets = [Path(p) for p in paths] if paths else self.roots()
        unknown = [p for p in targets if not p.exists() and state.catalog.root_id(Path(os.path.abspath(p))) is None]
        if unknown:
            raise FileNotFoundError(f"no such file or folder: {unknown[0]}")
        # an awaited starter stays listed from the moment the assets turn ready until it is registered (the model
        # list read between the two listed zero-shot alone: the Model box flickered, a test saw it)
        state.offering = state.awaited_starter is not None
        try:
            for progress in state.encoders.prepare(cancel, also_ready=starter_graphs_ready):
                if state.awaited_starter is not None and state.encoders.ready():
                    offer_starter(state)  # the assets are there: the starter searches while the word table is built
                yield progress
        finally:
            state.offering = False
        offer_starter(state)
        before = state.catalog.version()
        changed = True
        try:
            yield from state.indexer.index(targets, cancel)
            changed = state.catalog.version() != before
        finally:
            # let the backbone's session go: its arena keeps ~200 MB of activations; the next run reopens it
            state.indexer.release()
            state.encoders.release_backbone()
            heap.trim()  # and what indexing's threads freed, kept in their malloc arenas until asked for
            # A re-scan that found nothing new keeps the loaded indexes (no reload at 100k items). One that did
            # keeps the active model open: its sync below embeds the new items and drops the gone ones; reopening
            # it (its ONNX sessions and vector index) cost ~0.3 s per run, 8 % of indexing 384 photos.
            if changed:
                state.invalidate(model=False)

        prune_thumbnails(state.cache_dir)  # the thumbnail cache stays within its budget (engine/media/thumbs.py)
        trained = state.active_trained()  # embeds whatever its index lacks
        if trained is not None and changed:
            yield from trained.sync(cancel)

    def offline_roots(self) -> list[OfflineRoot]:
        """The library folders the last index run found offline."""
        return list(self._state.indexer.offline)

    def assets_ready(self) -> bool:
        """Whether the pretrained assets a search needs are there. On a fresh home they are not until the first
        index run has prepared them (:meth:`index`); a search before that raises ``AssetsMissing``, so the GUI
        holds a query typed meanwhile and runs it once they are (issue #44)."""
        return self._state.encoders.ready()

    def counts(self) -> dict[str, int]:
        raw = self._state.catalog.counts()
        out = {str(k): v for k, v in raw["kind"].items() if k}
        out["failed"] = raw["status"].get(MediaStatus.FAILED, 0)
        out["pending"] = raw["status"].get(MediaStatus.PENDING, 0)
        out["missing"] = raw["status"].get(MediaStatus.MISSING, 0)
        out["total"] = sum(raw["status"].values())
        return out

    def failures(self) -> list[tuple[str, str]]:
        return [(str(p), why) for p, why in self._state.catalog.failures()]

    def media(self, media_id: int) -> MediaRecord:
        return self._state.catalog.media(media_id)

    def details(self, media_id: int) -> MediaDetails:
        """Path, size, pixels, length, date taken and camera of one item
        (:func:`engine.library.browse.media_details`)."""
        return browse.media_details(self._state.catalog, media_id)

    def item(self, media_id: int) -> SearchHit:
        """One item as a hit of no search (score 0): its path, kind, captions and the model's guess."""
        record = self._state.catalog.media(media_id)
        captions, guess = split_captions(self._state.catalog.captions(media_id))
        return SearchHit(media_id, str(record.path), record.kind, 0.0, captions, guess=guess)

    def browse(self, top: int = 60, offset: int = 0, sort: str = "newest", folder: Path | None = None,
               kind: str | None = None, annotation: str = "all") -> list[SearchHit]:
        """The library without a query, a page at a time, sorted and filtered (:func:`engine.library.browse.browse`)."""
        return browse.browse(self._state.catalog, offset, top, sort, folder, kind, annotation)

    def browse_count(self, folder: Path | None = None, kind: str | None = None, annotation: str = "all") -> int:
        """How many items :meth:`browse` lists with these filters (:func:`engine.library.browse.browse_count`)."""
        return browse.browse_count(self._state.catalog, folder, kind, annotation)

    def thumbnail(self, media_id: int, size: int = 256) -> Path:
        return thumbnail(self.media(media_id).path, self._state.cache_dir, size=size)[0]

    def preview_frames(self, media_id: int, n: int = 8) -> list[Path]:
        return thumbnail(self.media(media_id).path, self._state.cache_dir, size=256, n_preview=n)[1:]

    def file_thumbnail(self, path: Path, size: int = 256) -> Path:
        """A thumbnail of any media file, in the library or not (the example a search is made by)."""
        return thumbnail(Path(path), paths.cache_dir() / "example-thumbnails", size=size)[0]

    def missing_summary(self) -> tuple[int, int, int]:
        """``(items, captions, pairs)`` :meth:`purge_missing` would delete (user and imported annotations)."""
        return self._state.catalog.missing_summary()

    def purge_missing(self) -> tuple[int, int, int, Path | None]:
        """Delete the items marked missing (offline or gone) with their annotations, after writing a snapshot
        of every annotation; returns ``(items, captions, pairs, snapshot file or None)``."""
        try:
            return self._state.catalog.purge_missing()
        finally:
            self._state.invalidate()
