"""Cached backbone features, shared by every library and by the trainer.

Features depend only on a file's content and on the backbone that computed them, so they are keyed by
``(content_hash, backbone_id)`` (:func:`engine.files.content_hash`): the same photo in two libraries,
or in a training caption folder, is run through the backbone once. The store is its own SQLite file
(``features.sqlite``, beside the catalog), with the catalog's settings: WAL, ``synchronous=NORMAL``, one
transaction per write, a lock around the one connection, and ``auto_vacuum=INCREMENTAL`` so deleting features
gives the space back.

What is kept per item, as float16 (features), 8-bit codes (local features) or int16 (ImageNet class ids) blobs:

- ``global``: the pooled feature, (D,) with D = 1280 for EfficientNet-Lite0. Always present; for an animation
  or video it is whatever the extractor pools over frames.
- ``local``: the 7x7 map as (49, D), still images only, stored as 8-bit codes on a square-root scale with an
  offset and a range per region vector (:func:`encode_local_codes`): 63 KB a photo instead of float16's 125 KB,
  which halves what indexing writes per photo and the store's size. The square-root scale spends the codes where
  the backbone's ReLU6 outputs are (88% exact zeros, most of the rest small): zeros stay exact and a value y of
  a vector with range r is off by at most r (2 sqrt(y / r) + 1/510) / 510, so small activations keep their
  size (a linear scale rounded every value below r / 510 to zero, and a toy PCME trained on those codes came
  out different). Stores written before schema v3 hold float16 rows; they are read as they are
  (``locals.codec`` tells the formats apart), and new rows are written as codes.
- ``frames``: (T, D) pooled features of sampled frames, animations and videos only.
- ``region_top_ids`` / ``region_top_probs``: (R, k) top-k ImageNet classes of each region (e.g. 49 x 3), and
  ``image_top_ids`` / ``image_top_probs``: (k,) top classes of the whole image (e.g. 5) -- the compact
  record of regional semantics that pseudo-pair mining reads, instead of 49 x 1000 logits.

Policy for big libraries: a still image costs about 63 KB of local features (49 x 1280 codes and 49 offsets and
steps) against 2.5 KB for its global feature. Local features are kept for at most ``max_local_items`` items
(default 50,000, about 3 GB); past the cap an item is stored with its global feature, frames and region tops
only, and whoever needs its local features (the trainer, for the items it samples) recomputes them. Replacing
an item that already has local features keeps within the cap. :meth:`FeatureStore.stats` reports the sizes.

Arrays come back as float16 / int16 in native byte order, writable; cast with ``.astype(np.float32)``. A row
whose blob does not have the size its shape says (a damaged file) is logged and read as a missing field, never
raised: readers already treat a missing ``local`` as one to recompute.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from engine.features.featureschema import CODEC_FLOAT16, CODEC_SQRT8, MIGRATIONS
from engine.sqlitestore import CatalogError, SQLiteStore

log = logging.getLogger(__name__)

FEATURES_FILENAME = "features.sqlite"
DEFAULT_MAX_LOCAL_ITEMS = 50_000
_F16 = np.dtype("<f2")
_F32 = np.dtype("<f4")
_I16 = np.dtype("<i2")
PAGE_SIZE = 65536  # SQLite's largest page, for a new store
_F16_MAX = float(np.finfo(np.float16).max)
_CV_MIN_SIZE = 4096  # below this NumPy is as fast (OpenCV has a fixed cost per call)


class FeatureStoreError(CatalogError):
    """A feature store operation failed, or a record has the wrong shape; the message names the item."""


@dataclass(eq=False, kw_only=True)
class FeatureRecord:
    """Backbone outputs of one media file; every field is optional (see the module docstring for shapes).

    ``global_`` is the ``global`` field (``global`` is a Python keyword); :meth:`FeatureStore.put` needs it.
    """

    global_: np.ndarray | None = None
    local: np.ndarray | None = None
    frames: np.ndarray | None = None
    region_top_ids: np.ndarray | None = None
    region_top_probs: np.ndarray | None = None
    image_top_ids: np.ndarray | None = None
    image_top_probs: np.ndarray | None = None

    def get(self, field: str) -> np.ndarray | None:
        """A field by its store name (``'global'``, ``'local'``, ...)."""
        if field not in FIELDS:
            raise FeatureStoreError(f"unknown feature field {field!r}; known: {', '.join(FIELDS)}")
        return getattr(self, "global_" if field == "global" else field)


FIELDS = (
    "global",
    "local",
    "frames",
    "region_top_ids",
    "region_top_probs",
    "image_top_ids",
    "image_top_probs",
)


@dataclass(frozen=True, slots=True)
class FeatureStoreStats:
    """Counts and sizes in bytes (feature payloads, and the whole file)."""

    items: int
    local_items: int
    frame_items: int
    global_bytes: int
    local_bytes: int
    frame_bytes: int
    file_bytes: int
    max_local_items: int


def top_k_classes(probs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` most probable classes along the last axis: ``(ids int16, probs float16)``, best first.

    ``probs`` is (C,) for a whole image or (R, C) for R regions (softmax of the ImageNet logits).
    """
    probs = np.asarray(probs, dtype=np.float32)
    if not 0 < k <= probs.shape[-1]:
        raise FeatureStoreError(f"top-k with k={k} over {probs.shape[-1]} classes")
    part = np.argpartition(-probs, k - 1, axis=-1)[..., :k]
    order = np.argsort(-np.take_along_axis(probs, part, axis=-1), axis=-1, kind="stable")
    ids = np.take_along_axis(part, order, axis=-1)
    return ids.astype(np.int16), np.take_along_axis(probs, ids, axis=-1).astype(np.float16)


