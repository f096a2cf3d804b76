"""Multi-vector index: K L2-normalised embeddings per item, searched by PVSE's K x K max-cosine (§3.4).

Five rooms: :mod:`~engine.search.vectorindex.scoring` (the K x K rule in numpy, the errors),
:mod:`~engine.search.vectorindex.ann` (the approximate faiss backends: HNSW, IVF, both),
:mod:`~engine.search.vectorindex.stored` (one consistent view of the stored rows, the lookups made for it, the
files' header and arrays read back), :mod:`~engine.search.vectorindex.index` (:class:`MultiVectorIndex`: exact
and approximate search over the stored vectors, adding and removing) and :mod:`~engine.search.vectorindex.indexfiles`
(its saving and loading). The measurements behind
the defaults are in docs/benchmarks.md ("The vector index's approximate search").
"""

from engine.search.vectorindex.ann import AnnParams, principal_projection, search_ef, set_faiss_threads
from engine.search.vectorindex.index import MultiVectorIndex
from engine.search.vectorindex.scoring import (
    IndexFileError,
    IndexInputError,
    ModelMismatchError,
    VectorIndexError,
    kxk_scores,
    normalise,
)

__all__ = ["AnnParams", "IndexFileError", "IndexInputError", "ModelMismatchError", "MultiVectorIndex",
           "VectorIndexError", "kxk_scores", "normalise", "principal_projection", "search_ef", "set_faiss_threads"]
