"""Does PCME's uncertainty mean something? sigma's spread and R@1 per sigma decile on a held-out split.

    python tests/bench/bench_pcme_uncertainty.py --home DIR --models LABEL=MODEL_DIR ... \
        [--data ../shared/datasets/flickr8k] [--split dev] [--out bench-results/pcme-uncertainty.json]

Each MODEL_DIR is a folder written by ``polyseek train --method pcme --out MODEL_DIR`` (train it first, with the
same ``POLYSEEK_HOME`` as ``--home`` so the features are cached). For each model, on the held-out split (dev:
1,000 photos, 5,000 captions, the 1K protocol) with the model's own test-time similarity: R@1/5/10 both ways and
rsum; R@1 per decile of the query's uncertainty (the geometric mean of sigma, PCME §3.2.1) and the Spearman
correlation of R@1 with the decile's rank (PCME fig. 6: negative when R@1 falls as sigma rises), for photo
queries (i2t, 100 photos a decile) and caption queries (t2i, 500 captions a decile); sigma's range, quantiles
and a histogram for the captions and for the photos. Results go to ``--out`` (JSON) and a Markdown file beside
it. Not run by CI.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
FLICKR = REPO.parent / "shared" / "datasets" / "flickr8k"
HISTOGRAM_BINS = 12
BAR = 40  # characters of the longest histogram bar


def sigma_summary(sigma: np.ndarray) -> dict:
    """Range, quantiles and a histogram (equal-width bins over the range) of one side's uncertainties."""
    counts, edges = np.histogram(sigma, bins=HISTOGRAM_BINS)
    quantiles = np.quantile(sigma, [0.01, 0.1, 0.5, 0.9, 0.99])
    return {"n": int(sigma.size), "min": float(sigma.min()), "max": float(sigma.max()),
            "max_over_min": float(sigma.max() / sigma.min()),
            "quantiles": dict(zip(("p1", "p10", "p50", "p90", "p99"), map(float, quantiles), strict=True)),
            "histogram": {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]}}


def measure(model_dir: Path, data: Path, split: str, device_name: str = "cpu") -> dict:
    """The uncertainty report of one PCME model folder on ``split`` (encoded on ``device_name``)."""
    import torch

    from trainer.checkpoint import load_model
    from trainer.data import FeatureNeeds, FeatureSource
    from trainer.evaluation import (
        Encoded,
        encode_pairs,
        report_from_scores,
        resolve_similarity,
        similarity_matrix,
        uncertainty_report,
    )
    from trainer.finetune import model_pairs
    from trainer.methods.interface import EncoderOutput
    from trainer.methods.pcme import PCMEModel
    from trainer.splits import split_view

    device = torch.device(device_name)
    model = load_model(model_dir, device)
    if not model.probabilistic:
        raise SystemExit(f"{model_dir}: not a PCME model ({model.config.method})")
    view = split_view(data, split)
    source = FeatureSource.open()
    try:
        pairs = model_pairs(model_dir, source.pairs(view.item_captions(), FeatureNeeds.of(model)), data, device)
    finally:
        source.close()
    encoded = encode_pairs(model, pairs, device)
    if device.type != "cpu":  # encoded on the GPU, read here
        model = model.cpu()
        encoded = Encoded(*(EncoderOutput(emb=o.emb.cpu(), logsigma=None if o.logsigma is None else o.logsigma.cpu())
                            for o in (encoded.visual, encoded.text)))
    similarity = resolve_similarity(model, "default")
    scores = similarity_matrix(model, encoded, similarity)
    report = report_from_scores(scores, pairs.caption_item)
    deciles = uncertainty_report(model, encoded, scores, pairs.caption_item)
    config = model.config
    return {
        "model_dir": str(model_dir), "similarity": similarity,
        "match_distance": getattr(config, "match_distance", "sampled"),
        "pseudo_positive_weight": getattr(config, "pseudo_positive_weight", 0.0),
        "rsum": float(report["rsum"]),
        "i2t": {k: float(report["i2t"][k]) for k in ("r1", "r5", "r10")},
        "t2i": {k: float(report["t2i"][k]) for k in ("r1", "r5", "r10")},
        "r1_by_sigma_decile": deciles,
        "spearman": {way: deciles[way]["rho_bins"] for way in ("i2t", "t2i")},
        "sigma": {"captions": sigma_summary(PCMEModel.uncertainty(encoded.text).numpy()),
                  "photos": sigma_summary(PCMEModel.uncertainty(encoded.visual).numpy())},
    }


def histogram_lines(summary: dict) -> list[str]:
    counts, edges = summary["histogram"]["counts"], summary["histogram"]["edges"]
    top = max(counts) or 1
    return [f"{edges[i]:.4f}-{edges[i + 1]:.4f} {counts[i]:5d} {'#' * round(BAR * counts[i] / top)}"
            for i in range(len(counts))]


