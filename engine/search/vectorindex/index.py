"""The multi-vector index: the items' stored vectors, exact K x K search over them, and their files.

:class:`MultiVectorIndex` keeps, per item, its int64 id and its (K, D) unit vectors and answers queries two ways:

- **exact** (up to ``AnnParams.exact_limit`` items): every item is scored with the K x K rule
  (:func:`~engine.search.vectorindex.scoring.kxk_scores`);
- **approximate** (above it): each query head asks a faiss backend (:mod:`engine.search.vectorindex.ann`) for its
  nearest ``(top + offset) * K * oversample`` vectors, the union of their items is the candidate set, and the
  candidates are rescored exactly from the stored vectors, so the scores and head pairs returned are always
  exact; only the candidate set is approximate.

Lifecycle. Adding past ``exact_limit`` items builds the approximate index; when the library grows
``rebuild_growth`` times past the size an IVF index was trained for, it is retrained with a larger
``nlist``; when it shrinks below half of ``exact_limit`` it goes back to exact search. Removal deletes
from IVF lists directly; HNSW keeps tombstones and is rebuilt once a quarter of it is dead. Labels are
``slot * K + head`` where ``slot`` is a per-item number that never changes, so compacting the stored
arrays never touches the faiss index.

Threads: any number of searches may run while one writer adds or removes. Searches and short mutations
share one lock; the long parts of a write (growing the arrays, training a new faiss index, assigning IVF
lists) run outside it under a separate writer lock. New items reach the faiss index in chunks
(``Ann.add_chunk`` per lock hold); until then searches score them exactly. Every search runs on one thread
(faiss with one OpenMP thread, BLAS held to one: docs/benchmarks.md, "Threads").

Memory: the stored vectors are float32, or float16 from :data:`FLOAT16_FROM` floats per item (``storage``;
docs/benchmarks.md, "Memory", has the sizes at 1M items).

Files: :mod:`engine.search.vectorindex.indexfiles` (:meth:`MultiVectorIndex.save` and ``load``).
"""

from __future__ import annotations

import logging
import threading
import time
import typing
import weakref
from dataclasses import replace
from typing import Any, Literal

import numpy as np

from engine.search.vectorindex.ann import (
    BUILD_THREADS,
    SEARCH_THREADS,
    Ann,
    AnnParams,
    set_faiss_threads,
)
from engine.search.vectorindex.indexfiles import IndexFiles
from engine.search.vectorindex.scoring import (
    IndexInputError,
    dot,
    max_pairs,
    normalise,
    top_rows,
    widen,
)
from engine.search.vectorindex.stored import (
    Data,
    IdRows,
    Kept,
    empty_data,
    grown_data,
    tail_start,
)

log = logging.getLogger(__name__)

Storage = Literal["auto", "float32", "float16"]
FLOAT16_FROM = 2048  # storage="auto": float16 from this many floats per item (K * D), see "Memory"
_SCORE_BLOCK = 1 << 23  # floats per block of exact scores: bounds temporary memory to ~32 MB
EXACT_FLOATS = 1 << 24  # stored floats up to which exact search is the default (64 MB read per query)


