"""The format of a trained model's export folder: the contract between the trainer that writes it
(``trainer/methods/export.py``) and the engine that reads it (:mod:`engine.search.modelrunner`).

Kept in its own module, with only the standard library, so the trainer reads the same constants without loading
ONNX Runtime, and the model list can say what a model is without opening it.
"""

from __future__ import annotations

import json
from pathlib import Path

MANIFEST_FILE = "manifest.json"
MANIFEST_VERSION = 1
MODALITIES = ("image", "video", "text")
# a manifest's "similarity": how the engine ranks items with the export (RetrievalModel.similarity_kind)
SIMILARITY_KINDS = ("cosine", "max-cosine", "network")
# a probabilistic (PCME) manifest's "match_distance": what its match probability is computed from
MATCH_DISTANCES = ("sampled", "csd")


def model_export_dir(path: Path) -> Path:
    """The folder holding ``manifest.json``: the model directory itself or its ``onnx/`` sub-folder."""
    path = Path(path)
    return path / "onnx" if (path / "onnx" / MANIFEST_FILE).is_file() else path


def is_probabilistic(model_dir: Path | None) -> bool:
    """Whether the model in ``model_dir`` scores by match probability (PCME), as its manifest says.

    The manifest's ``"probabilistic"`` flag decides; a manifest written without it is read from what only a
    probabilistic export carries (its match calibration, ``match_scale``). A folder without a readable manifest
    is not probabilistic (it cannot search at all).
    """
    if model_dir is None:
        return False
    try:
        manifest = json.loads((model_export_dir(model_dir) / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(manifest, dict):
        return False
    flag = manifest.get("probabilistic")
    return flag if isinstance(flag, bool) else "match_scale" in manifest
