"""Fixtures shared by the unit tests of the training loop (tests/unit/test_trainer_*.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.features.encoders import Encoders
from engine.features.featurestore import FeatureStore
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
