"""How far do trained models get together? Score fusion of several model folders on one split.

    python tests/bench/bench_ensemble.py --models DIR [DIR ...] [--data FLICKR8K] [--split dev]
                                         [--out bench-results/ensemble.json]

Each model scores every (item, caption) pair of the split with its own default similarity (PVSE: the best of
K x K cosines; PCME: the match probability). Scores of different models live on different scales, so each
matrix is standardised (zero mean, unit variance over the whole matrix) before the fused matrix takes their
plain average; no weight is tuned on the split. Reported: each model alone and every subset of two or more,
R@1/5/10 in both directions and rsum. This is a measurement of the methods' complementarity on held-out data,
not a product feature: the app searches with one model at a time. Not run by CI.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
FLICKR = REPO.parent / "shared" / "datasets" / "flickr8k"


def standardised(scores: np.ndarray) -> np.ndarray:
    """``(s - mean) / std`` over the whole matrix (float64, so the average of several stays exact enough)."""
    scores = scores.astype(np.float64)
    std = scores.std()
    return (scores - scores.mean()) / (std if std > 0 else 1.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=FLICKR)
    parser.add_argument("--split", default="dev")
    parser.add_argument("--home", default=os.environ.get("POLYSEEK_HOME"))
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "ensemble.json")
    args = parser.parse_args()
    if not (args.data / "captions.tsv").is_file():
        print(f"no caption folder at {args.data}: this benchmark needs ../shared/datasets/flickr8k", file=sys.stderr)
        return 2
    if args.home:
        os.environ["POLYSEEK_HOME"] = str(args.home)

    from engine.trainercontract.metrics import retrieval_report
    from trainer.checkpoint import load_model
    from trainer.data import FeatureNeeds, FeatureSource
    from trainer.evaluation import encode_pairs, similarity_matrix
    from trainer.splits import split_view

    view = split_view(args.data, args.split)
    source = FeatureSource.open()
    matrices: dict[str, np.ndarray] = {}
    caption_item = None
    try:
        for folder in args.models:
            model = load_model(folder, "cpu")
            pairs = source.pairs(view.item_captions(), FeatureNeeds.of(model))
            if caption_item is not None and not np.array_equal(caption_item, pairs.caption_item):
                raise SystemExit(f"{folder}: its pairs differ from the first model's (same split expected)")
            caption_item = pairs.caption_item
            name = f"{model.config.method}:{folder.name}"
            matrices[name] = standardised(similarity_matrix(model, encode_pairs(model, pairs, "cpu")))
            print(f"scored {name}", flush=True)
    finally:
        source.close()

    rows = []
    names = list(matrices)
    for size in range(1, len(names) + 1):
        for subset in itertools.combinations(names, size):
            fused = sum(matrices[n] for n in subset) / len(subset)
            report = retrieval_report(fused, caption_item)
            row = {"models": list(subset), "rsum": round(report["rsum"], 2),
                   "i2t": {k: round(report["i2t"][k], 2) for k in ("r1", "r5", "r10")},
                   "t2i": {k: round(report["t2i"][k], 2) for k in ("r1", "r5", "r10")}}
            rows.append(row)
            print(f"{row['rsum']:7.2f}  {' + '.join(subset)}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"split": args.split, "data": str(args.data), "rows": rows}, indent=2) + "\n")
    best = max(rows, key=lambda r: r["rsum"])
    lines = [f"Score fusion on {args.data.name} {args.split} (`python tests/bench/bench_ensemble.py --models ...`): "
             "each model's similarity matrix standardised, then averaged with equal weights.", "",
             "| models | i2t R@1 | R@5 | R@10 | t2i R@1 | R@5 | R@10 | rsum |", "|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (len(r["models"]), -r["rsum"])):
        lines.append(f"| {' + '.join(m.split(':')[0] for m in r['models'])} | {r['i2t']['r1']} | {r['i2t']['r5']} "
                     f"| {r['i2t']['r10']} | {r['t2i']['r1']} | {r['t2i']['r5']} | {r['t2i']['r10']} | {r['rsum']} |")
    lines += ["", f"Best subset: {' + '.join(best['models'])}, rsum {best['rsum']} (picked on this split itself, "
                  "so an optimistic figure; the row with every model involves no choice)."]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