def markdown(rows: dict[str, dict], command: str, where: str = "Flickr8k dev") -> str:
    """The table, R@1 by decile and σ's histograms; ``where``: the data set and split measured."""
    first = next(iter(rows.values()), None)
    photos, captions = (first["sigma"]["photos"]["n"], first["sigma"]["captions"]["n"]) if first else (0, 0)
    lines = [f"Measured with `{command}` on this machine (2 CPU cores shared with other jobs, no GPU); "
             f"{where} = {photos:,} photos, {captions:,} captions. σ = the geometric mean of an item's sigma (PCME "
             "§3.2.1). Spearman: of R@1 over the σ deciles, lowest σ first (negative: R@1 falls as σ rises).",
             "",
             "| model | distance | i2t R@1 | R@5 | R@10 | t2i R@1 | R@5 | R@10 | rsum | Spearman i2t | Spearman t2i "
             "| caption σ range | photo σ range |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for label, r in rows.items():
        cap, pho = r["sigma"]["captions"], r["sigma"]["photos"]
        lines.append(f"| {label} | {r['similarity']} | {r['i2t']['r1']:.1f} | {r['i2t']['r5']:.1f} "
                     f"| {r['i2t']['r10']:.1f} | {r['t2i']['r1']:.1f} | {r['t2i']['r5']:.1f} | {r['t2i']['r10']:.1f} "
                     f"| {r['rsum']:.1f} | {r['spearman']['i2t']:.2f} | {r['spearman']['t2i']:.2f} "
                     f"| {cap['min']:.4f}-{cap['max']:.4f} | {pho['min']:.4f}-{pho['max']:.4f} |")
    for label, r in rows.items():
        lines += ["", f"### {label}", ""]
        photos, captions = r["sigma"]["photos"]["n"], r["sigma"]["captions"]["n"]
        for way, what in (("i2t", f"photo queries, {photos // 10:,} a decile"),
                          ("t2i", f"caption queries, {captions // 10:,} a decile")):
            r1 = " ".join(f"{v:.1f}" for v in r["r1_by_sigma_decile"][way]["r1"])
            lines.append(f"- R@1 by σ decile, {way} ({what}): {r1}")
        for side in ("captions", "photos"):
            s = r["sigma"][side]
            q = s["quantiles"]
            lines += ["", f"σ of the {s['n']:,} {side}: {s['min']:.4f}-{s['max']:.4f} "
                      f"(max/min {s['max_over_min']:.2f}; p10 {q['p10']:.4f}, median {q['p50']:.4f}, "
                      f"p90 {q['p90']:.4f})", "", "```",
                      *histogram_lines(s), "```"]
    return "\n".join(lines) + "\n"


SLICES = ("flickr8k-train-slice", "webcaps-train-slice", "msrvtt-train-slice")


def slice_folder(datasets: Path, name: str, folder: Path) -> Path:
    """A caption folder at ``folder`` holding one train-side slice of ``tests/bench/bench_domains.py`` (the items the
    starter's build held aside) as its split ``slice``: PCME's recipe is chosen on these, each read apart (#42)."""
    from tests.bench.bench_domains import domains

    media, files, caps = domains(datasets)[name]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / media.name).symlink_to(media.resolve(), target_is_directory=True)
    rows = ["file\tcaption", *(f"{f}\t{c}" for f in files for c in caps[f])]
    (folder / "captions.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    (folder / "splits.tsv").write_text("\n".join(["file\tsplit", *(f"{f}\tslice" for f in files)]) + "\n",
                                       encoding="utf-8")
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", required=True, metavar="LABEL=DIR")
    parser.add_argument("--data", type=Path, default=FLICKR)
    parser.add_argument("--split", default="dev")
    parser.add_argument("--home", type=Path, default=None, help="POLYSEEK_HOME with the cached features")
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "pcme-uncertainty.json")
    parser.add_argument("--slice", choices=SLICES, help="a train-side slice the starter held aside instead of --data "
                        "--split (the datasets folder is --data's parent)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pcme-slice-") as scratch:  # a --slice's caption folder
        where = f"{args.data.name} {args.split}"
        if args.slice:
            args.data = slice_folder(args.data.parent, args.slice, Path(scratch) / "data")
            args.split, where = "slice", args.slice
        if not (args.data / "captions.tsv").is_file():
            raise SystemExit(f"{args.data}: no Flickr8k caption folder here (see ../shared/datasets)")
        if args.home is not None:
            os.environ["POLYSEEK_HOME"] = str(args.home)
        rows = {}
        for spec in args.models:
            label, _, folder = spec.partition("=")
            rows[label] = measure(Path(folder), args.data, args.split)
            print(f"{label}: rsum {rows[label]['rsum']:.1f}, Spearman {rows[label]['spearman']}", flush=True)
        command = "python tests/bench/bench_pcme_uncertainty.py " + shlex.join(sys.argv[1:] if argv is None else argv)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=2) + "\n")
        args.out.with_suffix(".md").write_text(markdown(rows, command, where))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
