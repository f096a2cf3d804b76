"""The backbone runs a large batch in bounded runs (ONNX Runtime's arena keeps the largest run's memory)."""

from __future__ import annotations

import numpy as np

from engine.features import backbone as bb


class RecordingSession:
    """Stands in for the ONNX session: outputs derived from each image, and the run sizes it saw."""

    def __init__(self) -> None:
        self.runs: list[int] = []

    def run(self, _names, feeds):
        x = feeds["images"]
        assert x.dtype == np.float32 and x.shape[1] == 3  # NCHW float, as the graph wants
        self.runs.append(len(x))
        n = len(x)
        mean = x.reshape(n, -1).mean(axis=1)
        return [np.repeat(mean[:, None, None], 49, 1), mean[:, None], mean[:, None], mean[:, None],
                mean[:, None].astype(np.int64), np.zeros((n, 49, 3), np.int64), np.zeros((n, 49, 3))]


def test_a_large_batch_runs_in_chunks_and_keeps_its_order() -> None:
    backbone = bb.Backbone.__new__(bb.Backbone)
    backbone.image_size, backbone._session = 4, RecordingSession()
    images = np.arange(40, dtype=np.uint8)[:, None, None, None] * np.ones((40, 4, 4, 3), np.uint8)
    out = backbone(images)
    assert max(backbone._session.runs) <= bb.RUN_CHUNK and sum(backbone._session.runs) == 40
    assert out.pooled[:, 0].tolist() == list(range(40))  # every image's output, in input order
    assert out.local.shape == (40, 49, 1) and out.region_top_ids.shape == (40, 49, 3)
