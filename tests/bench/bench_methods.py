"""Every method trained with its default recipe on Flickr8k, validated on the held-out dev split.

    python tests/bench/bench_methods.py [--methods vse pvse ...] [--text minilm glove] [--epochs N]
                                        [--set KEY=VALUE ...] [--home DIR] [--out bench-results/methods.json]

Backbone and text features are computed once into ``--home`` (a scratch Polyseek home, reused between runs). Each
run is its own process (``--one``), so its peak memory is its own: exactly what ``polyseek train --method M --data
FLICKR8K --out DIR`` does with no other flag (``--text glove`` adds ``--set text_encoder=glove``, the papers'
GloVe + bi-GRU text branch; ``minilm`` is each recipe's MiniLM default; ``--set`` passes the same config override
to ``train``, and the row shows it beside the method's name). Reported per run: i2t and t2i R@1/5/10 and
rsum on dev (1,000 photos, 5,000 captions: the 1K protocol), best epoch, wall and CPU seconds of training (feature
loading excluded from both), peak RSS of the process. The table also answers the issue's questions:

- does PVSE (K=3) beat the K=1 baseline (``vse``) trained the same way?
- does PCME's R@1 fall as uncertainty rises (Spearman of R@1 over the uncertainty deciles)?

Results go to ``--out`` (JSON) and a Markdown table beside it, rewritten after every run. Not run by CI.
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
sys.path.insert(0, str(REPO))
FLICKR = REPO.parent / "shared" / "datasets" / "flickr8k"
TEXT_CHOICES = ("minilm", "glove")


def heads(method: str, config: dict) -> int:
    """Vectors per item at search time (PVSE's K; 1 for the single-vector methods)."""
    return int(config.get("num_embeds", 1)) if method == "pvse" else 1


def run_one(args: argparse.Namespace) -> dict:
    """Train one (method, text encoder) in this process and return its table row."""
    import logging

    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    from trainer.checkpoint import load_state
    from trainer.cli import parse_overrides
    from trainer.data import FeatureSource
    from trainer.train import Reporter, TrainOptions, train

    overrides = {"text_encoder": "glove"} if args.one_text == "glove" else {}
    extra = parse_overrides(args.set)
    overrides.update(extra)
    label = f"{args.one}-{args.one_text}"
    out = Path(args.home) / "models" / f"{label}-{time.strftime('%m%d-%H%M%S')}"
    source = FeatureSource.open()
    try:
        seed = {} if args.seed is None else {"seed": args.seed}
        options = TrainOptions(method=args.one, data=args.data, out=out, epochs=args.epochs, device=args.device,
                               overrides=overrides, **seed)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        report = train(options, source=source, reporter=Reporter(False, enabled=args.verbose))
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    finally:
        source.close()
    state = load_state(out)
    config = json.loads((out / "config.json").read_text()) if (out / "config.json").is_file() else {}
    row = {"method": args.one, "text": args.one_text, "text_encoder": config.get("text_encoder"),
           "text_global": config.get("text_global"),
           "K": heads(args.one, config), "rsum": round(report["rsum"], 2),
           "i2t": {k: round(report["i2t"][k], 2) for k in ("r1", "r5", "r10")},
           "t2i": {k: round(report["t2i"][k], 2) for k in ("r1", "r5", "r10")},
           "best_epoch": report.get("best_epoch"), "epochs": state.epoch, "train_s": round(wall, 1),
           "cpu_s": round(cpu, 1), "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
           "model_dir": str(out), "overrides": extra, "seed": options.seed}
    deciles = report.get("r1_by_uncertainty_decile")
    if deciles:
        row["uncertainty_spearman"] = {k: v.get("rho_bins") for k, v in deciles.items()}
    return row


def text_label(row: dict) -> str:
    """The table's name for a row's text encoder (GloVe rows name their global text encoder)."""
    encoder = row.get("text_encoder") or ""
    if encoder == "glove":
        if row["method"].startswith("twobranch"):
            return "GloVe mean"  # the two-branch networks' mean-vector text feature
        if row["method"] == "a3vse":
            return "GloVe + LSTM"  # A3VSE §3.2
        return "GloVe + text CNN" if row.get("text_global") == "cnn" else "GloVe + bi-GRU"
    return {"minilm-sentence": "MiniLM sentence", "minilm": "MiniLM tokens"}.get(encoder, row["text"])


def markdown(rows: list[dict], command: str) -> str:
    lines = [f"Measured with `{command}` (each row one method and text encoder; rows appended over sessions with "
             "`--append`, a row's `--set` overrides shown beside its method) on this machine (2 CPU cores, no GPU); "
             "dev = 1,000 photos, 5,000 captions.",
             "",
             "| method | K | text encoder | i2t R@1 | R@5 | R@10 | t2i R@1 | R@5 | R@10 | rsum | best epoch | train s "
             "| CPU s | peak RSS MiB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        text = text_label(r)
        name = r["method"] + "".join(f" ({k}={v})" for k, v in (r.get("overrides") or {}).items()
                                     if k not in ("text_encoder", "text_global"))
        name += f" (seed {r['seed']})" if r.get("seed") else ""
        lines.append(f"| {name} | {r['K']} | {text} | {r['i2t']['r1']} | {r['i2t']['r5']} | {r['i2t']['r10']} "
                     f"| {r['t2i']['r1']} | {r['t2i']['r5']} | {r['t2i']['r10']} | {r['rsum']} "
                     f"| {r['best_epoch']}/{r['epochs']} | {r['train_s']:.0f} | {r['cpu_s']:.0f} "
                     f"| {r['peak_rss_mib']} |")
    spearman = [(r["method"], r["text"], r["uncertainty_spearman"]) for r in rows if r.get("uncertainty_spearman")]
    if spearman:
        lines += ["", "Spearman of R@1 over the uncertainty deciles (PCME; negative: R@1 falls as σ rises):"]
        lines += [f"- {m} ({t}): " + ", ".join(f"{k} {v}" for k, v in s.items()) for m, t, s in spearman]
    return "\n".join(lines) + "\n"


def main() -> int:
    from trainer.methods import list_methods

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=list_methods(), choices=list_methods())
    parser.add_argument("--text", nargs="+", default=list(TEXT_CHOICES), choices=TEXT_CHOICES)
    parser.add_argument("--data", type=Path, default=FLICKR)
    parser.add_argument("--epochs", type=int, default=None, help="default: each recipe's")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--home", default=os.environ.get("POLYSEEK_HOME") or "/tmp/polyseek-bench-home")
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "methods.json")
    parser.add_argument("--append", action="store_true", help="keep the rows already in --out")
    parser.add_argument("--verbose", action="store_true", help="log every epoch")
    parser.add_argument("--seed", type=int, default=None, help="training seed (default: train's)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="config override passed to every run (as train --set)")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--one-text", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not (args.data / "captions.tsv").is_file():
        print(f"no caption folder at {args.data}: this benchmark needs ../shared/datasets/flickr8k", file=sys.stderr)
        return 2
    os.environ["POLYSEEK_HOME"] = str(args.home)
    if args.one:
        print("ROW " + json.dumps(run_one(args)), flush=True)
        return 0
    rows: list[dict] = []  # with --append, the file's rows are read just before each new row is added
    command = ("python tests/bench/bench_methods.py --home DIR --text T --methods M [--set KEY=VALUE] --append"
               if args.append else "python tests/bench/bench_methods.py " + " ".join(sys.argv[1:]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for method in args.methods:
        for text in args.text:
            cmd = [sys.executable, __file__, "--one", method, "--one-text", text, "--data", str(args.data),
                   "--device", args.device, "--home", str(args.home)]
            cmd += ["--epochs", str(args.epochs)] if args.epochs else []
            cmd += ["--verbose"] if args.verbose else []
            cmd += [f"--set={pair}" for pair in args.set]
            cmd += ["--seed", str(args.seed)] if args.seed is not None else []
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False)
            found = [line[4:] for line in proc.stdout.splitlines() if line.startswith("ROW ")]
            if proc.returncode != 0 or not found:
                print(f"{method}/{text}: failed (exit {proc.returncode})", flush=True)
                continue
            row = json.loads(found[-1])
            if args.append and args.out.is_file():  # also picks up rows another run appended meanwhile
                rows = json.loads(args.out.read_text())
            rows.append(row)
            print(f"{method:16s} {text:7s} rsum {row['rsum']:6.1f}  i2t {row['i2t']}  t2i {row['t2i']}  "
                  f"best {row['best_epoch']}/{row['epochs']}  {row['train_s']:.0f}s  {row['peak_rss_mib']} MiB",
                  flush=True)
            args.out.write_text(json.dumps(rows, indent=2) + "\n")
            args.out.with_suffix(".md").write_text(markdown(rows, command))
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
