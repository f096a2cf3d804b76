"""One ranking made of several kinds of evidence (docs/contributing.md, "One ranking"): the sources and the rule.

Sources, each a small object that scores a set of library rows for one query:

Each kind is an :class:`engine.types.EvidenceKind`, the one list of them (``LibraryState.evidence`` narrows it):

- ``model``: the active trained model (K x K max cosine, PVSE §3.4; PCME: cosine of the means), a GIF or a video
  scored by its best-matching frame (:meth:`engine.search.trained.TrainedSearch.score_ids`);
- ``zero_shot``: the regional semantics (A3VSE §3.2, :mod:`engine.search.zeroshot`) for a sentence, the cosine of
  the backbone's global features for a picture;
- the user's words (:mod:`engine.search.words`, :class:`UserEvidence`): their captions and accepted queries matched
  lexically and semantically, spread to look-alikes; rejected queries.

The rule, one for every method: the dense sources are standardised over the library (z-scores, so neither dominates
by scale) and summed with fixed weights (:data:`MODEL`, chosen on train-side data); with a calibration
(:mod:`engine.search.calibration`, the app's sentence searches) that sum, the model's cosine, the user's words and
the library's size become the log-odds that an item is what the query asks for, and a rejection multiplies the
probability by ``1 - rejected``. Without one (a picture query, the gate's evaluation, no fitted parameters) the
user's words add :data:`WORDS` z-units and a rejection subtracts :data:`REJECT`, the hand-set rule before #40.

Scale: up to :data:`DENSE_LIMIT` items (:data:`COMPANION_DENSE_LIMIT` with a companion) every source scores every
item. Above it the candidates are the model's
approximate top :data:`CANDIDATES` (plus every clip and every item the user's words name), and the z-scores use
the mean and spread of a fixed random sample of the library, so a query costs the same at 100,000 items.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from engine.features import vocabulary
from engine.features.regional import content_words
from engine.search import calibration
from engine.search.modelrunner import Encoded
from engine.search.words import novelty_of
from engine.search.zeroshot import combine_terms
from engine.types import EvidenceKind

MODEL = 0.8  # weight of the trained model's z-score (the zero-shot semantics get 1 - MODEL)
WORDS = 10.0  # z-units a full match of the user's words adds (what you wrote outranks what a model guesses)
REJECT = 15.0  # z-units a rejected pair for this very query removes
# The active model's companion (engine.search.companion), a dense source beside it: it takes this share of the
# trained models' weight MODEL (chosen on the train-side slices, docs/benchmarks.md "A PVSE starter": 0 / 0.5 / 0.7
# gave app rsum 370.6 / 378.2 / 377.1 on the Flickr8k slice, 247.4 / 251.2 / 250.8 on the webcaps slice)
COMPANION = "companion"
COMPANION_SHARE = 0.5
# The companion's own companion, a probabilistic model (PCME; its sigma is the uncertainty the inspector reads): a
# dense source taking this share of all the trained models' weight (chosen on the train-side slices with
# tests/bench/bench_companion.py --beside, docs/benchmarks.md "The probabilistic companion": shares 0 / 0.2 / 0.33
# gave app rsum 376.6 / 381.0 / 383.7 on the Flickr8k slice, 250.6 / 253.4 / 252.8 on the webcaps slice)
PROBABILISTIC = "probabilistic"
PROBABILISTIC_SHARE = 0.33
BESIDE = (COMPANION, PROBABILISTIC)  # the dense kinds of the models searched beside the active one
DENSE_LIMIT = 20_000
# A companion's K x K heads cost ~7x the starter's one cosine per item (8 ms per 1,000 items against 1.1 on this
# machine): past this many items a model with one ranks the model's candidates (the large-library path) instead of
# every item, so a query at 20,000 items does not pay 160 ms for it
COMPANION_DENSE_LIMIT = 2_000
CANDIDATES = 300
SAMPLE = 1_000
# A companion reads every COMPANION_STRIDE-th row of the fixed sample for its z-scores (250 of 1,000): its K x K
# heads cost ~7x the model's cosine per item, and 250 rows estimate a mean and a spread within a few percent
COMPANION_STRIDE = 4
# On that path a companion scores only the model's top BESIDE_CANDIDATES candidates (and every row the user's words
# touch); the rest get its lowest score among them (None: every candidate). Chosen on the train side
# (tests/bench/bench_beside_candidates.py, docs/benchmarks.md "Fewer candidates for the companions"): on the
# starter's held-aside slices forced onto this path, app R@10 64.6 scoring all 300, 64.7 at 100, 64.8 at 60, 64.7 at 30
BESIDE_CANDIDATES: int | None = 60


class Evidence(Protocol):
    """One kind of evidence over the library's rows (``rows`` index the ranker's ``ids``)."""

    name: str  # an EvidenceKind, or one of BESIDE

    def score(self, rows: np.ndarray) -> np.ndarray:
        """Raw scores (n,) of ``rows`` for the query this object was made for."""
        ...


@dataclass
class Ranking:
    """Fused scores of some library rows, with what each source said (for the inspector and benchmarks)."""

    rows: np.ndarray
    total: np.ndarray
    parts: dict[str, np.ndarray] = field(default_factory=dict)
    frames: np.ndarray | None = None  # per library row: the frame of a clip that matched best (-1: none)
    head_pairs: np.ndarray | None = None  # per library row: (query head, item head) of the model's best match
    query: dict[str, float] = field(default_factory=dict)  # the calibration's per-query features (familiar, ...)
    names: dict[str, int] = field(default_factory=dict)  # the user's names the model's query was moved by: items
    features: dict = field(default_factory=dict)  # every feature the calibration weighed (the inspector reads them)
    calibrated: object = None  # the :class:`engine.search.calibration.Calibration` that made ``total`` (or None)

    def frame_of(self, row: int) -> int | None:
        if self.frames is None or self.frames[row] < 0:
            return None
        return int(self.frames[row])

    def head_pair_of(self, row: int) -> tuple[int, int] | None:
        return None if self.head_pairs is None else (int(self.head_pairs[row, 0]), int(self.head_pairs[row, 1]))

    def order(self) -> np.ndarray:
        """Positions into ``rows`` best first (ties by row, so a query always ranks the same way)."""
        return np.lexsort((self.rows, -self.total))


def standardise(scores: np.ndarray, reference: np.ndarray | None = None) -> np.ndarray:
    """z-scores of ``scores`` with the mean and spread of ``reference`` (default: ``scores`` themselves)."""
    ref = scores if reference is None else reference
    if len(ref) == 0:
        return np.zeros_like(scores, dtype=np.float32)
    std = float(ref.std())
    if std <= 1e-9:
        return np.zeros_like(scores, dtype=np.float32)
    return ((scores - float(ref.mean())) / std).astype(np.float32)


def weights(sources: Sequence[EvidenceKind], user_share: float = 0.0) -> dict[EvidenceKind, float]:
    """The weight of each dense source present: the model and the zero-shot semantics share 1. ``user_share``:
    the share of the query's content words that the user wrote on items; the zero-shot semantics read those words
    as ImageNet classes, while they mean what the user's items show (the words evidence), so their weight shrinks
    by that share."""
    if EvidenceKind.MODEL in sources and EvidenceKind.ZERO_SHOT in sources:
        out = {EvidenceKind.MODEL: MODEL, EvidenceKind.ZERO_SHOT: (1.0 - MODEL) * (1.0 - user_share)}
    else:
        out = {name: 1.0 for name in sources if name not in BESIDE}
    if COMPANION in sources and EvidenceKind.MODEL in out:  # the model's companion takes its share of its weight
        out[COMPANION] = out[EvidenceKind.MODEL] * COMPANION_SHARE
        out[EvidenceKind.MODEL] *= 1.0 - COMPANION_SHARE
    if PROBABILISTIC in sources and EvidenceKind.MODEL in out:  # and the companion's, its share of both
        trained = [name for name in (EvidenceKind.MODEL, COMPANION) if name in out]
        out[PROBABILISTIC] = sum(out[name] for name in trained) * PROBABILISTIC_SHARE
        for name in trained:
            out[name] *= 1.0 - PROBABILISTIC_SHARE
    return out


@dataclass
class UserEvidence:
    """What the user wrote, per ranking row (0..1 each; :mod:`engine.search.words`): lexical cover of the query,
    closeness of meaning, the share passed on by look-alikes, rejections for this query, and the cover by words new
    to the ranking."""

    lexical: np.ndarray
    semantic: np.ndarray
    spread: np.ndarray
    rejected: np.ndarray
    novel: np.ndarray | None = None  # the lexical cover by words new to the ranking (names), :func:`novel_cover`
    described: np.ndarray | None = None  # 1 where the user wrote what the item is (a caption or accepted query)


def fuse(dense: dict[str, Evidence], rows: np.ndarray, sample: np.ndarray | None = None,
         words: np.ndarray | None = None, rejected: np.ndarray | None = None, user_share: float = 0.0,
         calibrated=None, user: UserEvidence | None = None, familiar: float = 1.0,
         n_items: int | None = None, log_frames: np.ndarray | None = None) -> Ranking:
    """The fused ranking of ``rows`` (a single source alone keeps its own scores): each dense source z-scored
    (over ``rows``, or over ``sample`` when the rows are candidates of a large library) and summed with
    :func:`weights` (``user_share``: see there).

    ``calibrated`` (:class:`engine.search.calibration.Calibration`): the total is the log-odds that the item is what
    the query asks for, from the dense sum, the model's raw cosine, the query's ``familiar`` share, the library's
    size ``n_items`` and the ``user`` evidence; ``Ranking.parts["probability"]`` holds it as a probability; a clip
    scored by the best of its T frames (``log_frames``: log T per row, 0 for a photo) first loses the calibration's
    ``frames_bias`` z-units per log T of its dense sum (the best of T draws stands above one draw). Without
    one (the dense sources alone, or no fitted parameters), ``words`` (0..1 per row) adds up to :data:`WORDS`
    z-units and ``rejected`` removes up to :data:`REJECT`."""
    w = weights(list(dense), user_share)
    model = dense.get(EvidenceKind.MODEL)
    # a hit's heads are the companion's where the model has one vector per item (the inspector shows them)
    heads = dense.get(COMPANION) if COMPANION in dense and not _has_heads(model) else model
    seen = {"frames": getattr(model, "frames", None), "head_pairs": getattr(heads, "head_pairs", None)}
    if len(dense) == 1 and words is None and rejected is None and calibrated is None:
        (name, source), = dense.items()  # one source: its own scores (e.g. a cosine)
        raw = source.score(rows).astype(np.float32)
        return Ranking(rows, raw, {name: raw}, **seen)
    total = np.zeros(len(rows), np.float32)
    parts: dict[str, np.ndarray] = {}
    some: np.ndarray | None = None  # the rows a companion scores on the large-library path (after the model)
    for name, source in dense.items():
        own = beside_sample(sample) if name in BESIDE else sample
        if own is not None and hasattr(source, "calibrate"):
            source.calibrate(own)
        if sample is not None and name in BESIDE and some is None:
            some = _beside_rows(parts.get(EvidenceKind.MODEL), _touched(user, words))
        raw = source.score(rows) if some is None or name not in BESIDE else _scored_at(source, rows, some)
        reference = source.score(own) if own is not None else None
        parts[name] = raw
        total += w[name] * standardise(raw, reference)
    if calibrated is not None:
        if log_frames is not None and calibrated.frames_bias:
            total = total - np.float32(calibrated.frames_bias) * log_frames.astype(np.float32)
        parts["dense"] = total
        words = {} if user is None else {"lexical": user.lexical, "semantic": user.semantic, "spread": user.spread,
                                         "novel": user.novel, "described": user.described}
        features = calibration.features(total, familiar, n_items if n_items is not None else len(rows),
                                        parts.get(EvidenceKind.MODEL), **words)
        parts.update(words)
        logit = calibrated.logit(features, len(rows))
        if user is not None and np.any(user.rejected > 0):
            parts["rejected"] = user.rejected
            logit = calibration.with_rejection(logit, user.rejected)
        parts["probability"] = calibration.sigmoid(logit)
        return Ranking(rows, logit, parts, **seen,
                       query={"familiar": float(features["familiar"]), "share": float(familiar),
                              "log_items": float(features["log_items"])}, calibrated=calibrated,
                       features=features)
    if words is not None:
        parts[EvidenceKind.WORDS] = words
        total += WORDS * words.astype(np.float32)
    if rejected is not None:
        parts["rejected"] = rejected
        total -= REJECT * rejected.astype(np.float32)
    return Ranking(rows, total, parts, **seen)


def beside_sample(sample: np.ndarray | None) -> np.ndarray | None:
    """The rows of a large library's fixed ``sample`` a companion reads for its z-scores: every
    :data:`COMPANION_STRIDE`-th (a sample too small to thin is read whole)."""
    if sample is None or len(sample) < 100 * COMPANION_STRIDE:
        return sample
    return sample[::COMPANION_STRIDE]


def takes_candidates(n_items: int, trained) -> bool:
    """Whether a library of ``n_items`` ranks the model's candidates (:func:`candidate_rows`) rather than every
    item."""
    if trained is None:
        return False
    return n_items > (DENSE_LIMIT if trained.companion is None else COMPANION_DENSE_LIMIT)


def _touched(user: UserEvidence | None, words: np.ndarray | None) -> np.ndarray | None:
    """Rows the user's words say something about (a caption, a look-alike, a rejection), or None."""
    arrays = [words] if words is not None else []
    if user is not None:
        arrays += [user.lexical, user.semantic, user.spread, user.rejected]
    arrays = [a for a in arrays if a is not None and len(a)]
    return np.flatnonzero(np.any(np.stack(arrays) != 0, axis=0)) if arrays else None


