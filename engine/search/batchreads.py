"""One batch of items' stored features, read and stacked once for every model that embeds the batch.

Indexing embeds each new item with the active model and the models searched beside it (its companion, that one's
own; :meth:`engine.search.trained.TrainedSearch.sync`). The two companions both read a photo's 49 local features:
read from the store and converted to float32 once per model, that cost as much as their int8 graphs (0.2 ms read
+ 0.2-0.8 ms stacking a photo, each, against 0.2-0.3 ms of graph). :class:`BatchReads` keeps what the first model
read for the next, and decodes the local features as float32 straight into one buffer (the store's float16 records
were widened and stacked again for the graphs: ~0.6 ms a photo).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engine.features.featurestore import FeatureStore


class BatchReads:
    """Feature records and float32 input stacks of one batch, shared by the models embedding it."""

    def __init__(self, features: FeatureStore, scratch: dict | None = None) -> None:
        self.features = features
        self._scratch = {} if scratch is None else scratch  # float32 buffers the batches of one sync reuse
        self._records: list[tuple[str, frozenset, frozenset, dict]] = []
        self._stacks: dict[tuple, list] = {}  # (backbone, hashes) -> [rows, pooled, local or None]

    def records(self, hashes: Sequence[str], backbone: str, fields: tuple[str, ...]) -> dict:
        """:meth:`FeatureStore.get_many`, answered from an earlier read of these items with at least these fields."""
        wanted, asked = frozenset(hashes), frozenset(fields)
        for read_backbone, read_hashes, read_fields, found in self._records:
            if read_backbone == backbone and wanted <= read_hashes and asked <= read_fields:
                return found
        found = self.features.get_many(list(hashes), backbone, fields)
        self._records.append((backbone, wanted, asked, found))
        return found

    def photo_inputs(self, hashes: list[str], backbone: str,
                     wants_local: bool) -> tuple[list[int], np.ndarray, np.ndarray | None]:
        """``(rows, pooled (N, C), local (N, 49, C) or None)`` float32 of the photos ``hashes`` that have features
        (``rows``: their places in ``hashes``), a photo stored without local features standing its pooled one in
        for every region. The local features are decoded straight into a buffer the next batch reuses (read as
        float16 records, widened, then stacked, they cost ~0.6 ms a photo; a fresh 64 MB array a batch, its page
        faults again)."""
        key = (backbone, tuple(hashes))
        if key not in self._stacks:
            records = self.records(hashes, backbone, ("global",))
            rows = [i for i, h in enumerate(hashes) if h in records and records[h].global_ is not None]
            pooled = np.stack([records[hashes[i]].global_ for i in rows]).astype(np.float32) if rows else None
            self._stacks[key] = [rows, pooled, None]
        stack = self._stacks[key]
        rows, pooled, local = stack
        if wants_local and rows and local is None:
            local = stack[2] = self._buffer((len(rows), 49, pooled.shape[1]))
            written = self.features.locals_into([hashes[i] for i in rows], backbone, local)
            for row in np.flatnonzero(~written):
                local[row] = pooled[row]
        return rows, pooled, local if wants_local else None

    def _buffer(self, shape: tuple[int, ...]) -> np.ndarray:
        size = int(np.prod(shape))
        held = self._scratch.get("local")
        if held is None or held.size < size:
            held = self._scratch["local"] = np.empty(size, np.float32)
        return held[:size].reshape(shape)
