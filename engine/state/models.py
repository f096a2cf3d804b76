"""The model list of an opened library, which the workspace's ``Models`` part (:mod:`engine.workspace.models`) and
the retraining job (:mod:`engine.loop.retrain`) both read and write: the list (zero-shot ranking first),
registering a model folder, making one the library's active model, and the shipped starter offered to a new
library. Activating here only records the choice; switching to a model with the library re-embedded is
``Workspace.models.switch``, the one way a new model becomes active for the user."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from engine.search import calibration
from engine.search.modelrunner import ModelRunner
from engine.search.starter import STARTER_NAME, shipped_starter, starter_enabled
from engine.search.starter import offer_starter as offer
from engine.state.librarystate import LibraryState
from engine.trainercontract.exportformat import is_probabilistic, model_export_dir
from engine.trainercontract.runfolder import read_config_method, read_metrics
from engine.types import ZERO_SHOT, EvidenceKind, ModelInfo


def model_infos(state: LibraryState) -> list[ModelInfo]:
    """Zero-shot ranking first, then the registered models; each says whether its text searches give a match
    probability (the calibration the ranking uses with it, else a probabilistic model's own)."""
    records = state.catalog.models()
    active = any(r.is_active for r in records)
    zero_shot = calibration.load(EvidenceKind.ZERO_SHOT) is not None
    kind = EvidenceKind.MODEL if EvidenceKind.MODEL in state.evidence else EvidenceKind.ZERO_SHOT
    trained = calibration.load(kind) is not None
    waiting = state.offering or not state.encoders.ready()
    awaited = state.awaited_starter if not active and waiting else None
    infos = [ModelInfo(ZERO_SHOT, ZERO_SHOT, None, {}, not active and awaited is None, gives_probability=zero_shot)]
    for r in records:
        pcme = is_probabilistic(r.path)
        infos.append(ModelInfo(r.name, r.method, r.path, r.metrics, r.is_active, pcme, trained or pcme))
    if awaited is not None:  # a fresh home: the starter is registered and searches once the assets are prepared
        infos.append(replace(awaited, gives_probability=trained))
    return infos


def register_model(state: LibraryState, model_dir: Path, name: str | None = None) -> str:
    """Register a model directory written by ``polyseek train --out`` (its ONNX export must be there)."""
    model_dir = Path(model_dir).resolve()
    runner = ModelRunner.load(model_export_dir(model_dir), backbone_id=state.encoders.backbone.id)
    if runner.manifest.backbone is not None:
        state.encoders.for_model(runner)  # its backbone graph must open, or registering fails here
    metrics = read_metrics(model_dir)
    name = name or model_dir.name
    existing = {m.name: m for m in state.catalog.models()}
    if name in existing and Path(existing[name].path) != model_dir:
        raise ValueError(f"a different model is already registered as {name!r}")
    if name not in existing:
        state.catalog.register_model(name, runner.method, model_dir, metrics.as_dict() if metrics else {})
    return name


def registered_name(state: LibraryState, name: str | None) -> str | None:
    """The registered name of a model name or directory (registering a directory); None for zero-shot."""
    if name in (None, ZERO_SHOT):
        return None
    if name not in {m.name for m in state.catalog.models()}:
        candidate = Path(str(name)).expanduser()
        if not candidate.is_dir():
            raise LookupError(f"no model named {name!r} (see `polyseek models`) and no such model directory")
        name = register_model(state, candidate)
    return name


def set_active_model(state: LibraryState, name: str | None) -> None:
    """Record a registered model (by name, or a model directory registered on the way), or zero-shot, as the
    library's active model; what was built from the old one is dropped."""
    state.catalog.set_active_model(registered_name(state, name))
    state.invalidate()


def offer_starter(state: LibraryState) -> None:
    """Offer the shipped starter model (:mod:`engine.search.starter`) when the library has none yet. On a fresh
    home the pretrained assets are prepared by the first index run, after opening had to skip the offer (it checks
    the starter against the backbone); the index run calls this again once they are there (issue #32)."""
    state.offering = True  # registering checks it against the backbone (seconds): it stays listed meanwhile
    try:
        name = offer(state.catalog, lambda folder, as_name: register_model(state, folder, as_name),
                     lambda as_name: set_active_model(state, as_name),  # at once where listed
                     state.invalidate)  # reopened with what was added (its companions' graphs)
    finally:
        state.offering = False
    waiting = (name is None and not state.encoders.ready() and starter_enabled()
               and state.catalog.active_model() is None)
    shipped = shipped_starter() if waiting else None
    # model_infos() lists it as the active model meanwhile; its config is read once here, not at every listing
    state.awaited_starter = (ModelInfo(STARTER_NAME, read_config_method(shipped), shipped, {}, active=True)
                             if shipped is not None else None)

