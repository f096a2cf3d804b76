"""Indexing throughput end to end vs the backbone alone, measured in the same run.

    python tests/bench/bench_indexing.py [--n 512] [--n-large 48] [--out bench-results/indexing.json]

Two libraries: ``--n`` Flickr8k photos as they are (224x224 JPEGs, from ../shared/datasets/flickr8k) and
``--n-large`` 12-megapixel JPEGs (4000x3000, made here by enlarging Flickr8k photos). For each: (a) the backbone
alone on already-decoded 224x224 batches of the same size, (b) ``SearchService.index_paths`` on a fresh home
(walk, hash, decode, backbone, regional semantics, feature store and catalog writes). The ratio (b)/(a) is the
figure of merit (PRODUCT.md: >= 0.8). Medians of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
FLICKR = REPO.parent / "shared" / "datasets" / "flickr8k" / "images"


def backbone_alone(backbone, images: np.ndarray, batch: int) -> float:
    backbone(images[:batch])  # warm-up
    start = time.perf_counter()
    for i in range(0, len(images), batch):
        backbone(images[i:i + batch])
    return len(images) / (time.perf_counter() - start)


def end_to_end(folder: Path, assets: Path) -> float:
    from engine.service import SearchService

    with tempfile.TemporaryDirectory() as home:
        os.environ["POLYSEEK_HOME"] = home
        service = SearchService.open("bench", assets)
        service.encoders.backbone  # noqa: B018 - session opening is not indexing
        n = len(list(folder.iterdir()))
        start = time.perf_counter()
        for _ in service.index_paths([folder]):
            pass
        rate = n / (time.perf_counter() - start)
        service.close()
    return rate


def make_large(files: list[Path], dest: Path) -> None:
    for f in files:
        Image.open(f).convert("RGB").resize((4000, 3000), Image.BICUBIC).save(dest / f.name, quality=90)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=512)
    parser.add_argument("--n-large", type=int, default=48)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "indexing.json")
    args = parser.parse_args()
    if not FLICKR.is_dir():
        print(f"skipped: {FLICKR} is absent")
        return 0
    from engine.backbone import Backbone
    from engine.extract import decode_for_backbone
    from engine.indexer import BATCH
    from engine.paths import assets_dir

    assets = Path(os.environ.get("POLYSEEK_ASSETS") or assets_dir())
    files = sorted(FLICKR.iterdir())[: args.n]
    backbone = Backbone(assets)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        small, large = Path(tmp) / "small", Path(tmp) / "large"
        small.mkdir()
        large.mkdir()
        for f in files:
            os.symlink(f, small / f.name)
        make_large(files[: args.n_large], large)
        for name, folder in (("flickr8k-224px", small), ("12MP-jpeg", large)):
            paths = sorted(folder.iterdir())
            images = np.concatenate([decode_for_backbone(p, 224).frames for p in paths])
            alone = [backbone_alone(backbone, images, BATCH) for _ in range(args.repeat)]
            full = [end_to_end(folder, assets) for _ in range(args.repeat)]
            row = {"n": len(paths), "backbone_alone_per_s": statistics.median(alone),
                   "end_to_end_per_s": statistics.median(full)}
            row["ratio"] = row["end_to_end_per_s"] / row["backbone_alone_per_s"]
            results[name] = row
            print(f"{name:16s} n={row['n']:4d}  backbone alone {row['backbone_alone_per_s']:6.1f}/s  "
                  f"end to end {row['end_to_end_per_s']:6.1f}/s  ratio {row['ratio']:.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": f"{os.cpu_count()} cores", "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
