"""The backup through the command line (issue #31): ``annotations export`` then ``annotations import`` into a fresh
library of the same photos gives back every caption with its provenance and every accepted and rejected pair."""

from __future__ import annotations

import json
import shutil

import pytest

from engine.workspace import Workspace
from tests.e2e.test_offline_cli import polyseek
from tests.mediagen import make_jpeg
from tests.unit.test_annotations_survive import annotations, without_times


@pytest.mark.parametrize("backup", ["backup.json", "backup"])
def test_export_then_import_into_a_fresh_library_restores_everything(tmp_path, polyseek_home, assets_dir, backup):
    photos = tmp_path / "Photos"
    photos.mkdir()
    for i, color in enumerate([(220, 30, 30), (30, 200, 30), (30, 30, 220)]):
        make_jpeg(photos / f"p{i}.jpg", (64, 48), color)
    assert polyseek("index", str(photos), "--library", "old", home=polyseek_home, assets=assets_dir).returncode == 0
    service = Workspace.open("old", assets_dir)
    try:
        ids = {m.path.name: m.id for m in service.state.catalog.iter_media()}
        service.annotations.add_caption(ids["p0.jpg"], "the red one")
        service.state.catalog.add_caption(ids["p1.jpg"], "green, from an old album", "imported")
        service.annotations.accept_pair("something red", ids["p0.jpg"])
        service.annotations.reject_pair("something red", ids["p2.jpg"])
        before = annotations(service.state.catalog)
    finally:
        service.close()
    run = polyseek("annotations", "export", str(tmp_path / backup), "--library", "old", "--json", home=polyseek_home,
                   assets=assets_dir)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert (out["captions"], out["accepted"], out["rejected"], out["skipped"]) == (2, 1, 1, [])

    shutil.copytree(photos, tmp_path / "new-disk" / "Photos")  # the same photos on a new machine
    assert polyseek("index", str(tmp_path / "new-disk" / "Photos"), "--library", "new", home=polyseek_home,
                    assets=assets_dir).returncode == 0
    run = polyseek("annotations", "import", str(tmp_path / backup), "--library", "new", home=polyseek_home,
                   assets=assets_dir)
    assert run.returncode == 0, run.stderr
    assert "imported 2 captions, 1 accepted and 1 rejected results" in run.stdout
    run = polyseek("annotations", "import", str(tmp_path / backup), "--library", "new", "--json",
                   home=polyseek_home, assets=assets_dir)
    assert (json.loads(run.stdout)["captions"], json.loads(run.stdout)["pairs"]) == (0, 0)  # nothing twice
    service = Workspace.open("new", assets_dir)
    try:
        assert without_times(annotations(service.state.catalog)) == without_times(before)
    finally:
        service.close()
