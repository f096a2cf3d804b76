"""Reliability diagrams of the calibrated ranking (issue #40) from bench_calibration.py's record, drawn with Pillow.

    python tests/bench/plot_reliability.py [--record bench-results/calibration-dev.json]
        [--out docs/reliability-dev.png]

One panel per dev set: the top 10 of every query before the user wrote anything, binned by predicted probability;
each bin's mean prediction against the share of its items that were the photo the caption was written for (the
diagonal is perfect calibration; a dot's area grows with the bin's count), with the expected calibration error.
Both axes are on a square-root scale: most predictions are a few percent.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from PIL import Image, ImageDraw

REPO = Path(__file__).resolve().parents[2]
SIDE, PAD = 300, 46


def panel(record: dict, title: str) -> Image.Image:
    image = Image.new("RGB", (SIDE + 2 * PAD, SIDE + 2 * PAD), "white")
    draw = ImageDraw.Draw(image)

    def at(p: float, q: float) -> tuple[float, float]:
        return PAD + SIDE * math.sqrt(max(p, 0.0)), PAD + SIDE * (1 - math.sqrt(max(q, 0.0)))

    draw.rectangle([PAD, PAD, PAD + SIDE, PAD + SIDE], outline="black")
    for tick in (0.01, 0.05, 0.1, 0.25, 0.5, 1.0):
        x, y = at(tick, tick)
        draw.line([x, PAD + SIDE, x, PAD + SIDE + 4], fill="black")
        draw.text((x - 10, PAD + SIDE + 6), f"{tick:g}", fill="black")
        draw.line([PAD - 4, y, PAD, y], fill="black")
        draw.text((4, y - 6), f"{tick:g}", fill="black")
    draw.line([at(0, 0), at(1, 1)], fill=(150, 150, 150), width=1)
    total = sum(b["n"] for b in record["bins"])
    for b in record["bins"]:
        x, y = at(b["predicted"], b["observed"])
        r = 2 + 14 * math.sqrt(b["n"] / total)
        draw.ellipse([x - r, y - r, x + r, y + r], outline=(30, 90, 170), fill=(120, 170, 230))
    draw.text((PAD, 8), f"{title}", fill="black")
    draw.text((PAD, 24), f"ECE {record['ece']:.3f} over {record['n']:,} top-10 places", fill="black")
    draw.text((PAD + SIDE // 2 - 50, PAD + SIDE + 24), "predicted probability", fill="black")
    return image


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", type=Path, default=REPO / "bench-results" / "calibration-dev.json")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "reliability-dev.png")
    args = parser.parse_args()
    record = json.loads(args.record.read_text(encoding="utf-8"))
    panels = [panel(d["before"]["reliability_top10"], f"{d['domain']}: observed vs predicted")
              for d in record["domains"] if "reliability_top10" in d.get("before", {})]
    width = sum(p.width for p in panels)
    out = Image.new("RGB", (width, panels[0].height), "white")
    x = 0
    for p in panels:
        out.paste(p, (x, 0))
        x += p.width
    out.save(args.out, optimize=True)
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
