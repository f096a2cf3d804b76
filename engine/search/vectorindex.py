"""Multi-vector index: K L2-normalised embeddings per item, searched by PVSE's K x K max-cosine (§3.4).

PVSE represents every item by K embeddings and scores an item for a query with Kq embeddings by the best of
the Kq x K cosine pairs ("Inference", §3.4). :func:`kxk_scores` is that rule in plain numpy.
:class:`MultiVectorIndex` keeps, per item, its int64 id and its (K, D) vectors and answers queries two ways:

- **exact** (up to ``AnnParams.exact_limit`` items): every item is scored with the K x K rule;
- **approximate** (above it): each query head asks a faiss index over all item vectors for its nearest
  ``(top + offset) * K * oversample`` vectors, the union of their items is the candidate set, and the
  candidates are rescored exactly (K x K, stored float32 vectors), so the scores and head pairs returned are
  always exact; only the candidate set is approximate.

Which approximate index: measured with ``tests/bench/bench_search.py --compare --items 200000`` on this
2-core box (faiss 1.15; other jobs kept the load average at 4-7, so latencies are pessimistic): 200,000
items x K=3 x D=256 from 5,000 Zipf-sized gaussian clusters on the sphere, items spread along a
16-dimensional subspace of their cluster (``--shape subspace``), heads perturbed isotropically; 200
queries from the same mixture, top 10, candidates rescored exactly (oversample 4, IVF-PQ 8); recall@10
against exact K x K search. Memory is faiss's per vector (1M items = 3M vectors), on top of the 1 KB of
stored float32 vectors every kind keeps for the rescoring:

===========================  =========  ========  ========  =========  ============
index (search setting)       build (s)  p50 (ms)  p95 (ms)  recall@10  bytes/vector
===========================  =========  ========  ========  =========  ============
exact, numpy (reference)     0          180.6     196.6     1.000      0
IVF-Flat 1024 lists (16)     11.7       1.9       2.4       0.796      1032
IVF-Flat (nprobe 64)                    6.6       11.2      0.932
IVF-SQ8 1024 lists (16)      10.1       1.4       1.7       0.796      264
IVF-SQ8 (nprobe 64)                     4.1       6.4       0.932
IVF-PQ 1024 lists, m=32 (16) 33.1       1.5       5.7       0.793      40
IVF-PQ (nprobe 64)                      3.2       7.6       0.923
HNSW M=32 (ef 128)           379.5      1.9       3.2       0.985      ~1290
HNSW-SQ8 M=32 (ef 128)       337.1      2.2       6.9       0.986      ~520
HNSW-SQ8 (ef 256)                       4.7       9.6       0.991
===========================  =========  ========  ========  =========  ============

The IVF kinds lose recall to the probed lists, not to their codes (Flat and SQ8 recall the same): a query's true
top 10 spread over many lists, and scanning 6 % of the data still misses 7 %. With isotropic clusters (``--shape
isotropic``, the hardest case) IVF-Flat at nprobe 16 recalled 0.79, IVF-PQ 0.75 and HNSW 0.99. **HNSW over 8-bit
codes** is therefore the base of the default: HNSW's recall at a fraction of its memory (the default adds IVF-SQ8
lists beside the graph for near-duplicates, see "Near-duplicates" below). Its costs: a graph build about 30x
slower than IVF's (about 0.5 ms per vector on two cores; new items are inserted in short chunks while searches go
on, see below) and no real deletion (tombstones, rebuilt when a quarter is dead). IVF-SQ8
(``AnnParams(kind="ivf-sq8", nprobe=64)``) is the choice when build time matters more than the last points of
recall. At 1,000,000 items (``bench_search.py`` defaults, subspace data, items added 100,000 at a time, machine
quiet) HNSW-SQ8 searched in 2.9 ms p50 / 4.3 ms p95 with recall@10 0.979 (numpy brute force: 396 / 452 ms), after
777 s of building, at 4.6 GB of process memory for the index (3.1 GB of it the stored vectors): the product target
is p95 < 50 ms and recall >= 0.95. On isotropic clusters (the stress case) the same run gave 2.9 / 4.9 ms and
recall 0.944 (1,504 s build). Both ran with ``ef_search`` 128. Real cross-modal queries need far more: text
embeddings lie away from the image embeddings the graph links (cosine ~0.2 to their best photo with the 2-epoch
PVSE, against ~0.88 between neighbouring photos), and on replicated Flickr8k embeddings (``bench_search.py --data
flickr``, bench-results/search-flickr-25k.md: 25,000 items x K=3 x D=1024, noise 0.5) ef 128 / 256 / 512 / 1024
recalled 0.81 / 0.88 / 0.94 / 0.97 (at 20,000 items flat HNSW recalled the same as HNSW-SQ8, so the codes are not
the cause). Hence the defaults: ``ef_search`` 1024, grown by :func:`search_ef` with the graph (``ef_growth`` 0.5:
1536 at 1M items x K=3), since recall at a fixed ef falls with size (isotropic, ef 128: HNSW 0.99 at 200,000
items, HNSW-SQ8 0.944 at 1M). Search time grows about linearly with ef (ef 1024 took ~4x ef 128 at 20,000 items);
the 1M-item figures above predate these defaults (the commands to re-measure them are in
tests/bench/bench_search.py).

Memory. Per vector (K per item) the HNSW-SQ8 graph keeps D bytes of 8-bit codes, ~280 bytes of HNSW links
(2M = 64 four-byte links at level 0 plus the upper levels, M=32) and an 8-byte label (the default's IVF lists add
another D bytes of codes and an 8-byte label: +0.8 GB at 1M x K=3 x 256); per item, the K x D
stored vectors the exact rescoring reads, float32 (4 bytes per float) or float16 (2; ``storage``), and ~130
bytes of ids, slots and the id table. :meth:`MultiVectorIndex.nbytes` reports these parts as counted from
the arrays. The stored arrays grow by half when they fill up, by at most :data:`_GROW_ROWS` rows once
large, and a growth step briefly holds the old and the new array (about twice the vectors). At 1M items x
K=3: D=256, float32: 3.1 GB vectors + 0.8 GB codes + 0.9 GB links (the 4.6 GB measured above). PVSE's
D=1024, float32: 12.3 GB of vectors + 0.8 GB codes (256-d, see "Reduced graph") + 0.9 GB links = 14 GB,
and ~26 GB during a growth step: not feasible in 24 GB. float16 halves the vectors: 6.1 + 0.8 + 0.9 = 7.8 GB
(plus up to 0.8 GB of spare rows), ~14 GB during the last growth step. ``storage="auto"`` (the default)
therefore stores float16 from :data:`FLOAT16_FROM` floats per item. float16 rounding of the items moves a
cosine by ~1e-4 (queries stay float32), far below the gaps the ranking depends on. Rescoring from the SQ8
codes instead (no stored vectors) would save the 6.1 GB but make the scores approximate; not done.

Reduced graph. Wide vectors (PVSE's D=1024) are linked and searched by HNSW in their ``reduce_dim`` (256)
principal directions (:func:`principal_projection`, a bias-free faiss ``LinearTransform`` in front of the graph,
fitted on the training sample), and the candidates are rescored with the full stored vectors as always. Each
distance then costs a quarter, the build and the search about 4x less, the codes a quarter of the memory.
What it loses, measured with PVSE's Flickr8k embeddings (50,000 items replicated with noise 0.5, 200 dev captions
as queries, each head's top 120 by the projected inner product, then exact K x K): recall@10 0.866 / 0.982 /
0.999 / 1.000 at 64 / 128 / 256 / 384 directions (the 256 principal directions hold 70 % of the items' variance,
much of the rest being the replicas' isotropic noise). At 25,000 such items the reduced graph built in 8 s and
recalled 0.999 at ef 512 (bench-results/search-flickr-25k-pca.md).

Near-duplicates defeat HNSW, hence ``"hnsw+ivf"``, the default. With 1,000,000 items made of 7,000 Flickr8k photos
each repeated 143 times with noise (cosine 0.89 within a photo's copies, 0.47 to other photos;
bench-results/search-flickr-1m.md) HNSW-SQ8 alone recalled 0.19 / 0.32 / 0.43 at ef 128 / 512 / 1024. It is the
clumps, not the projection: at the same density on 100,000 items, HNSW recalled 0.62 on the full vectors and 0.65
projected, IVF-SQ8 (nprobe 32) 0.99. The graph's links stay inside the clumps, so a query that enters the wrong one
cannot leave it; IVF has the opposite weakness (spread clusters, the table above). ``"hnsw+ivf"`` keeps both over
the same (projected) vectors and labels: the HNSW-SQ8 graph and IVF-SQ8 lists (``nlist`` as for the IVF kinds,
``nprobe`` per head); each query head takes the fetch from both and the union is rescored exactly, so it recalls at
least what either recalls alone. On the 1M replicated set (``--kind hnsw+ivf --nprobe 32 --oversample 8``): build
340 s (the lists add ~15 s and 0.8 GB), recall@10 0.945 / 0.946 / 0.953 at ef 128 / 512 / 1024, end to end p95 30.5
/ 29.6 / 34.0 ms; fetching twice as much (oversample 16) recalled 0.954 / 0.955 / 0.958 for ~9 ms more, so the
fetch is not what limits it. At 100,000 such items it recalled 0.963 (oversample 4), 0.988 (8), 0.995 (16). On the
synthetic 1M set above (``bench_search.py --items 1000000 --ef-search 128,1024``) it recalled 0.9985 at ef 128 and
1024, p95 35.4 / 36.4 ms (the graph alone: 0.979, 4.3 ms): the lists cost ~15 ms per query. Removed items stay in
the lists as tombstones like in the graph (both are rebuilt together).

Every search runs on one thread: faiss with one OpenMP thread in the searching thread (libgomp keeps the
setting per thread; builds use :data:`BUILD_THREADS`) and ``np.einsum`` instead of BLAS for the scoring.
With the two cores busy, two OpenMP or OpenBLAS threads made a query 10x slower (12 ms instead of 1.5 ms),
and one query is too small to gain from a second core anyway.

Lifecycle. Adding past ``exact_limit`` items builds the approximate index; when the library grows
``rebuild_growth`` times past the size an IVF index was trained for, it is retrained with a larger
``nlist``; when it shrinks below half of ``exact_limit`` it goes back to exact search. Removal deletes
from IVF lists directly; HNSW keeps tombstones and is rebuilt once a quarter of it is dead. Labels are
``slot * K + head`` where ``slot`` is a per-item number that never changes, so compacting the stored
arrays never touches the faiss index.

Threads: any number of searches may run while one writer adds or removes. Searches and short mutations
share one lock; the long parts of a write (growing the arrays, training a new faiss index, assigning IVF
lists) run outside it under a separate writer lock. New items reach the faiss index in chunks
(:data:`_HNSW_ADD_ITEMS` per lock hold for HNSW); until then searches score them exactly.

Files (:meth:`MultiVectorIndex.save`): ``index.json`` (format version, model id, dims, parameters, which
data folder is current) plus a data folder with ``ids.npy``, ``slots.npy``, ``vectors.npy``,
``payload.npy`` and ``ann.faiss``. A save writes a new data folder, then replaces ``index.json``
atomically, then deletes the old folder, so a crash leaves the previous index readable. Nothing is
pickled.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import shutil
import threading
import time
import typing
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal

import faiss
import numpy as np

from engine.files import atomic_write_text

log = logging.getLogger(__name__)

FORMAT = "polyseek-multivector-index"
FORMAT_VERSION = 1
BUILD_THREADS = 2  # OpenMP threads for training and adding (the box has two cores)
SEARCH_THREADS = 1  # per query: see "Threads" in the module docstring
INDEX_FILE = "index.json"
LISTS_FILE = "ann-lists.faiss"  # the IVF half of "hnsw+ivf", beside ann.faiss
AnnKind = Literal["ivf-flat", "ivf-sq8", "ivf-pq", "hnsw", "hnsw-sq8", "hnsw+ivf"]
Storage = Literal["auto", "float32", "float16"]
EF_BASE_VECTORS = 300_000  # search_ef: ef_search as given up to this many vectors (100,000 items at K=3)
FLOAT16_FROM = 2048  # storage="auto": float16 from this many floats per item (K * D), see "Memory"
_SCORE_BLOCK = 1 << 23  # floats per block of exact scores: bounds temporary memory to ~32 MB
EXACT_FLOATS = 1 << 24  # stored floats up to which exact search is the default (64 MB read per query)
_HNSW_ADD_ITEMS = 128  # items added to HNSW per lock hold (~0.2 s on two busy cores)
_IVF_ADD_ITEMS = 16_384  # items added to IVF lists per lock hold (their lists are assigned before)
_GROW_ROWS = 1 << 17  # most spare rows one growth of the stored arrays adds (0.8 GB at K=3, D=1024, float16)


class VectorIndexError(Exception):
    """Base class of the vector index's errors."""


