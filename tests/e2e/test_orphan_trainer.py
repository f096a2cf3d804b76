"""A trainer started by the app or `polyseek retrain` (``--stop-with-parent``) does not outlive it: SIGKILL of the
process that reads its events leaves a resumable checkpoint and no trainer running on (issue #21)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.synthetic import make_toy_photo_folder
from trainer import checkpoint as ckpt

REPO = Path(__file__).resolve().parents[2]

# Stands for the app: starts the trainer, reads its events until the first epoch, says the trainer's pid, waits.
PARENT = r"""
import subprocess, sys, time
trainer = subprocess.Popen([sys.executable, "-m", "trainer", *sys.argv[1:]], stdout=subprocess.PIPE, text=True)
for line in trainer.stdout:
    if '"event": "epoch"' in line:
        print("READY", trainer.pid, flush=True)
        break
time.sleep(600)
"""


def _running(pid: int) -> bool:
    """Alive and not a zombie waiting for a reaper."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    if stat.is_file():
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False
    return True


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL (POSIX)")
def test_killing_the_events_reader_stops_the_trainer_with_a_resumable_checkpoint(tmp_path, assets_dir,
                                                                                 polyseek_home):
    toy = make_toy_photo_folder(tmp_path / "toy", 16, seed=5, dev_fraction=0.25)
    out = tmp_path / "run"
    env = {**os.environ, "POLYSEEK_HOME": str(polyseek_home), "POLYSEEK_ASSETS": str(assets_dir),
           "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, "train", "--method", "vse", "--data", str(toy.root), "--out", str(out),
         "--epochs", "100000", "--preset", "test", "--batch-size", "4", "--device", "cpu", "--json-progress",
         "--stop-with-parent"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    try:
        ready = parent.stdout.readline().split()
        assert ready and ready[0] == "READY", "the trainer never finished an epoch"
        trainer_pid = int(ready[1])
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 120  # a bound on waiting, not a speed target
        while _running(trainer_pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _running(trainer_pid), "the trainer outlived the process that started it"
    finally:
        if parent.poll() is None:
            parent.kill()
    state = ckpt.load_state(out)
    assert state is not None and state.resume is not None and state.epoch >= 1  # --resume continues from here
    log = "\n".join(p.read_text(errors="replace") for p in polyseek_home.rglob("trainer.log*"))
    assert "stopping with a resumable checkpoint" in log  # it stopped as asked, not by dying on the dead pipe
