"""Every method trained with its default recipe on Flickr8k, validated on the held-out dev split.

    python tests/bench/bench_methods.py [--methods vse pvse ...] [--epochs N] [--home DIR]
                                        [--out bench-results/methods.json]

Features (backbone and MiniLM) are computed once into ``--home`` (a scratch Polyseek home, reused between runs)
and every run trains in this process on them. Reported per run: dev rsum, R@1 both ways, best epoch, seconds
of training (features excluded). Besides every method with all annotations, the table answers PRODUCT.md's
questions:

- does PVSE (K=3) beat the K=1 baseline (``vse``) trained the same way?
- does PCME's R@1 fall as uncertainty rises (``rho_bins`` < 0 for the uncertainty deciles)?
- does A3VSE with 10% of the annotations plus pseudo pairs beat the same 10% without them
  (``a3vse@10%`` vs ``a3vse@10%-no-pseudo``)?

The 1K protocol here is the Flickr8k dev split itself (1,000 photos, 5,000 captions). Not run by CI.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
FLICKR = REPO.parent / "shared" / "datasets" / "flickr8k"


def runs(methods: list[str]) -> list[tuple[str, str, dict]]:
    """(label, method, TrainOptions changes) of every run asked for."""
    from trainer.sparse import SparseConfig

    out = [(m, m, {}) for m in methods]
    if "a3vse" in methods:
        sparse = SparseConfig(0.1, None, 0)
        out += [("a3vse@10%", "a3vse", {"sparse": sparse}),
                ("a3vse@10%-no-pseudo", "a3vse", {"sparse": sparse, "pseudo_pairs": False})]
    return out


def run_one(label: str, method: str, changes: dict, args: argparse.Namespace, source) -> dict:
    from trainer.train import Reporter, TrainOptions, train

    out = Path(args.home) / "models" / f"{label}-{time.strftime('%H%M%S')}"
    options = TrainOptions(method=method, data=args.data, out=out, epochs=args.epochs, device=args.device,
                           **changes)
    start = time.perf_counter()
    report = train(options, source=source, reporter=Reporter(False, enabled=args.verbose))
    seconds = time.perf_counter() - start
    from trainer.checkpoint import load_state

    state = load_state(out)
    row = {"run": label, "method": method, "rsum": report["rsum"], "i2t_r1": report["i2t"]["r1"],
           "t2i_r1": report["t2i"]["r1"], "best_epoch": report.get("best_epoch"), "epochs": state.epoch,
           "seconds": round(seconds, 1), "model_dir": str(out)}
    if "r1_by_uncertainty_decile" in report:
        row["uncertainty_rho_bins"] = {k: v["rho_bins"] for k, v in report["r1_by_uncertainty_decile"].items()}
    return row


def main() -> int:
    from trainer.methods import list_methods

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=list_methods(), choices=list_methods())
    parser.add_argument("--data", type=Path, default=FLICKR)
    parser.add_argument("--epochs", type=int, default=None, help="default: each recipe's")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--home", default=os.environ.get("POLYSEEK_HOME") or "/tmp/polyseek-bench-home")
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "methods.json")
    parser.add_argument("--verbose", action="store_true", help="log every epoch")
    args = parser.parse_args()
    if not (args.data / "captions.tsv").is_file():
        print(f"no caption folder at {args.data}", file=sys.stderr)
        return 2
    os.environ["POLYSEEK_HOME"] = str(args.home)
    import logging

    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    from trainer.data import FeatureSource

    source = FeatureSource.open()
    rows = []
    try:
        for label, method, changes in runs(args.methods):
            rows.append(run_one(label, method, changes, args, source))
            row = rows[-1]
            print(f"{label:22s} rsum {row['rsum']:6.1f}  i2t R@1 {row['i2t_r1']:5.1f}  t2i R@1 {row['t2i_r1']:5.1f}"
                  f"  best epoch {row['best_epoch']}/{row['epochs']}  {row['seconds']:.0f}s", flush=True)
    finally:
        source.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
