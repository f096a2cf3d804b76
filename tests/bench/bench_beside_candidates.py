"""How many of a large library's candidates the starter's companions must score (#42's query cost).

Past :data:`engine.search.evidence.COMPANION_DENSE_LIMIT` items a query ranks the model's top
:data:`~engine.search.evidence.CANDIDATES` candidates, and each companion scores every one of them (its K x K heads,
~7x the model's cosine an item). With :data:`~engine.search.evidence.BESIDE_CANDIDATES` = M the companions score
only the model's top M (and the rows the user's words touch); the rest get a companion's lowest score among them.

The choice is made on the train side: one library of the starter's held-aside slices (500 Flickr8k and 1,000 webcaps
train photos, 200 MSR-VTT train clips; tests/bench/bench_domains.py) forced onto the candidates path
(``COMPANION_DENSE_LIMIT`` set to 0 here), every caption of the photos and two of each clip a query through the
app's ranking (:meth:`engine.workspace.search.Search.rank_text`), each query's true item ranked where the ranking
put it (after every scored row if it was no candidate). Rows: the dense path (every item scored), then each M.

    python tests/bench/bench_beside_candidates.py --home DIR [--ms 300 150 100 60 30] [--out F]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.bench.bench_domains import domains, open_library, use_home  # noqa: E402

SLICES = ("flickr8k-train-slice", "webcaps-train-slice", "msrvtt-train-slice")


def ranks(service, queries: list[str], truth: list[int]) -> tuple[np.ndarray, float]:
    """Each query's true item's rank (0 = first) in the app's ranking, and the median ms a query."""
    out, times = [], []
    for text, want in zip(queries, truth, strict=True):
        started = time.perf_counter()
        ids, ranking, _, _ = service.search.rank_text(text)
        times.append(time.perf_counter() - started)
        order = ranking.rows[ranking.order()]
        where = np.flatnonzero(ids[order] == want)
        out.append(int(where[0]) if len(where) else len(order))
    return np.array(out), 1000 * float(np.median(times))


def recall(r: np.ndarray) -> dict:
    return {f"r{k}": round(100 * float((r < k).mean()), 2) for k in (1, 5, 10)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "datasets")
    parser.add_argument("--ms", type=int, nargs="+", default=[300, 150, 100, 60, 30])
    parser.add_argument("--clip-captions", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "beside-candidates.json")
    args = parser.parse_args()
    if not args.data.is_dir():
        raise SystemExit(f"{args.data}: the shared datasets are needed (../shared/datasets)")
    use_home(args.home, args.data, starter=True)
    from engine.search import evidence

    sets = domains(args.data)
    files = [sets[s][0] / f for s in SLICES for f in sets[s][1]]
    service = open_library(args.home, "beside-candidates", files[0].parent, [], extra=files)
    by_name = {Path(m.path).name: m.id for m in service.state.catalog.iter_media()}
    queries, truth, where = [], [], []
    for s in SLICES:
        caps = sets[s][2]
        for f in sets[s][1]:
            chosen = caps[f][: args.clip_captions] if s.startswith("msrvtt") else caps[f]
            queries += chosen
            truth += [by_name[f]] * len(chosen)
            where += [s] * len(chosen)
    where_arr = np.array(where)
    rows = {}
    settings = [("dense", None)] + [(f"M={m}", m) for m in args.ms]
    for label, m in settings:
        evidence.COMPANION_DENSE_LIMIT = 2_000 if m is None else 0
        evidence.BESIDE_CANDIDATES = m
        r, ms = ranks(service, queries, truth)
        rows[label] = {"all": recall(r), "median_ms": round(ms, 2),
                       **{s: recall(r[where_arr == s]) for s in SLICES}}
        print(label, json.dumps(rows[label]), flush=True)
    service.close()
    record = {"command": "python tests/bench/bench_beside_candidates.py " + " ".join(sys.argv[1:]),
              "library": {s: len(sets[s][1]) for s in SLICES}, "queries": len(queries),
              "candidates": evidence.CANDIDATES, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
