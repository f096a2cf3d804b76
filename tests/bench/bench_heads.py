"""Do a K-head model's heads look at different things? (issue #42: "heads that differ")

    python tests/bench/bench_heads.py --home DIR [--data ../shared/datasets] [--domains flickr8k-dev webcaps-dev]
        [--model DIR] [--top 5] [--out bench-results/heads.json]

Each dev photo (a fresh library of the domain's dev photos, the shipped starter active unless ``--model``) is
embedded by the active model's image encoder from its cached local features, and each head's attention over the
7 x 7 regions (PVSE eq. 2-3) is read the way the inspector shows it. Per photo and pair of heads: the IoU of the
``--top`` regions each head weighs most, and the cosine of their two attention maps; reported as the mean over
photos and pairs, with the share of photos whose heads all pick the same top region. An IoU of 1 means the
inspector would show the same map K times; two heads that pick their top regions at random among 49 have an
expected IoU of about 0.05 (top 5).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def overlap(attention: np.ndarray, top: int) -> tuple[float, float, bool]:
    """``(mean IoU of the heads' top regions, mean cosine of their maps, all heads' first region the same)`` for
    one item's attention (K, R)."""
    tops = [set(np.argsort(-a)[:top].tolist()) for a in attention]
    pairs = list(itertools.combinations(range(len(attention)), 2))
    iou = np.mean([len(tops[i] & tops[j]) / len(tops[i] | tops[j]) for i, j in pairs])
    unit = attention / np.maximum(np.linalg.norm(attention, axis=1, keepdims=True), 1e-12)
    cos = np.mean([float(unit[i] @ unit[j]) for i, j in pairs])
    same = len({int(np.argmax(a)) for a in attention}) == 1
    return float(iou), float(cos), same


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "datasets")
    parser.add_argument("--domains", nargs="+", default=["flickr8k-dev", "webcaps-dev"])
    parser.add_argument("--model", type=Path, help="a model folder instead of the shipped starter")
    parser.add_argument("--tag", default="", help="appended to each domain's library name")
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "heads.json")
    args = parser.parse_args()
    from tests.bench import bench_domains
    from tests.bench.bench_domains import domains, open_library, use_home

    if not use_home(args.home, args.data, starter=True):
        return 0
    bench_domains.MODEL_DIR = args.model
    sets = domains(args.data)
    record: dict = {"top": args.top, "domains": []}
    for domain in args.domains:
        images, files, _ = sets[domain]
        service = open_library(args.home, domain + args.tag, images, files)
        trained = service.models.active_trained()
        if trained is None or trained.runner.num_embeddings < 2:
            print(f"{domain}: the active model has one embedding per item: no heads to compare")
            service.close()
            continue
        ious, coss, same = [], [], 0
        backbone = service.state.encoders.backbone.id
        for media in service.state.catalog.iter_media():
            feats = service.state.features.get(media.content_hash, backbone)
            if feats is None or feats.local is None:
                continue
            attention = trained.encode_media_features(feats).attention
            if attention is None:
                continue
            iou, cos, first = overlap(np.asarray(attention[0], np.float64), args.top)
            ious.append(iou)
            coss.append(cos)
            same += first
        row = {"domain": domain, "model": trained.record.name, "heads": trained.runner.num_embeddings,
               "photos": len(ious), "mean_top_iou": round(float(np.mean(ious)), 3),
               "median_top_iou": round(float(np.median(ious)), 3), "mean_map_cosine": round(float(np.mean(coss)), 3),
               "same_first_region_share": round(same / max(1, len(ious)), 3)}
        record["domains"].append(row)
        print(json.dumps(row), flush=True)
        service.close()
    _write(args.out, record)
    return 0


def _write(out: Path, record: dict) -> None:
    """The record as indented JSON (the folder made if needed), rewritten whole."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