# ---------------------------------------------------------------------------------------------- encoding


@dataclass(frozen=True, slots=True)
class _Encoded:
    dim: int
    global_feature: bytes
    local: tuple[int, bytes, int] | None  # (rows, blob, codec)
    frames: tuple[int, bytes] | None
    region_k: int | None
    region_top_ids: bytes | None
    region_top_probs: bytes | None
    image_top_ids: bytes | None
    image_top_probs: bytes | None


def _half(key: str, name: str, array: np.ndarray, ndim: int, dim: int | None = None) -> np.ndarray:
    array = np.asarray(array)
    if array.ndim != ndim or (dim is not None and array.shape[-1] != dim):
        want = f"{ndim}-D" + ("" if dim is None else f" with last axis {dim}")
        raise FeatureStoreError(f"{name} features of {key} have shape {array.shape}, want {want}")
    # checked on the input (cheap min/max; NaN fails both comparisons) rather than on the float16 copy
    if array.size and not (array.max() <= _F16_MAX and array.min() >= -_F16_MAX):
        raise FeatureStoreError(f"{name} features of {key} are not finite in float16")
    return _to_half(array)


def _to_half(array: np.ndarray) -> np.ndarray:
    """``array.astype(float16)``, bit for bit, with OpenCV's vectorised (F16C) conversion for big float32 arrays.

    NumPy converts float32 to float16 one element at a time (about 3 ns each): for a photo's 49 x 1280 local
    features that is 0.2 ms, over 1% of the backbone's own time per photo on two cores; OpenCV takes a
    quarter of that. Both round to nearest even, so the bytes stored are the same.
    """
    if array.dtype != np.float32 or array.size < _CV_MIN_SIZE or array.ndim > 2:
        return array.astype(_F16)

    # multiplying by 1 is exact (and keeps -0.0); ``dtype`` makes OpenCV write float16
    return cv2.multiply(np.ascontiguousarray(array), 1.0, dtype=cv2.CV_16F).reshape(array.shape).view(_F16)


def _class_ids(key: str, name: str, array: np.ndarray, shape: tuple[int, ...]) -> bytes:
    array = np.asarray(array)
    if array.shape != shape or not np.issubdtype(array.dtype, np.integer):
        raise FeatureStoreError(
            f"{name} of {key} have shape {array.shape} {array.dtype}, want integers {shape}"
        )
    if array.size and (array.min() < 0 or array.max() > np.iinfo(np.int16).max):
        raise FeatureStoreError(f"{name} of {key} fall outside 0..32767")
    return array.astype(_I16).tobytes()


