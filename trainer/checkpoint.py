"""Writing and reading a training run's output folder, so that a crash never leaves a broken one.

The folder's layout and its state file's format are the engine's contract with the trainer
(:mod:`engine.trainercontract.runfolder`: ``config.json``, ``model.safetensors``, ``trainer_state.json``,
``last-<step>.safetensors`` / ``optimizer-<step>.pt``, ``metrics.json``, ``onnx/``). This module writes them: the
resume files carry the global step in their names, so a new checkpoint never overwrites the one
``trainer_state.json`` still names; older ones are deleted after the state file points at the new ones.
``optimizer-*.pt`` holds tensors, numbers and strings only and is read with ``torch.load(weights_only=True)``.

Every file is written to a temporary name in the same folder and moved into place with ``os.replace``.
"""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors
from torch import nn

from engine.files import atomic_write_bytes, atomic_write_text
from engine.trainercontract.runfolder import (  # noqa: F401 - the trainer's modules read the names here
    CONFIG_FILE,
    METRICS_FILE,
    ONNX_DIR,
    STATE_FILE,
    WEIGHTS_FILE,
    CheckpointError,
    TrainerState,
    load_state,
)
from trainer.methods import ConfigError, MethodConfig, RetrievalModel, build_model, config_from_json

# ------------------------------------------------------------------------------------------ atomic files


def write_json(path: Path, value: Any) -> None:
    """Indented JSON, atomically; NaN and infinities are refused (they are not JSON)."""
    atomic_write_text(path, json.dumps(value, indent=2, sort_keys=True, allow_nan=False) + "\n")


# ------------------------------------------------------------------------------------------ weights


def weights_bytes(model: nn.Module, metadata: dict[str, str] | None = None) -> bytes:
    """The model's state dict as safetensors bytes (CPU, contiguous copies)."""
    return tensors_bytes(_unwrap(model).state_dict(), metadata)


def tensors_bytes(tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> bytes:
    """Named tensors as safetensors bytes (CPU, contiguous copies)."""
    return save_safetensors({k: v.detach().to("cpu").contiguous().clone() for k, v in tensors.items()},
                            metadata=metadata)


def safetensors_metadata(path: Path) -> dict[str, str]:
    """The metadata of a safetensors file's header; :class:`CheckpointError` when it cannot be read."""
    try:
        with safe_open(str(path), framework="pt") as f:
            return dict(f.metadata() or {})
    except Exception as exc:  # OSError, or safetensors' own error type for a damaged header
        raise CheckpointError(f"{path}: cannot read weights: {exc}") from exc


def companion_weights(model_dir: Path, key: str, prefix: str, what: str) -> tuple[str, Path] | None:
    """(id, file) of the weights file ``model.safetensors``'s metadata ``key`` names in ``model_dir`` (a fine-tuned
    backbone or text encoder saved beside the head as ``<prefix><id>.safetensors``), or None when it names none;
    :class:`CheckpointError` when it names a file that is missing."""
    weights = Path(model_dir) / WEIGHTS_FILE
    found = safetensors_metadata(weights).get(key)
    if not found:
        return None
    path = Path(model_dir) / f"{prefix}{found}.safetensors"
    if not path.is_file():
        raise CheckpointError(f"{weights}: names {what} {found!r} but {path.name} is missing")
    return found, path


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file (CPU); :class:`CheckpointError` when it cannot be read."""
    try:
        return load_safetensors(path.read_bytes())
    except (OSError, SafetensorError) as exc:
        raise CheckpointError(f"{path}: cannot read weights: {exc}") from exc


def save_weights(path: Path, model: nn.Module, metadata: dict[str, str] | None = None) -> None:
    """Write the model's weights to ``path`` atomically."""
    atomic_write_bytes(path, weights_bytes(model, metadata))


# Metadata of a weights file stored without the parameters of a branch that learnt from nothing (a shipped model's
# video encoder when its clips trained through the image side): the parameter-name prefixes left out, comma-separated.
UNTRAINED_KEY = "untrained"


def untrained_prefixes(tensors: dict[str, Any], trained_on: dict[str, int]) -> tuple[str, ...]:
    """The parameter-name prefixes of the encoder branches ``trained_on`` (an export manifest's counts) says learnt
    from nothing: today the video branch (``globals.video.``, ``video_pie.``) when no clip trained through it."""
    if trained_on.get("video", 0):
        return ()
    return tuple(sorted({".".join(k.split(".")[:i + 1]) + "." for k in tensors
                         for i, part in enumerate(k.split(".")[:2]) if part == "video" or part.startswith("video_")}))


def drop_untrained(tensors: dict[str, Any], prefixes: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, str]]:
    """``tensors`` without those under ``prefixes``, and the metadata that lets :func:`load_weights` accept the file
    (a shipped model half the size: the starter's PVSE companion's video side is 15 of its 24 MB)."""
    kept = {k: v for k, v in tensors.items() if not k.startswith(prefixes)}
    return kept, ({UNTRAINED_KEY: ",".join(prefixes)} if prefixes else {})