def _beside_rows(model_raw: np.ndarray | None, touched: np.ndarray | None) -> np.ndarray | None:
    """Positions a companion scores among a large library's candidates: the model's top
    :data:`BESIDE_CANDIDATES` and ``touched``; None (all of them) where that is every candidate anyway."""
    if BESIDE_CANDIDATES is None or model_raw is None or len(model_raw) <= BESIDE_CANDIDATES:
        return None
    top = np.argpartition(-np.asarray(model_raw, np.float32), BESIDE_CANDIDATES - 1)[:BESIDE_CANDIDATES]
    return top if touched is None else np.union1d(top, touched)


def _scored_at(source: Evidence, rows: np.ndarray, some: np.ndarray) -> np.ndarray:
    """``source``'s scores of ``rows[some]``, every other row at the lowest of them: below every row scored."""
    scored = np.asarray(source.score(rows[some]), np.float32)
    out = np.full(len(rows), scored.min() if len(scored) else 0.0, np.float32)
    out[some] = scored
    return out


def beside(trained) -> list[tuple[str, Any]]:
    """The models searched beside ``trained`` (:mod:`engine.search.companion`), each with the dense kind it ranks
    as: its companion (:data:`COMPANION`), then that one's own (:data:`PROBABILISTIC`); none without a model."""
    out: list[tuple[str, Any]] = []
    companion = getattr(trained, "companion", None)
    if companion is not None:
        out.append((COMPANION, companion))
        if companion.companion is not None:
            out.append((PROBABILISTIC, companion.companion))
    return out