def _encode(key: str, record: FeatureRecord) -> _Encoded:
    if record.global_ is None:
        raise FeatureStoreError(f"feature record of {key} has no global feature")
    global_feature = _half(key, "global", record.global_, 1)
    dim = global_feature.shape[0]
    local = None if record.local is None else encode_local_codes(key, record.local, dim)
    frames = None if record.frames is None else _half(key, "frames", record.frames, 2, dim)
    region = _encode_tops(key, "region", record.region_top_ids, record.region_top_probs, 2)
    image = _encode_tops(key, "image", record.image_top_ids, record.image_top_probs, 1)
    return _Encoded(
        dim=dim,
        global_feature=global_feature.tobytes(),
        local=None if local is None else (len(local[0]), b"".join(a.tobytes() for a in local), CODEC_SQRT8),
        frames=None if frames is None else (frames.shape[0], frames.tobytes()),
        region_k=None if region is None else region[0],
        region_top_ids=None if region is None else region[1],
        region_top_probs=None if region is None else region[2],
        image_top_ids=None if image is None else image[1],
        image_top_probs=None if image is None else image[2],
    )


def _encode_tops(
    key: str, name: str, ids: np.ndarray | None, probs: np.ndarray | None, ndim: int
) -> tuple[int, bytes, bytes] | None:
    if ids is None and probs is None:
        return None
    if ids is None or probs is None:
        raise FeatureStoreError(f"{name} top classes of {key} need both ids and probabilities")
    half = _half(key, f"{name} top probabilities", probs, ndim)
    return half.shape[-1], _class_ids(key, f"{name} top ids", ids, half.shape), half.tobytes()