class MultiVectorIndex(IndexFiles):
    """Items with K unit vectors each, searched by the K x K max-cosine rule (module docstring).

    ``storage`` is the
    type of the stored vectors the exact scoring reads: ``"float32"``, ``"float16"`` (half the memory;
    scores then differ from float32 ones by ~1e-4) or ``"auto"``: float16 from :data:`FLOAT16_FROM`
    floats per item (PVSE's K=3 x D=1024), float32 below (docs/benchmarks.md, "Memory").
    """

    def __init__(self, dim: int, heads: int, metric: str = "ip", model_id: str = "",
                 params: AnnParams | None = None, seed: int = 0,
                 storage: Storage = "auto") -> None:
        if metric != "ip":
            raise IndexInputError(f"metric: only 'ip' (cosine of unit vectors) is supported, got {metric!r}")
        if dim < 1 or heads < 1:
            raise IndexInputError(f"dim and heads must be >= 1, got dim={dim}, heads={heads}")
        if storage not in typing.get_args(Storage):
            raise IndexInputError(f"storage: expected one of {typing.get_args(Storage)}, got {storage!r}")
        if storage == "auto":
            storage = "float16" if heads * dim >= FLOAT16_FROM else "float32"
        self.storage: Literal["float32", "float16"] = storage
        self.dim, self.heads, self.metric, self.model_id = int(dim), int(heads), metric, str(model_id)
        self.params = params or AnnParams()
        self._rng = np.random.default_rng(seed)
        self._lock = threading.RLock()  # searches and short mutations
        self._write_lock = threading.RLock()  # one writer at a time; held through long rebuilds
        self._data = empty_data(0, self.heads, self.dim, self.storage)
        self._ann: Ann | None = None
        self._row_of_id: dict[int, int] = {}
        self._id_rows: IdRows | None = None  # the current view's lookup table, made on first use
        self._kept: Kept | None = None  # the last id set a caller asked to keep (scores_where_known)

    # -- reading -------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._data.count

    def __contains__(self, item_id: object) -> bool:
        return isinstance(item_id, (int, np.integer)) and int(item_id) in self._row_of_id

    @property
    def exact_limit(self) -> int:
        """The size above which searches go through the approximate index."""
        return self.params.exact_limit or max(1, EXACT_FLOATS // (self.heads * self.dim))

    @property
    def approximate(self) -> bool:
        """True while searches go through the faiss index rather than exact scoring."""
        return self._ann is not None

    def ids(self) -> np.ndarray:
        """The ids of all items, in storage order."""
        with self._lock:
            data = self._data
            return data.ids[:data.size][data.alive[:data.size]].copy()

    def get(self, ids: np.ndarray | list[int]) -> np.ndarray:
        """The stored unit vectors (N, K, D) of ``ids`` as float32; :class:`KeyError` names an unknown id."""
        with self._lock:
            return self._data.vectors[self._rows_of(ids)].astype(np.float32)

    def known(self, ids: np.ndarray | list[int]) -> np.ndarray:
        """Whether each of ``ids`` is in the index, (N,) bool (vectorised, :meth:`_lookup`)."""
        return self._lookup(ids) >= 0

    def _lookup(self, ids: np.ndarray | list[int], data: Data | None = None) -> np.ndarray:
        """Rows of ``ids`` in ``data`` (default: the current view), -1 for an unknown id: a binary search in the
        view's sorted ids (:class:`IdRows`; a dictionary probe per id cost ~0.4 ms per 1,000 ids, and a ranking
        looks up ~1,500 a query)."""
        with self._lock:
            data = self._data if data is None else data
            table = self._id_rows
            if table is None or table.view() is not data:
                table = self._id_rows = IdRows.of(data)
        wanted = np.asarray(ids, dtype=np.int64).reshape(-1)
        if not len(table.ids):
            return np.full(len(wanted), -1, np.int64)
        at = np.minimum(np.searchsorted(table.ids, wanted), len(table.ids) - 1)
        return np.where(table.ids[at] == wanted, table.rows[at], -1)

    def _rows_of(self, ids: np.ndarray | list[int]) -> np.ndarray:
        rows = self._lookup(ids)
        if len(rows) and rows.min() < 0:
            self._row_of(int(np.asarray(ids, dtype=np.int64).reshape(-1)[np.argmin(rows)]))  # names it
        return rows

    def describe(self) -> dict[str, Any]:
        """Sizes and the state of the approximate index, for logs and the CLI."""
        with self._lock:
            return {"model_id": self.model_id, "dim": self.dim, "heads": self.heads, "items": len(self),
                    "approximate": self._ann.describe() if self._ann else None}

    def nbytes(self) -> dict[str, int]:
        """Memory held, in bytes: ``vectors`` (the stored vectors of the exact scoring, allocated rows),
        ``ann_codes`` and ``ann_structure`` (the faiss index, see :meth:`Ann.nbytes`), ``other`` (ids,
        slots, flags, the id tables, a kept id set's vectors, approximately) and ``total``."""
        with self._lock:
            data, ann = self._data, self._ann
            codes, structure = ann.nbytes() if ann is not None else (0, 0)
            other = sum(a.nbytes for a in (data.ids, data.slots, data.alive, data.row_of_slot))
            other += 100 * len(self._row_of_id)  # dict entry + two Python ints, roughly
            other += sum(a.nbytes for a in (self._id_rows.ids, self._id_rows.rows)) if self._id_rows else 0
            other += (self._kept.vectors.nbytes + self._kept.ids.nbytes) if self._kept else 0
        out = {"vectors": int(data.vectors.nbytes), "ann_codes": codes, "ann_structure": structure,
               "other": int(other)}
        return {**out, "total": sum(out.values())}

    def search(self, query: np.ndarray, top: int = 10, offset: int = 0, exact: bool = False
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The items ranked ``offset .. offset + top`` for a query of Kq vectors (Kq, D).

        Returns ``ids`` (n,) int64, ``scores`` (n,) float32 (exact K x K max-cosine, best first, ties by
        id) and ``head_pairs`` (n, 2) int64: (query head, item head) of each score. ``exact=True`` scores
        every item even when the approximate index is in use (the reference for recall; slow).
        """
        return self.search_batch(np.asarray(query)[None], top, offset, exact)[0]

    def scores(self, query: np.ndarray, ids: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Exact K x K scores of every item (storage order) or of ``ids`` (in that order) for one query (Kq, D):
        ``(ids, scores, head_pairs)``. What a ranking that weighs this index beside other evidence reads."""
        queries = self._check_queries(np.asarray(query)[None])
        with self._lock:
            data = self._data
            rows = np.flatnonzero(data.alive[:data.size]) if ids is None else self._rows_of(ids)
            scores, pairs = self._score_rows(data, rows, queries)
            return data.ids[rows].copy(), scores[0], pairs[0]

    def scores_where_known(self, query: np.ndarray, ids: np.ndarray, keep: bool = False
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`scores` of those of ``ids`` the index holds, with one id lookup (a query's ranking reads a few
        hundred candidates and a fixed sample of 1,000): ``(known (N,) bool, scores (n,), head_pairs (n, 2))``, the
        last two for ``ids[known]`` in order. ``keep``: the same ids will be asked again (a ranking's fixed sample),
        so their rows and float32 vectors are kept, the last such set only, until the index changes."""
        queries = self._check_queries(np.asarray(query)[None])
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        with self._lock:
            data = self._data
            kept = self._kept if keep else None
            if kept is not None and (kept.view() is not data or not np.array_equal(kept.ids, ids)):
                kept = None
            if kept is None:
                rows = self._lookup(ids, data)
                known = rows >= 0
                if not keep:
                    scores, pairs = self._score_rows(data, rows[known], queries)
                    return known, scores[0], pairs[0]
                kept = self._kept = Kept(weakref.ref(data), ids.copy(), known, rows[known],
                                          widen(data.vectors[rows[known]]))
            scores, pairs = self._score_rows(data, kept.rows, queries, kept.vectors)
            return kept.known.copy(), scores[0], pairs[0]

    def candidates(self, query: np.ndarray, n: int) -> np.ndarray:
        """Ids of about the ``n`` items nearest a query (Kq, D), unscored and unordered: for a ranking that scores
        them itself beside other evidence. Approximate: the union of each query head's ``n`` nearest vectors
        (no oversampling, no exact rescoring: a candidate pool, not a page); exact below the size that uses the
        approximate index."""
        queries = self._check_queries(np.asarray(query)[None])
        if self._ann is None:
            return self.search(query, top=n)[0]
        set_faiss_threads(SEARCH_THREADS)
        with self._lock:
            data, ann = self._data, self._ann
            labels = ann.search(queries[0], max(1, min(ann.size, n)), self.params)
            tail = np.arange(tail_start(data, ann), data.size)
            rows = np.union1d(self._candidate_rows(labels), tail[data.alive[tail]])
            return data.ids[rows].copy()

    def search_batch(self, queries: np.ndarray, top: int = 10, offset: int = 0, exact: bool = False
                     ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """:meth:`search` for B queries (B, Kq, D) at once (one faiss call for all their heads)."""
        queries = self._check_queries(queries)
        if top < 0 or offset < 0:
            raise IndexInputError(f"top and offset must be >= 0, got top={top}, offset={offset}")
        if top == 0:
            return [top_rows(np.zeros(0, np.int64), np.zeros(0, np.float32), np.zeros((0, 2), np.int64), 0, 0)
                    for _ in range(len(queries))]
        set_faiss_threads(SEARCH_THREADS)
        with self._lock:
            if self._ann is None or exact:
                return self._exact_batch(queries, top, offset)
            return self._approximate_batch(queries, top, offset)

    def _score_one(self, data: Data, rows: np.ndarray, query: np.ndarray, vectors: np.ndarray | None
                   ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_score_rows` of one query (Kq, D) in one block, the K x K rule without a batch axis (a text
        query's candidates and sample, every query)."""
        scores, pairs = max_pairs(query, widen(data.vectors[rows]) if vectors is None else vectors)
        return scores[None], pairs[None]

    def _check_queries(self, queries: np.ndarray) -> np.ndarray:
        queries = np.asarray(queries)
        if queries.ndim != 3 or queries.shape[2] != self.dim or queries.shape[1] < 1:
            raise IndexInputError(f"query: expected (Kq, {self.dim}) vectors per query, got shape "
                                  f"{queries.shape[1:] if queries.ndim == 3 else queries.shape}")
        if not np.isfinite(queries).all():
            raise IndexInputError("query: contains NaN or infinite values")
        return normalise(queries)

    def _exact_batch(self, queries: np.ndarray, top: int, offset: int
                     ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        data = self._data
        rows = np.flatnonzero(data.alive[:data.size])
        scores, pairs = self._score_rows(data, rows, queries)
        return [top_rows(data.ids[rows], scores[b], pairs[b], top, offset) for b in range(len(queries))]

    def _score_rows(self, data: Data, rows: np.ndarray, queries: np.ndarray, vectors: np.ndarray | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
        """Exact K x K scores (B, n) and head pairs (B, n, 2) of ``rows`` for every query, in blocks; ``vectors``:
        the rows' float32 vectors when already gathered (:class:`Kept`)."""
        batch, kq, _ = queries.shape
        flat = queries.reshape(batch * kq, self.dim)
        if batch == 1 and len(rows) * self.heads * self.dim <= _SCORE_BLOCK:
            return self._score_one(data, rows, flat, vectors)
        scores = np.empty((batch, len(rows)), np.float32)
        pairs = np.empty((batch, len(rows), 2), np.int64)
        # bounds both the similarities and a block's float32 vectors (copied when gathered or widened)
        block = max(1, _SCORE_BLOCK // (self.heads * max(batch * kq, self.dim)))
        # a run of consecutive rows is read as a slice (no copy); a permutation of one is not such a run
        contiguous = vectors is None and (len(rows) == 0 or bool((np.diff(rows) == 1).all()))
        for start in range(0, len(rows), block):
            part = rows[start:start + block]
            if vectors is not None:
                items = vectors[start:start + block]
            else:
                items = data.vectors[part[0]:part[-1] + 1] if contiguous else data.vectors[part]
                items = widen(items)  # float16 storage: einsum is slow on halves
            sims = dot(items.reshape(-1, self.dim), flat).reshape(len(part), self.heads, batch, kq)
            sims = sims.transpose(2, 0, 3, 1).reshape(batch, len(part), kq * self.heads)
            best = sims.argmax(axis=2)
            scores[:, start:start + block] = np.take_along_axis(sims, best[..., None], axis=2)[..., 0]
            pairs[:, start:start + block, 0] = best // self.heads
            pairs[:, start:start + block, 1] = best % self.heads
        return scores, pairs

    def _approximate_batch(self, queries: np.ndarray, top: int, offset: int
                           ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        assert self._ann is not None
        batch, kq, _ = queries.shape
        need = offset + top
        fetch = max(1, min(self._ann.size, max(need, 10) * self.heads * self.params.oversample))
        labels = self._ann.search(queries.reshape(batch * kq, self.dim), fetch, self.params)
        data = self._data
        tail = np.arange(tail_start(data, self._ann), data.size)
        tail = tail[data.alive[tail]]  # added but not yet in the faiss index: scored exactly
        out = []
        for b in range(batch):
            rows = np.union1d(self._candidate_rows(labels[b * kq:(b + 1) * kq]), tail)
            if len(rows) < min(need, len(self)):
                rows = self._wider_candidates(queries[b], need, fetch, tail)
            scores, pairs = self._score_rows(data, rows, queries[b:b + 1])
            out.append(top_rows(data.ids[rows], scores[0], pairs[0], top, offset))
        return out

    def _candidate_rows(self, labels: np.ndarray) -> np.ndarray:
        """Unique live rows of the items behind faiss labels (-1 and removed slots dropped)."""
        labels = labels[labels >= 0]
        rows = self._data.row_of_slot[np.unique(labels // self.heads)]
        return np.sort(rows[rows >= 0])

    def _wider_candidates(self, query: np.ndarray, need: int, fetch: int, tail: np.ndarray) -> np.ndarray:
        """Too few live candidates (deep page, tombstones): fetch 4x more, up to every row."""
        assert self._ann is not None
        while fetch < self._ann.size:
            fetch = min(self._ann.size, fetch * 4)
            rows = np.union1d(self._candidate_rows(self._ann.search(query, fetch, self.params)), tail)
            if len(rows) >= min(need, len(self)):
                return rows
        data = self._data
        return np.flatnonzero(data.alive[:data.size])

    def _row_of(self, item_id: int) -> int:
        try:
            return self._row_of_id[item_id]
        except KeyError:
            raise KeyError(f"item id {item_id} is not in the index") from None

    # -- writing -------------------------------------------------------------------------------------

    def reserve(self, extra: int) -> None:
        """Make room for ``extra`` more items now, so that adding them a batch at a time grows the stored arrays
        once: each growth copies them (old and new copy side by side), which at 100,000 items of the 1024-d
        starter added ~260 MB to the peak resident memory of embedding a library."""
        with self._write_lock:
            grown = grown_data(self._data, max(0, int(extra)), self.heads, self.dim, self.storage)
            with self._lock:
                self._data = grown

    def add(self, ids: np.ndarray | list[int], vectors: np.ndarray) -> None:
        """Add items ``ids`` (N,) with vectors (N, K, D); an id already present is replaced.

        Vectors are L2-normalised here. May build or retrain the approximate index (module docstring).
        """
        ids, vectors = self._check_items(ids, vectors)
        set_faiss_threads(BUILD_THREADS)
        with self._write_lock:
            present = [i for i in ids.tolist() if i in self._row_of_id]
            if present:
                self._remove_known(np.array(present, np.int64))
            grown = grown_data(self._data, len(ids), self.heads, self.dim, self.storage)
            with self._lock:
                self._data = self._append(grown, ids, vectors)
            self._maintain()
            self._catch_up()

    def _catch_up(self) -> None:
        """Add the rows appended since the approximate index last grew, a short chunk per lock hold, so
        searches (which score the waiting tail exactly) are never held up for long."""
        ann, data = self._ann, self._data
        if ann is None:
            return
        chunk = ann.add_chunk
        for start in range(tail_start(data, ann), data.size, chunk):
            stop = min(start + chunk, data.size)
            rows = np.arange(start, stop)[data.alive[start:stop]]
            vectors, slots = data.vectors[rows].astype(np.float32), data.slots[rows]
            lists = ann.assign(vectors)  # IVF's slow part, outside the lock
            with self._lock:
                ann.add(vectors, slots, lists)
                ann.indexed_upto = int(data.slots[stop - 1]) + 1
        ann.indexed_upto = len(data.row_of_slot)

    def remove(self, ids: np.ndarray | list[int]) -> int:
        """Remove items by id; ids not in the index are ignored. Returns how many were removed."""
        ids = np.unique(np.asarray(ids, dtype=np.int64).reshape(-1))
        with self._write_lock:
            known = np.array([i for i in ids.tolist() if i in self._row_of_id], np.int64)
            if len(known):
                self._remove_known(known)
                self._maintain()
            return len(known)

    def rebuild(self) -> None:
        """Compact the stored arrays and retrain the approximate index now (if the size calls for one)."""
        set_faiss_threads(BUILD_THREADS)
        with self._write_lock:
            self._compact()
            if self._data.count > self.exact_limit:
                self._build_ann()
            else:
                with self._lock:
                    self._ann = None

    def _check_items(self, ids: np.ndarray | list[int], vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ids_array = np.asarray(ids)
        integral = np.issubdtype(ids_array.dtype, np.integer) or ids_array.size == 0
        if ids_array.ndim != 1 or not integral:
            raise IndexInputError(f"ids: expected a 1-D integer array, got {ids_array.dtype} "
                                  f"{ids_array.shape}")
        ids_array = ids_array.astype(np.int64)
        vectors = np.asarray(vectors)
        expected = (len(ids_array), self.heads, self.dim)
        if vectors.shape != expected:
            raise IndexInputError(f"vectors: expected shape {expected} (N, K, D), got {vectors.shape}")
        if len(np.unique(ids_array)) != len(ids_array):
            raise IndexInputError("ids: the same id appears twice in one add")
        if not np.isfinite(vectors).all():
            raise IndexInputError("vectors: contain NaN or infinite values")
        return ids_array, normalise(vectors)

    def _remove_known(self, ids: np.ndarray) -> None:
        rows = np.array([self._row_of_id[i] for i in ids.tolist()], np.int64)
        with self._lock:
            data = self._data
            slots = data.slots[rows]
            data.alive[rows] = False
            data.row_of_slot[slots] = -1
            for i in ids.tolist():
                del self._row_of_id[i]
            self._data = replace(data, count=data.count - len(rows))
            if self._ann is not None:
                self._ann.remove(slots, self.heads)

    def _append(self, data: Data, ids: np.ndarray, vectors: np.ndarray) -> Data:
        start, stop = data.size, data.size + len(ids)
        first_slot = len(data.row_of_slot)
        slots = np.arange(first_slot, first_slot + len(ids), dtype=np.int64)
        data.ids[start:stop], data.slots[start:stop], data.vectors[start:stop] = ids, slots, vectors
        data.alive[start:stop] = True
        row_of_slot = np.concatenate([data.row_of_slot, np.arange(start, stop, dtype=np.int64)])
        self._row_of_id.update(zip(ids.tolist(), range(start, stop), strict=True))
        return replace(data, row_of_slot=row_of_slot, size=stop, count=data.count + len(ids))

    def _maintain(self) -> None:
        """Compact and build, retrain or drop the approximate index as the size calls for (writer only)."""
        data, ann, params = self._data, self._ann, self.params
        if data.size - data.count > max(1024, data.size // 4):
            self._compact()
        if ann is None and data.count > self.exact_limit:
            self._build_ann()
        elif ann is not None and data.count < self.exact_limit // 2:
            with self._lock:
                self._ann = None
        elif ann is not None and ann.is_hnsw and ann.dead > max(1024, ann.size // (4 * self.heads)):
            self._build_ann()  # a quarter of the graph is tombstones
        elif ann is not None and not ann.is_hnsw and data.count > params.rebuild_growth * ann.trained_items:
            self._build_ann()  # the IVF lists were trained for a much smaller library

    def _compact(self) -> None:
        """Drop removed rows from the arrays (slots, hence faiss labels, are unchanged)."""
        data = self._data
        if data.count == data.size:
            return
        keep = np.flatnonzero(data.alive[:data.size])
        compact = empty_data(len(keep), self.heads, self.dim, self.storage)
        for name in ("ids", "slots", "vectors"):
            getattr(compact, name)[:] = getattr(data, name)[keep]
        compact.alive[:] = True
        row_of_slot = np.full(len(data.row_of_slot), -1, np.int64)
        row_of_slot[compact.slots] = np.arange(len(keep))
        with self._lock:
            self._data = replace(compact, row_of_slot=row_of_slot, size=len(keep), count=len(keep))
            self._row_of_id = dict(zip(compact.ids.tolist(), range(len(keep)), strict=True))

    def _build_ann(self) -> None:
        """Train a new faiss index on the live items (outside the search lock) and swap it in."""
        started = time.perf_counter()
        self._compact()  # searches keep reading the old view; only this writer changes data
        data = self._data
        ann = Ann.build(self.params, data.vectors[:data.size], data.slots[:data.size],
                         len(data.row_of_slot), self._rng)
        with self._lock:
            self._ann = ann
        log.info("built %s index over %d items in %.1f s", ann.kind, data.count,
                 time.perf_counter() - started)