def _has_heads(source) -> bool:
    """Whether a model source embeds an item as more than one vector (PVSE's K heads)."""
    trained = getattr(source, "trained", None)
    return trained is not None and trained.runner.num_embeddings > 1


def novel_cover(labels: dict[str, tuple[float, tuple[int, ...]]], shares: dict[str, float],
                novelty: dict[str, float]) -> dict[int, float]:
    """Per item, the share of the whole query its captions cover with words new to the ranking in use (each
    written word's share times its novelty, :func:`word_novelty`): a name the user gave ("Biscuit": novelty 1)
    counts in full, an everyday word the model already reads ("dog": ~0) hardly at all. What the user wrote
    tells the ranking most where it says what no model here can read."""
    out: dict[int, float] = {}
    for term, (_, items) in labels.items():
        add = shares.get(term, 0.0) * novelty.get(term, 1.0)
        for m in items:
            out[m] = min(1.0, out.get(m, 0.0) + add)
    return out


@functools.lru_cache(maxsize=8)
def fixed_sample(n: int, size: int = SAMPLE, seed: int = 0) -> np.ndarray:
    """Rows whose scores stand for the library's when only candidates are scored (same rows every query: the
    same read-only array, drawn once per library size)."""
    rows = np.arange(n) if n <= size else np.sort(np.random.default_rng(seed).choice(n, size, replace=False))
    rows.flags.writeable = False
    return rows


