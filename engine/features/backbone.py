"""The pretrained image backbone (EfficientNet-Lite0 on ONNX Runtime).

Outputs per image (see ``trainer.prepare``): 49 local features (7x7 grid, row-major, 1280-d), their mean, the
ImageNet softmax, and the regional semantics reduced in the graph (per class its best region and probability, per
region its top-3 classes). Images go in as uint8 RGB (N, 224, 224, 3).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.features.onnx import open_session
from engine.paths import assets_dir


class AssetsMissing(RuntimeError):
    """The pretrained assets were not prepared (run ``polyseek prepare``)."""


def require_assets(root: Path | None = None) -> Path:
    root = root or assets_dir()
    if not (root / "manifest.json").is_file():
        raise AssetsMissing(f"pretrained assets are missing in {root}: run `polyseek prepare` first")
    return root


@dataclass(frozen=True, slots=True)
class BackboneOutput:
    local: np.ndarray  # (N, 49, 1280) float32
    pooled: np.ndarray  # (N, 1280)
    probs: np.ndarray  # (N, 1000) ImageNet softmax of the whole image
    region_max: np.ndarray  # (N, 1000) each class's best probability over the 49 regions
    region_best: np.ndarray  # (N, 1000) int64, the region holding it
    region_top_ids: np.ndarray  # (N, 49, 3) int64, each region's most probable classes
    region_top_probs: np.ndarray  # (N, 49, 3)


# Images per session run. ONNX Runtime's CPU arena keeps the largest run's activations for the life of the
# session: one run of a 32-item batch of GIFs (8 frames each: 256 images) left the GUI process holding ~1.6 GB
# after indexing 90 items. Measured on 128 images here: one run 36 img/s and 1.47 GB resident; runs of 32
# 46 img/s, 0.58 GB; runs of 16 51 img/s, 0.37 GB.
RUN_CHUNK = 16


class Backbone:
    """EfficientNet-Lite0 feature extractor; thread-safe (ONNX Runtime sessions are).

    By default the stock ImageNet one of the prepared assets; ``graph`` and ``meta`` give another with the same
    inputs and outputs instead (a model's fine-tuned backbone, see ``trainer/finetune.py``), whose ``meta["id"]``
    keys its features in the feature store.
    """

    def __init__(self, root: Path | None = None, threads: int | None = None, *, graph: Path | None = None,
                 meta: dict | None = None) -> None:
        if graph is None or meta is None:
            folder = require_assets(root) / "backbone"
            meta, graph = json.loads((folder / "backbone.json").read_text()), folder / "efficientnet_lite0.onnx"
        self.meta = meta
        self.id: str = meta["id"]
        self.image_size: int = meta["image_size"]
        self._session = open_session(graph, threads=threads)

    def __call__(self, images: np.ndarray) -> BackboneOutput:
        """Run a batch of uint8 RGB images (N, S, S, 3)."""
        if images.ndim != 4 or images.shape[1:] != (self.image_size, self.image_size, 3):
            raise ValueError(f"expected (N, {self.image_size}, {self.image_size}, 3) images, got {images.shape}")
        chunks = [self._session.run(None, {"images": np.ascontiguousarray(
            images[i:i + RUN_CHUNK].transpose(0, 3, 1, 2), dtype=np.float32)})
            for i in range(0, max(1, len(images)), RUN_CHUNK)]
        return BackboneOutput(*(np.concatenate(parts) for parts in zip(*chunks, strict=True)))


def class_names(root: Path | None = None) -> list[str]:
    """The 1,000 ImageNet class names in logit order."""
    return json.loads((require_assets(root) / "imagenet_classes.json").read_text())
