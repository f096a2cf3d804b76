"""First use just works: a new POLYSEEK_HOME prepares the pretrained assets itself (in a child process, with
progress) and indexes, with no `polyseek prepare` step; `polyseek --version`."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from PIL import Image

import engine.features.assets
import engine.trainercontract.command
from engine import cli, paths
from engine.progress import Progress


def fake_prepare(tmp_path: Path, source: Path, status: int = 0) -> list[str]:
    """A stand-in for ``python -m trainer prepare --json-progress`` (the real one exports ONNX files for a
    minute): a child process that reports progress the same way and copies an already prepared set into
    the assets folder of the home it is given, or fails with ``status``."""
    script = tmp_path / "fake_prepare.py"
    script.write_text(textwrap.dedent(f"""
        import json, os, shutil, sys
        from engine import paths
        print("INFO chatter that belongs in the log", file=sys.stderr)
        for done in range(4):
            print(json.dumps({{"event": "progress", "stage": "prepare", "done": done, "total": 4,
                              "message": f"step {{done}}"}}), flush=True)
        if {status}:
            sys.exit({status})
        shutil.copytree({str(source)!r}, paths.assets_dir())
        print(json.dumps({{"event": "done", "assets": str(paths.assets_dir())}}), flush=True)
    """))
    return [sys.executable, str(script)]


@pytest.fixture
def fresh_home(polyseek_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("POLYSEEK_ASSETS")  # the assets belong to the home, and it has none yet
    assert not (polyseek_home / "assets").exists()
    return polyseek_home


def test_a_fresh_home_prepares_its_assets_then_indexes(fresh_home, assets_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(engine.trainercontract.command, "prepare_command",
                        lambda force=False: fake_prepare(tmp_path, assets_dir))
    seen: list[Progress] = []
    real = engine.features.assets.ensure_assets

    def watched(*args, **kwargs):
        for record in real(*args, **kwargs):
            seen.append(record)
            yield record

    monkeypatch.setattr(engine.features.assets, "ensure_assets", watched)
    photos = tmp_path / "photos"
    photos.mkdir()
    Image.new("RGB", (40, 30), (200, 30, 30)).save(photos / "red.jpg")
    assert cli.main(["index", str(photos), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["counts"]["image"] == 1 and report["failures"] == []
    assert (fresh_home / "assets" / "manifest.json").is_file()
    assert [(p.done, p.total) for p in seen][1:] == [(0, 4), (1, 4), (2, 4), (3, 4)]
    assert "chatter" in (paths.log_dir() / "polyseek-prepare.log").read_text()
    seen.clear()
    assert cli.main(["search", "something red", "--json"]) == 0  # prepared once: not again
    assert seen == [] and json.loads(capsys.readouterr().out)[0]["path"].endswith("red.jpg")


def test_a_failed_prepare_is_one_line_naming_the_log(fresh_home, assets_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(engine.trainercontract.command, "prepare_command",
                        lambda force=False: fake_prepare(tmp_path, assets_dir, status=3))
    assert cli.main(["search", "a cat"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "exit status 3" in err[0] and "polyseek-prepare.log" in err[0], err
    assert not (fresh_home / "assets").exists()


def test_version_is_the_installed_package_version():
    from importlib.metadata import version

    done = subprocess.run([sys.executable, "-m", "engine.cli", "--version"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == f"polyseek {version('polyseek')}"


def test_train_prepares_the_assets_before_starting_the_trainer(fresh_home, assets_dir, tmp_path, monkeypatch,
                                                              capsys):
    monkeypatch.setattr(engine.trainercontract.command, "prepare_command",
                        lambda force=False: fake_prepare(tmp_path, assets_dir, status=4))
    started = []
    monkeypatch.setattr(cli.subprocess, "call", lambda *a, **k: started.append(a) or 0)
    assert cli.main(["train", "--method", "vse", "--data", str(tmp_path)]) == 2
    assert started == [] and "exit status 4" in capsys.readouterr().err  # no trainer without its assets


def test_assets_prepared_before_the_starter_had_companions_get_their_graphs_at_the_next_use(
        assets_dir, tmp_path, monkeypatch, capsys):
    """#42: the starter's companions ship as weights; a home whose assets were prepared without their graphs gets
    them from the real trainer at its next command (the other assets are kept), and then nothing is prepared again."""
    from engine.search.starter import graphs_to_prepare, prepared_graphs, shipped_starter, starter_graphs_ready

    shipped = shipped_starter()
    if shipped is None or not graphs_to_prepare(shipped):
        pytest.skip("this installation ships no starter with companions to prepare")
    assets = tmp_path / "assets"
    assets.mkdir()
    for entry in assets_dir.iterdir():  # the prepared set, without the companions' graphs
        if entry.name != "starter-graphs":
            (assets / entry.name).symlink_to(entry)
    monkeypatch.setenv("POLYSEEK_ASSETS", str(assets))
    monkeypatch.setenv("POLYSEEK_STARTER", "on")
    assert not starter_graphs_ready()
    assert cli.main(["prepare"]) == 0
    for folder in graphs_to_prepare(shipped):
        manifest = json.loads((prepared_graphs(shipped, folder) / "manifest.json").read_text())
        assert manifest["int8"] == ["image"] and "video" not in manifest["encoders"]
    assert starter_graphs_ready() and (assets / "backbone").is_symlink()  # only the graphs were written
    seen: list[Progress] = []
    real = engine.features.assets.ensure_assets
    monkeypatch.setattr(engine.features.assets, "ensure_assets",
                        lambda *a, **k: (seen.append(p) or p for p in real(*a, **k)))
    assert cli.main(["prepare"]) == 0 and seen == []  # ready: nothing runs again