@dataclass
class ArrayEvidence:
    """Evidence already computed for every row (a small library, or a benchmark's score matrix column)."""

    name: EvidenceKind
    values: np.ndarray

    def score(self, rows: np.ndarray) -> np.ndarray:
        return self.values[rows]


class ZeroShotEvidence:
    """The regional semantics of a sentence (:class:`engine.search.zeroshot.ZeroShotIndex`, its three terms
    standardised with the same rows as the other sources)."""

    name = EvidenceKind.ZERO_SHOT

    def __init__(self, index, sentence: np.ndarray, words: np.ndarray, frames=None) -> None:
        """``frames``: ``(owner rows (F,), ZeroShotIndex of F frames)``, the sampled frames of the library's clips,
        so a clip is scored by its best-matching frame too (a slideshow's mean is no photo of it)."""
        self.index, self.frames = index, frames
        self.query = index.query_columns(sentence, words)  # the query's side, computed once for every row set
        self._sample: np.ndarray | None = None
        self._reference: np.ndarray | None = None  # the sample's raw terms
        self._reference_scores: np.ndarray | None = None

    def terms(self, rows: np.ndarray) -> np.ndarray:
        return self.index.terms(None, None, rows, query=self.query)

    def score(self, rows: np.ndarray) -> np.ndarray:
        if rows is self._sample and self._reference_scores is not None:
            return self._reference_scores
        sample = rows is self._sample and self._reference is not None  # calibrate's terms: not computed again
        terms = self._reference if sample else self.terms(rows)
        reference = self._reference if self._reference is not None else terms
        scores = combine_terms(terms, reference)
        if self.frames is not None and len(self.frames[0]):
            owners, frame_index = self.frames
            position = np.full(int(max(owners.max(), rows.max() if len(rows) else 0)) + 1, -1, np.int64)
            position[rows] = np.arange(len(rows))
            mine = np.flatnonzero(position[owners] >= 0)
            if len(mine):
                frame_terms = frame_index.terms(None, None, mine, query=self.query)
                np.maximum.at(scores, position[owners[mine]], combine_terms(frame_terms, reference))
        return scores

    def calibrate(self, sample: np.ndarray) -> None:
        """Standardise the terms of candidates with those of a fixed sample of the library (large libraries); the
        sample's own scores are kept (:func:`fuse` reads them as the reference)."""
        self._sample, self._reference, self._reference_scores = sample, self.terms(sample), None
        self._reference_scores = self.score(sample)


