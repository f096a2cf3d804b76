"""The catalog's models room: the registered trained models (at most one active) and their per-item vectors."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engine.library.catalog.records import ModelRecord, NotFound, model_record
from engine.sqlitestore import CatalogError, SQLiteStore

_MODEL_SELECT = "SELECT id, name, method, path, created_at, metrics_json, is_active FROM models"


def _metrics_json(model: str, metrics: dict[str, Any] | None) -> str:
    def plain(value: Any) -> Any:  # trainers report numpy scalars and arrays
        if isinstance(value, np.generic | np.ndarray):
            return value.tolist()
        raise TypeError(f"{type(value).__name__} is not JSON")

    try:
        return json.dumps(metrics or {}, default=plain)
    except (TypeError, ValueError) as exc:
        raise CatalogError(f"metrics of model {model!r} cannot be stored: {exc}") from exc


class ModelRoom(SQLiteStore):
    """Models and embeddings of a catalog (a part of :class:`engine.library.catalog.Catalog`)."""

    def register_model(
        self, name: str, method: str, path: Path, metrics: dict[str, Any] | None = None
    ) -> int:
        """Register a trained model (inactive); returns its id. Names are unique."""
        with self.transaction(f"registering model {name!r}") as conn:
            if conn.execute("SELECT 1 FROM models WHERE name = ?", (name,)).fetchone():
                raise CatalogError(f"model {name!r} is already registered in {self.path}")
            cursor = conn.execute(
                "INSERT INTO models (name, method, path, created_at, metrics_json) VALUES (?, ?, ?, ?, ?)",
                (name, method, str(path), time.time(), _metrics_json(name, metrics)),
            )
            return int(cursor.lastrowid or 0)

    def models(self) -> list[ModelRecord]:
        """All registered models, oldest first."""
        return [model_record(r) for r in self._read("listing models", f"{_MODEL_SELECT} ORDER BY id")]

    def model(self, name: str) -> ModelRecord:
        """A model by name; raises :class:`NotFound`."""
        rows = self._read("reading model", f"{_MODEL_SELECT} WHERE name = ?", (name,))
        if not rows:
            raise NotFound(f"model {name!r} is not registered in {self.path}")
        return model_record(rows[0])

    def active_model(self) -> ModelRecord | None:
        """The model searches use, or None."""
        rows = self._read("reading active model", f"{_MODEL_SELECT} WHERE is_active = 1")
        return model_record(rows[0]) if rows else None

    def set_active_model(self, name: str | None) -> None:
        """Make ``name`` the one active model (None: no model). Deletes nothing."""
        with self.transaction(f"activating model {name!r}") as conn:
            conn.execute("UPDATE models SET is_active = 0 WHERE is_active = 1")
            if name is not None:
                if conn.execute("UPDATE models SET is_active = 1 WHERE name = ?", (name,)).rowcount == 0:
                    raise NotFound(f"model {name!r} is not registered in {self.path}")

    def rename_model(self, name: str, new_name: str) -> None:
        """Register model ``name`` as ``new_name`` (its embeddings and active state stay with it)."""
        with self.transaction(f"renaming model {name!r}") as conn:
            if conn.execute("SELECT 1 FROM models WHERE name = ?", (new_name,)).fetchone():
                raise CatalogError(f"a model named {new_name!r} is already registered in {self.path}")
            if conn.execute("UPDATE models SET name = ? WHERE name = ?", (new_name, name)).rowcount == 0:
                raise NotFound(f"model {name!r} is not registered in {self.path}")

    def delete_model(self, name: str) -> None:
        """Unregister a model and delete its embeddings (the checkpoint file is the caller's to remove)."""
        with self.transaction(f"deleting model {name!r}") as conn:
            if conn.execute("DELETE FROM models WHERE name = ?", (name,)).rowcount == 0:
                raise NotFound(f"model {name!r} is not registered in {self.path}")

    # -- embeddings ----------------------------------------------------------------------------------------

    def put_embeddings(
        self,
        model_id: int,
        media_ids: Sequence[int],
        vectors: np.ndarray,
        extras: dict[str, np.ndarray] | None = None,
    ) -> None:
        """Store ``vectors`` (N, K, D) float32 and per-item ``extras`` (each (N, ...)) of ``media_ids``.

        One transaction; it replaces whatever the model had for those items (vectors and extras).
        """
        ids = [int(i) for i in media_ids]
        extras = extras or {}
        self._check_embeddings(model_id, ids, vectors, extras)
        vectors = np.ascontiguousarray(vectors, dtype="<f4")
        n, k = vectors.shape[:2]
        with self.transaction(f"storing {n} embeddings of model {model_id}") as conn:
            self._delete_embedding_rows(conn, model_id, ids)
            conn.executemany(
                "INSERT INTO embeddings (media_id, model_id, head, vector) VALUES (?, ?, ?, ?)",
                ((ids[i], model_id, h, vectors[i, h].tobytes()) for i in range(n) for h in range(k)),
            )
            for name, array in extras.items():
                array = np.ascontiguousarray(array)
                dtype, shape = array.dtype.newbyteorder("<").str, json.dumps(array.shape[1:])
                conn.executemany(
                    "INSERT INTO embedding_extras (media_id, model_id, name, dtype, shape_json, data) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        (ids[i], model_id, name, dtype, shape, array[i].astype(dtype).tobytes())
                        for i in range(n)
                    ),
                )

    @staticmethod
    def _check_embeddings(
        model_id: int, ids: list[int], vectors: np.ndarray, extras: dict[str, np.ndarray]
    ) -> None:
        if vectors.ndim != 3 or vectors.dtype != np.float32:
            raise CatalogError(
                f"embeddings of model {model_id} must be float32 (N, K, D), "
                f"got {vectors.dtype} {vectors.shape}"
            )
        if len(ids) != vectors.shape[0] or len(set(ids)) != len(ids):
            raise CatalogError(
                f"model {model_id}: {len(ids)} media ids (unique: {len(set(ids))}) "
                f"for {vectors.shape[0]} vectors"
            )
        for name, array in extras.items():
            if array.shape[:1] != (len(ids),):
                raise CatalogError(
                    f"extra {name!r} of model {model_id} has shape {array.shape}, want ({len(ids)}, ...)"
                )

    @staticmethod
    def _delete_embedding_rows(conn: sqlite3.Connection, model_id: int, ids: Sequence[int] | None) -> None:
        for table in ("embeddings", "embedding_extras"):
            if ids is None:
                conn.execute(f"DELETE FROM {table} WHERE model_id = ?", (model_id,))
            else:
                conn.executemany(
                    f"DELETE FROM {table} WHERE model_id = ? AND media_id = ?", ((model_id, i) for i in ids)
                )

    def get_embeddings(
        self, model_id: int, media_ids: Sequence[int] | None = None
    ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """``(ids, vectors (N, K, D) float32, extras)`` of a model, in ``media_ids`` order when given.

        Requested items the model has no vectors for are left out (compare ``ids``); with none at all the
        vectors have shape (0, 0, 0).
        """
        rows = self._embedding_rows(model_id, media_ids)
        ids, vectors = self._stack_vectors(model_id, rows)
        if media_ids is not None:
            position = {int(m): i for i, m in enumerate(ids)}
            order = np.array([position[int(m)] for m in media_ids if int(m) in position], dtype=np.int64)
            ids, vectors = ids[order], vectors[order]
        return ids, vectors, self._extras(model_id, ids, every_item=media_ids is None)

    def _embedding_rows(self, model_id: int, media_ids: Sequence[int] | None) -> list[tuple[Any, ...]]:
        what = f"reading embeddings of model {model_id}"
        select = "SELECT media_id, head, vector FROM embeddings WHERE model_id = ?"
        if media_ids is None:
            return self._read(what, f"{select} ORDER BY media_id, head", (model_id,))
        wanted = sorted({int(m) for m in media_ids})
        rows = self._read_in(
            what, f"{select} AND media_id IN ({{marks}}) ORDER BY media_id, head", (model_id,), wanted
        )
        return rows

    def _stack_vectors(self, model_id: int, rows: list[tuple[Any, ...]]) -> tuple[np.ndarray, np.ndarray]:
        if not rows:
            return np.zeros(0, dtype=np.int64), np.zeros((0, 0, 0), dtype=np.float32)
        media = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        heads = np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows))
        k = int(heads.max()) + 1
        sizes = {len(r[2]) for r in rows}
        # rows are sorted by (media, head): a well-formed model has heads 0..K-1 for every item
        if (
            len(rows) % k
            or not np.array_equal(heads, np.tile(np.arange(k), len(rows) // k))
            or len(sizes) != 1
        ):
            raise CatalogError(f"embeddings of model {model_id} in {self.path} have uneven heads or sizes")
        vectors = np.frombuffer(b"".join(r[2] for r in rows), dtype="<f4").astype(np.float32)
        return media[::k].copy(), vectors.reshape(len(rows) // k, k, sizes.pop() // 4)

    def _extras(self, model_id: int, ids: np.ndarray, every_item: bool) -> dict[str, np.ndarray]:
        what = f"reading extras of model {model_id}"
        select = "SELECT media_id, name, dtype, shape_json, data FROM embedding_extras WHERE model_id = ?"
        if every_item:  # one scan of the model's rows instead of thousands of IN lists
            rows = self._read(what, select, (model_id,))
        else:
            rows = self._read_in(what, f"{select} AND media_id IN ({{marks}})", (model_id,), ids.tolist())
        by_name: dict[str, dict[int, np.ndarray]] = {}
        for media_id, name, dtype, shape, data in rows:
            array = np.frombuffer(data, dtype=dtype).reshape(json.loads(shape))
            by_name.setdefault(name, {})[media_id] = array
        extras = {}
        for name, items in by_name.items():
            if any(int(i) not in items for i in ids):
                raise CatalogError(
                    f"extra {name!r} of model {model_id} is missing for some items in {self.path}"
                )
            stacked = np.stack([items[int(i)] for i in ids])
            extras[name] = stacked.astype(stacked.dtype.newbyteorder("="))  # stored little-endian
        return extras

    def delete_embeddings(self, model_id: int, media_ids: Sequence[int] | None = None) -> None:
        """Delete a model's vectors and extras (of some items, or all)."""
        ids = None if media_ids is None else [int(i) for i in media_ids]
        with self.transaction(f"deleting embeddings of model {model_id}") as conn:
            self._delete_embedding_rows(conn, model_id, ids)

    def embedded_ids(self, model_id: int) -> set[int]:
        """Ids of the items the model has vectors for."""
        rows = self._read(
            f"listing embedded items of model {model_id}",
            "SELECT DISTINCT media_id FROM embeddings WHERE model_id = ?",
            (model_id,),
        )
        return {r[0] for r in rows}
