"""Two-phase training on Flickr8k: what fine-tuning the backbone adds over the warm-up on frozen features.

    python tests/bench/bench_finetune.py --home DIR --run NAME -- polyseek-train-arguments...
    python tests/bench/bench_finetune.py --table          (rewrite the Markdown table from the JSON)

``--run`` executes ``polyseek train <arguments> --out DIR/models/NAME --json-progress`` as a child process with
``POLYSEEK_HOME=--home`` (its cached features are reused), measures the child's CPU seconds and peak RSS, and
appends one row to ``--out`` (JSON) read from the finished model folder: the warm-up's best validation rsum, every
phase-two epoch's rsum, the final whole-dev metrics of the best epoch (that epoch's backbone), and the seconds the
trainer recorded per phase. ``--resume`` among the arguments fine-tunes a model folder trained before (copy it to
``DIR/models/NAME`` first): then the warm-up's seconds are the earlier run's. Not run by CI.

``--record MODEL_DIR --time-log FILE`` adds the row of a run made by hand instead, as
``/usr/bin/time -v polyseek train ARGS > progress 2> FILE``: CPU seconds and peak RSS come from that log.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "bench-results" / "finetune.json"
CPU_HOST = "2 CPU cores, no GPU"  # the machine of the rows measured before rows named theirs


def machine() -> str:
    """This machine in words: its CPU count and, where ``nvidia-smi`` answers, its GPUs."""
    words = f"{os.cpu_count()} CPU cores"
    try:
        gpus = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30, check=True).stdout.split("\n")
    except (OSError, subprocess.SubprocessError):
        return words + ", no GPU"
    return words + ", " + ", ".join(g.strip() for g in gpus if g.strip())


def _flag(arguments: list[str], name: str, default: float) -> float:
    return float(arguments[arguments.index(name) + 1]) if name in arguments else default


def summarise(model_dir: Path, arguments: list[str]) -> dict:
    """One table row from a finished two-phase model folder (a run resumed by an older trainer did not record
    phase two's settings: they are read from its arguments, with the CLI's defaults)."""
    state = json.loads((model_dir / "trainer_state.json").read_text())
    metrics = json.loads((model_dir / "metrics.json").read_text())
    start = state.get("finetune_from")
    history = state["history"]
    warm = [h for h in history if start is None or h["epoch"] <= start]
    tuned = [h for h in history if start is not None and h["epoch"] > start]
    options = state["options"]
    return {
        "method": state["method"],
        "finetune_epochs": options.get("finetune_epochs") or int(_flag(arguments, "--finetune-epochs", 0)),
        "finetune_blocks": (options["finetune_blocks"] if options.get("finetune_blocks") is not None
                            else int(_flag(arguments, "--finetune-blocks", 16))),
        "text_layers": options.get("text_layers") or 0, "text_lr": options.get("text_lr"),
        "finetune_lr": options.get("finetune_lr") or _flag(arguments, "--finetune-lr", 1e-5),
        "finetune_head_lr": options.get("finetune_head_lr") or _flag(arguments, "--finetune-head-lr", 2e-5),
        "warmup_best_rsum": round(max(h["val"]["rsum"] for h in warm), 2), "warmup_epochs": len(warm),
        "finetune_rsums": [round(h["val"]["rsum"], 2) for h in tuned],
        "best_epoch": state["best_epoch"], "backbone": metrics.get("backbone"),
        "rsum": round(metrics["rsum"], 2),
        "i2t": {k: round(metrics["i2t"][k], 2) for k in ("r1", "r5", "r10")},
        "t2i": {k: round(metrics["t2i"][k], 2) for k in ("r1", "r5", "r10")},
        "warmup_s": round(sum(h["train_s"] + h["val_s"] for h in warm), 1),
        "finetune_s": round(sum(h["train_s"] + h["val_s"] for h in tuned), 1),
        **({"gpu_peak_mib": metrics["gpu_peak_mib"]} if "gpu_peak_mib" in metrics else {}),
    }


def time_log(path: Path | None) -> dict:
    """CPU seconds, wall seconds and peak RSS from the report of ``/usr/bin/time -v``."""
    if path is None:
        return {}
    found: dict[str, float] = {}
    for line in path.read_text().splitlines():
        key, _, value = line.strip().rpartition(": ")
        if key in ("User time (seconds)", "System time (seconds)"):
            found["cpu_s"] = found.get("cpu_s", 0.0) + float(value)
        elif key == "Maximum resident set size (kbytes)":
            found["peak_rss_mib"] = round(int(value) / 1024)
        elif key.startswith("Elapsed (wall clock) time"):
            parts = [float(p) for p in value.split(":")]
            found["wall_s"] = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
    return {k: round(v, 1) if isinstance(v, float) else v for k, v in found.items()}


def markdown(rows: list[dict]) -> str:
    lines = ["Two-phase training on Flickr8k (train 6,000 photos; dev 1,000 photos / 5,000 captions, unless a row's "
             "`--data` below is another folder), measured with `python tests/bench/bench_finetune.py --home DIR "
             "--run NAME -- ARGS` on the machine each row names (each row's arguments below). rsum per phase-two "
             "epoch is the per-epoch validation; the R@K "
             "columns are the best epoch's final evaluation (that epoch's backbone). Warm-up and phase-two seconds "
             "are the trainer's own per-epoch records (wall; the one-off caching of the frozen trunk and the final "
             "evaluation are outside them); child CPU s and peak RSS cover the whole command; GPU peak is the most "
             "memory the trainer's tensors held on the GPU.",
             "",
             "| run | blocks tuned | MiniLM layers tuned | lr (backbone / text / head) | warm-up best rsum | "
             "phase-two rsum per epoch | i2t R@1 | "
             "R@5 | R@10 | t2i R@1 | R@5 | R@10 | rsum | warm-up s | phase-two s | child CPU s | peak RSS MiB | "
             "machine | GPU peak MiB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        per_epoch = " → ".join(f"{v:.1f}" for v in r["finetune_rsums"])
        text_lr = f"{r['text_lr']:g}" if r.get("text_layers") else "-"
        lines.append(f"| {r['name']} | {r['finetune_blocks']} of 16 | {r.get('text_layers', 0)} of 6 "
                     f"| {r['finetune_lr']:g} / {text_lr} / {r['finetune_head_lr']:g} "
                     f"| {r['warmup_best_rsum']} | {per_epoch} | {r['i2t']['r1']} | {r['i2t']['r5']} | "
                     f"{r['i2t']['r10']} | {r['t2i']['r1']} | {r['t2i']['r5']} | {r['t2i']['r10']} | **{r['rsum']}** "
                     f"| {r['warmup_s']:.0f} | {r['finetune_s']:.0f} | {r.get('cpu_s', 0):.0f} | "
                     f"{r.get('peak_rss_mib', '')} | {r.get('machine', CPU_HOST)} | {r.get('gpu_peak_mib', '')} |")
    lines += ["", "Arguments of each run:"]
    lines += [f"- {r['name']}: `polyseek train {' '.join(r['arguments'])}`"
              + (" (run by hand under `/usr/bin/time -v`, added with `--record`)" if r.get("recorded") else "")
              for r in rows]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=os.environ.get("POLYSEEK_HOME") or "/tmp/polyseek-bench-home")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--run", help="name of the run (its model folder under HOME/models)")
    parser.add_argument("--table", action="store_true", help="only rewrite the Markdown table")
    parser.add_argument("--record", type=Path, help="a finished model folder to add (with --time-log)")
    parser.add_argument("--time-log", type=Path, help="stderr of `/usr/bin/time -v polyseek train ...`")
    parser.add_argument("arguments", nargs=argparse.REMAINDER, help="-- then `polyseek train` arguments")
    args = parser.parse_args()
    rows = json.loads(args.out.read_text()) if args.out.is_file() else []
    if args.run and args.record:
        arguments = [a for a in args.arguments if a != "--"]
        row = {"name": args.run, "arguments": arguments, **summarise(args.record, arguments), **time_log(args.time_log),
               "recorded": True}
        rows = [r for r in rows if r["name"] != args.run] + [row]
        args.out.write_text(json.dumps(rows, indent=2) + "\n")
    elif args.run:
        arguments = [a for a in args.arguments if a != "--"]
        out = Path(args.home) / "models" / args.run
        command = [sys.executable, "-m", "trainer", "train", *arguments, "--out", str(out), "--json-progress"]
        env = {**os.environ, "POLYSEEK_HOME": str(args.home)}
        wall = time.perf_counter()
        with open(out.parent / f"{args.run}.jsonl", "w") as progress:
            proc = subprocess.run(command, stdout=progress, env=env, check=False)
        wall = time.perf_counter() - wall
        if proc.returncode != 0:
            print(f"{args.run}: the trainer failed (exit {proc.returncode})", file=sys.stderr)
            return 1
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        row = {"name": args.run, "arguments": arguments, **summarise(out, arguments), "wall_s": round(wall, 1),
               "cpu_s": round(usage.ru_utime + usage.ru_stime, 1), "peak_rss_mib": round(usage.ru_maxrss / 1024),
               "machine": machine()}
        rows = [r for r in rows if r["name"] != args.run] + [row]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=2) + "\n")
        print(json.dumps(row))
    args.out.with_suffix(".md").write_text(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
