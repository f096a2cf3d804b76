"""The approximate backends of the multi-vector index: faiss HNSW and IVF indexes over the items' vectors.

:class:`Ann` is one faiss index (or, for ``"hnsw+ivf"``, an HNSW-SQ8 graph and IVF-SQ8 lists over the same
vectors) whose labels are ``slot * K + head``; the index that owns the stored vectors
(:mod:`engine.search.vectorindex.index`) asks it for candidates and rescores them exactly. :class:`AnnParams` says
which kind and how it is searched. The kinds were compared, and the defaults chosen, on the measurements in
docs/benchmarks.md ("The vector index's approximate search": the table of kinds, "Memory", "Reduced graph",
"Near-duplicates", "Threads").
"""

from __future__ import annotations

import os
import typing
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

import faiss
import numpy as np

from engine.search.vectorindex.scoring import IndexFileError, IndexInputError

# OpenMP threads for training and adding: every core. A build runs in a writer thread while searches keep one
# thread each (SEARCH_THREADS), and faiss's own parallel loops are where a build spends its time.
BUILD_THREADS = os.cpu_count() or 1
SEARCH_THREADS = 1  # per query: one query is too small to gain from a second core (docs/benchmarks.md, "Threads")
LISTS_FILE = "ann-lists.faiss"  # the IVF half of "hnsw+ivf", beside ann.faiss
ANN_FILE = "ann.faiss"
AnnKind = Literal["ivf-flat", "ivf-sq8", "ivf-pq", "hnsw", "hnsw-sq8", "hnsw+ivf"]
EF_BASE_VECTORS = 300_000  # search_ef: ef_search as given up to this many vectors (100,000 items at K=3)
HNSW_ADD_ITEMS = 128  # items added to HNSW per lock hold (~0.2 s on two busy cores)
IVF_ADD_ITEMS = 16_384  # items added to IVF lists per lock hold (their lists are assigned before)


@dataclass(frozen=True)
class AnnParams:
    """How and when the approximate index is used (docs/benchmarks.md compares the kinds).

    Exact search reads every stored float per query, so it is used up to ``exact_limit`` items, by default (0) as
    many as fit ``EXACT_FLOATS`` floats (about 22,000 items at K=3, D=256, ~10 ms here). HNSW kinds use
    ``hnsw_m`` links per node, ``ef_construction`` and, per search, ``ef_search`` raised by ``ef_growth`` times
    itself per tenfold of vectors above :data:`EF_BASE_VECTORS` (HNSW's recall at a fixed ef falls as the graph
    grows; :func:`search_ef`), and at least the number of vectors fetched; vectors wider than ``reduce_dim``
    (0: never) are linked and searched in their ``reduce_dim`` principal directions (docs/benchmarks.md, "Reduced
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
    log10(vectors / EF_BASE_VECTORS))``, never below ``ef_search`` nor ``fetch`` (recall at a fixed ef falls as
    the graph grows: docs/benchmarks.md)."""
    decades = np.log10(max(1.0, vectors / EF_BASE_VECTORS))
    return max(fetch, int(round(params.ef_search * (1.0 + params.ef_growth * decades))))


def set_faiss_threads(threads: int) -> None:
    """Cap faiss's OpenMP threads for work started from the calling thread (libgomp keeps the setting per
    thread, so a search thread and a build thread can use different counts)."""
    faiss.omp_set_num_threads(max(1, min(threads, os.cpu_count() or 1)))


def _auto_nlist(vectors: int, per_sqrt: float) -> int:
    """A power of two near ``per_sqrt * sqrt(vectors)``, at least 16 and at most 65536."""
    target = max(1.0, per_sqrt * np.sqrt(max(vectors, 1)))
    return int(min(65536, max(16, 2 ** round(np.log2(target)))))


def _labels(slots: np.ndarray, heads: int) -> np.ndarray:
    """faiss labels ``slot * K + head`` of every vector of the items in ``slots``, item-major."""
    return (slots[:, None] * heads + np.arange(heads)).reshape(-1).astype(np.int64)


class Ann:
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
              rng: np.random.Generator) -> Ann:
        """Train on a sample of ``vectors`` (N, K, D) and add them all."""
        n = len(vectors)
        lists = None
        if params.kind.startswith("hnsw"):
            index, lists = cls._trained_hnsw(params, vectors, rng)
        else:
            index = cls._trained_ivf(params, vectors, rng)
        ann = cls(index, params.kind, n, next_slot, lists=lists)
        for start in range(0, n, IVF_ADD_ITEMS):  # float32 copies of float16 storage, a chunk at a time
            part = vectors[start:start + IVF_ADD_ITEMS].astype(np.float32, copy=False)
            ann.add(part, slots[start:start + IVF_ADD_ITEMS], ann.assign(part))
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
        lists over the same projected vectors (docs/benchmarks.md, "Near-duplicates")."""
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

    @property
    def add_chunk(self) -> int:
        """Items added per hold of the searches' lock (an HNSW insert is slow; IVF lists are assigned before)."""
        return HNSW_ADD_ITEMS if self.is_hnsw else IVF_ADD_ITEMS

    def write(self, folder: Path) -> None:
        """Write the faiss index (and the lists of ``"hnsw+ivf"``) into ``folder``."""
        faiss.write_index(self.index, str(folder / ANN_FILE))
        if self.lists is not None:
            faiss.write_index(self.lists, str(folder / LISTS_FILE))

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

    For candidate generation (docs/benchmarks.md, "Reduced graph"): the directions come from the centred sample,
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


def _read_faiss(path: Path) -> faiss.Index:
    try:
        return faiss.read_index(str(path))
    except RuntimeError as exc:  # faiss reports I/O and format errors as RuntimeError
        raise IndexFileError(f"{path}: cannot read the faiss index: {exc}") from exc


def read_ann(folder: Path, described: dict[str, Any], dim: int) -> Ann:
    """The approximate index :meth:`Ann.write` left in ``folder``, as the index header ``described`` it."""
    path = folder / ANN_FILE
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
    return Ann(index, described["kind"], int(described["trained_items"]), int(described["indexed_upto"]),
                int(described["dead"]), lists=lists)