def encode_local_codes(key: str, local: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, ranges, codes) of (n, ``dim``) features: per row, ``offset`` = min and ``range`` = max - min
    (float32), and ``codes`` = round(255 sqrt((x - offset) / range)) as uint8, so
    x ~ offset + range (code / 255)^2."""
    local = np.asarray(local)
    if local.ndim != 2 or local.shape[-1] != dim:
        raise FeatureStoreError(f"local features of {key} have shape {local.shape}, want 2-D with last axis {dim}")
    local = local.astype(np.float32, copy=False)
    low, high = local.min(axis=1), local.max(axis=1)
    if not (np.isfinite(low).all() and np.isfinite(high).all()):  # NaN or inf anywhere reaches a row's min or max
        raise FeatureStoreError(f"local features of {key} are not finite")
    span = high - low
    inverse = np.divide(1, span, out=np.zeros_like(span), where=span > 0)
    scaled = local - low[:, None] if low.any() else local * 1  # ReLU features: every row's min is 0
    scaled *= inverse[:, None]
    np.sqrt(scaled, out=scaled)
    scaled *= 255
    scaled += 0.5  # truncating x + 0.5 rounds x >= 0 to nearest
    return low, span.astype(np.float32), scaled.astype(np.uint8)


def decode_local_codes(blob: bytes, n: int, dim: int, out: np.ndarray | None = None) -> np.ndarray:
    """The float16 (n, ``dim``) features of a :func:`encode_local_codes` blob (offsets, ranges, codes); with
    ``out``, float32 written there (what a model's graph reads: narrowing and widening again, then copying into a
    batch, cost ~0.6 ms a photo)."""
    head = 2 * n * _F32.itemsize
    if len(blob) != head + n * dim:
        raise ValueError(f"{len(blob)} bytes of 8-bit local features, want {head + n * dim} for {n} x {dim}")
    low = np.frombuffer(blob, _F32, n)
    span = np.frombuffer(blob, _F32, n, n * _F32.itemsize)
    codes = np.frombuffer(blob, np.uint8, offset=head).reshape(n, dim)
    # OpenCV's table lookup, ~10x NumPy's fancy indexing or np.take; it writes only into a contiguous ``out``
    direct = out is not None and out.flags.c_contiguous
    values = cv2.LUT(codes, _SQUARES, dst=out) if direct else cv2.LUT(codes, _SQUARES)
    if out is not None and values.ctypes.data != out.ctypes.data:
        out[...], values = values, out
    values *= span.astype(np.float32)[:, None]
    if low.any():  # ReLU features: every row's min is 0
        values += low.astype(np.float32)[:, None]
    return _to_half(values) if out is None else values


_SQUARES = ((np.arange(256, dtype=np.float32) / 255) ** 2).reshape(1, 256)  # code -> its share of the row's range


def _local(dim: int, n: int, blob: bytes | None, codec: int, out: np.ndarray | None = None) -> np.ndarray | None:
    if blob is None:
        return None
    if codec == CODEC_SQRT8:
        return decode_local_codes(blob, n, dim, out)
    if codec == CODEC_FLOAT16:
        values = _floats(blob, n, dim)
        if out is not None:
            out[...] = values
            return out
        return values
    raise ValueError(f"unknown local-feature codec {codec}")


def _floats(blob: bytes | None, *shape: int) -> np.ndarray | None:
    return None if blob is None else np.frombuffer(blob, dtype=_F16).reshape(shape).astype(np.float16)


def _ints(blob: bytes | None, *shape: int) -> np.ndarray | None:
    return None if blob is None else np.frombuffer(blob, dtype=_I16).reshape(shape).astype(np.int16)


# field -> (columns it reads after ``dim``, decoder of (dim, *columns))
_DECODERS: dict[str, tuple[tuple[str, ...], Callable[..., np.ndarray | None]]] = {
    "global": (("i.global_feature",), lambda dim, blob: _floats(blob, dim)),
    "local": (("l.n_regions", "l.data", "l.codec"), _local),
    "frames": (("f.n_frames", "f.data"), lambda dim, n, blob: _floats(blob, n, dim)),
    "region_top_ids": (("i.region_k", "i.region_top_ids"), lambda dim, k, blob: _ints(blob, -1, k)),
    "region_top_probs": (("i.region_k", "i.region_top_probs"), lambda dim, k, blob: _floats(blob, -1, k)),
    "image_top_ids": (("i.image_top_ids",), lambda dim, blob: _ints(blob, -1)),
    "image_top_probs": (("i.image_top_probs",), lambda dim, blob: _floats(blob, -1)),
}


def _select(fields: Sequence[str]) -> str:
    unknown = [f for f in fields if f not in _DECODERS]
    if unknown:
        raise FeatureStoreError(f"unknown feature fields {unknown}; known: {', '.join(FIELDS)}")
    columns = [column for f in fields for column in _DECODERS[f][0]]
    joins = "".join(
        f" LEFT JOIN {table} {alias} ON {alias}.item_id = i.id"
        for field, table, alias in (("local", "locals", "l"), ("frames", "frames", "f"))
        if field in fields
    )
    return f"SELECT i.content_hash, i.dim, {', '.join(columns)} FROM items i{joins}"


def _decode(row: tuple, fields: Sequence[str], where: Path) -> FeatureRecord:
    """One row as a record; a field whose blob is damaged (wrong size, unknown codec) is logged and left None."""
    dim, values, record = row[1], row[2:], FeatureRecord()
    for field in fields:
        columns, decoder = _DECODERS[field]
        try:
            array = decoder(dim, *values[: len(columns)])
        except (ValueError, TypeError) as error:
            log.warning("%s: the %s features of %s are damaged and read as missing: %s", where, field, row[0], error)
            array = None
        values = values[len(columns) :]
        setattr(record, "global_" if field == "global" else field, array)
    return record


# ---------------------------------------------------------------------------------------------- store


class FeatureStore(SQLiteStore):
    """The feature cache file. ``FeatureStore(path, max_local_items)``; use as a context manager."""

    error = FeatureStoreError

    def __init__(self, path: Path, max_local_items: int = DEFAULT_MAX_LOCAL_ITEMS) -> None:
        if max_local_items < 0:
            raise FeatureStoreError(f"max_local_items={max_local_items} is negative")
        self.max_local_items = max_local_items
        # Both only take effect before the first table exists (an older store keeps its 4 KB pages). A photo's
        # local features are a 125 KB blob: on 4 KB pages SQLite chains 31 overflow pages for it, on 64 KB
        # pages 2; writing 384 of them took 0.56 ms of CPU (0.94 ms wall) each with 4 KB pages, 0.31 (0.32)
        # with 64 KB ones, and indexing writes one per photo.
        super().__init__(path, MIGRATIONS, first_pragmas=(f"PRAGMA page_size={PAGE_SIZE}",
                                                           "PRAGMA auto_vacuum=INCREMENTAL"))

    def __enter__(self) -> FeatureStore:
        return self

    def put(self, content_hash: str, backbone: str, record: FeatureRecord) -> None:
        """Store (replace) one item's features; local features are dropped past the cap."""
        self.put_many([(content_hash, record)], backbone)

    def put_many(self, items: Iterable[tuple[str, FeatureRecord]], backbone: str) -> int:
        """Store (replace) many items in one transaction; returns how many lost local features to the cap.

        A record with a bad shape rolls the whole batch back.
        """
        dropped = 0
        with self.transaction(f"storing {backbone} features") as conn:
            n_local = conn.execute("SELECT n FROM counts WHERE name = 'locals'").fetchone()[0]
            for content_hash, record in items:
                encoded = _encode(f"{content_hash} ({backbone})", record)
                item_id = self._upsert_item(conn, content_hash, backbone, encoded)
                n_local -= conn.execute("DELETE FROM locals WHERE item_id = ?", (item_id,)).rowcount
                conn.execute("DELETE FROM frames WHERE item_id = ?", (item_id,))
                if encoded.local is not None and n_local >= self.max_local_items:
                    dropped += 1
                elif encoded.local is not None:
                    conn.execute("INSERT INTO locals (item_id, n_regions, data, codec) VALUES (?, ?, ?, ?)",
                                 (item_id, *encoded.local))
                    n_local += 1
                if encoded.frames is not None:
                    conn.execute("INSERT INTO frames VALUES (?, ?, ?)", (item_id, *encoded.frames))
        return dropped

    @staticmethod
    def _upsert_item(conn: sqlite3.Connection, content_hash: str, backbone: str, e: _Encoded) -> int:
        row = conn.execute(
            """INSERT INTO items (content_hash, backbone, dim, global_feature, region_k, region_top_ids,
                   region_top_probs, image_top_ids, image_top_probs, created_at)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
               ON CONFLICT (content_hash, backbone) DO UPDATE SET
                   dim = excluded.dim, global_feature = excluded.global_feature, region_k = excluded.region_k,
                   region_top_ids = excluded.region_top_ids, region_top_probs = excluded.region_top_probs,
                   image_top_ids = excluded.image_top_ids, image_top_probs = excluded.image_top_probs,
                   created_at = excluded.created_at
               RETURNING id""",
            (
                content_hash,
                backbone,
                e.dim,
                e.global_feature,
                e.region_k,
                e.region_top_ids,
                e.region_top_probs,
                e.image_top_ids,
                e.image_top_probs,
                time.time(),
            ),
        ).fetchone()
        return int(row[0])

    def get(self, content_hash: str, backbone: str) -> FeatureRecord | None:
        """Every stored field of one item, or None."""
        return self.get_many([content_hash], backbone, FIELDS).get(content_hash)

    def get_many(
        self, hashes: Sequence[str], backbone: str, fields: Sequence[str] = ("global",)
    ) -> dict[str, FeatureRecord]:
        """Records of the stored items among ``hashes``, only ``fields`` loaded; absent ones are left out."""
        sql = f"{_select(fields)} WHERE i.backbone = ? AND i.content_hash IN ({{marks}})"
        rows = self._read_in(f"reading {backbone} features", sql, (backbone,), list(dict.fromkeys(hashes)))
        return {row[0]: _decode(row, fields, self.path) for row in rows}

    def locals_into(self, hashes: Sequence[str], backbone: str, out: np.ndarray) -> np.ndarray:
        """Each item's local features as float32, decoded straight into ``out[i]`` ((N, R, dim), ``hashes[i]``'s
        row); returns which rows were written (an item stored without local features, or whose blob is damaged
        or of another region count, is left as ``out`` had it)."""
        at: dict[str, list[int]] = {}
        for row, content_hash in enumerate(hashes):
            at.setdefault(content_hash, []).append(row)
        sql = ("SELECT i.content_hash, i.dim, l.n_regions, l.data, l.codec FROM items i JOIN locals l "
               "ON l.item_id = i.id WHERE i.backbone = ? AND i.content_hash IN ({marks})")
        written = np.zeros(len(hashes), bool)
        for content_hash, dim, n, blob, codec in self._read_in(f"reading {backbone} features", sql, (backbone,),
                                                               list(at)):
            first, *more = at[content_hash]
            if (n, dim) != out.shape[1:]:
                continue
            try:
                _local(dim, n, blob, codec, out[first])
            except (ValueError, TypeError) as error:
                log.warning("%s: the local features of %s are damaged and read as missing: %s", self.path,
                            content_hash, error)
                continue
            out[more] = out[first]
            written[[first, *more]] = True
        return written

    def stack(self, hashes: Sequence[str], backbone: str, field: str = "global") -> np.ndarray:
        """One field of many items stacked in ``hashes`` order, e.g. (N, D) globals; all must have it."""
        records = self.get_many(hashes, backbone, (field,))
        arrays = []
        for content_hash in hashes:
            array = records[content_hash].get(field) if content_hash in records else None
            if array is None:
                raise FeatureStoreError(f"no {field} features for {content_hash} ({backbone}) in {self.path}")
            arrays.append(array)
        if not arrays:
            raise FeatureStoreError(f"nothing to stack: no hashes given for {field} ({backbone})")
        return np.stack(arrays)

    def has(self, content_hash: str, backbone: str) -> bool:
        """Whether the item has features from this backbone."""
        return not self.missing([content_hash], backbone)

    def missing(self, hashes: Iterable[str], backbone: str) -> list[str]:
        """The hashes (first occurrences, in order) that have no features from this backbone."""
        unique = list(dict.fromkeys(hashes))
        rows = self._read_in(
            f"checking {backbone} features",
            "SELECT content_hash FROM items WHERE backbone = ? AND content_hash IN ({marks})",
            (backbone,),
            unique,
        )
        present = {r[0] for r in rows}
        return [h for h in unique if h not in present]

    def delete_unreferenced(self, keep_hashes: Iterable[str]) -> int:
        """Delete the features (of every backbone) of items not in ``keep_hashes``; returns how many items."""
        with self.transaction("deleting unreferenced features") as conn:
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS keep_hashes (content_hash TEXT PRIMARY KEY)")
            conn.execute("DELETE FROM keep_hashes")
            conn.executemany("INSERT OR IGNORE INTO keep_hashes VALUES (?)", ((h,) for h in keep_hashes))
            deleted = conn.execute(
                "DELETE FROM items WHERE content_hash NOT IN (SELECT content_hash FROM keep_hashes)"
            ).rowcount
            conn.execute("DELETE FROM keep_hashes")
        self._read("returning free pages", "PRAGMA incremental_vacuum")
        return deleted

    def stats(self) -> FeatureStoreStats:
        """How many items have which features, and how many bytes they take."""
        what = "measuring feature store"
        items, global_bytes = self._read(
            what, "SELECT COUNT(*), COALESCE(SUM(LENGTH(global_feature)), 0) FROM items"
        )[0]
        local_items, local_bytes = self._read(
            what, "SELECT COUNT(*), COALESCE(SUM(LENGTH(data)), 0) FROM locals"
        )[0]
        frame_items, frame_bytes = self._read(
            what, "SELECT COUNT(*), COALESCE(SUM(LENGTH(data)), 0) FROM frames"
        )[0]
        pages = self._read(what, "PRAGMA page_count")[0][0] * self._read(what, "PRAGMA page_size")[0][0]
        return FeatureStoreStats(
            items,
            local_items,
            frame_items,
            global_bytes,
            local_bytes,
            frame_bytes,
            pages,
            self.max_local_items,
        )