class CosineEvidence:
    """Cosine of unit vectors (N, D), e.g. the backbone's global features against a picture's."""

    def __init__(self, name: EvidenceKind, matrix: np.ndarray, query: np.ndarray) -> None:
        self.name, self.matrix = name, matrix
        self.query = (query / max(float(np.linalg.norm(query)), 1e-9)).astype(np.float32)

    def score(self, rows: np.ndarray) -> np.ndarray:
        return self.matrix[rows] @ self.query


class ModelEvidence:
    """The trained model's score of library rows (``ids[rows]``): :meth:`TrainedSearch.score_ids`; remembers
    which frame of a clip matched."""

    name: str = EvidenceKind.MODEL

    def __init__(self, trained, encoded, ids: np.ndarray, name: str = EvidenceKind.MODEL) -> None:
        """``name``: one of :data:`BESIDE` for a model searched beside the active one."""
        self.trained, self.encoded, self.ids, self.name = trained, encoded, ids, name
        self.frames = np.full(len(ids), -1, np.int64)  # per library row: the clip's best frame (-1: none)
        self.head_pairs = np.zeros((len(ids), 2), np.int64)  # per library row: (query head, item head)
        self._sample: np.ndarray | None = None
        self._scored: tuple[np.ndarray, np.ndarray] | None = None  # rows scored ahead (prefetch) and their scores

    def calibrate(self, sample: np.ndarray) -> None:
        """``sample`` (:func:`fixed_sample`) is scored every query of a large library: the index keeps its
        vectors between queries."""
        self._sample = sample

    def prefetch(self, rows: np.ndarray) -> None:
        """Score ``rows`` now (a helper thread, while the query's other work runs): :meth:`score` of the same rows
        answers from it."""
        self._scored = (rows, self.score(rows))

    def score(self, rows: np.ndarray) -> np.ndarray:
        ahead = self._scored
        if ahead is not None and len(ahead[0]) == len(rows) and np.array_equal(ahead[0], rows):
            return ahead[1]
        scores, frames, pairs = self.trained.score_ids(self.encoded, self.ids[rows], keep=rows is self._sample)
        self.frames[rows] = frames
        self.head_pairs[rows] = pairs
        return scores


