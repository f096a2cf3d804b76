"""The user's own words as evidence at query time (issue #31): what they wrote on an item finds it at once.

Texts per item: the user's and imported captions and the queries they accepted the item for (machine captions
never count); the queries they rejected it for, apart. For one query:

- *lexical*: SQLite FTS5 (porter stemming over unicode61 tokens, through sqlite-utils) finds the items whose
  texts contain each content word of the query; an item's lexical evidence is the share of the *whole* query it
  covers: the query's informative words, each weighted by its inverse document frequency among the items that
  have texts (a name written on 16 photos weighs more than "the dog" written on 300), a word nobody wrote
  weighing as much as one written on a single item. One shared word of four is a quarter, not a match (#40);
- *semantic*: MiniLM cosine between the query and each text, mapped linearly from ``SEM_FLOOR`` (nothing) to
  ``SEM_FULL`` (a paraphrase: full evidence);
- both stay apart (:class:`WordsMatch`): the calibrated ranking (:mod:`engine.search.calibration`) weighs each
  by what it was worth on train-side scenarios; ``positive`` keeps the larger of the two, in 0..1, for the
  inspector; *rejected* evidence is the larger of the two against the queries the item was rejected for.

Spread (:func:`spread`): an item that looks like one that carries evidence gets a share of it, decaying with its
rank among the look-alikes of that item (:class:`LookAlikes`: the backbone's global features, centred on the
library's mean), so the 17th photo of the dog named on 16 comes up before any retrain. The space and the constants
were chosen on train-side scenarios (docs/benchmarks.md, "The user's words").
"""

from __future__ import annotations

import math
import re
import sqlite3
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

SEM_FLOOR = 0.55
SEM_FULL = 0.85
SPREAD_FLOOR = 0.0  # similarity (centred cosine, :class:`LookAlikes`) below which an item gets no share
SPREAD_SHARE = 1.0  # scale of a word's spread (an item next to every item of a word new to the model: 1 x its weight)
SPREAD_PRIOR = 3  # pseudo-count: a word written on one item spreads a quarter of what a word on many does
SPREAD_NEIGHBOURS = 200

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
_STOP = frozenset("""a an the and or of in on at to for with by from is are was were be been being it its this that
these those there here his her their our your my me we you they he she them him i as into onto over under up down
out off than then so very just some any all no not has have had do does did one two three""".split())


def query_terms(text: str) -> list[str]:
    """The query's words that can be matched against what the user wrote (stop words dropped, order kept)."""
    seen: list[str] = []
    for word in _TOKEN.findall(text.lower()):
        if word not in _STOP and word not in seen:
            seen.append(word)
    return seen


@dataclass(frozen=True)
class WordsMatch:
    """Evidence per item (media id -> 0..1) for one query; ``labels``: each query word the user wrote somewhere,
    with its share of what the words the user wrote say of the query and the items it is written on (what
    :func:`spread` reads);
    ``lexical`` / ``semantic``: the two measures apart (``positive`` is the larger, per item)."""

    positive: dict[int, float]
    rejected: dict[int, float]
    labels: dict[str, tuple[float, tuple[int, ...]]] = field(default_factory=dict)
    lexical: dict[int, float] = field(default_factory=dict)
    semantic: dict[int, float] = field(default_factory=dict)
    shares: dict[str, float] = field(default_factory=dict)  # each written word's share of the whole query


