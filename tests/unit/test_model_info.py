"""Whether a model ranks by match probability comes from its export manifest, also for older model folders; whether
its text searches give one, from the shipped calibration (issue #40)."""

from __future__ import annotations

import json
from pathlib import Path

from engine.trainercontract.exportformat import MANIFEST_FILE, is_probabilistic, model_export_dir
from engine.types import ModelInfo, active_model


def _model(folder: Path, manifest: dict, nested: bool = True) -> Path:
    where = folder / "onnx" if nested else folder
    where.mkdir(parents=True)
    (where / MANIFEST_FILE).write_text(json.dumps(manifest))
    return folder


def test_the_manifest_says_whether_a_model_is_probabilistic(tmp_path: Path) -> None:
    pcme = _model(tmp_path / "pcme", {"method": "pcme", "probabilistic": True, "match_scale": 5.0})
    vse = _model(tmp_path / "vse", {"method": "vse", "probabilistic": False}, nested=False)
    # a method name says nothing: a (hypothetical) deterministic export of a pcme-named method is not probabilistic
    renamed = _model(tmp_path / "renamed", {"method": "pcme", "probabilistic": False})
    assert model_export_dir(pcme) == pcme / "onnx" and model_export_dir(vse) == vse
    assert is_probabilistic(pcme) and not is_probabilistic(vse) and not is_probabilistic(renamed)


def test_older_folders_without_the_flag_and_broken_ones_still_load(tmp_path: Path) -> None:
    old_pcme = _model(tmp_path / "old-pcme", {"method": "pcme", "match_scale": 5.0, "match_shift": 1.0})
    old_vse = _model(tmp_path / "old-vse", {"method": "vse"})
    broken = tmp_path / "broken"
    (broken / "onnx").mkdir(parents=True)
    (broken / "onnx" / MANIFEST_FILE).write_text("{not json")
    assert is_probabilistic(old_pcme) and not is_probabilistic(old_vse)
    assert not is_probabilistic(broken) and not is_probabilistic(tmp_path / "missing") and not is_probabilistic(None)


def test_active_model_reads_the_typed_flag() -> None:
    models = [ModelInfo("zero-shot", "zero-shot", None), ModelInfo("m", "vse", Path("m"), active=True)]
    assert active_model(models) is models[1] and active_model(models[:1]) is None


def test_a_model_gives_a_match_probability_where_the_calibration_ships(assets_dir: Path, monkeypatch) -> None:
    """Issue #40: every model's text searches give a calibrated probability (the GUI offers its cutoff for each);
    without the calibration file only a probabilistic model would, and zero-shot ranking does not."""
    from engine.search import calibration
    from engine.workspace import Workspace

    service = Workspace.open("probabilities", assets_dir)
    try:
        assert [(m.name, m.gives_probability) for m in service.models.all()] == [("zero-shot", True)]
        monkeypatch.setattr(calibration, "load", lambda kind, path=None: None)
        assert [(m.name, m.gives_probability) for m in service.models.all()] == [("zero-shot", False)]
    finally:
        service.close()