class Prefetched:
    """A source being made on a helper thread (its query encoded, its sample scored; see
    :func:`engine.search.ranking.rank_sentence`) while the query's other work runs; whatever is asked of it waits
    for ``future``, whose result maps each kind to its source."""

    def __init__(self, name: str, future) -> None:
        self.name, self._future = name, future

    def __getattr__(self, attr: str):
        return getattr(self._future.result()[self.name], attr)


def positions(ids: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(positions, found)``: where each of ``wanted`` is in ``ids`` (any order), for those ``found``."""
    wanted = np.asarray(wanted, np.int64)
    if not len(ids) or not len(wanted):
        return np.zeros(0, np.int64), np.zeros(len(wanted), bool)
    if bool((ids[1:] > ids[:-1]).all()):  # the library's ids come in id order: no sort (0.4 ms at 100,000)
        at = np.minimum(np.searchsorted(ids, wanted), len(ids) - 1)
    else:
        order = np.argsort(ids)
        at = order[np.minimum(np.searchsorted(ids, wanted, sorter=order), len(ids) - 1)]
    found = ids[at] == wanted
    return at[found], found


def on_rows(values: dict[int, float], ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Per-item values (media id -> value) laid on ranking rows (``ids[rows]``), 0 elsewhere."""
    out = np.zeros(len(rows), np.float32)
    if values:
        at, found = positions(ids[rows], np.fromiter(values, np.int64, len(values)))
        out[at] = np.fromiter(values.values(), np.float32, len(values))[found]
    return out


def candidate_rows(ids: np.ndarray, trained, encoded, named: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Every row of a library up to :data:`DENSE_LIMIT` items (:data:`COMPANION_DENSE_LIMIT` when the model has a
    companion); above it the model's candidates, every clip and every item the user's words name, with a fixed
    sample of the library for the z-scores."""
    if not takes_candidates(len(ids), trained) or encoded is None:
        return np.arange(len(ids)), None
    wanted = np.union1d(trained.candidate_ids(encoded, CANDIDATES), named)
    return np.unique(positions(ids, wanted)[0]), fixed_sample(len(ids))


def word_novelty(labels: dict, ids: np.ndarray, index, trained,
                 zero_shot_query: Callable[[str], tuple[np.ndarray, np.ndarray]] | None) -> dict[str, float]:
    """How new each word the user wrote is to the ranking in use: for a trained model that records the words of
    its training captions, from their counts (:func:`engine.features.vocabulary.novelty`: "Biscuit" 1, "girl"
    0.01); else :func:`engine.search.words.novelty_of`, the word alone as the query against a fixed sample of
    the library (the zero-shot semantics, its query made by ``zero_shot_query``, or a model without the record).
    Ranking a bare word is a poor test of a sentence model: on photos it never saw it put everyday words ("girl",
    "jumps") as low as names."""
    terms = list(labels)
    if trained is not None and trained.caption_words is not None:  # what the model read, not what it ranks

        known = trained.caption_words[0]
        # captions of other people only: after a retrain the model has read the user's own captions too, and
        # "Shadow", their dog, must not turn into the shadows the starter read about. A word the counts leave out
        # as no content word ("through", "while") is in nearly every caption the model read: nothing new
        return {term: vocabulary.novelty(known.get(term, 0) - len(labels[term][1])) if content_words(term) else 0.0
                for term in terms}
    sample = fixed_sample(len(ids))
    out: dict[str, float] = {}
    encoded = trained.encode_text(terms)[0] if trained is not None else None
    for j, term in enumerate(terms):
        rows = positions(ids, np.array(labels[term][1], np.int64))[0]
        if not len(rows):
            continue
        if trained is not None:
            query = Encoded(encoded.emb[j:j + 1])
            mine, _, _ = trained.score_ids(query, ids[rows])
            reference, _, _ = trained.score_ids(query, ids[sample])
        else:
            sentence, words = zero_shot_query(term)
            source = ZeroShotEvidence(index, sentence, words)
            source.calibrate(sample)
            mine, reference = source.score(rows), source.score(sample)
        out[term] = novelty_of(mine, reference)
    return out
