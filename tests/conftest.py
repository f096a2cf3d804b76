"""Test-wide setup: an isolated Polyseek home per test and one prepared copy of the pretrained assets.

The assets (ONNX backbone, MiniLM, GloVe, class embeddings) come from the installed PyPI packages only; they are
prepared once into ``<repo>/.cache/test-assets`` (or ``$POLYSEEK_ASSETS``) and shared by every test run.
"""

from __future__ import annotations

import faulthandler
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATASETS = REPO.parent / "shared" / "datasets"


def _find_assets() -> Path:
    """$POLYSEEK_ASSETS, else the assets the installer prepared (read only), else a repo-local copy."""
    env = os.environ.get("POLYSEEK_ASSETS")
    if env:
        return Path(env)
    from engine.paths import assets_dir

    installed = assets_dir()
    return installed if (installed / "manifest.json").is_file() else REPO / ".cache" / "test-assets"


_ASSETS = _find_assets()  # resolved before any test changes POLYSEEK_HOME

# No test comes near this (the slowest take about a minute on two cores). One that passes it is stuck: every
# thread's stack is printed and the run stops, rather than a hung test holding CI until its own limit.
STUCK_TEST_S = 600


_stderr = sys.__stderr__  # the real one, from pytest_configure (output capture replaces fd 2 during tests)


def pytest_configure(config: pytest.Config) -> None:
    global _stderr
    _stderr = os.fdopen(os.dup(sys.__stderr__.fileno()), "w")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    faulthandler.dump_traceback_later(STUCK_TEST_S, exit=True, file=_stderr)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def _assets_root() -> Path:
    return _ASSETS


@pytest.fixture(scope="session")
def assets_dir() -> Path:
    """The prepared pretrained assets (prepared on first use, about 15 s)."""
    from engine.search.starter import shipped_starter
    from trainer.prepare import is_prepared, prepare
    from trainer.startergraphs import prepare_starter_graphs

    root = _assets_root()
    if not is_prepared(root):
        prepare(root)
    if shipped_starter() is not None:  # the shipped starter's companions' graphs (whatever POLYSEEK_STARTER says)
        prepare_starter_graphs(root, shipped=shipped_starter())
    return root


@pytest.fixture(autouse=True)
def polyseek_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own home (libraries, models, caches, settings, logs); assets are shared."""
    home = tmp_path / "polyseek-home"
    home.mkdir()
    monkeypatch.setenv("POLYSEEK_HOME", str(home))
    monkeypatch.setenv("POLYSEEK_ASSETS", str(_assets_root()))
    # Tests of ranking, indexing and the GUI start from zero-shot ranking; tests of the shipped starter model
    # (tests/unit/test_starter.py) turn the offer back on.
    monkeypatch.setenv("POLYSEEK_STARTER", "off")
    return home


def shared_dataset(name: str) -> Path:
    """A dataset from ../shared/datasets, or skip the test with a clear message where it is absent."""
    path = SHARED_DATASETS / name
    if not path.is_dir():
        pytest.skip(f"../shared/datasets/{name} is absent on this machine (only benchmarks need it)")
    return path
