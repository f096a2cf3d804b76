"""``Workspace.search``: queries over the library. A sentence is ranked in :mod:`engine.search.ranking` and nowhere
else (docs/contributing.md); a picture, GIF or video by the active model's embedding and the backbone's global
features, fused the same way (:mod:`engine.search.evidence`); an explanation from the same numbers.

Until a model is trained (or while the zero-shot model is active) a sentence is ranked by the regional semantics
of every item (:mod:`engine.features.regional`) and the user's own words."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from engine import heap
from engine.library.catalog import MediaRecord, MediaStatus
from engine.media import MediaError
from engine.progress import CancelToken
from engine.search import calibration, evidence
from engine.search.evidence import positions
from engine.search.explanation import explain_item, ranking_note, your_words_note
from engine.search.ranking import page_of_hits, rank_sentence
from engine.search.threads import single_threaded
from engine.state import LibraryState
from engine.types import EvidenceKind, Explanation, SearchHit


class Search:
    """Queries: a sentence, an example picture or clip, why an item ranked, the first search's warm-up."""

    def __init__(self, state: LibraryState) -> None:
        self._state = state

    @single_threaded  # a query's small products on its own thread (engine/search/threads.py)
    def text(self, text: str, top: int = 60, offset: int = 0, min_probability: float | None = None,
             kind: str | None = None, folder: Path | None = None) -> list[SearchHit]:
        """The items that best match a sentence, best first: the active model, the zero-shot semantics and the
        user's own words in one ranking (:mod:`engine.search.evidence`); ``kind`` / ``folder`` keep only the
        items of that kind / under that library folder (ranked among the whole library)."""
        text = text.strip()
        if not text:
            return []
        if min_probability is not None and calibration.load(EvidenceKind.MODEL) is None:
            trained = self._state.active_trained()
            if trained is not None and not trained.carries_evidence(text):
                return []  # no word the model knows: nothing to believe, whatever its weights answer (#29)
        ranked = self.rank_text(text)
        if ranked is None:
            return []
        return page_of_hits(self._state.catalog, *ranked, top, offset, min_probability, self._scope(kind, folder))

    @single_threaded
    def rank_text(self, text: str):
        """``(ids, ranking, trained, encoded query)`` of a sentence over the library (None: nothing indexed)."""
        state = self._state
        return rank_sentence(text, state.indexes, state.encoders, state.active_trained(), state.evidence)

    def example(self, path: Path, top: int = 60, offset: int = 0, kind: str | None = None,
                folder: Path | None = None, exclude_example: bool = False) -> list[SearchHit]:
        """The items that look most like a picture, GIF or video file: the active model's embedding and the
        backbone's global features, fused (:mod:`engine.search.evidence`); ``kind`` / ``folder`` as in
        :meth:`text`; ``exclude_example``: the file itself is left out when it is a library item (Find similar:
        the item is trivially its own best match)."""
        state = self._state
        trained = state.active_trained()
        result = (trained.encoders if trained is not None else state.encoders).extractor().extract([Path(path)])[0]
        if isinstance(result, MediaError):
            raise result
        ids, matrix = state.indexes.global_matrix()
        if not len(ids):
            return []
        dense: dict[str, evidence.Evidence] = {}
        zero_shot, model = EvidenceKind.ZERO_SHOT, EvidenceKind.MODEL
        if zero_shot in state.evidence or trained is None:
            dense[zero_shot] = evidence.CosineEvidence(zero_shot, matrix, result.record.global_.astype(np.float32))
        encoded = None
        if trained is not None:
            encoded = trained.encode_media_features(result.record)
            if model in state.evidence:
                dense[model] = evidence.ModelEvidence(trained, encoded, ids)
                for kind, other in evidence.beside(trained):
                    dense[kind] = evidence.ModelEvidence(other, other.encode_media_features(result.record), ids,
                                                         kind)
        rows, sample = evidence.candidate_rows(ids, trained, encoded, np.zeros(0, np.int64))
        itself = self._library_item(path) if exclude_example else None
        # every source is z-scored against the library's other items: the example's own perfect match is no
        # typical item (with it, a model's and the look's spreads both swelled and every hit read "weak")
        reference = sample if sample is not None else rows
        if itself is not None:
            reference = reference[ids[reference] != itself.id]
        ranking = evidence.fuse(dense, rows, reference if itself is not None else sample)
        if len(dense) == 1:  # one source keeps its raw cosines; a hit's standing reads z-units, as of a fused sum
            (source,) = dense.values()
            ranking.total = evidence.standardise(ranking.total, source.score(reference))
        return page_of_hits(state.catalog, ids, ranking, None, None, top, offset, None, self._scope(kind, folder),
                            exclude=itself.id if itself is not None else None)

    def leaves_out(self, path: Path) -> bool:
        """Whether a search by ``path`` that excludes its example (:meth:`example`, Find similar) ranks one item
        fewer than the library's indexed items: the file is one of them (the GUI's places say "of N items")."""
        itself = self._library_item(path)
        return itself is not None and itself.status == MediaStatus.OK

    def _library_item(self, path: Path) -> MediaRecord | None:
        """The library's item at ``path`` (None: the file is not one), the example a search may leave out."""
        return self._state.catalog.media_by_path(Path(path).resolve())

    def explain(self, query: str | Path, media_id: int) -> Explanation:
        """Why an item matched: the model's attention (or, without any, the regional semantics' classes that match
        the query's words), and for a sentence what the user wrote on the item that the ranking counted."""
        state = self._state
        explained = explain_item(query, state.catalog.media(media_id), state.active_trained(), state.features,
                                 state.encoders)
        if isinstance(query, Path):
            return explained
        notes = []
        ranked = self.rank_text(str(query))
        if ranked is not None:  # the same numbers that ranked it (#40)
            ids, ranking = ranked[0], ranked[1]
            at, found = positions(ids[ranking.rows], np.array([media_id]))
            notes.append(ranking_note(ranking, int(at[0])) if found.all() else None)
        if EvidenceKind.WORDS in state.evidence:
            notes.append(your_words_note(str(query), media_id, state.indexes.user_words(), state.encoders))
        notes = [n for n in notes if n]
        return replace(explained, notes=(*explained.notes, *notes)) if notes else explained

    def carries_evidence(self, text: str) -> bool:
        """False when the active trained model's text encoder knows none of the query's content words
        (:meth:`engine.search.trained.TrainedSearch.carries_evidence`): a search under a match-probability cutoff
        then returns nothing, and the GUI says why. Always True with zero-shot search, which has no cutoff."""
        trained = self._state.active_trained()
        return trained is None or trained.carries_evidence(text.strip())

    def warm(self, cancel: CancelToken | None = None) -> bool:
        """Build what a first search needs, off the user's clock: the text encoders' sessions, the library's
        zero-shot index and its clips' frames, the active model's item and frame vectors (at 9,200 items these
        took the first query 2 s on an idle machine, 4-5 s in the app, issue #44 point 19). The GUI calls it in
        the background when a library opens and when indexing ends; a query asked meanwhile waits on the same
        indexes' locks instead of building them twice. False when there is nothing to warm (no assets yet, an
        empty library, or ``cancel`` set before it began: the library closed while the job waited its turn)."""
        state = self._state
        if (cancel is not None and cancel.cancelled) or not state.encoders.ready():
            return False
        if not state.catalog.counts()["status"].get(MediaStatus.OK, 0):  # an empty library: nothing to build, and
            return False  # opening the encoders for nothing took the GIL from a first index run starting beside it
        warmed = self.rank_text("a photo") is not None
        heap.trim()  # what building them needed only for a moment (reading 9,200 items' features)
        return warmed

    def _scope(self, kind: str | None, folder: Path | None) -> np.ndarray | None:
        """The media ids a search may return (None: every item)."""
        if kind is None and folder is None:
            return None
        return self._state.catalog.media_ids(Path(folder) if folder is not None else None, kind)
