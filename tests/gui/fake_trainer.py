"""A stand-in trainer for GUI tests: prints ``--json-progress`` lines like ``python -m trainer train``.

Usage: ``python fake_trainer.py train --method M --data D --out O --epochs N --device X --json-progress``.
``FAKE_TRAINER_STEP_S`` sets the pause between steps; ``FAKE_TRAINER_FAIL=1`` makes it exit with code 3.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["train"])
    for flag in ("--method", "--data", "--out", "--device"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--json-progress", action="store_true")
    args = parser.parse_args()
    pause = float(os.environ.get("FAKE_TRAINER_STEP_S", "0.01"))
    steps = 5
    print("loading data (not JSON)", flush=True)
    for epoch in range(1, args.epochs + 1):
        for step in range(1, steps + 1):
            loss = 1.0 / (epoch * steps + step)
            print(json.dumps({"event": "step", "epoch": epoch, "step": step, "total": steps,
                              "loss": {"total": loss, "triplet": loss * 0.8}, "lr": 2e-4,
                              "eta_s": pause * (steps - step)}), flush=True)
            time.sleep(pause)
        print(json.dumps({"event": "epoch", "epoch": epoch, "val": {"rsum": 100.0 + 10 * epoch}}), flush=True)
    if os.environ.get("FAKE_TRAINER_FAIL") == "1":
        print("Traceback: something broke", file=sys.stderr, flush=True)
        return 3
    Path(args.out).mkdir(parents=True, exist_ok=True)
    print(json.dumps({"event": "done", "model_dir": args.out}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
