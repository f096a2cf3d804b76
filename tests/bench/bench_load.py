"""Search under load: memory and latency of 1,000 text searches in a row on a 20,000-item library.

    nice python tests/bench/bench_load.py [--n 20000] [--searches 1000] [--work DIR]
                                          [--out bench-results/load.json]

Makes ``--n`` small JPEGs (64 x 64, random shapes and colours; made once and reused when ``--work`` is
given), indexes them with ``polyseek index`` in a subprocess (wall time and the subprocess's peak RSS, read
from its ``VmHWM`` while it runs), then runs ``--searches`` text searches in a row in this process through
:class:`engine.workspace.Workspace`. Reported: resident memory after a warm-up (the first searches load
MiniLM and build the zero-shot index) and at the end, and the growth between them (must stay under 10%: the
exit status is 1 otherwise); search latency p50/p95 per window of 100 searches, first window vs last. Not
collected by pytest; Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

MAX_RSS_GROWTH = 0.10
WARMUP_SEARCHES = 20
WINDOW = 100
LIBRARY = "bench-load"
SUBJECTS = ["a red circle", "a blue square", "green shapes", "a yellow ball", "a dark picture", "a white dog",
            "a cat on a sofa", "a car on the road", "two people walking", "a bright orange sunset",
            "a purple flower", "a bowl of soup", "a pink balloon", "a black and white pattern", "a grey sky",
            "a boat on the water", "a plate of food", "a child playing", "a computer screen", "a brown bag"]
SETTINGS = ["", "in the dark", "at night", "on a table", "near the sea", "in a small room", "from above",
            "with a blurry background", "in the snow", "under a lamp"]


def queries(n: int) -> list[str]:
    """``n`` different sentences (subject x setting x a counter), so no query is answered from a cache."""
    return [" ".join(filter(None, [SUBJECTS[i % len(SUBJECTS)], SETTINGS[i // len(SUBJECTS) % len(SETTINGS)],
                                   f"number {i}"])) for i in range(n)]


def make_library(folder: Path, n: int, seed: int = 0, size: int = 64) -> float:
    """``n`` distinct JPEGs of random ellipses and rectangles on a random background; returns seconds."""
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        path = folder / f"{i // 1000:02d}" / f"item{i:06d}.jpg"
        if path.exists():
            continue
        path.parent.mkdir(exist_ok=True)
        image = Image.new("RGB", (size, size), tuple(int(v) for v in rng.integers(0, 256, 3)))
        draw = ImageDraw.Draw(image)
        for _ in range(int(rng.integers(1, 5))):
            x, y = (int(v) for v in rng.integers(0, size - 8, 2))
            w, h = (int(v) for v in rng.integers(8, size // 2, 2))
            shape = draw.ellipse if rng.random() < 0.5 else draw.rectangle
            shape([x, y, x + w, y + h], fill=tuple(int(v) for v in rng.integers(0, 256, 3)))
        image.save(path, quality=90)
    return time.perf_counter() - start


def status_kib(field: str, pid: int | str = "self") -> int | None:
    """A memory field of /proc/PID/status (``VmRSS``, ``VmHWM``) in KiB, or None when unreadable."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def index_library(folder: Path, env: dict[str, str]) -> dict:
    """``polyseek index`` in a subprocess: wall time, rate and peak RSS (its VmHWM, polled until it exits)."""
    start = time.perf_counter()
    command = [sys.executable, "-m", "engine.cli", "index", str(folder), "--library", LIBRARY, "--json"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=REPO,
                               text=True)
    peak_kib = 0
    while process.poll() is None:
        peak_kib = max(peak_kib, status_kib("VmHWM", process.pid) or 0)
        time.sleep(0.5)
    wall = time.perf_counter() - start
    report = json.loads(process.stdout.read())
    if process.returncode:
        raise SystemExit(f"polyseek index failed with status {process.returncode}")
    indexed = report["counts"].get("total", 0)
    return {"wall_s": round(wall, 1), "items_per_s": round(indexed / wall, 1), "counts": report["counts"],
            "failures": len(report["failures"]), "peak_rss_mib": round(peak_kib / 1024, 1)}


def percentiles(latencies_s: list[float]) -> dict[str, float]:
    ms = np.asarray(latencies_s) * 1000
    return {f"p{q}_ms": round(float(np.percentile(ms, q)), 2) for q in (50, 95)}


def search_under_load(assets: Path, n_searches: int) -> dict:
    """Warm up, then ``n_searches`` text searches in a row: RSS before/after and latency per window."""
    from engine.workspace import Workspace

    service = Workspace.open(LIBRARY, assets)
    try:
        for text in queries(WARMUP_SEARCHES):
            service.search.text(f"warm-up {text}", top=60)
        rss_warm = status_kib("VmRSS") or 0
        latencies = []
        for text in queries(n_searches):
            start = time.perf_counter()
            hits = service.search.text(text, top=60)
            latencies.append(time.perf_counter() - start)
            if len(hits) != 60:
                raise SystemExit(f"search {text!r} returned {len(hits)} hits, not 60")
        rss_end = status_kib("VmRSS") or 0
    finally:
        service.close()
    growth = (rss_end - rss_warm) / rss_warm if rss_warm else float("nan")
    windows = [percentiles(latencies[i:i + WINDOW]) for i in range(0, len(latencies), WINDOW)]
    return {
        "warmup_searches": WARMUP_SEARCHES,
        "rss_after_warmup_mib": round(rss_warm / 1024, 1),
        "rss_end_mib": round(rss_end / 1024, 1),
        "rss_growth_pct": round(100 * growth, 2),
        "rss_growth_ok": growth < MAX_RSS_GROWTH,
        "latency": {"first_100": windows[0], "last_100": windows[-1], "all": percentiles(latencies),
                    "per_window_of_100": windows},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20_000, help="items in the library")
    parser.add_argument("--searches", type=int, default=1_000)
    parser.add_argument("--work", type=Path, default=None,
                        help="keep the library and the home here (reused next time); default: a temp dir")
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "load.json")
    args = parser.parse_args()
    from engine.paths import assets_dir

    assets = Path(os.environ.get("POLYSEEK_ASSETS") or assets_dir())
    with tempfile.TemporaryDirectory(prefix="polyseek-bench-load-") as tmp:
        work = args.work or Path(tmp)
        home = work / "home"
        os.environ["POLYSEEK_HOME"] = str(home)  # the search phase, in this process, uses the same home
        env = {**os.environ, "POLYSEEK_ASSETS": str(assets), "PYTHONPATH": str(REPO)}
        generate_s = make_library(work / "library", args.n)
        print(f"library of {args.n} items ready in {generate_s:.0f} s; indexing...", flush=True)
        index = index_library(work / "library", env)
        print(f"indexed: {index}", flush=True)
        search = search_under_load(assets, args.searches)
    result = {"n_items": args.n, "n_searches": args.searches, "generate_s": round(generate_s, 1),
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "platform": platform.platform()},
              "index": index, "search": search}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in search.items() if k != "latency"}, indent=2))
    print("latency first 100:", search["latency"]["first_100"], "last 100:", search["latency"]["last_100"])
    return 0 if search["rss_growth_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
