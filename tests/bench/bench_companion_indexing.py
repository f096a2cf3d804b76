"""What the starter's companions cost at indexing, end to end (issue #42: "indexing stays within 10 % of today's
items/s"): the same photos indexed into fresh homes with the starter alone and with the starter and its two
companions, in turn.

    python tests/bench/bench_companion_indexing.py [--photos ../shared/datasets/flickr8k/images] [--n 400]
        [--repeats 3] [--work /tmp/companion-indexing] [--out bench-results/companion-indexing.json]

Each run is a new ``POLYSEEK_HOME`` (the pretrained assets linked in from ``POLYSEEK_ASSETS`` or the default home,
nothing else shared: decoding, the backbone and the feature store are measured too) and one
:meth:`engine.library.Library.index` of ``--n`` photos, which ends with every model's embeddings. "alone" searches
with a copy of the shipped starter whose companion file is removed. The two settings alternate, ``--repeats``
times each; the record gives each run's seconds, the medians, items/s and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def one_run(work: Path, photos: list[Path], alone: bool, assets: Path) -> float:
    home = work / ("alone" if alone else "companions")
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    (home / "assets").symlink_to(assets)
    os.environ["POLYSEEK_HOME"], os.environ["POLYSEEK_STARTER"] = str(home), "on"
    from engine.search.companion import COMPANION_FILE
    from engine.search.starter import installed_starter, shipped_starter
    from engine.workspace import Workspace

    service = Workspace.open("bench")
    if alone:
        folder = home / "starter-alone"
        # the installed copy: it holds the graph of the starter's own MiniLM, which `polyseek prepare` exports
        shutil.copytree(installed_starter(shipped_starter()), folder,
                        ignore=shutil.ignore_patterns("companion", "pcme"))
        (folder / COMPANION_FILE).unlink()
        service.models.activate(str(folder))
    root = home / "photos"
    root.mkdir()
    for p in photos:
        (root / p.name).symlink_to(p)
    service.library.add_root(root)
    started = time.perf_counter()
    for _ in service.library.index([root]):
        pass
    took = time.perf_counter() - started
    trained = service.models.active_trained()
    assert (trained.companion is None) == alone and trained.embedded() == len(photos)
    service.close()
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--photos", type=Path, default=REPO.parent / "shared" / "datasets" / "flickr8k" / "images")
    parser.add_argument("--n", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path("/tmp/companion-indexing"))
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "companion-indexing.json")
    args = parser.parse_args()
    if not args.photos.is_dir():
        print(f"skipped: {args.photos} is absent (the benchmark needs ../shared/datasets)")
        return 0
    assets = Path(os.environ.get("POLYSEEK_ASSETS") or Path.home() / ".local/share/polyseek/assets").resolve()
    photos = sorted(args.photos.glob("*.jpg"))[:args.n]
    runs: dict[str, list[float]] = {"alone": [], "companions": []}
    for _ in range(args.repeats):
        for name in runs:
            runs[name].append(round(one_run(args.work, photos, name == "alone", assets), 3))
            print(name, runs[name][-1], flush=True)
    median = {k: statistics.median(v) for k, v in runs.items()}
    record = {"photos": len(photos), "seconds": runs, "median_s": median,
              "items_per_s": {k: round(len(photos) / v, 1) for k, v in median.items()},
              "time_ratio": round(median["companions"] / median["alone"], 3)}
    print(json.dumps(record, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
