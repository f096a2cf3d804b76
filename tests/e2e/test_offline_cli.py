"""The command line over an unplugged drive (issue #21): ``polyseek index`` reports offline folders and indexes the
rest, ``annotations export`` names what it skipped, ``purge-missing`` counts then deletes after a snapshot, and
``annotations import SNAPSHOT`` puts every annotation back."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from engine.workspace import Workspace
from tests.mediagen import make_jpeg, make_png
from tests.unit.test_annotations_survive import annotations, without_times


def polyseek(*args: str, home: Path, assets: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "POLYSEEK_HOME": str(home), "POLYSEEK_ASSETS": str(assets), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_unplugged_drive_through_the_cli(tmp_path, polyseek_home, assets_dir):
    drive, home = tmp_path / "drive", tmp_path / "home"
    drive.mkdir()
    home.mkdir()
    make_jpeg(drive / "red.jpg", (64, 48), (220, 30, 30))
    make_jpeg(drive / "blue.jpg", (64, 48), (30, 30, 220))
    make_png(home / "green.png", (48, 48), (30, 200, 30))
    run = polyseek("index", str(drive), str(home), "--library", "cli", home=polyseek_home, assets=assets_dir)
    assert run.returncode == 0, run.stderr
    service = Workspace.open("cli", assets_dir)
    try:
        red = service.state.catalog.media_by_path(drive / "red.jpg").id
        service.annotations.add_caption(red, "the red one from the trip")
        service.annotations.accept_pair("red", red)
        service.annotations.add_caption(service.state.catalog.media_by_path(home / "green.png").id, "green at home")
        before = annotations(service.state.catalog)
    finally:
        service.close()

    shutil.move(drive, tmp_path / "unplugged")
    drive.mkdir()  # the mount point of an unplugged drive: an empty folder
    make_png(home / "new.png", (40, 40), (90, 90, 90))
    run = polyseek("index", str(drive), str(home), "--library", "cli", "--json", home=polyseek_home,
                   assets=assets_dir)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert set(out) == {"library", "counts", "failures", "offline"}
    assert [(o["path"], o["items"]) for o in out["offline"]] == [(str(drive), 2)]
    assert out["counts"]["image"] == 2 and out["counts"]["missing"] == 2  # home's two; the drive's kept

    run = polyseek("annotations", "export", str(tmp_path / "backup"), "--library", "cli", home=polyseek_home,
                   assets=assets_dir)
    assert run.returncode == 0, run.stderr
    assert "wrote 1 captions" in run.stdout and "skipped 1 annotated items" in run.stdout and "red.jpg" in run.stdout

    run = polyseek("purge-missing", "--library", "cli", home=polyseek_home, assets=assets_dir)
    assert run.returncode == 0 and "2 missing or offline items with 1 captions and 1 pairs would be" in run.stdout
    run = polyseek("purge-missing", "--library", "cli", "--yes", "--json", home=polyseek_home, assets=assets_dir)
    purged = json.loads(run.stdout)
    assert (purged["missing_items"], purged["captions"], purged["pairs"], purged["purged"]) == (2, 1, 1, True)
    assert Path(purged["snapshot"]).parent == polyseek_home / "libraries" / "cli" / "snapshots"

    run = polyseek("annotations", "import", purged["snapshot"], "--library", "cli", "--json", home=polyseek_home,
                   assets=assets_dir)
    assert run.returncode == 0, run.stderr
    assert (json.loads(run.stdout)["captions"], json.loads(run.stdout)["pairs"]) == (1, 1)
    drive.rmdir()
    shutil.move(tmp_path / "unplugged", drive)
    assert polyseek("index", str(drive), "--library", "cli", home=polyseek_home, assets=assets_dir).returncode == 0
    service = Workspace.open("cli", assets_dir)
    try:
        assert without_times(annotations(service.state.catalog)) == without_times(before)
        assert {str(m.status) for m in service.state.catalog.iter_media()} == {"ok"}
    finally:
        service.close()

    run = polyseek("index", str(tmp_path / "never-added"), "--library", "cli", home=polyseek_home, assets=assets_dir)
    assert run.returncode == 2 and "no such file or folder" in run.stderr
