"""Quitting right after an annotation is clean: no error dialog, no traceback, exit code 0 (issue #20)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quit_right_after_annotating_exits_cleanly(tmp_path: Path, isolated_home: Path) -> None:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "POLYSEEK_HOME": str(isolated_home),
           "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "tests.gui.quit_after_annotating", str(tmp_path)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    assert "ERROR DIALOG" not in done.stderr
    assert "already deleted" not in done.stderr
    assert "Traceback" not in done.stderr
    assert done.returncode == 0, done.stderr
    log = (isolated_home / "logs").glob("*.log") if (isolated_home / "logs").is_dir() else []
    assert not any("uncaught exception" in f.read_text() for f in log)