class UserWords:
    """The library's user-written texts, indexed for one query after another (rebuilt when they change)."""

    def __init__(self, texts: Iterable[tuple[int, str, bool]], encode: Callable[[list[str]], np.ndarray]) -> None:
        """``texts``: ``(media_id, text, rejected)``; ``encode``: sentences -> unit MiniLM embeddings (n, D)."""
        import sqlite_utils

        rows = [(int(m), " ".join(str(t).split()), bool(r)) for m, t, r in texts if str(t).strip()]
        self.media = np.array([m for m, _, _ in rows], np.int64)
        self.rejected = np.array([r for _, _, r in rows], bool)
        self.texts = [t for _, t, _ in rows]
        # built on one thread (a search), read on others (the next search, the inspector's explanation): the
        # connection may cross threads, and a lock keeps it to one reader at a time
        self._db = sqlite_utils.Database(sqlite3.connect(":memory:", check_same_thread=False))
        self._lock = threading.Lock()
        table = self._db["texts"]
        table.insert_all(({"id": i, "text": t} for i, t in enumerate(self.texts)), pk="id")
        if rows:
            table.enable_fts(["text"], tokenize="porter unicode61")
        self._embeddings = encode(self.texts) if rows else np.zeros((0, 1), np.float32)
        self._items = max(1, len(set(self.media[~self.rejected].tolist())))

    def __len__(self) -> int:
        return len(self.texts)

    def described(self) -> list[int]:
        """The items the user wrote what they are on (a caption or an accepted query; not a rejection)."""
        return sorted(set(self.media[~self.rejected].tolist()))

    def _rows_with(self, term: str) -> np.ndarray:
        phrase = '"' + term.replace('"', "") + '"'
        with self._lock:
            found = self._db.execute("SELECT rowid FROM texts_fts WHERE texts_fts MATCH ?", [phrase]).fetchall()
        return np.array([r[0] for r in found], np.int64)

    def match(self, text: str, sentence: np.ndarray) -> WordsMatch:
        """Evidence of every item with texts for a query (its MiniLM embedding ``sentence``, unit length)."""
        if not len(self):
            return WordsMatch({}, {})
        lexical = np.zeros(len(self.texts), np.float32)
        labels: dict[str, tuple[float, tuple[int, ...]]] = {}
        shares: dict[str, float] = {}
        terms = query_terms(text)
        if terms:
            hits = {t: self._rows_with(t) for t in terms}
            unwritten = math.log(1.0 + self._items)  # a word nobody wrote weighs as one written on a single item
            weights = {}
            for term, rows in hits.items():
                items = len(set(self.media[rows].tolist())) if len(rows) else 0
                weights[term] = math.log(1.0 + self._items / items) if items else unwritten
            total = sum(weights.values())
            written = sum(w for t, w in weights.items() if len(hits[t]))
            for term, weight in weights.items():
                if not len(hits[term]):
                    continue
                lexical[hits[term]] += weight / total
                shares[term] = weight / total
                rows = hits[term][~self.rejected[hits[term]]]
                # a label's weight is its share of what the user's words say of the query: "Biscuit" in "Biscuit
                # on the beach" is the whole of it (the look-alikes of Biscuit's photos get it all)
                labels[term] = (weight / written, tuple(sorted(set(self.media[rows].tolist()))))
        semantic = self._embeddings @ sentence.astype(np.float32)
        semantic = np.clip((semantic - SEM_FLOOR) / (SEM_FULL - SEM_FLOOR), 0.0, 1.0)
        lexical = np.minimum(lexical, 1.0)
        evidence = np.maximum(lexical, semantic)
        positive: dict[int, float] = {}
        rejected: dict[int, float] = {}
        apart: tuple[dict[int, float], dict[int, float]] = ({}, {})
        for media_id, value, lex, sem, is_rejection in zip(self.media.tolist(), evidence.tolist(), lexical.tolist(),
                                                           semantic.tolist(), self.rejected.tolist(), strict=True):
            if value <= 0:
                continue
            if is_rejection:
                rejected[media_id] = max(rejected.get(media_id, 0.0), value)
                continue
            positive[media_id] = max(positive.get(media_id, 0.0), value)
            for kept, v in zip(apart, (lex, sem), strict=True):
                if v > 0:
                    kept[media_id] = max(kept.get(media_id, 0.0), v)
        return WordsMatch(positive, rejected, labels, *apart, shares)


def spread(labels: dict[str, tuple[float, tuple[int, ...]]],
           neighbours: Callable[[list[int]], tuple[list[np.ndarray], list[np.ndarray]]],
           novelty: dict[str, float] | None = None) -> dict[int, float]:
    """Each item's share of the evidence of the user's words it resembles the items of (a word the user wrote on
    items is a label; its items are the examples of what it means). ``neighbours(ids)`` gives, per id, its
    nearest items, best first, and their cosine similarities. For a label of weight w (its share of the query,
    :meth:`UserWords.match`) written on items S, an item at rank r among the M neighbours of an item of S
    (similarity at least ``SPREAD_FLOOR``) gets ``1 - r / M`` from it; its share of the label is
    ``SPREAD_SHARE * w * sum / (|S| + SPREAD_PRIOR)``: what resembles many of the photos the user named Biscuit
    gets much, a look-alike of the one photo that says "grass" little. ``novelty`` (0..1 per word, default 1)
    scales each word's share: a word the model already reads as the user does ("dog" on photos of dogs) has
    nothing to teach by example, a name it cannot know ("Biscuit" on photos of a dog) has everything
    (:func:`novelty_of`)."""
    items = sorted({m for _, ms in labels.values() for m in ms})
    if not items:
        return {}
    near, sims = neighbours(items)
    ranked = {}
    for source, ids, ss in zip(items, near, sims, strict=True):
        m = max(1, len(ids))
        ranked[source] = {item: 1.0 - r / m for r, (item, s) in enumerate(zip(ids.tolist(), ss.tolist(), strict=True))
                          if item != source and s >= SPREAD_FLOOR}
    out: dict[int, float] = {}
    for term, (weight, sources) in labels.items():
        weight *= 1.0 if novelty is None else novelty.get(term, 1.0)
        if weight <= 0:
            continue
        total: dict[int, float] = {}
        for source in sources:
            for item, k in ranked[source].items():
                total[item] = total.get(item, 0.0) + k
        scale = SPREAD_SHARE * weight / (len(sources) + SPREAD_PRIOR)
        for item, value in total.items():
            out[item] = out.get(item, 0.0) + scale * value
    return out


