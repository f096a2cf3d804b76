"""ONNX Runtime sessions with the best available execution provider.

``onnxruntime-gpu`` is the only ONNX Runtime installed; where CUDA is absent it runs on the CPU, but only if the
providers are named explicitly, so every session in Polyseek is opened here.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import onnxruntime as ort

log = logging.getLogger(__name__)

_PREFERRED = ("CUDAExecutionProvider", "CPUExecutionProvider")


def providers() -> list[str]:
    """CUDA first where ONNX Runtime can use it (and ``POLYSEEK_DEVICE`` is not ``cpu``), then the CPU."""
    available = set(ort.get_available_providers())
    wanted = [p for p in _PREFERRED if p in available]
    # onnxruntime-gpu lists CUDA even on machines without a GPU, then fails noisily when a session opens.
    if not Path("/dev/nvidiactl").exists() or os.environ.get("POLYSEEK_DEVICE", "auto") == "cpu":
        wanted = [p for p in wanted if p == "CPUExecutionProvider"]
    return wanted or ["CPUExecutionProvider"]


def open_session(path: Path, threads: int | None = None) -> ort.InferenceSession:
    """Open an inference session; ``threads`` caps intra-op threads (default: all cores)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads:
        options.intra_op_num_threads = threads
    options.log_severity_level = 3
    # idle intra-op threads sleep instead of spinning: spinning kept both cores busy between batches (the
    # decode threads then waited for a core) and burns a desktop user's CPU while the app is idle
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(str(path), sess_options=options, providers=providers())
    log.debug("opened %s on %s", path.name, session.get_providers())
    return session
