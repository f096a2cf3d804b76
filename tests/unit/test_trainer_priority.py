"""``train --low-priority`` lowers the trainer process's CPU priority (every thread of it), so the GUI that
started it stays responsive. Each check runs in a child process: a lowered priority cannot be raised back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.cli import LOW_PRIORITY_NICE, _parser, lower_priority

REPO = Path(__file__).resolve().parents[2]
posix_only = pytest.mark.skipif(not hasattr(os, "getpriority"), reason="nice values are POSIX")

# Starts a thread first (as importing torch does), lowers the priority, and reports both threads' nice values.
CHILD = """
import json, os, threading
from trainer.cli import lower_priority
started, release = threading.Event(), threading.Event()
tid = []
def idle():
    tid.append(threading.get_native_id()); started.set(); release.wait()
thread = threading.Thread(target=idle); thread.start(); started.wait()
before = os.getpriority(os.PRIO_PROCESS, 0)
applied = lower_priority()
after = os.getpriority(os.PRIO_PROCESS, 0)
other = os.getpriority(os.PRIO_PROCESS, tid[0]) if os.path.isdir("/proc/self/task") else after
release.set(); thread.join()
print(json.dumps({"before": before, "after": after, "other": other, "applied": applied}))
"""


def run_child(code: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *(["-c", code] if code else []), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


@posix_only
def test_lower_priority_raises_the_nice_value_of_every_thread() -> None:
    if os.getpriority(os.PRIO_PROCESS, 0) > 19 - LOW_PRIORITY_NICE:
        pytest.skip("this process already runs at (almost) the lowest priority")
    result = run_child(CHILD)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["after"] == seen["before"] + LOW_PRIORITY_NICE
    assert seen["other"] == seen["after"]  # the thread that already existed is lowered too
    assert seen["applied"] == f"nice {seen['after']}"


def test_lower_priority_refuses_a_non_positive_increment() -> None:
    with pytest.raises(ValueError, match="increment must be positive"):
        lower_priority(0)


def test_the_train_command_accepts_low_priority(tmp_path: Path) -> None:
    base = ["train", "--method", "vse", "--data", str(tmp_path)]
    assert _parser().parse_args([*base, "--low-priority"]).low_priority
    assert not _parser().parse_args(base).low_priority


@posix_only
def test_train_low_priority_applies_it_before_anything_else(tmp_path: Path) -> None:
    """The option is applied at the very start of ``train``: before the data is even checked (here it is
    not a caption folder, so the command stops there without training)."""
    env = {**os.environ, "POLYSEEK_HOME": str(tmp_path / "home")}
    result = run_child("", "-m", "trainer", "train", "--method", "vse", "--data", str(tmp_path), "--out",
                       str(tmp_path / "out"), "--low-priority", env=env)
    assert result.returncode == 2 and "is not a caption folder" in result.stderr
    assert "running at a lower CPU priority (nice" in result.stderr