class LookAlikes:
    """Nearest items in the backbone's global features centred on the library's mean: what every photo of the
    library shares (the pooled features are all positive) is taken out, and what is left tells a black dog on a lawn
    from other dogs on lawns better. Chosen on the train side over the model's space, the raw globals, pooled local
    features, mixes and a per-name prototype (docs/benchmarks.md); it does not move with a retrain and is there
    before any model.

    The centred cosine is read from the uncentred matrix (no copy of it): for unit rows x, y and the mean m,
    ``(x - m).(y - m) = x.y - x.m - y.m + m.m``, with ``|x - m|^2 = 1 - 2 x.m + m.m``."""

    def __init__(self, ids: np.ndarray, matrix: np.ndarray) -> None:
        """``matrix``: unit rows (N, D) of the items ``ids`` (N,)."""
        self.ids, self.matrix = ids, matrix
        self._row = {int(m): r for r, m in enumerate(ids.tolist())}
        mean = matrix.mean(axis=0) if len(matrix) else np.zeros(matrix.shape[1], np.float32)
        self._dot_mean = (matrix @ mean).astype(np.float32)
        self._mean_sq = float(mean @ mean)
        self._norm = np.sqrt(np.maximum(1.0 - 2.0 * self._dot_mean + self._mean_sq, 1e-12)).astype(np.float32)
        self._nearest: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}

    def __contains__(self, media_id: object) -> bool:
        return isinstance(media_id, (int, np.integer)) and int(media_id) in self._row

    def similarities(self, media_ids: list[int]) -> np.ndarray:
        """Centred cosines (len(media_ids), N) of the items with every item of the library (one pass over it)."""
        rows = np.array([self._row[int(m)] for m in media_ids], np.int64)
        dots = (self.matrix[rows] @ self.matrix.T - self._dot_mean[rows, None] - self._dot_mean[None, :]
                + self._mean_sq)
        return dots / (self._norm[rows, None] * self._norm[None, :])

    def nearest(self, media_ids: list[int], top: int | None = None) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Per id, its ``top`` (default :data:`SPREAD_NEIGHBOURS`) nearest items, best first (itself among them),
        and their centred cosines; an unknown id has none. The ``neighbours`` of :func:`spread`. Kept per item:
        the items the user wrote on come back query after query, and a library's pass costs O(N D)."""
        top = min(SPREAD_NEIGHBOURS if top is None else top, len(self.ids))
        todo = [m for m in dict.fromkeys(int(m) for m in media_ids) if m in self and (m, top) not in self._nearest]
        for start in range(0, len(todo), 64):  # a block of items per pass over the library
            chunk = todo[start:start + 64]
            for media_id, s in zip(chunk, self.similarities(chunk), strict=True):
                best = np.argpartition(-s, top - 1)[:top]
                best = best[np.lexsort((self.ids[best], -s[best]))]
                self._nearest[media_id, top] = (self.ids[best], s[best].astype(np.float32))
        empty = (np.zeros(0, np.int64), np.zeros(0, np.float32))
        found = [self._nearest.get((int(m), top), empty) for m in media_ids]
        return [f[0] for f in found], [f[1] for f in found]


def novelty_of(scores_of_items: np.ndarray, scores_of_sample: np.ndarray) -> float:
    """How new a word the user wrote on items is to a ranking: the share of a sample of the library that the
    ranking scores (for that word alone) above the mean of the word's own items, doubled and clipped to 1. Items
    at the top of the library for the word: 0 (the ranking already knows it); at the median or below: 1."""
    if not len(scores_of_items) or not len(scores_of_sample):
        return 1.0
    above = float(np.mean(scores_of_sample > float(np.mean(scores_of_items))))
    return min(1.0, 2.0 * above)
