"""SIGKILL of ``polyseek retrain`` between training-set export, training, registration, activation and re-index
loses nothing (issue #21): after a restart the registry holds no half model, the active model loads, the active
model has embedded exactly the library's present items, every annotation is there as it was, and the next
retrain works.

The kills come at points the test watches for (the trainer's first event, the new model's row, its activation)
and at seeded random delays. The whole process group is killed, the trainer with the app, as a crash or a power
cut would."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.search.modelrunner import ModelRunner
from engine.search.trained import model_export_dir
from engine.workspace import Workspace
from tests.synthetic import make_toy_photo_folder
from tests.unit.test_annotations_survive import annotations

LIBRARY = "kills"
N_ITEMS = 16
N_ANNOTATED = 10
RETRAIN = ("retrain", "--library", LIBRARY, "--holdout", "0.25", "--epochs", "1", "--preset", "test",
           "--batch-size", "4", "--device", "cpu", "--always-activate", "--json")  # each new version goes live


def env(home: Path, assets: Path) -> dict[str, str]:
    return {**os.environ, "POLYSEEK_HOME": str(home), "POLYSEEK_ASSETS": str(assets), "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1"}


@pytest.fixture
def library(tmp_path: Path, polyseek_home: Path, assets_dir: Path) -> dict:
    """Toy photos, ten annotated (captions, an accepted and a rejected pair), one annotated and one plain photo
    deleted from disk (kept as missing, with the annotation)."""
    toy = make_toy_photo_folder(tmp_path / "toy", N_ITEMS, seed=11)
    service = Workspace.open(LIBRARY, assets_dir)
    try:
        list(service.library.index([toy.media_dir]))
        by_path = {m.path.resolve(): m.id for m in service.state.catalog.iter_media()}
        items = toy.item_captions()
        for index, (item, texts) in enumerate(items[:N_ANNOTATED]):
            media_id = by_path[item.path.resolve()]
            service.annotations.add_caption(media_id, texts[0])
            if index == 0:
                service.annotations.accept_pair(texts[1], media_id)
                service.annotations.reject_pair("a picture of something else entirely", media_id)
        items[0][0].path.unlink()  # annotated, then deleted
        items[-1][0].path.unlink()  # never annotated, deleted
        list(service.models.reindex())
        assert service.library.counts()["missing"] == 2
        before = annotations(service.state.catalog)
    finally:
        service.close()
    return {"home": polyseek_home, "assets": assets_dir, "before": before}


def retrain_killed(lib: dict, when: Callable[[subprocess.Popen, list[str], Path], bool], limit_s: float = 240) -> str:
    """Run ``polyseek retrain`` and SIGKILL its process group as soon as ``when(process, stdout lines,
    catalog)`` holds; returns 'killed' or, when it finished first, 'finished'."""
    process = subprocess.Popen([sys.executable, "-m", "engine.cli", *RETRAIN], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True, env=env(lib["home"], lib["assets"]),
                               start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout or ()), daemon=True)
    reader.start()
    catalog = lib["home"] / "libraries" / LIBRARY / "catalog.sqlite"
    deadline = time.monotonic() + limit_s
    try:
        while process.poll() is None:
            if when(process, lines, catalog):
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                return "killed"
            assert time.monotonic() < deadline, "the retrain took too long to reach the kill point"
            time.sleep(0.02)
        return "finished"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        reader.join(5)


def models_in(catalog: Path) -> list[tuple[str, int]]:
    try:
        with sqlite3.connect(f"file:{catalog}?mode=ro", uri=True, timeout=5) as conn:
            return conn.execute("SELECT name, is_active FROM models ORDER BY id").fetchall()
    except sqlite3.Error:
        return []


def check_library(lib: dict) -> str | None:
    """The state after a restart; returns the active model's name."""
    service = Workspace.open(LIBRARY, lib["assets"])
    try:
        assert service.state.catalog.integrity_ok()
        assert annotations(service.state.catalog) == lib["before"]
        for record in service.state.catalog.models():  # no half model: every registered one opens
            ModelRunner.load(model_export_dir(record.path), backbone_id=service.state.encoders.backbone.id)
        list(service.models.reindex())  # what the app's re-index does on a restart
        assert service.search.text("a large green triangle", top=3) is not None  # the active model loads
        active = service.state.catalog.active_model()
        present = {m.id for m in service.state.catalog.iter_media("ok")}
        assert len(present) == N_ITEMS - 2
        if active is not None:
            assert service.state.catalog.embedded_ids(active.id) == present  # the missing items have no vectors
            trained = service.models.active_trained()
            assert trained is not None and set(trained.index.ids().tolist()) == present
        assert annotations(service.state.catalog) == lib["before"]
        return active.name if active is not None else None
    finally:
        service.close()


def test_kills_during_the_retrain_loop_lose_nothing_and_the_next_retrain_works(library):
    lib = library
    first = subprocess.run([sys.executable, "-m", "engine.cli", *RETRAIN], capture_output=True, text=True,
                           env=env(lib["home"], lib["assets"]), timeout=300)
    assert first.returncode == 0, first.stderr
    v1 = check_library(lib)
    assert v1 is not None

    def first_trainer_event(_p, lines, _c):
        return bool(lines)

    def registered(_p, _lines, catalog):
        return len(models_in(catalog)) > n_models

    def activated(_p, _lines, catalog):
        rows = models_in(catalog)
        return len(rows) > n_models and rows[-1][1] == 1

    rng = random.Random(21)
    outcomes = []
    for when in (first_trainer_event, registered, activated, "random", "random"):
        n_models = len(models_in(lib["home"] / "libraries" / LIBRARY / "catalog.sqlite"))
        if when == "random":
            start, delay = time.monotonic(), rng.uniform(0.5, 12.0)
            outcome = retrain_killed(lib, lambda *_a: time.monotonic() - start > delay)  # noqa: B023
        else:
            outcome = retrain_killed(lib, when)
        outcomes.append(outcome)
        active = check_library(lib)
        assert active is not None  # a model is always active: the old one or a complete new one
    assert outcomes[:3] == ["killed"] * 3, outcomes  # the watched points are always reached before the end
    print("kill outcomes:", outcomes)

    last = subprocess.run([sys.executable, "-m", "engine.cli", *RETRAIN], capture_output=True, text=True,
                          env=env(lib["home"], lib["assets"]), timeout=300)
    assert last.returncode == 0, last.stderr
    newest = check_library(lib)
    assert newest not in (None, v1)
