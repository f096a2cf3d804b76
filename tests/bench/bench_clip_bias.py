"""Clips on the photos' scale (issue #40): choose the calibration's ``frames_bias`` on train-side clips.

    python tests/bench/bench_clip_bias.py --home DIR [--data ../shared/datasets] [--biases 0 0.25 0.5 0.75 1]
        [--out bench-results/clip-bias-train.json]

A clip is scored by the best of its T sampled frames, and the best of T draws stands above one: a GIF that slowly
zooms into one photo was found more often than the photo itself. The calibration takes ``frames_bias * log T``
z-units off a clip's dense sum (:func:`engine.search.evidence.fuse`). The library is the 500 Flickr8k *train*
photos the starter held aside plus 25 slideshows (4 of its photos each) and 25 zooming GIFs (one photo each) made
from them (tests/bench/bench_domains.py's clips); for each bias, every caption of a photo a clip shows is a query,
and the clip's R@10 stands beside its photo's. Choose the bias that brings both kinds nearest their photos; dev
clips are measured once after (bench_domains.py --domains clips).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "datasets")
    parser.add_argument("--biases", type=float, nargs="+", default=[0.0, 0.25, 0.5, 0.75, 1.0])
    parser.add_argument("--shots", type=float, nargs="+", default=None,
                        help="shot thresholds to sweep (engine.search.shots.SHOT_COSINE; default: the shipped one)")
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "clip-bias-train.json")
    args = parser.parse_args()
    from engine.search import calibration, shots
    from tests.bench.bench_domains import domains, make_clips, open_library, use_home, write_json

    if not use_home(args.home, args.data, starter=True):
        return 0
    images, files, caps = domains(args.data)["flickr8k-train-slice"]
    clips = make_clips(args.home / "train-side", images, files)
    service = open_library(args.home, "clips-train-slice", images, files, [p for p, _ in clips])
    by_path = {Path(m.path).name: m.id for m in service.state.catalog.iter_media()}
    shipped = calibration.load
    results = []
    for threshold, bias in [(t, b) for t in (args.shots or [shots.SHOT_COSINE]) for b in args.biases]:
        shots.SHOT_COSINE = threshold
        service.state.indexes.drop()  # the clips' shots are built again at this threshold
        if service.models.active_trained() is not None:
            service.models.active_trained()._frames = None
        calibration.load = lambda kind, path=None, b=bias: dataclasses.replace(shipped(kind, path), frames_bias=b)
        rows: dict[str, list[tuple[bool, bool]]] = {"slideshow": [], "zoom": []}
        for path, group in clips:
            kind = "slideshow" if path.suffix == ".mp4" else "zoom"
            for f in group:
                for caption in caps[f]:
                    hits = [h.media_id for h in service.search.text(caption, top=10)]
                    rows[kind].append((by_path[path.name] in hits, by_path[f] in hits))
        record: dict = {"shot_cosine": threshold, "frames_bias": bias}
        for kind, pairs in rows.items():
            clip, photo = (round(100 * float(np.mean([p[i] for p in pairs])), 1) for i in (0, 1))
            record[kind] = {"queries": len(pairs), "clip_r10": clip, "photo_r10": photo, "gap": round(clip - photo, 1)}
        record["worst_gap"] = max(abs(record[k]["gap"]) for k in rows)
        results.append(record)
        print(json.dumps(record), flush=True)
    calibration.load = shipped
    service.close()
    write_json(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
