"""The house rules, checked by tools: engine/trainer never import Qt; the engine and the GUI never import torch;
the import graph of engine/, trainer/ and app/ has no circle; no module over 500 lines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_import_contracts_hold():
    lint = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run([str(lint)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_search_path_runs_without_torch_or_qt():
    code = ("import sys, engine.workspace, engine.cli, engine.library.indexer, engine.loop.evaluate; "
            "bad = [m for m in ('torch', 'PySide6', 'trainer') if m in sys.modules]; print(bad); sys.exit(bool(bad))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_gui_process_never_imports_torch():
    """Every module of the app (the main window, every widget, the training dialog's job) imported in a GUI
    process, offscreen, with a QApplication: neither torch nor the trainer is loaded."""
    code = ("import importlib, pkgutil, sys\n"
            "from PySide6.QtWidgets import QApplication\n"
            "application = QApplication([])\n"
            "import app, app.mainwindow, engine.workspace, engine.loop.retrain\n"
            "for module in pkgutil.walk_packages(app.__path__, 'app.'):\n"
            "    if module.name != 'app.__main__':  # that one runs the app\n"
            "        importlib.import_module(module.name)\n"
            "assert 'app.mainwindow' in sys.modules and 'app.widgets.training' in sys.modules\n"
            "bad = [m for m in ('torch', 'trainer') if m in sys.modules]; print(bad); sys.exit(bool(bad))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO), "QT_QPA_PLATFORM": "offscreen"})
    assert done.returncode == 0, done.stdout + done.stderr


MODULE_LINES = 500  # a module longer than this does more than one job


def test_no_module_is_longer_than_a_reader_can_hold():
    lines = {str(p.relative_to(REPO)): len(p.read_text(encoding="utf-8").splitlines())
             for root in ("engine", "app", "trainer") for p in (REPO / root).rglob("*.py")}
    long = {path: n for path, n in lines.items() if n > MODULE_LINES}
    assert not long, f"modules over {MODULE_LINES} lines: {long}"
