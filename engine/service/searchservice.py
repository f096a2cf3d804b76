"""``SearchService``: index, search, explain, annotate and the models of one library. The CLI and the GUI hold it
as an :class:`engine.workspace.Workspace`, which adds the library loop's jobs; this module knows nothing of the loop.

It is built from its parts (catalog, feature store, indexer, encoders: docs/contributing.md) by
:meth:`SearchService.open`, or by a test from fakes. Everything here is synchronous and thread-safe enough for one
GUI worker plus the GUI thread; slow calls (``index_paths``, ``reindex``, the first search, thumbnails) belong off
the GUI thread. A sentence is ranked in :mod:`engine.search.ranking`.

Ranking. Until a model is trained (or while the zero-shot model is active) a sentence is ranked by the regional
semantics of every item (:mod:`engine.features.regional`), and a picture, GIF or video by the cosine of the backbone's
global features.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from engine import heap, paths
from engine.features.encoders import Encoders
from engine.features.featurestore import FeatureStore
from engine.library.catalog import CaptionRecord, Catalog, MediaRecord, MediaStatus
from engine.library.catalog.snapshots import Restored
from engine.library.indexer import Indexer
from engine.progress import CancelToken, Progress
from engine.search.libraryindexes import LibraryIndexes
from engine.search.ranking import page_of_hits
from engine.search.threads import single_threaded
from engine.service.models import LibraryModels
from engine.types import ALL_EVIDENCE, CaptionSource, EvidenceKind, Explanation, MediaDetails, ModelInfo, SearchHit

log = logging.getLogger(__name__)

USER_PAIR_LABELS = {"accept": 1, "reject": -1}


class SearchService(LibraryModels):
    """Index, search, explain and annotate one library."""

    def __init__(self, name: str, catalog: Catalog, features: FeatureStore, encoders: Encoders,
                 cache_dir: Path) -> None:
        self.name = name
        self.catalog = catalog
        self.features = features
        self.encoders = encoders
        self.cache_dir = cache_dir
        self.indexer = Indexer(catalog, features, encoders.extractor)
        self._lock = threading.RLock()
        self.indexes = LibraryIndexes(catalog, features, encoders)  # zero-shot, frames, globals, the user's words
        self._trained = None  # TrainedSearch of the active model, opened lazily
        self._evidence: frozenset[EvidenceKind] = ALL_EVIDENCE  # the property below
        self._unloadable = None  # id of an active model that could not be loaded (warned once)
        self._model_for_this_service: tuple[str | None] | None = None  # search_with_model; None: the active one
        self._awaited_starter: ModelInfo | None = None  # the shipped starter, waiting for the assets (_offer_starter)
        self._offering = False
        self.library_dir = cache_dir.parent

    @property
    def evidence(self) -> frozenset[EvidenceKind]:
        """The kinds of evidence rankings weigh (:class:`engine.types.EvidenceKind`, all by default); a test or a
        benchmark may narrow them, by kind or name (``ValueError`` for a name that is no kind)."""
        return self._evidence

    @evidence.setter
    def evidence(self, kinds: Iterable[EvidenceKind | str]) -> None:
        from engine.types import evidence_kinds

        self._evidence = evidence_kinds(kinds)

    @classmethod
    def open(cls, library: str = "default", assets: Path | None = None) -> SearchService:
        """The service of a named library under ``engine.paths.home()``."""
        folder = paths.library_dir(library)
        folder.mkdir(parents=True, exist_ok=True)
        catalog = Catalog(folder / "catalog.sqlite")
        features = FeatureStore(paths.home() / "features.sqlite")
        service = cls(library, catalog, features, Encoders(assets), folder / "thumbnails")
        service._offer_starter()  # a new library searches with the shipped starter model (engine/search/starter.py)
        return service

    def close(self) -> None:
        self.catalog.close()
        self.features.close()

    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener()`` after every change this process commits to the library: folders, items, captions,
        verdicts, models and their embeddings (on the thread that wrote it; the GUI hops to its own). Returns
        the function that unsubscribes. The GUI's one view of the library's counts and results follows this
        (``app/state.py``), so no view depends on the writer remembering to refresh it."""
        return self.catalog.on_commit(listener)

    def version(self) -> tuple:
        """A value that changes with every change of the library this process or another one commits."""
        return self.catalog.version()

    def annotation_version(self) -> tuple:
        """A value that changes whenever a caption or an accepted / rejected pair is added, edited or deleted."""
        return self.catalog.annotation_version()

    # -- library ---------------------------------------------------------------------------------------------

    def roots(self) -> list[Path]:
        return self.catalog.roots()

    def add_root(self, path: Path) -> None:
        self.catalog.add_root(Path(path).resolve())

    def root_summary(self, path: Path) -> tuple[int, int, int]:
        """``(items, captions, pairs)`` :meth:`remove_root` would delete with the folder: its items and the user
        and imported annotations on them (:meth:`Catalog.root_summary`), for the question asked before."""
        return self.catalog.root_summary(Path(path).resolve())

    def remove_root(self, path: Path) -> Path | None:
        """Stop indexing a folder: its items leave the library (the files are not touched). Their user and imported
        captions and pairs are first written to a snapshot (:meth:`restore_snapshot` puts them back); returns
        its file, or None when they had none."""
        snapshot = self.catalog.remove_root(Path(path).resolve())
        self._invalidate()
        return snapshot

    def index_paths(self, paths_: list[Path] | None = None, cancel: CancelToken | None = None) -> Iterator[Progress]:
        """Index folders (default: every root of the library); a generator of progress records.

        A library folder that looks unplugged is skipped and reported by :meth:`offline_roots`, the others are
        indexed; a path that does not exist and is not a library folder raises FileNotFoundError."""
        targets = [Path(p) for p in paths_] if paths_ else self.roots()
        unknown = [p for p in targets if not p.exists() and self.catalog.root_id(Path(os.path.abspath(p))) is None]
        if unknown:
            raise FileNotFoundError(f"no such file or folder: {unknown[0]}")
        # an awaited starter stays listed from the moment the assets turn ready until it is registered (models()
        # read between the two listed zero-shot alone: the Model box flickered, a test saw it)
        self._offering = self._awaited_starter is not None
        try:
            for progress in self.encoders.prepare(cancel):
                if self._awaited_starter is not None and self.encoders.ready():
                    self._offer_starter()  # the assets are there: the starter searches while the word table is built
                yield progress
        finally:
            self._offering = False
        self._offer_starter()
        before = self.catalog.version()
        changed = True
        try:
            yield from self.indexer.index(targets, cancel)
            changed = self.catalog.version() != before
        finally:
            # let the backbone's session go: its arena keeps ~200 MB of activations; the next run reopens it
            self.indexer.release()
            self.encoders.release_backbone()
            heap.trim()  # and what indexing's threads freed, kept in their malloc arenas until asked for
            # A re-scan that found nothing new keeps the loaded indexes (no reload at 100k items). One that did
            # keeps the active model open: its sync below embeds the new items and drops the gone ones; reopening
            # it (its ONNX sessions and vector index) cost ~0.3 s per run, 8 % of indexing 384 photos.
            if changed:
                self._invalidate(model=False)
        from engine.media import prune_thumbnails

        prune_thumbnails(self.cache_dir)  # the thumbnail cache stays within its budget (engine/media/thumbs.py)
        trained = self.active_trained()  # embeds whatever its index lacks
        if trained is not None and changed:
            yield from trained.sync(cancel)

    def _offer_starter(self) -> None:
        """Offer the starter model now that the pretrained assets are surely there: on a fresh home they are
        prepared by the first index run, after :meth:`open` had to skip the offer (it checks the starter against
        the backbone), so without this the starter only arrived at the next start (issue #32)."""
        from engine.search.starter import STARTER_NAME, offer_starter, shipped_starter, starter_enabled

        self._offering = True  # registering checks it against the backbone (seconds): it stays listed meanwhile
        try:
            name = offer_starter(self.catalog, self.register_model, self.set_active_model)  # at once where listed
        finally:
            self._offering = False
        waiting = (name is None and not self.encoders.ready() and starter_enabled()
                   and self.catalog.active_model() is None)
        shipped = shipped_starter() if waiting else None
        # models() lists it as the active model meanwhile; its config is read once here, not at every listing
        self._awaited_starter = (ModelInfo(STARTER_NAME, _method_of(shipped), shipped, {}, active=True)
                                 if shipped is not None else None)

    def assets_ready(self) -> bool:
        """Whether the pretrained assets a search needs are there. On a fresh home they are not until the first
        index run has prepared them (:meth:`index_paths`); a search before that raises ``AssetsMissing``, so the
        GUI holds a query typed meanwhile and runs it once they are (issue #44)."""
        return self.encoders.ready()

    def offline_roots(self) -> list:
        """The library folders the last index run found offline (:class:`engine.library.indexer.OfflineRoot`)."""
        return list(self.indexer.offline)

    def reindex(self, cancel: CancelToken | None = None) -> Iterator[Progress]:
        """Re-index every root (new, changed, moved and deleted files; interrupted work resumes), then embed
        every item with the active model."""
        if self.roots():
            yield from self.index_paths(None, cancel)
        else:
            trained = self.active_trained()
            if trained is not None:
                yield from trained.sync(cancel)

    def counts(self) -> dict[str, int]:
        raw = self.catalog.counts()
        out = {str(k): v for k, v in raw["kind"].items() if k}
        out["failed"] = raw["status"].get(MediaStatus.FAILED, 0)
        out["pending"] = raw["status"].get(MediaStatus.PENDING, 0)
        out["missing"] = raw["status"].get(MediaStatus.MISSING, 0)
        out["total"] = sum(raw["status"].values())
        return out

    def failures(self) -> list[tuple[str, str]]:
        return [(str(p), why) for p, why in self.catalog.failures()]

    def media(self, media_id: int) -> MediaRecord:
        return self.catalog.media(media_id)

    def media_details(self, media_id: int) -> MediaDetails:
        """Path, size, pixels, length, date taken and camera of one item
        (:func:`engine.library.browse.media_details`)."""
        from engine.library import browse

        return browse.media_details(self.catalog, media_id)

    def item(self, media_id: int) -> SearchHit:
        """One item as a hit of no search (score 0): its path, kind, captions and the model's guess."""
        from engine.library.browse import split_captions

        record = self.catalog.media(media_id)
        captions, guess = split_captions(self.catalog.captions(media_id))
        return SearchHit(media_id, str(record.path), record.kind, 0.0, captions, guess=guess)

    def browse(self, top: int = 60, offset: int = 0, sort: str = "newest", folder: Path | None = None,
               kind: str | None = None, annotation: str = "all") -> list[SearchHit]:
        """The library without a query, a page at a time, sorted and filtered (:func:`engine.library.browse.browse`)."""
        from engine.library import browse

        return browse.browse(self.catalog, offset, top, sort, folder, kind, annotation)

    def browse_count(self, folder: Path | None = None, kind: str | None = None, annotation: str = "all") -> int:
        """How many items :meth:`browse` lists with these filters (:func:`engine.library.browse.browse_count`)."""
        from engine.library import browse

        return browse.browse_count(self.catalog, folder, kind, annotation)

    def annotation_states(self, media_ids: list[int], query: str | None = None) -> dict[int, Any]:
        """Caption sources and the verdict for ``query`` of each item
        (:func:`engine.library.browse.annotation_states`)."""
        from engine.library import browse

        return browse.annotation_states(self.catalog, media_ids, query)

    def annotation_progress(self) -> Any:
        """How many indexed items carry a human caption (:func:`engine.library.browse.annotation_progress`)."""
        from engine.library import browse

        return browse.annotation_progress(self.catalog)

    def thumbnail(self, media_id: int, size: int = 256) -> Path:
        from engine.media import thumbnail

        return thumbnail(self.media(media_id).path, self.cache_dir, size=size)[0]

    def preview_frames(self, media_id: int, n: int = 8) -> list[Path]:
        from engine.media import thumbnail

        return thumbnail(self.media(media_id).path, self.cache_dir, size=256, n_preview=n)[1:]

    # -- search ----------------------------------------------------------------------------------------------

    @single_threaded  # a query's small products on its own thread (engine/search/threads.py)
    def search_text(self, text: str, top: int = 60, offset: int = 0, min_probability: float | None = None,
                    kind: str | None = None, folder: Path | None = None) -> list[SearchHit]:
        """The items that best match a sentence, best first: the active model, the zero-shot semantics and the
        user's own words in one ranking (:mod:`engine.search.evidence`); ``kind`` / ``folder`` keep only the
        items of that kind / under that library folder (ranked among the whole library)."""
        from engine.search import calibration

        text = text.strip()
        if not text:
            return []
        if min_probability is not None and calibration.load(EvidenceKind.MODEL) is None:
            trained = self.active_trained()
            if trained is not None and not trained.carries_evidence(text):
                return []  # no word the model knows: nothing to believe, whatever its weights answer (#29)
        ranked = self.rank_text(text)
        if ranked is None:
            return []
        return page_of_hits(self.catalog, *ranked, top, offset, min_probability, self._scope(kind, folder))

    def _scope(self, kind: str | None, folder: Path | None) -> np.ndarray | None:
        """The media ids a search may return (None: every item)."""
        if kind is None and folder is None:
            return None
        return self.catalog.media_ids(Path(folder) if folder is not None else None, kind)

    def warm_search(self, cancel: CancelToken | None = None) -> bool:
        """Build what a first search needs, off the user's clock: the text encoders' sessions, the library's
        zero-shot index and its clips' frames, the active model's item and frame vectors (at 9,200 items these
        took the first query 2 s on an idle machine, 4-5 s in the app, issue #44 point 19). The GUI calls it in
        the background when a library opens and when indexing ends; a query asked meanwhile waits on the same
        indexes' locks instead of building them twice. False when there is nothing to warm (no assets yet, an
        empty library, or ``cancel`` set before it began: the library closed while the job waited its turn)."""
        if (cancel is not None and cancel.cancelled) or not self.assets_ready():
            return False
        if not self.catalog.counts()["status"].get(MediaStatus.OK, 0):  # an empty library: nothing to build, and
            return False  # opening the encoders for nothing took the GIL from a first index run starting beside it
        warmed = self.rank_text("a photo") is not None
        heap.trim()  # what building them needed only for a moment (reading 9,200 items' features)
        return warmed

    @single_threaded
    def rank_text(self, text: str):
        """``(ids, ranking, trained, encoded query)`` of a sentence over the library (None: nothing indexed)."""
        from engine.search.ranking import rank_sentence

        return rank_sentence(text, self.indexes, self.encoders, self.active_trained(), self.evidence)

    def query_carries_evidence(self, text: str) -> bool:
        """False when the active trained model's text encoder knows none of the query's content words
        (:meth:`engine.search.trained.TrainedSearch.carries_evidence`): a search under a match-probability cutoff
        then returns nothing, and the GUI says why. Always True with zero-shot search, which has no cutoff."""
        trained = self.active_trained()
        return trained is None or trained.carries_evidence(text.strip())

    def search_media(self, path: Path, top: int = 60, offset: int = 0, kind: str | None = None,
                     folder: Path | None = None, exclude_example: bool = False) -> list[SearchHit]:
        """The items that look most like a picture, GIF or video file: the active model's embedding and the
        backbone's global features, fused (:mod:`engine.search.evidence`); ``kind`` / ``folder`` as in
        :meth:`search_text`; ``exclude_example``: the file itself is left out when it is a library item (Find
        similar: the item is trivially its own best match)."""
        from engine.media import MediaError
        from engine.search import evidence

        trained = self.active_trained()
        result = (trained.encoders if trained is not None else self.encoders).extractor().extract([Path(path)])[0]
        if isinstance(result, MediaError):
            raise result
        ids, matrix = self.indexes.global_matrix()
        if not len(ids):
            return []
        dense: dict[EvidenceKind, evidence.Evidence] = {}
        zero_shot, model = EvidenceKind.ZERO_SHOT, EvidenceKind.MODEL
        if zero_shot in self.evidence or trained is None:
            dense[zero_shot] = evidence.CosineEvidence(zero_shot, matrix, result.record.global_.astype(np.float32))
        encoded = None
        if trained is not None:
            encoded = trained.encode_media_features(result.record)
            if model in self.evidence:
                dense[model] = evidence.ModelEvidence(trained, encoded, ids)
        rows, sample = evidence.candidate_rows(ids, trained, encoded, np.zeros(0, np.int64))
        ranking = evidence.fuse(dense, rows, sample)
        itself = self.catalog.media_by_path(Path(path).resolve()) if exclude_example else None
        return page_of_hits(self.catalog, ids, ranking, None, None, top, offset, None, self._scope(kind, folder),
                                 exclude=itself.id if itself is not None else None)

    def file_thumbnail(self, path: Path, size: int = 256) -> Path:
        """A thumbnail of any media file, in the library or not (the example a search is made by)."""
        from engine.media import thumbnail

        return thumbnail(Path(path), paths.cache_dir() / "example-thumbnails", size=size)[0]

    def explain(self, query: str | Path, media_id: int) -> Explanation:
        """Why an item matched: the model's attention (or, without any, the regional semantics' classes that match
        the query's words), and for a sentence what the user wrote on the item that the ranking counted."""
        from engine.search.evidence import positions
        from engine.search.explanation import explain_item, ranking_note, your_words_note

        explained = explain_item(query, self.media(media_id), self.active_trained(), self.features, self.encoders)
        if isinstance(query, Path):
            return explained
        notes = []
        ranked = self.rank_text(str(query))
        if ranked is not None:  # the same numbers that ranked it (#40)
            ids, ranking = ranked[0], ranked[1]
            at, found = positions(ids[ranking.rows], np.array([media_id]))
            notes.append(ranking_note(ranking, int(at[0])) if found.all() else None)
        if EvidenceKind.WORDS in self.evidence:
            notes.append(your_words_note(str(query), media_id, self.indexes.user_words(), self.encoders))
        notes = [n for n in notes if n]
        return replace(explained, notes=(*explained.notes, *notes)) if notes else explained

    def _invalidate(self, model: bool = True) -> None:
        """Drop what is built from the library's items (zero-shot ranking, global features) and, with ``model``,
        the active model's search (reopened when next needed)."""
        with self._lock:
            self.indexes.drop()
            if model:
                self._trained = None

    # -- annotation ------------------------------------------------------------------------------------------

    def captions(self, media_id: int) -> list[CaptionRecord]:
        return self.catalog.captions(media_id)

    def add_caption(self, media_id: int, text: str) -> int:
        return self.catalog.add_caption(media_id, _clean(text), CaptionSource.USER)

    def update_caption(self, caption_id: int, text: str) -> None:
        self.catalog.update_caption(caption_id, _clean(text))

    def delete_caption(self, caption_id: int) -> None:
        self.catalog.delete_caption(caption_id)

    def accept_pair(self, query: str, media_id: int) -> int:
        return self.catalog.add_pair(media_id, _clean(query), USER_PAIR_LABELS["accept"], CaptionSource.USER)

    def reject_pair(self, query: str, media_id: int) -> int:
        return self.catalog.add_pair(media_id, _clean(query), USER_PAIR_LABELS["reject"], CaptionSource.USER)

    def delete_pair(self, pair_id: int) -> None:
        self.catalog.delete_pair(pair_id)

    def missing_summary(self) -> tuple[int, int, int]:
        """``(items, captions, pairs)`` :meth:`purge_missing` would delete (user and imported annotations)."""
        return self.catalog.missing_summary()

    def purge_missing(self) -> tuple[int, int, int, Path | None]:
        """Delete the items marked missing (offline or gone) with their annotations, after writing a snapshot
        of every annotation; returns ``(items, captions, pairs, snapshot file or None)``."""
        try:
            return self.catalog.purge_missing()
        finally:
            self._invalidate()

    def annotation_snapshots(self) -> list[Path]:
        """The library's automatic annotation snapshots, oldest first (:mod:`engine.library.catalog.snapshots`)."""
        from engine.library.catalog import snapshots

        return snapshots.snapshots(snapshots.folder_of(self.catalog.path))

    def restore_snapshot(self, path: Path) -> Restored:
        """Put back the captions and pairs of a snapshot (:meth:`Catalog.restore_snapshot`)."""
        return self.catalog.restore_snapshot(Path(path))


def _clean(text: str) -> str:
    text = " ".join(str(text).split())
    if not text:
        raise ValueError("a caption or query cannot be empty")
    return text


def _method_of(model_dir: Path) -> str:
    """The method a model folder's ``config.json`` names (:func:`runfolder.read_config_method`)."""
    from engine.trainercontract.runfolder import read_config_method

    return read_config_method(model_dir)
