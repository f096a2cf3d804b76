"""The multi-vector index's files: :meth:`IndexFiles.save` and :meth:`IndexFiles.load`, mixed into
:class:`engine.search.vectorindex.index.MultiVectorIndex`.

Files (:meth:`MultiVectorIndex.save`): ``index.json`` (format version, model id, dims, parameters, which
data folder is current) plus a data folder with ``ids.npy``, ``slots.npy``, ``vectors.npy`` and the faiss
files. A save writes a new data folder, then replaces ``index.json`` atomically, then deletes the old folder,
so a crash leaves the previous index readable. Nothing is pickled.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal, Self

import numpy as np

from engine.files import atomic_write_text
from engine.search.vectorindex.ann import Ann, AnnParams, read_ann
from engine.search.vectorindex.scoring import IndexFileError, ModelMismatchError
from engine.search.vectorindex.stored import FORMAT, FORMAT_VERSION, Data, load_array, read_header

INDEX_FILE = "index.json"


class IndexFiles:
    """Saving and loading of :class:`~engine.search.vectorindex.index.MultiVectorIndex`, which owns the state
    below."""

    dim: int
    heads: int
    metric: str
    model_id: str
    storage: Literal["float32", "float16"]
    params: AnnParams
    _write_lock: threading.RLock
    _data: Data
    _ann: Ann | None
    _row_of_id: dict[int, int]

    def _compact(self) -> None:
        raise NotImplementedError  # the index drops its removed rows before a save

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
    def _write_data(staging: Path, data: Data, ann: Ann | None) -> None:
        np.save(staging / "ids.npy", data.ids[:data.size])
        np.save(staging / "slots.npy", data.slots[:data.size])
        np.save(staging / "vectors.npy", data.vectors[:data.size])
        if ann is not None:
            ann.write(staging)

    def _header(self, name: str, data: Data, ann: Ann | None) -> dict[str, Any]:
        return {"format": FORMAT, "version": FORMAT_VERSION, "model_id": self.model_id, "dim": self.dim,
                "heads": self.heads, "metric": self.metric,
                "storage": self.storage,
                "count": data.count, "data": name,
                "next_slot": len(data.row_of_slot), "params": asdict(self.params),
                "ann": ann.describe() if ann else None}

    @classmethod
    def load(cls, path: str | os.PathLike[str], model_id: str | None = None,
             params: AnnParams | None = None) -> Self:
        """Read an index saved by :meth:`save`.

        ``model_id``, when given, must equal the saved one (:class:`ModelMismatchError` otherwise: an index
        is only valid for the model version that made its vectors). ``params`` overrides the saved
        search parameters (the saved faiss index is kept).
        """
        folder = Path(path)
        header = read_header(folder / INDEX_FILE)
        if model_id is not None and header["model_id"] != model_id:
            raise ModelMismatchError(f"{folder / INDEX_FILE}: index built for model {header['model_id']!r}, "
                                     f"not {model_id!r}; rebuild it")
        storage = header.get("storage", "float32")  # files written before float16 storage existed
        if storage not in ("float32", "float16"):
            raise IndexFileError(f"{folder / INDEX_FILE}: unknown vector storage {storage!r}")
        index = cls(header["dim"], header["heads"], header["metric"], header["model_id"],
                    params or AnnParams.from_dict(header["params"]),
                    storage=storage)
        index._restore(folder / header["data"], header)
        return index

    def _restore(self, data_dir: Path, header: dict[str, Any]) -> None:
        ids = load_array(data_dir / "ids.npy", np.int64, (header["count"],))
        slots = load_array(data_dir / "slots.npy", np.int64, (header["count"],))
        vectors = load_array(data_dir / "vectors.npy", np.dtype(self.storage).type,
                              (header["count"], self.heads, self.dim))
        if len(slots) and (slots.min() < 0 or slots.max() >= header["next_slot"]):
            raise IndexFileError(f"{data_dir / 'slots.npy'}: slot numbers outside 0..{header['next_slot']}")
        row_of_slot = np.full(header["next_slot"], -1, np.int64)
        row_of_slot[slots] = np.arange(len(slots))
        count = len(ids)
        self._data = Data(ids, slots, vectors, np.ones(count, bool), row_of_slot, count, count)
        self._row_of_id = dict(zip(ids.tolist(), range(len(ids)), strict=True))
        if header["ann"] is not None:
            self._ann = read_ann(data_dir, header["ann"], self.dim)
