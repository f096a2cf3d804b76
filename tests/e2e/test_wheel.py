"""Installable as a package: a wheel built from the source tree, installed into a fresh virtual environment,
gives a working ``polyseek`` with its resources (demo library, starter model, icons).

Kept fast and offline: the wheel is built without build isolation and without dependencies, and the new
environment sees the test environment's packages (torch, OpenCV, ...) through a ``.pth`` line instead of
downloading them. That line does not run the test environment's own ``.pth`` hooks, so the repository's
editable install stays out of sight: the test checks that ``engine`` is imported from the wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD_IGNORE = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", ".cache", "__pycache__",
                                      ".pytest_cache", ".ruff_cache", "tests", "bench-results", "docs")

pytestmark = pytest.mark.slow


def run(*command: str | Path, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([str(part) for part in command], capture_output=True, text=True, timeout=300, **kwargs)
    assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment with only the polyseek wheel installed in it; returns its bin/Scripts folder."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    shutil.copytree(REPO, source, ignore=BUILD_IGNORE, symlinks=True)  # the build writes build/ and egg-info
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w",
        work / "dist", source)
    [wheel] = (work / "dist").glob("polyseek-*.whl")
    venv = work / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    scripts = venv / ("Scripts" if os.name == "nt" else "bin")
    python = scripts / ("python.exe" if os.name == "nt" else "python")
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip())
    (site / "test-environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", wheel)
    return scripts


def test_the_wheel_runs_polyseek_with_its_resources(installed: Path, tmp_path: Path, assets_dir: Path) -> None:
    python = installed / ("python.exe" if os.name == "nt" else "python")
    polyseek = installed / ("polyseek.exe" if os.name == "nt" else "polyseek")
    env = {**os.environ, "POLYSEEK_HOME": str(tmp_path / "home"), "POLYSEEK_ASSETS": str(assets_dir)}
    env.pop("PYTHONPATH", None)
    from importlib.metadata import version

    assert run(polyseek, "--version", cwd=tmp_path, env=env).stdout.strip() == f"polyseek {version('polyseek')}"

    where = run(python, "-c", "import engine, resources; print(engine.__file__); print(resources.__file__)",
                cwd=tmp_path, env=env).stdout.split()
    installed_resources = Path(where[1]).parent
    assert all(Path(path).is_relative_to(installed.parent) for path in where), where  # the wheel, not the repo
    shipped = [p.relative_to(REPO / "resources") for p in (REPO / "resources").rglob("*")
               if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"]
    missing = [str(p) for p in shipped if not (installed_resources / p).is_file()]
    assert not missing, f"files under resources/ left out of the wheel: {missing}"

    demo = run(python, "-c", "from resources.demo import ensure_demo_library; print(ensure_demo_library())",
               cwd=tmp_path, env=env).stdout.strip()
    done = run(polyseek, "index", demo, "--library", "demo", "--json", cwd=tmp_path, env=env)
    counts = json.loads(done.stdout)["counts"]
    assert counts["image"] >= 5 and counts["failed"] == 0, counts
    hits = json.loads(run(polyseek, "search", "a cup of coffee", "--library", "demo", "--json", "--top", "3",
                          cwd=tmp_path, env=env).stdout)
    assert len(hits) == 3 and all(Path(hit["path"]).is_relative_to(demo) for hit in hits)
