"""The multi-vector index's stored rows and their files (:mod:`engine.search.vectorindex.index` uses them).

:class:`Data` is one consistent view of the stored items, swapped as a whole by every change; :class:`IdRows` and
:class:`Kept` are lookups made for one view and dropped with it; :func:`empty_data` and :func:`grown_data` make the
arrays of a new view. :func:`read_header` and :func:`load_array` read an
index's files back, checking each against what the header promises.
"""

from __future__ import annotations

import json
import weakref
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from engine.search.vectorindex.ann import Ann
from engine.search.vectorindex.scoring import IndexFileError

FORMAT = "polyseek-multivector-index"
FORMAT_VERSION = 1
GROW_ROWS = 1 << 17  # most spare rows one growth of the stored arrays adds (0.8 GB at K=3, D=1024, float16)


def empty_data(capacity: int, heads: int, dim: int, storage: str) -> Data:
    """Stored arrays with room for ``capacity`` items of ``heads`` x ``dim`` vectors (``storage``: their dtype)."""
    return Data(np.zeros(capacity, np.int64), np.zeros(capacity, np.int64),
                np.zeros((capacity, heads, dim), storage), np.zeros(capacity, bool),
                np.zeros(0, np.int64), 0, 0)


def grown_data(data: Data, extra: int, heads: int, dim: int, storage: str) -> Data:
    """``data`` with room for ``extra`` more rows; a bigger copy is made outside the search lock."""
    if data.size + extra <= len(data.ids):
        return data
    capacity = max(data.size + extra, len(data.ids) + min(len(data.ids) // 2, GROW_ROWS), 1024)
    bigger = empty_data(capacity, heads, dim, storage)
    for name in ("ids", "slots", "vectors", "alive"):
        getattr(bigger, name)[:data.size] = getattr(data, name)[:data.size]
    return replace(bigger, row_of_slot=data.row_of_slot, size=data.size, count=data.count)


def tail_start(data: Data, ann: Ann) -> int:
    """First row whose slot the approximate index has not been given yet."""
    return int(np.searchsorted(data.slots[:data.size], ann.indexed_upto))


@dataclass(frozen=True)
class Data:
    """The stored items, swapped as a whole so searches always see a consistent view.

    Rows ``[0, size)`` of the buffers are in use; ``alive`` marks the rows not removed. ``row_of_slot``
    maps every slot ever given out to its row, or -1 once removed. Slots increase with the row (appends
    take new slots, compaction keeps the order), so the rows not yet in the faiss index are a tail.
    """

    ids: np.ndarray  # (capacity,) int64
    slots: np.ndarray  # (capacity,) int64
    vectors: np.ndarray  # (capacity, K, D) float32 or float16 (the index's storage), unit rows
    alive: np.ndarray  # (capacity,) bool
    row_of_slot: np.ndarray  # (next_slot,) int64
    size: int
    count: int  # alive rows


@dataclass(frozen=True)
class IdRows:
    """One view's alive ids sorted, with their rows: an id's row by binary search, vectorised. Made for one view
    (every change of the index makes a new one) and used only with it: ``view`` is a weak reference, so a table
    never keeps an old view's arrays alive."""

    view: weakref.ref
    ids: np.ndarray  # (count,) int64, ascending
    rows: np.ndarray  # (count,) int64

    @classmethod
    def of(cls, data: Data) -> IdRows:
        alive = np.flatnonzero(data.alive[:data.size])
        ids = data.ids[alive]
        order = np.argsort(ids, kind="stable")
        return cls(weakref.ref(data), ids[order], alive[order])


@dataclass(frozen=True)
class Kept:
    """A set of ids scored again and again (a ranking's fixed calibration sample): its rows and float32 vectors
    gathered once, for one view (a weak reference, as :class:`IdRows`)."""

    view: weakref.ref
    ids: np.ndarray
    known: np.ndarray  # (N,) bool
    rows: np.ndarray  # rows of ids[known]
    vectors: np.ndarray  # (n, K, D) float32


def read_header(path: Path) -> dict[str, Any]:
    try:
        header = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise IndexFileError(f"{path}: cannot read the index header: {exc}") from exc
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise IndexFileError(f"{path}: not a {FORMAT} file")
    if header.get("version") != FORMAT_VERSION:
        raise IndexFileError(f"{path}: format version {header.get('version')!r}, expected {FORMAT_VERSION}")
    required = ("model_id", "dim", "heads", "metric", "count", "data", "next_slot", "params",
                "ann")
    missing = [k for k in required if k not in header]
    if missing or "/" in str(header.get("data")) or ".." in str(header.get("data")):
        raise IndexFileError(f"{path}: missing or invalid entries {missing or ['data']}")
    return header


def load_array(path: Path, dtype: type, shape: tuple[int, ...]) -> np.ndarray:
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise IndexFileError(f"{path}: cannot read: {exc}") from exc
    if array.dtype != dtype or array.shape != shape:
        raise IndexFileError(f"{path}: expected {np.dtype(dtype).name} {shape}, "
                             f"got {array.dtype} {array.shape}")
    return array
