"""A stand-in trainer for GUI tests: prints ``--json-progress`` lines like ``python -m trainer train``. Usage:
``python fake_trainer.py train --method M --data D --out O --epochs N --device X [--resume] [--finetune-epochs F]
... --json-progress`` (F more epochs after a "phase" event; other trainer options are accepted and ignored).
``FAKE_TRAINER_STEP_S`` sets the pause between steps; ``FAKE_TRAINER_FAIL=1`` makes it exit with code 3;
``FAKE_TRAINER_LOAD_S`` the time it spends "loading data" before its first step (a SIGTERM then leaves no
checkpoint, and the "stopped" event says nothing is resumable). Like the real trainer it writes a checkpoint at the
end of every epoch (``trainer_state.json`` naming ``last-*.safetensors`` and ``optimizer-*.pt``, as
``trainer.checkpoint`` does), and SIGTERM stops it after the current step with a "stopped" event, a checkpoint that
``--resume`` continues from, and exit status 143. ``FAKE_TRAINER_IGNORE_TERM=1`` makes it a trainer too busy to
answer SIGTERM (it must be killed). A finished run writes ``config.json`` and ``metrics.json`` and, from
``FAKE_TRAINER_EXPORTS/<method>`` (tests/gui/conftest.py: ``tiny_models``), a real tiny export of that method.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

STEPS = 5


def metrics(epoch: int) -> dict:
    """Validation metrics shaped like the trainer's (rsum = the six recalls)."""
    t2i = {"r1": 10.0 + epoch, "r5": 30.0 + epoch, "r10": 50.0 + epoch}
    i2t = {"r1": 12.0, "r5": 32.0, "r10": 52.0}
    return {"i2t": i2t, "t2i": t2i, "rsum": sum(t2i.values()) + sum(i2t.values())}


def checkpoint(out: Path, method: str, epochs_done: int, options: dict | None = None) -> None:
    """The files ``trainer.checkpoint.save_checkpoint`` leaves (the weights are not real ones); ``options``
    are the run's (``trainer_state.json`` keeps data, splits and epochs there)."""
    out.mkdir(parents=True, exist_ok=True)
    tag = f"{epochs_done * STEPS:08d}-000000"
    stale = [*out.glob("last-*.safetensors"), *out.glob("optimizer-*.pt")]
    (out / f"last-{tag}.safetensors").write_bytes(b"fake weights")
    (out / f"optimizer-{tag}.pt").write_bytes(b"fake optimizer")
    state = {"version": 1, "method": method, "epoch": epochs_done, "step": 0, "global_step": epochs_done * STEPS,
             "finished": False, "resume": {"weights": f"last-{tag}.safetensors", "optimizer": f"optimizer-{tag}.pt"},
             "options": options or {}}
    # in the real trainer's order: new files, the state atomically, then the stale files; a kill at any moment
    # leaves a state naming files that exist (deleting first made the killed-trainer test flaky under load)
    (out / "trainer_state.json.tmp").write_text(json.dumps(state))
    os.replace(out / "trainer_state.json.tmp", out / "trainer_state.json")
    for old in stale:
        if old.name not in state["resume"].values():
            old.unlink()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["train"])
    for flag in ("--method", "--data", "--out", "--device"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--finetune-epochs", type=int, default=0)
    parser.add_argument("--val-split", default="dev")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--json-progress", action="store_true")
    args, _ = parser.parse_known_args()
    out = Path(args.out)
    run_options = {"data": args.data, "epochs": args.epochs, "val_split": args.val_split}
    pause = float(os.environ.get("FAKE_TRAINER_STEP_S", "0.01"))
    stop: list[int] = []
    if os.environ.get("FAKE_TRAINER_IGNORE_TERM") == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda signum, _frame: stop.append(signum))
    first = 1
    if args.resume:
        first = json.loads((out / "trainer_state.json").read_text())["epoch"] + 1
        print(json.dumps({"event": "resumed", "epoch": first - 1, "step": 0}), flush=True)
    print("loading data (not JSON)", flush=True)
    loading = time.monotonic() + float(os.environ.get("FAKE_TRAINER_LOAD_S", "0"))
    while time.monotonic() < loading:  # SIGTERM here, before any checkpoint: nothing to resume (as the trainer)
        time.sleep(0.02)
        if stop:
            print(json.dumps({"event": "stopped", "signal": "SIGTERM", "model_dir": str(out),
                              "resumable": False}), flush=True)
            return 128 + stop[0]
    total = args.epochs + args.finetune_epochs
    for epoch in range(first, total + 1):
        if epoch == args.epochs + 1:
            print(json.dumps({"event": "phase", "phase": "finetune", "epoch": args.epochs,
                              "epochs": args.finetune_epochs, "lr": 1e-5}), flush=True)
        for step in range(1, STEPS + 1):
            loss = 1.0 / (epoch * STEPS + step)
            print(json.dumps({"event": "step", "epoch": epoch, "step": step, "total": STEPS,
                              "loss": {"total": loss, "triplet": loss * 0.8}, "lr": 2e-4,
                              "eta_s": pause * (STEPS - step)}), flush=True)
            time.sleep(pause)
            if stop:
                checkpoint(out, args.method, epoch - 1, run_options)
                print(json.dumps({"event": "stopped", "signal": "SIGTERM", "model_dir": str(out),
                                  "resumable": True}), flush=True)
                return 128 + stop[0]
        checkpoint(out, args.method, epoch, run_options)
        print(json.dumps({"event": "epoch", "epoch": epoch, "val": metrics(epoch)}), flush=True)
    if os.environ.get("FAKE_TRAINER_FAIL") == "1":
        print("Traceback: something broke", file=sys.stderr, flush=True)
        return 3
    out.mkdir(parents=True, exist_ok=True)
    if (out / "trainer_state.json").is_file():
        state = json.loads((out / "trainer_state.json").read_text())
        (out / "trainer_state.json").write_text(json.dumps({**state, "finished": True}))
    final = {**metrics(total), "split": args.val_split, "method": args.method}
    (out / "metrics.json").write_text(json.dumps(final))
    (out / "config.json").write_text(json.dumps({"method": args.method}))
    exports = Path(os.environ.get("FAKE_TRAINER_EXPORTS", "/nonexistent")) / args.method / "onnx"
    if exports.is_dir():
        shutil.copytree(exports, out / "onnx", dirs_exist_ok=True)
    print(json.dumps({"event": "done", "model_dir": str(out), "val": final}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
