"""Fixtures shared by the unit tests: the training loop's (tests/unit/test_trainer_*.py) and an eight-photo library
searched without a model (the ranking's: test_evidence.py, test_calibration.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.features.encoders import Encoders
from engine.features.featurestore import FeatureStore
from engine.workspace import Workspace
from tests.mediagen import make_jpeg
from tests.synthetic import make_toy_photo_folder
from trainer.data import FeatureSource


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory, assets_dir: Path):
    """A toy photo folder (train/dev) and a feature source whose store and text cache the module shares."""
    root = tmp_path_factory.mktemp("trainer")
    folder = root / "toy"
    make_toy_photo_folder(folder, 16, seed=5, dev_fraction=0.25)
    store = FeatureStore(root / "features.sqlite")
    source = FeatureSource(store, Encoders(assets_dir), root / "text-cache", assets_dir)
    yield folder, source, assets_dir
    store.close()


@pytest.fixture
def library(assets_dir: Path, tmp_path: Path, monkeypatch) -> Workspace:
    """Eight plain-coloured photos, zero-shot ranking (no starter)."""
    monkeypatch.setenv("POLYSEEK_STARTER", "off")
    folder = tmp_path / "media"
    folder.mkdir()
    colours = [(200, 30, 30), (30, 200, 30), (30, 30, 200), (220, 220, 220), (20, 20, 20), (250, 200, 0),
               (200, 0, 200), (0, 200, 200)]
    for i, colour in enumerate(colours):
        make_jpeg(folder / f"photo{i}.jpg", (48, 40), colour)
    service = Workspace.open("words", assets_dir)
    list(service.library.index([folder]))
    yield service
    service.close()