class IndexInputError(VectorIndexError, ValueError):
    """Ids, vectors or a query have the wrong shape, type or values; the message names which."""


class IndexFileError(VectorIndexError, OSError):
    """A saved index is missing, unreadable or of another format; the message names the file."""


class ModelMismatchError(VectorIndexError):
    """A saved index was built with another model than the one asked for."""


@dataclass(frozen=True)
class AnnParams:
    """How and when the approximate index is used (the module docstring compares the kinds).

    Exact search reads every stored float per query, so it is used up to ``exact_limit`` items, by default (0) as
    many as fit :data:`EXACT_FLOATS` floats (about 22,000 items at K=3, D=256, ~10 ms here). HNSW kinds use
    ``hnsw_m`` links per node, ``ef_construction`` and, per search, ``ef_search`` raised by ``ef_growth`` times
    itself per tenfold of vectors above :data:`EF_BASE_VECTORS` (HNSW's recall at a fixed ef falls as the graph
    grows; :func:`search_ef`), and at least the number of vectors fetched; vectors wider than ``reduce_dim``
    (0: never) are linked and searched in their ``reduce_dim`` principal directions (module docstring, "Reduced
    graph"), candidates still rescored with the full vectors. IVF kinds and the lists of ``"hnsw+ivf"`` (the default:
    HNSW-SQ8 graph and IVF-SQ8 lists over the same vectors, candidates from both): ``nlist=0`` picks about
    ``nlist_per_sqrt * sqrt(vectors)`` lists (a power of two, 16..65536), ``nprobe`` lists are scanned per query
    head, IVF-PQ has ``pq_m`` sub-quantisers of ``pq_bits`` bits. Each query head fetches ``max(top + offset, 10) *
    K * oversample`` vectors: an item in the exact top t has its best pair among the first t * K vectors of that
    head, so ``oversample`` is slack for the approximation only.
    """

    kind: AnnKind = "hnsw+ivf"
    exact_limit: int = 0
    nlist: int = 0
    nlist_per_sqrt: float = 1.0
    nprobe: int = 32
    pq_m: int = 32
    pq_bits: int = 8
    hnsw_m: int = 32
    ef_construction: int = 80
    ef_search: int = 1024
    ef_growth: float = 0.5
    reduce_dim: int = 256
    oversample: int = 8
    train_per_list: int = 40
    rebuild_growth: float = 4.0

    def __post_init__(self) -> None:
        if self.kind not in typing.get_args(AnnKind):
            raise IndexInputError(f"kind: unknown approximate index {self.kind!r}")
        for f in fields(self):
            value = getattr(self, f.name)
            may_be_zero = ("nlist", "exact_limit", "ef_growth", "reduce_dim")
            if f.name != "kind" and (value < 0 or (value == 0 and f.name not in may_be_zero)):
                raise IndexInputError(f"{f.name}: must be positive, got {value!r}")
        if self.rebuild_growth <= 1.0:
            raise IndexInputError(f"rebuild_growth: must be > 1, got {self.rebuild_growth}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AnnParams:
        """Inverse of ``dataclasses.asdict``; unknown keys raise :class:`IndexInputError`."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise IndexInputError(f"params: unknown fields {unknown}")
        return cls(**data)


def search_ef(params: AnnParams, vectors: int, fetch: int) -> int:
    """HNSW's ef for a search fetching ``fetch`` of ``vectors`` vectors: ``ef_search * (1 + ef_growth *
    log10(vectors / EF_BASE_VECTORS))``, never below ``ef_search`` nor ``fetch`` (module docstring)."""
    decades = np.log10(max(1.0, vectors / EF_BASE_VECTORS))
    return max(fetch, int(round(params.ef_search * (1.0 + params.ef_growth * decades))))


def set_faiss_threads(threads: int) -> None:
    """Cap faiss's OpenMP threads for work started from the calling thread (libgomp keeps the setting per
    thread, so a search thread and a build thread can use different counts)."""
    faiss.omp_set_num_threads(max(1, min(threads, os.cpu_count() or 1)))


def normalise(vectors: np.ndarray) -> np.ndarray:
    """float32 copy of ``vectors`` with unit L2 norm along the last axis (zero vectors stay zero)."""
    out = np.array(vectors, dtype=np.float32, copy=True)
    norms = np.linalg.norm(out, axis=-1, keepdims=True)
    out /= np.maximum(norms, 1e-12)
    return out


def kxk_scores(query: np.ndarray, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """PVSE §3.4 inference: for a query (Kq, D) and items (N, K, D), the best cosine of the Kq x K pairs.

    Returns ``scores`` (N,) float32 and ``pairs`` (N, 2) int64 with the (query head, item head) that
    gave each score. Both sides are L2-normalised here, so any non-zero vectors may be passed.
    """
    query, items = np.asarray(query), np.asarray(items)
    if query.ndim != 2 or items.ndim != 3 or query.shape[1] != items.shape[2]:
        raise IndexInputError(f"kxk_scores: expected query (Kq, D) and items (N, K, D), got "
                              f"{query.shape} and {items.shape}")
    return _max_pairs(normalise(query), normalise(items))


def _dot(rows: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """(N, Q) inner products of (N, D) rows with (Q, D) queries.

    ``np.einsum`` rather than ``@``: a matrix with a handful of columns is memory-bound, and OpenBLAS's
    threads made it 10-100x slower whenever the two cores were busy (12 ms instead of 0.1 ms for 900 rows).
    """
    return np.einsum("nd,qd->nq", rows, queries)


def _max_pairs(query: np.ndarray, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`kxk_scores` on already-normalised float32 arrays (the hot path)."""
    n, heads, dim = items.shape
    sims = _dot(items.reshape(n * heads, dim), query).reshape(n, heads, len(query))
    flat = sims.transpose(0, 2, 1).reshape(n, len(query) * heads)  # column p * K + q
    best = flat.argmax(axis=1)
    scores = flat[np.arange(n), best]
    return scores.astype(np.float32), np.stack([best // heads, best % heads], axis=1).astype(np.int64)


def _top(ids: np.ndarray, scores: np.ndarray, pairs: np.ndarray, top: int, offset: int
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows ``offset .. offset + top`` of the ranking by score (ties: smaller id first)."""
    stop = min(len(ids), offset + top)
    if stop <= offset:
        return np.zeros(0, np.int64), np.zeros(0, np.float32), np.zeros((0, 2), np.int64)
    part = np.argpartition(-scores, stop - 1)[:stop] if stop < len(ids) else np.arange(len(ids))
    order = part[np.lexsort((ids[part], -scores[part]))][offset:stop]
    return ids[order], scores[order], pairs[order]


def _auto_nlist(vectors: int, per_sqrt: float) -> int:
    """A power of two near ``per_sqrt * sqrt(vectors)``, at least 16 and at most 65536."""
    target = max(1.0, per_sqrt * np.sqrt(max(vectors, 1)))
    return int(min(65536, max(16, 2 ** round(np.log2(target)))))


def _tail_start(data: _Data, ann: _Ann) -> int:
    """First row whose slot the approximate index has not been given yet."""
    return int(np.searchsorted(data.slots[:data.size], ann.indexed_upto))


def _labels(slots: np.ndarray, heads: int) -> np.ndarray:
    """faiss labels ``slot * K + head`` of every vector of the items in ``slots``, item-major."""
    return (slots[:, None] * heads + np.arange(heads)).reshape(-1).astype(np.int64)


class _Ann:
    """One faiss index over item vectors labelled ``slot * K + head``.

    It holds the items of every live slot below ``indexed_upto``; later slots (a tail of the stored rows)
    are waiting to be added and are scored exactly by searches meanwhile.
    """

    def __init__(self, index: faiss.Index, kind: AnnKind, trained_items: int, indexed_upto: int,
                 dead: int = 0, lists: faiss.IndexIVF | None = None) -> None:
        self.index, self.kind, self.trained_items = index, kind, trained_items
        self.indexed_upto, self.dead = indexed_upto, dead
        self.lists = lists  # "hnsw+ivf": IVF-SQ8 lists over the graph's (projected) vectors, same labels
        self._projection = _projection_of(index) if lists is not None else None

    @classmethod
    def build(cls, params: AnnParams, vectors: np.ndarray, slots: np.ndarray, next_slot: int,
              rng: np.random.Generator) -> _Ann:
        """Train on a sample of ``vectors`` (N, K, D) and add them all."""
        n = len(vectors)
        lists = None
        if params.kind.startswith("hnsw"):
            index, lists = cls._trained_hnsw(params, vectors, rng)
        else:
            index = cls._trained_ivf(params, vectors, rng)
        ann = cls(index, params.kind, n, next_slot, lists=lists)
        for start in range(0, n, _IVF_ADD_ITEMS):  # float32 copies of float16 storage, a chunk at a time
            part = vectors[start:start + _IVF_ADD_ITEMS].astype(np.float32, copy=False)
            ann.add(part, slots[start:start + _IVF_ADD_ITEMS], ann.assign(part))
        return ann

    @staticmethod
    def _sample(vectors: np.ndarray, wanted: int, rng: np.random.Generator) -> np.ndarray:
        flat = vectors.reshape(-1, vectors.shape[2])
        rows = rng.choice(len(flat), size=min(len(flat), wanted), replace=False)
        return np.ascontiguousarray(flat[np.sort(rows)], dtype=np.float32)

    @classmethod
    def _trained_hnsw(cls, params: AnnParams, vectors: np.ndarray, rng: np.random.Generator
                      ) -> tuple[faiss.Index, faiss.IndexIVF | None]:
        """The graph (in an ``IndexIDMap``, behind the projection if any) and, for ``"hnsw+ivf"``, the IVF-SQ8
        lists over the same projected vectors (module docstring, "Near-duplicates")."""
        n, heads, dim = vectors.shape
        reduce = 0 < params.reduce_dim < dim
        nlist = 0
        if params.kind == "hnsw+ivf":
            nlist = min(params.nlist or _auto_nlist(n * heads, params.nlist_per_sqrt), max(1, n * heads // 39))
        # the projection, the 8-bit code ranges and the lists are fitted on one sample; flat HNSW at full width
        # needs none
        wanted = max(65_536, nlist * params.train_per_list)
        sample = cls._sample(vectors, wanted, rng) if reduce or params.kind != "hnsw" else None
        transform = principal_projection(sample[:65_536], params.reduce_dim) if reduce else None
        graph_dim = transform.d_out if transform is not None else dim
        if transform is not None:
            sample = transform.apply(sample)
        if params.kind == "hnsw":
            graph = faiss.IndexHNSWFlat(graph_dim, params.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        else:
            graph = faiss.IndexHNSWSQ(graph_dim, faiss.ScalarQuantizer.QT_8bit, params.hnsw_m,
                                      faiss.METRIC_INNER_PRODUCT)
            graph.train(sample)  # the per-dimension ranges of the 8-bit codes
        graph.hnsw.efConstruction = params.ef_construction
        inner = graph if transform is None else faiss.IndexPreTransform(transform, graph)
        lists = None
        if nlist:
            lists = faiss.IndexIVFScalarQuantizer(faiss.IndexFlatIP(graph_dim), graph_dim, nlist,
                                                  faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT)
            lists.train(sample)
        return faiss.IndexIDMap(inner), lists  # HNSW numbers vectors 0..n-1; the map keeps our labels

    @classmethod
    def _trained_ivf(cls, params: AnnParams, vectors: np.ndarray, rng: np.random.Generator) -> faiss.Index:
        n, heads, dim = vectors.shape
        nlist = params.nlist or _auto_nlist(n * heads, params.nlist_per_sqrt)
        nlist = min(nlist, max(1, n * heads // 39))  # faiss wants ~39 training points per centroid
        quantizer = faiss.IndexFlatIP(dim)
        if params.kind == "ivf-pq":
            if dim % params.pq_m:
                raise IndexInputError(f"pq_m: {params.pq_m} does not divide the dimension {dim}")
            index = faiss.IndexIVFPQ(quantizer, dim, nlist, params.pq_m, params.pq_bits,
                                     faiss.METRIC_INNER_PRODUCT)
        elif params.kind == "ivf-sq8":
            index = faiss.IndexIVFScalarQuantizer(quantizer, dim, nlist, faiss.ScalarQuantizer.QT_8bit,
                                                  faiss.METRIC_INNER_PRODUCT)
        else:
            index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
        wanted = nlist * params.train_per_list
        if params.kind == "ivf-pq":
            wanted = max(wanted, 64 << params.pq_bits)  # each PQ codebook needs points of its own
        index.train(cls._sample(vectors, wanted, rng))
        return index  # faiss's Python wrapper keeps the quantizer referenced by the index

    @property
    def is_hnsw(self) -> bool:
        return self.kind.startswith("hnsw")

    def _ivf(self) -> faiss.IndexIVF | None:
        """The IVF index vectors are listed in (after :meth:`_projected`), or None for pure HNSW."""
        return self.lists if self.is_hnsw else self.index

    def _projected(self, rows: np.ndarray) -> np.ndarray:
        """(n, D) float32 rows as the lists of ``"hnsw+ivf"`` see them (the graph's projection), else as is."""
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        return self._projection.apply(rows) if self._projection is not None else rows

    def assign(self, vectors: np.ndarray) -> np.ndarray | None:
        """IVF list of every vector of (N, K, D) items, as (N * K,), or None for pure HNSW.

        The slow part of an IVF add; the trained quantizer is read-only, so this runs while searches do.
        """
        ivf = self._ivf()
        if ivf is None:
            return None
        _, lists = ivf.quantizer.search(self._projected(vectors.reshape(-1, vectors.shape[2])), 1)
        return lists.reshape(-1)

    def add(self, vectors: np.ndarray, slots: np.ndarray, lists: np.ndarray | None) -> None:
        """Add items' vectors (N, K, D) under labels ``slot * K + head`` (IVF: into ``lists`` from
        :meth:`assign`)."""
        heads, dim = vectors.shape[1:]
        part = np.ascontiguousarray(vectors.reshape(-1, dim))
        labels = _labels(slots, heads)
        if self.is_hnsw:
            self.index.add_with_ids(part, labels)
        ivf = self._ivf()
        if ivf is not None:
            assert lists is not None, "IVF adds need the lists from assign()"
            rows = self._projected(part)
            where = np.ascontiguousarray(lists, dtype=np.int64)
            ivf.add_core(len(rows), *(faiss.swig_ptr(a) for a in (rows, labels, where)))

    def remove(self, slots: np.ndarray, heads: int) -> None:
        """Delete items (IVF) or count them as tombstones (HNSW cannot delete, and its companion lists in
        ``"hnsw+ivf"`` are rebuilt with it; dead slots are filtered)."""
        slots = slots[slots < self.indexed_upto]  # the rest were never added
        if self.is_hnsw:
            self.dead += len(slots)
        elif len(slots):
            self.index.remove_ids(faiss.IDSelectorBatch(_labels(slots, heads)))

    def search(self, queries: np.ndarray, k: int, params: AnnParams) -> np.ndarray:
        """Labels of the nearest vectors of each query row, (Q, k), or (Q, 2k) for ``"hnsw+ivf"`` (the graph's
        k, then the lists' k); -1 where fewer exist."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        probe = faiss.SearchParametersIVF(nprobe=params.nprobe)
        if not self.is_hnsw:
            return self.index.search(queries, k, params=probe)[1]
        walk = faiss.SearchParametersHNSW(efSearch=search_ef(params, self.size, k))
        labels = self.index.search(queries, k, params=walk)[1]
        if self.lists is None:
            return labels
        return np.concatenate([labels, self.lists.search(self._projected(queries), k, params=probe)[1]], axis=1)

    @property
    def size(self) -> int:
        return int(self.index.ntotal)

    def nbytes(self) -> tuple[int, int]:
        """Bytes of the vector codes and of the structure around them (HNSW links and levels, or IVF
        list ids and centroids; the label map), counted from faiss's arrays (no serialisation)."""
        codes = structure = 0
        if self.is_hnsw:
            inner = _hnsw_of(self.index)
            codes = int(faiss.downcast_index(inner.storage).codes.size())
            graph = inner.hnsw
            links = 4 * (graph.neighbors.size() + graph.levels.size()) + 8 * graph.offsets.size()
            structure = int(links + 8 * self.index.id_map.size())
        ivf = self._ivf()
        if ivf is not None:
            ntotal = int(ivf.invlists.compute_ntotal())
            codes += ntotal * int(ivf.code_size)
            structure += ntotal * 8 + 4 * int(ivf.nlist) * int(ivf.d)
        return codes, structure

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "trained_items": self.trained_items, "dead": self.dead,
                               "indexed_upto": self.indexed_upto}
        if self.is_hnsw:
            out["graph_dim"] = int(_hnsw_of(self.index).d)
        ivf = self._ivf()
        if ivf is not None:
            out["nlist"] = int(ivf.nlist)
        return out


def _hnsw_of(index: faiss.Index) -> faiss.Index:
    """The HNSW index inside our ``IndexIDMap`` (behind the projection of ``AnnParams.reduce_dim`` if any)."""
    inner = faiss.downcast_index(index.index)
    return faiss.downcast_index(inner.index) if isinstance(inner, faiss.IndexPreTransform) else inner


def _projection_of(index: faiss.Index) -> faiss.VectorTransform | None:
    """The projection in front of the graph in our ``IndexIDMap`` (``AnnParams.reduce_dim``), or None."""
    inner = faiss.downcast_index(index.index)
    if isinstance(inner, faiss.IndexPreTransform):
        return faiss.downcast_VectorTransform(inner.chain.at(0))
    return None


def principal_projection(sample: np.ndarray, dims: int) -> faiss.LinearTransform:
    """The linear map onto the ``dims`` principal directions of ``sample`` (N, D), without centring.

    For candidate generation (module docstring, "Reduced graph"): the directions come from the centred sample,
    but the map itself has no bias, so a query and an item map to ``P q`` and ``P x`` and their inner product
    is ``q . x`` minus the part outside the subspace. Centring both sides as faiss's PCAMatrix does would add
    ``-(m . x)``, a per-item term that changes the ranking; mapping ``x - m`` only would add ``-(q . m)``, which is
    constant per query, so the uncentred map ranks like it.
    """
    sample = np.asarray(sample, np.float64)
    centred = sample - sample.mean(axis=0)
    values, vectors = np.linalg.eigh(centred.T @ centred)  # ascending eigenvalues
    basis = np.ascontiguousarray(vectors[:, ::-1][:, :dims].T, dtype=np.float32)  # (dims, D), largest first
    transform = faiss.LinearTransform(sample.shape[1], dims, False)
    faiss.copy_array_to_vector(basis.ravel(), transform.A)
    transform.is_trained = True
    return transform


@dataclass(frozen=True)
class _Data:
    """The stored items, swapped as a whole so searches always see a consistent view.

    Rows ``[0, size)`` of the buffers are in use; ``alive`` marks the rows not removed. ``row_of_slot``
    maps every slot ever given out to its row, or -1 once removed. Slots increase with the row (appends
    take new slots, compaction keeps the order), so the rows not yet in the faiss index are a tail.
    """

    ids: np.ndarray  # (capacity,) int64
    slots: np.ndarray  # (capacity,) int64
    vectors: np.ndarray  # (capacity, K, D) float32 or float16 (the index's storage), unit rows
    alive: np.ndarray  # (capacity,) bool
    payload: np.ndarray  # (capacity, P) float32, P = 0 unless the index carries per-item values
    row_of_slot: np.ndarray  # (next_slot,) int64
    size: int
    count: int  # alive rows


class MultiVectorIndex:
    """Items with K unit vectors each, searched by the K x K max-cosine rule (module docstring).

    ``payload_dim`` > 0 keeps P float32 values per item beside its vectors (e.g. PCME's log sigma, for
    uncertainty and match probability), stored and saved with it but never searched. ``storage`` is the
    type of the stored vectors the exact scoring reads: ``"float32"``, ``"float16"`` (half the memory;
    scores then differ from float32 ones by ~1e-4) or ``"auto"``: float16 from :data:`FLOAT16_FROM`
    floats per item (PVSE's K=3 x D=1024), float32 below (module docstring, "Memory").
    """

    def __init__(self, dim: int, heads: int, metric: str = "ip", model_id: str = "",
                 params: AnnParams | None = None, seed: int = 0, payload_dim: int = 0,
                 storage: Storage = "auto") -> None:
        if metric != "ip":
            raise IndexInputError(f"metric: only 'ip' (cosine of unit vectors) is supported, got {metric!r}")
        if dim < 1 or heads < 1 or payload_dim < 0:
            raise IndexInputError(f"dim and heads must be >= 1 and payload_dim >= 0, got dim={dim}, "
                                  f"heads={heads}, payload_dim={payload_dim}")
        if storage not in typing.get_args(Storage):
            raise IndexInputError(f"storage: expected one of {typing.get_args(Storage)}, got {storage!r}")
        if storage == "auto":
            storage = "float16" if heads * dim >= FLOAT16_FROM else "float32"
        self.storage: Literal["float32", "float16"] = storage
        self.dim, self.heads, self.metric, self.model_id = int(dim), int(heads), metric, str(model_id)
        self.payload_dim = int(payload_dim)
        self.params = params or AnnParams()
        self._rng = np.random.default_rng(seed)
        self._lock = threading.RLock()  # searches and short mutations
        self._write_lock = threading.RLock()  # one writer at a time; held through long rebuilds
        self._data = self._empty_data()
        self._ann: _Ann | None = None
        self._row_of_id: dict[int, int] = {}

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

    def payload(self, ids: np.ndarray | list[int]) -> np.ndarray:
        """The stored payload (N, P) of ``ids``; :class:`KeyError` names an unknown id."""
        with self._lock:
            return self._data.payload[self._rows_of(ids)]

    def known(self, ids: np.ndarray | list[int]) -> np.ndarray:
        """Whether each of ``ids`` is in the index, (N,) bool (one dictionary probe each, no Python loop)."""
        return self._lookup(ids) >= 0

    def _lookup(self, ids: np.ndarray | list[int]) -> np.ndarray:
        """Rows of ``ids``, -1 for an unknown id (``map`` over ``dict.get`` runs in C: ~30x a Python loop)."""
        flat = np.asarray(ids, dtype=np.int64).reshape(-1).tolist()
        return np.fromiter(map(self._row_of_id.get, flat, itertools.repeat(-1)), np.int64, len(flat))

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
        ``ann_codes`` and ``ann_structure`` (the faiss index, see :meth:`_Ann.nbytes`), ``other`` (ids,
        slots, payload, flags, the id table's keys and values, approximately) and ``total``."""
        with self._lock:
            data, ann = self._data, self._ann
            codes, structure = ann.nbytes() if ann is not None else (0, 0)
            other = sum(a.nbytes for a in (data.ids, data.slots, data.alive, data.payload, data.row_of_slot))
            other += 100 * len(self._row_of_id)  # dict entry + two Python ints, roughly
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
            tail = np.arange(_tail_start(data, ann), data.size)
            rows = np.union1d(self._candidate_rows(labels), tail[data.alive[tail]])
            return data.ids[rows].copy()

    def search_batch(self, queries: np.ndarray, top: int = 10, offset: int = 0, exact: bool = False
                     ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """:meth:`search` for B queries (B, Kq, D) at once (one faiss call for all their heads)."""
        queries = self._check_queries(queries)
        if top < 0 or offset < 0:
            raise IndexInputError(f"top and offset must be >= 0, got top={top}, offset={offset}")
        if top == 0:
            return [_top(np.zeros(0, np.int64), np.zeros(0, np.float32), np.zeros((0, 2), np.int64), 0, 0)
                    for _ in range(len(queries))]
        set_faiss_threads(SEARCH_THREADS)
        with self._lock:
            if self._ann is None or exact:
                return self._exact_batch(queries, top, offset)
            return self._approximate_batch(queries, top, offset)

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
        return [_top(data.ids[rows], scores[b], pairs[b], top, offset) for b in range(len(queries))]

    def _score_rows(self, data: _Data, rows: np.ndarray, queries: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
        """Exact K x K scores (B, n) and head pairs (B, n, 2) of ``rows`` for every query, in blocks."""
        batch, kq, _ = queries.shape
        flat = queries.reshape(batch * kq, self.dim)
        scores = np.empty((batch, len(rows)), np.float32)
        pairs = np.empty((batch, len(rows), 2), np.int64)
        # bounds both the similarities and a block's float32 vectors (copied when gathered or widened)
        block = max(1, _SCORE_BLOCK // (self.heads * max(batch * kq, self.dim)))
        # a run of consecutive rows is read as a slice (no copy); a permutation of one is not such a run
        contiguous = len(rows) == 0 or bool((np.diff(rows) == 1).all())
        for start in range(0, len(rows), block):
            part = rows[start:start + block]
            items = data.vectors[part[0]:part[-1] + 1] if contiguous else data.vectors[part]
            items = items.astype(np.float32, copy=False)  # float16 storage: einsum is slow on halves
            sims = _dot(items.reshape(-1, self.dim), flat).reshape(len(part), self.heads, batch, kq)
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
        tail = np.arange(_tail_start(data, self._ann), data.size)
        tail = tail[data.alive[tail]]  # added but not yet in the faiss index: scored exactly
        out = []
        for b in range(batch):
            rows = np.union1d(self._candidate_rows(labels[b * kq:(b + 1) * kq]), tail)
            if len(rows) < min(need, len(self)):
                rows = self._wider_candidates(queries[b], need, fetch, tail)
            scores, pairs = self._score_rows(data, rows, queries[b:b + 1])
            out.append(_top(data.ids[rows], scores[0], pairs[0], top, offset))
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
            grown = self._grown(self._data, max(0, int(extra)))
            with self._lock:
                self._data = grown

    def add(self, ids: np.ndarray | list[int], vectors: np.ndarray,
            payload: np.ndarray | None = None) -> None:
        """Add items ``ids`` (N,) with vectors (N, K, D) (and payload (N, P)); an id already present is
        replaced.

        Vectors are L2-normalised here. May build or retrain the approximate index (module docstring).
        """
        ids, vectors = self._check_items(ids, vectors)
        payload = self._check_payload(len(ids), payload)
        set_faiss_threads(BUILD_THREADS)
        with self._write_lock:
            present = [i for i in ids.tolist() if i in self._row_of_id]
            if present:
                self._remove_known(np.array(present, np.int64))
            grown = self._grown(self._data, len(ids))
            with self._lock:
                self._data = self._append(grown, ids, vectors, payload)
            self._maintain()
            self._catch_up()

    def _catch_up(self) -> None:
        """Add the rows appended since the approximate index last grew, a short chunk per lock hold, so
        searches (which score the waiting tail exactly) are never held up for long."""
        ann, data = self._ann, self._data
        if ann is None:
            return
        chunk = _HNSW_ADD_ITEMS if ann.is_hnsw else _IVF_ADD_ITEMS
        for start in range(_tail_start(data, ann), data.size, chunk):
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

    def _check_payload(self, count: int, payload: np.ndarray | None) -> np.ndarray:
        if payload is None and self.payload_dim == 0:
            return np.zeros((count, 0), np.float32)
        expected = (count, self.payload_dim)
        if payload is None or np.shape(payload) != expected:
            raise IndexInputError(f"payload: expected shape {expected}, got "
                                  f"{None if payload is None else np.shape(payload)}")
        if not np.isfinite(payload).all():
            raise IndexInputError("payload: contains NaN or infinite values")
        return np.asarray(payload, np.float32)

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

    def _empty_data(self, capacity: int = 0) -> _Data:
        return _Data(np.zeros(capacity, np.int64), np.zeros(capacity, np.int64),
                     np.zeros((capacity, self.heads, self.dim), self.storage), np.zeros(capacity, bool),
                     np.zeros((capacity, self.payload_dim), np.float32), np.zeros(0, np.int64), 0, 0)

    def _grown(self, data: _Data, extra: int) -> _Data:
        """``data`` with room for ``extra`` more rows; a bigger copy is made outside the search lock."""
        if data.size + extra <= len(data.ids):
            return data
        capacity = max(data.size + extra, len(data.ids) + min(len(data.ids) // 2, _GROW_ROWS), 1024)
        bigger = self._empty_data(capacity)
        for name in ("ids", "slots", "vectors", "alive", "payload"):
            getattr(bigger, name)[:data.size] = getattr(data, name)[:data.size]
        return replace(bigger, row_of_slot=data.row_of_slot, size=data.size, count=data.count)

    def _append(self, data: _Data, ids: np.ndarray, vectors: np.ndarray, payload: np.ndarray) -> _Data:
        start, stop = data.size, data.size + len(ids)
        first_slot = len(data.row_of_slot)
        slots = np.arange(first_slot, first_slot + len(ids), dtype=np.int64)
        data.ids[start:stop], data.slots[start:stop], data.vectors[start:stop] = ids, slots, vectors
        data.alive[start:stop], data.payload[start:stop] = True, payload
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
        compact = self._empty_data(len(keep))
        for name in ("ids", "slots", "vectors", "payload"):
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
        ann = _Ann.build(self.params, data.vectors[:data.size], data.slots[:data.size],
                         len(data.row_of_slot), self._rng)
        with self._lock:
            self._ann = ann
        log.info("built %s index over %d items in %.1f s", ann.kind, data.count,
                 time.perf_counter() - started)

    # -- files ---------------------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the index into the folder ``path`` (created if needed); see the module docstring."""
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        with self._write_lock:
            self._compact()
            data, ann = self._data, self._ann
            name = f"data-{time.time_ns():x}"
            staging = folder / f".{name}.tmp"
            staging.mkdir()
            try:
                self._write_data(staging, data, ann)
                os.replace(staging, folder / name)
                atomic_write_text(folder / INDEX_FILE, json.dumps(self._header(name, data, ann), indent=2))
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
        for old in folder.glob("data-*"):
            if old.name != name:
                shutil.rmtree(old, ignore_errors=True)

    @staticmethod
    def _write_data(staging: Path, data: _Data, ann: _Ann | None) -> None:
        np.save(staging / "ids.npy", data.ids[:data.size])
        np.save(staging / "slots.npy", data.slots[:data.size])
        np.save(staging / "vectors.npy", data.vectors[:data.size])
        np.save(staging / "payload.npy", data.payload[:data.size])
        if ann is not None:
            faiss.write_index(ann.index, str(staging / "ann.faiss"))
        if ann is not None and ann.lists is not None:
            faiss.write_index(ann.lists, str(staging / LISTS_FILE))

    def _header(self, name: str, data: _Data, ann: _Ann | None) -> dict[str, Any]:
        return {"format": FORMAT, "version": FORMAT_VERSION, "model_id": self.model_id, "dim": self.dim,
                "heads": self.heads, "metric": self.metric, "payload_dim": self.payload_dim,
                "storage": self.storage,
                "count": data.count, "data": name,
                "next_slot": len(data.row_of_slot), "params": asdict(self.params),
                "ann": ann.describe() if ann else None}

    @classmethod
    def load(cls, path: str | os.PathLike[str], model_id: str | None = None,
             params: AnnParams | None = None) -> MultiVectorIndex:
        """Read an index saved by :meth:`save`.

        ``model_id``, when given, must equal the saved one (:class:`ModelMismatchError` otherwise: an index
        is only valid for the model version that made its vectors). ``params`` overrides the saved
        search parameters (the saved faiss index is kept).
        """
        folder = Path(path)
        header = _read_header(folder / INDEX_FILE)
        if model_id is not None and header["model_id"] != model_id:
            raise ModelMismatchError(f"{folder / INDEX_FILE}: index built for model {header['model_id']!r}, "
                                     f"not {model_id!r}; rebuild it")
        storage = header.get("storage", "float32")  # files written before float16 storage existed
        if storage not in ("float32", "float16"):
            raise IndexFileError(f"{folder / INDEX_FILE}: unknown vector storage {storage!r}")
        index = cls(header["dim"], header["heads"], header["metric"], header["model_id"],
                    params or AnnParams.from_dict(header["params"]), payload_dim=header["payload_dim"],
                    storage=storage)
        index._restore(folder / header["data"], header)
        return index

    def _restore(self, data_dir: Path, header: dict[str, Any]) -> None:
        ids = _load_array(data_dir / "ids.npy", np.int64, (header["count"],))
        slots = _load_array(data_dir / "slots.npy", np.int64, (header["count"],))
        vectors = _load_array(data_dir / "vectors.npy", np.dtype(self.storage).type,
                              (header["count"], self.heads, self.dim))
        payload = _load_array(data_dir / "payload.npy", np.float32, (header["count"], self.payload_dim))
        if len(slots) and (slots.min() < 0 or slots.max() >= header["next_slot"]):
            raise IndexFileError(f"{data_dir / 'slots.npy'}: slot numbers outside 0..{header['next_slot']}")
        row_of_slot = np.full(header["next_slot"], -1, np.int64)
        row_of_slot[slots] = np.arange(len(slots))
        count = len(ids)
        self._data = _Data(ids, slots, vectors, np.ones(count, bool), payload, row_of_slot, count, count)
        self._row_of_id = dict(zip(ids.tolist(), range(len(ids)), strict=True))
        if header["ann"] is not None:
            self._ann = _read_ann(data_dir / "ann.faiss", header["ann"], self.dim)


def _read_header(path: Path) -> dict[str, Any]:
    try:
        header = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise IndexFileError(f"{path}: cannot read the index header: {exc}") from exc
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise IndexFileError(f"{path}: not a {FORMAT} file")
    if header.get("version") != FORMAT_VERSION:
        raise IndexFileError(f"{path}: format version {header.get('version')!r}, expected {FORMAT_VERSION}")
    required = ("model_id", "dim", "heads", "metric", "payload_dim", "count", "data", "next_slot", "params",
                "ann")
    missing = [k for k in required if k not in header]
    if missing or "/" in str(header.get("data")) or ".." in str(header.get("data")):
        raise IndexFileError(f"{path}: missing or invalid entries {missing or ['data']}")
    return header


def _load_array(path: Path, dtype: type, shape: tuple[int, ...]) -> np.ndarray:
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise IndexFileError(f"{path}: cannot read: {exc}") from exc
    if array.dtype != dtype or array.shape != shape:
        raise IndexFileError(f"{path}: expected {np.dtype(dtype).name} {shape}, "
                             f"got {array.dtype} {array.shape}")
    return array


def _read_faiss(path: Path) -> faiss.Index:
    try:
        return faiss.read_index(str(path))
    except RuntimeError as exc:  # faiss reports I/O and format errors as RuntimeError
        raise IndexFileError(f"{path}: cannot read the faiss index: {exc}") from exc


def _read_ann(path: Path, described: dict[str, Any], dim: int) -> _Ann:
    index = _read_faiss(path)
    if index.d != dim:
        raise IndexFileError(f"{path}: faiss index of dimension {index.d}, expected {dim}")
    lists = None
    if described["kind"] == "hnsw+ivf":
        lists_path = path.with_name(LISTS_FILE)
        lists = _read_faiss(lists_path)
        graph_dim = int(_hnsw_of(index).d)
        if not isinstance(lists, faiss.IndexIVF) or lists.d != graph_dim or lists.ntotal != index.ntotal:
            raise IndexFileError(f"{lists_path}: expected IVF lists of dimension {graph_dim} holding "
                                 f"{index.ntotal} vectors, got {type(lists).__name__} {lists.d} / {lists.ntotal}")
    return _Ann(index, described["kind"], int(described["trained_items"]), int(described["indexed_upto"]),
                int(described["dead"]), lists=lists)
