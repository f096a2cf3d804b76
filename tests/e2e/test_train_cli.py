"""``python -m trainer train|evaluate|export`` (and ``polyseek`` forwarding to it) in real subprocesses.

One module-wide Polyseek home holds a tiny generated caption folder's features, so every subprocess reads
them from the feature store instead of running the backbone again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.features.encoders import Encoders
from engine.features.featurestore import FeatureStore
from tests.synthetic import make_toy_photo_folder
from trainer.data import FeatureNeeds, FeatureSource
from trainer.splits import split_view

TIMEOUT = 240


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, assets_dir: Path) -> dict:
    """A home with the toy folder's features (and the test-preset VSE's caption features) already cached."""
    root = tmp_path_factory.mktemp("train-cli")
    home, folder = root / "home", root / "toy"
    make_toy_photo_folder(folder, 16, seed=7, dev_fraction=0.25)
    home.mkdir()
    with FeatureStore(home / "features.sqlite") as store:
        source = FeatureSource(store, Encoders(assets_dir), home / "cache" / "text", assets_dir)
        source.pairs(split_view(folder, None).item_captions(), FeatureNeeds(False, False, True, "minilm", 8))
    env = {**os.environ, "POLYSEEK_HOME": str(home), "POLYSEEK_ASSETS": str(assets_dir), "OMP_NUM_THREADS": "1",
           "PYTHONUNBUFFERED": "1"}
    return {"home": home, "folder": folder, "env": env}


def trainer(*args: str, env: dict, module: str = "trainer") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, env=env,
                          timeout=TIMEOUT)


def train_args(folder: Path, out: Path, *extra: str) -> list[str]:
    return ["train", "--method", "vse", "--data", str(folder), "--out", str(out), "--preset", "test",
            "--batch-size", "6", "--device", "cpu", *extra]


def events(stdout: str) -> list[dict]:
    """Every stdout line must be one JSON event."""
    parsed = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    assert all(isinstance(e, dict) and "event" in e for e in parsed)
    return parsed


def test_json_progress_then_evaluate_and_export(shared, tmp_path):
    out = tmp_path / "model"
    run = trainer(*train_args(shared["folder"], out, "--epochs", "2", "--json-progress"), env=shared["env"],
                  module="engine.cli")  # the polyseek CLI forwards train to the trainer process
    assert run.returncode == 0, run.stderr
    stream = events(run.stdout)
    kinds = [e["event"] for e in stream]
    assert kinds[-1] == "done" and kinds.count("epoch") == 2 and "step" in kinds
    assert kinds.index("step") < kinds.index("epoch")
    step = next(e for e in stream if e["event"] == "step")
    assert {"epoch", "step", "total", "loss", "lr", "eta_s"} <= set(step) and "total" in step["loss"]
    assert stream[-1]["model_dir"] == str(out) and "rsum" in stream[-1]["val"]

    evaluated = trainer("evaluate", "--model", str(out), "--data", str(shared["folder"]), "--split", "dev",
                        "--json", env=shared["env"], module="engine.cli")
    assert evaluated.returncode == 0, evaluated.stderr
    report = json.loads(evaluated.stdout)
    assert {"r1", "r5", "r10", "medr", "meanr"} <= set(report["i2t"]) and set(report["i2t"]) == set(report["t2i"])
    assert (report["n_media"], report["n_captions"]) == (4, 8)
    assert report["rsum"] == pytest.approx(json.loads((out / "metrics.json").read_text())["rsum"], abs=1e-3)
    assert "r_precision" in report

    exported = trainer("export", "--model", str(out), "--out", str(tmp_path / "onnx"), env=shared["env"])
    assert exported.returncode == 0, exported.stderr
    manifest = json.loads((tmp_path / "onnx" / "manifest.json").read_text())
    assert manifest["method"] == "vse" and (tmp_path / "onnx" / "text.onnx").is_file()


@pytest.mark.parametrize(("setting", "message"), [
    ("margin=-1", "error: margin: must be >= 0.0, got -1.0"),
    ("bogus_field=3", "error: bogus_field: unknown field for method 'vse'"),
])
def test_a_bad_set_is_one_line_naming_the_field(shared, tmp_path, setting, message):
    run = trainer(*train_args(shared["folder"], tmp_path / "m", "--set", setting, "--json-progress"),
                  env=shared["env"])
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [message]
    assert events(run.stdout)[-1] == {"event": "error", "message": message.removeprefix("error: ")}
    assert not (tmp_path / "m" / "trainer_state.json").exists()


def _start_long_run(shared: dict, out: Path) -> subprocess.Popen:
    args = train_args(shared["folder"], out, "--epochs", "500", "--patience", "1000", "--schedule", "constant",
                      "--json-progress")
    return subprocess.Popen([sys.executable, "-m", "trainer", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=shared["env"])


def _wait_for_epoch(process: subprocess.Popen) -> list[dict]:
    seen: list[dict] = []
    deadline = time.monotonic() + TIMEOUT
    assert process.stdout is not None
    for line in process.stdout:
        seen.append(json.loads(line))
        if seen[-1]["event"] == "epoch" or time.monotonic() > deadline:
            break
    assert seen and seen[-1]["event"] == "epoch", seen
    return seen


def _resume(shared: dict, out: Path) -> tuple[subprocess.CompletedProcess, dict]:
    state = json.loads((out / "trainer_state.json").read_text())
    run = trainer(*train_args(shared["folder"], out, "--epochs", str(state["epoch"] + 1), "--resume",
                              "--json-progress"), env=shared["env"])
    assert run.returncode == 0, run.stderr
    return run, state


def test_sigterm_writes_a_resumable_checkpoint_and_exits_143(shared, tmp_path):
    out = tmp_path / "model"
    process = _start_long_run(shared, out)
    _wait_for_epoch(process)
    process.send_signal(signal.SIGTERM)
    rest, _ = process.communicate(timeout=TIMEOUT)
    assert process.returncode == 128 + signal.SIGTERM
    assert events(rest)[-1] == {"event": "stopped", "signal": "SIGTERM", "model_dir": str(out), "resumable": True}
    state = json.loads((out / "trainer_state.json").read_text())
    assert not state["finished"] and state["epoch"] >= 1
    assert all((out / name).is_file() for name in state["resume"].values())
    run, before = _resume(shared, out)
    after = json.loads((out / "trainer_state.json").read_text())
    assert after["finished"] and [h["epoch"] for h in after["history"]] == list(range(1, before["epoch"] + 2))
    assert events(run.stdout)[-1]["event"] == "done" and (out / "onnx" / "manifest.json").is_file()


def test_a_killed_trainer_resumes_from_its_last_epoch(shared, tmp_path):
    out = tmp_path / "model"
    process = _start_long_run(shared, out)
    _wait_for_epoch(process)
    process.kill()
    process.communicate(timeout=TIMEOUT)
    assert process.returncode == -signal.SIGKILL
    run, before = _resume(shared, out)
    after = json.loads((out / "trainer_state.json").read_text())
    assert after["finished"] and after["epoch"] == before["epoch"] + 1
    assert not list(out.glob(".*.tmp"))
    assert len(list(out.glob("last-*.safetensors"))) == 1


@pytest.mark.slow
def test_two_process_data_parallel_training(shared, tmp_path):
    out = tmp_path / "ddp"
    args = train_args(shared["folder"], out, "--epochs", "2", "--json-progress")
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                          "-m", "trainer", *args], capture_output=True, text=True, env=shared["env"],
                         timeout=TIMEOUT)
    assert run.returncode == 0, run.stderr[-3000:]
    stream = events("\n".join(line for line in run.stdout.splitlines() if line.startswith("{")))
    assert [e["event"] for e in stream].count("done") == 1  # rank 0 alone reports
    step = next(e for e in stream if e["event"] == "step")
    assert step["total"] == 1  # 2 batches (12 items, one caption each, 6 a batch) shared by 2 processes
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["finished"] and state["epoch"] == 2 and (out / "onnx" / "manifest.json").is_file()


@pytest.mark.slow
def test_two_process_data_parallel_fine_tuning(shared, tmp_path):
    """Phase two under DDP: the backbone and head wrapped together, both ranks stepping in lockstep."""
    out = tmp_path / "ddp-ft"
    args = train_args(shared["folder"], out, "--epochs", "1", "--finetune-epochs", "1", "--json-progress")
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                          "-m", "trainer", *args], capture_output=True, text=True, env=shared["env"],
                         timeout=TIMEOUT)
    assert run.returncode == 0, run.stderr[-3000:]
    stream = events("\n".join(line for line in run.stdout.splitlines() if line.startswith("{")))
    assert [e["event"] for e in stream].count("phase") == 1 and [e["event"] for e in stream].count("done") == 1
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["finished"] and state["epoch"] == 2 and state["finetune_from"] == 1
    assert len(state["history"]) == 2
