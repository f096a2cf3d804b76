"""Read each PCME run of ``tests/bench/gpu_full.sh`` on the starter's held-aside train-side slices, each apart, and
pick the runs worth bringing back (#42: the probabilistic recipe is chosen by the sigma-decile Spearman of R@1 on
held-aside train-side photos, both directions, Flickr8k and webcaps slices; dev is read only afterwards, here).

The caption folder ``--data`` is the bundle's (``tests/bench/gpu_full_bundle.py --val-items 500 1000 200``): its
``starter-val`` split holds the three slices, told apart by their file names (Flickr8k ``<id>_<hash>.jpg``,
MSR-VTT ``video<N>.mp4``, webcaps the rest). Each slice becomes a caption folder of its own under ``--work`` (links
to the same media, so the cached features are found again) and every run is measured on each with
``bench_pcme_uncertainty.measure``. Writes ``--out`` (JSON) and prints the runs to bring back, best first: ranked
by the worse of the two photo slices' Spearmans in each direction (the bar holds only where all four do), then
by the mean held-aside rsum.

    python tests/bench/gpu_pcme_pick.py --data D --home H --runs pcme-s0 pcmecsd-s0 --work /tmp/slices \
        --out $OUT/sigma.json --keep 3
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

FLICKR = re.compile(r"^\d+_[0-9a-f]+\.jpg$")
PHOTO_SLICES = ("flickr8k", "webcaps")


def slice_of(name: str) -> str:
    if FLICKR.match(name):
        return "flickr8k"
    return "msrvtt" if name.startswith("video") else "webcaps"


def write_slices(data: Path, work: Path, split: str) -> dict[str, Path]:
    """One caption folder per slice of ``data``'s ``split`` under ``work``, its media linked from ``data``'s."""
    rows = [line.split("\t") for line in (data / "splits.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    chosen: dict[str, set[str]] = {}
    for name, where in rows:
        if where == split:
            chosen.setdefault(slice_of(name), set()).add(name)
    captions = (data / "captions.tsv").read_text(encoding="utf-8").splitlines()
    folders = {}
    for label, names in sorted(chosen.items()):
        folder = work / label
        (folder / "images").mkdir(parents=True, exist_ok=True)
        for name in names:
            link = folder / "images" / name
            if not link.exists():
                link.symlink_to((data / "images" / name).resolve())
        (folder / "splits.tsv").write_text("file\tsplit\n" + "".join(f"{n}\tslice\n" for n in sorted(names)),
                                           encoding="utf-8")
        kept = [line for line in captions[1:] if line.split("\t", 1)[0] in names]
        (folder / "captions.tsv").write_text("\n".join([captions[0], *kept]) + "\n", encoding="utf-8")
        folders[label] = folder
    return folders


def rank(results: dict[str, dict]) -> list[str]:
    """Runs best first: the worst photo-slice Spearman (lower is better), then the mean rsum (higher)."""
    def key(run: str) -> tuple[float, float]:
        row = results[run]
        worst = max(row[s]["spearman"][way] for s in PHOTO_SLICES if s in row for way in ("i2t", "t2i"))
        return worst, -sum(row[s]["rsum"] for s in PHOTO_SLICES if s in row)
    return sorted((r for r in results if all(s in results[r] for s in PHOTO_SLICES)), key=key)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--runs", nargs="+", required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--split", default="starter-val")
    parser.add_argument("--keep", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    os.environ["POLYSEEK_HOME"] = str(args.home)
    from tests.bench.bench_pcme_uncertainty import measure

    folders = {k: v for k, v in write_slices(args.data, args.work, args.split).items() if k in PHOTO_SLICES}
    results: dict[str, dict] = {}
    for run in args.runs:
        model = args.home / "models" / run
        if not (model / "model.safetensors").is_file():
            print(run, "no model", flush=True)
            continue
        results[run] = {}
        for label, folder in folders.items():
            row = measure(model, folder, "slice", args.device)
            results[run][label] = row
            print(f"{run} {label}: rsum {row['rsum']:.1f} Spearman i2t {row['spearman']['i2t']:+.2f} "
                  f"t2i {row['spearman']['t2i']:+.2f}", flush=True)
    order = rank(results)
    args.out.write_text(json.dumps({"order": order, "runs": results}, indent=1) + "\n", encoding="utf-8")
    print("KEEP", " ".join(order[: args.keep]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