def load_weights(path: Path, model: nn.Module) -> None:
    """Load safetensors weights into ``model`` (strict: every tensor must fit). A file stored without an untrained
    branch (:data:`UNTRAINED_KEY`) leaves those parameters as the model built them: they never learnt anything,
    and nothing ranks with them."""
    tensors = read_safetensors(path)
    untrained = tuple(p for p in safetensors_metadata(path).get(UNTRAINED_KEY, "").split(",") if p)
    target = _unwrap(model)
    device = next(iter(target.state_dict().values())).device if target.state_dict() else torch.device("cpu")
    if untrained:
        left = {k: v for k, v in target.state_dict().items() if k.startswith(untrained) and k not in tensors}
        tensors = {**left, **tensors}
    try:
        target.load_state_dict({k: v.to(device) for k, v in tensors.items()}, strict=True)
    except RuntimeError as exc:
        raise CheckpointError(f"{path}: weights do not fit the model: {exc}") from exc


def _unwrap(model: nn.Module) -> nn.Module:
    """The module inside a DistributedDataParallel wrapper (or the module itself)."""
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


# ------------------------------------------------------------------------------------------ model folders


def save_config(out: Path, config: MethodConfig) -> None:
    """``config.json`` of a model folder."""
    atomic_write_text(out / CONFIG_FILE, config.to_json() + "\n")


def load_config(model_dir: Path) -> MethodConfig:
    """The resolved config of a model folder."""
    path = Path(model_dir) / CONFIG_FILE
    try:
        return config_from_json(path.read_text())
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read the model config: {exc}") from exc
    except ConfigError as exc:
        raise CheckpointError(f"{path}: {exc}") from exc


def load_model(model_dir: Path, device: torch.device | str = "cpu") -> RetrievalModel:
    """The best model of a training folder (``config.json`` + ``model.safetensors``), in eval mode."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise CheckpointError(f"{model_dir}: no such model folder")
    model = build_model(load_config(model_dir)).to(device)
    weights = model_dir / WEIGHTS_FILE
    if not weights.is_file():
        raise CheckpointError(f"{weights}: missing (has this model finished an epoch?)")
    load_weights(weights, model)
    return model.eval()


# ------------------------------------------------------------------------------------------ resume


def save_checkpoint(out: Path, model: nn.Module, training: dict[str, Any], state: TrainerState) -> None:
    """Write a resumable checkpoint: versioned weights and optimizer files, then ``trainer_state.json``
    naming them (the commit point), then delete the files of older checkpoints."""
    tag = f"{state.global_step:08d}-{state.step:06d}"
    weights, optimizer = f"last-{tag}.safetensors", f"optimizer-{tag}.pt"
    save_weights(out / weights, model, {"global_step": str(state.global_step)})
    buffer = io.BytesIO()
    torch.save(training, buffer)
    atomic_write_bytes(out / optimizer, buffer.getvalue())
    state.resume = {"weights": weights, "optimizer": optimizer}
    atomic_write_text(out / STATE_FILE, state.to_json() + "\n")
    for stale in [*out.glob("last-*.safetensors"), *out.glob("optimizer-*.pt")]:
        if stale.name not in (weights, optimizer):
            stale.unlink(missing_ok=True)


def remove_temporaries(out: Path) -> int:
    """Delete the temporary files a killed writer left behind in ``out``; returns how many."""
    stale = [p for p in Path(out).glob(".*.tmp") if p.is_file()]
    for path in stale:
        path.unlink(missing_ok=True)
    return len(stale)


def load_checkpoint(out: Path, model: nn.Module) -> tuple[TrainerState, dict[str, Any]]:
    """Load the resumable checkpoint of ``out`` into ``model``; returns the state and the optimizer record
    (read with ``weights_only=True``)."""
    state = load_state(out)
    if state is None or not state.resume:
        raise CheckpointError(f"{Path(out) / STATE_FILE}: no resumable checkpoint in {out}")
    load_weights(Path(out) / state.resume["weights"], model)
    path = Path(out) / state.resume["optimizer"]
    try:
        training = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as exc:
        raise CheckpointError(f"{path}: cannot read the optimizer state: {exc}") from exc
    return state, training
