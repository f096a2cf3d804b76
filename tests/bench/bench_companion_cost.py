"""What the starter's companions cost (issue #42): embedding an item with each model, and a text query on a library
with the model alone, with its PVSE companion, and with the companion's probabilistic one, in one run.

    python tests/bench/bench_companion_cost.py --home DIR --library mix-2080 [--queries 300]
        [--out bench-results/companion-cost.json]

``--library``: a library of the benchmark home with the shipped starter active (e.g. ``mix-2080``: Flickr8k dev,
webcaps dev and coco-val-80 photos). Embedding: :meth:`TrainedSearch.encode_items` over 512 of its items in the
batches indexing embeds them in, their features read from the store once a batch (what indexing adds after decode
and backbone): the model alone, then with its companion, then with both (``embed_ms_per_item``: each the whole
chain's time, the median of five interleaved runs). Queries: the first ``--queries``
captions of Flickr8k dev through :meth:`engine.workspace.search.Search.rank_text`, each setting timed in turn, p50
and p95 (ms) and their ratio to the model alone, and the share of queries whose photo ranks in the top 10 (R@10 of
the whole library). The items are already embedded; nothing is written.
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--library", default="mix-2080")
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "datasets")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "companion-cost.json")
    args = parser.parse_args()
    from tests.bench.bench_domains import domains, use_home

    if not use_home(args.home, args.data, starter=True):
        return 0
    from engine.library.catalog import MediaStatus
    from engine.workspace import Workspace

    service = Workspace.open(args.library)
    trained = service.models.active_trained()
    heads = trained.companion
    further = heads.companion if heads is not None else None
    state = service.state
    from engine.search.batchreads import BatchReads
    from engine.search.trained import BATCH

    media = list(state.catalog.iter_media(MediaStatus.OK))[:2 * BATCH]
    chains = {"model": [trained], "heads": [trained, heads], "probabilistic": [trained, heads, further]}
    times: dict[str, list[float]] = {name: [] for name, chain in chains.items() if None not in chain}
    for chain in chains.values():
        for model in chain if None not in chain else ():
            model.encode_items(media[:8])  # warm
    for _ in range(5):  # interleaved, medians of five: the machine is noisy
        for name in times:
            started = time.perf_counter()
            for start in range(0, len(media), BATCH):  # as indexing embeds: a batch read once for the whole chain
                reads = BatchReads(state.features)
                for model in chains[name]:
                    model.encode_items(media[start:start + BATCH], reads)
            times[name].append(1000 * (time.perf_counter() - started) / len(media))
    embed = {name: round(float(np.median(values)), 3) for name, values in times.items()}
    _, files, caps = domains(args.data)["flickr8k-dev"]
    pairs = [(f, caps[f][0]) for f in files][:args.queries]
    # a mixed library's files are named "<domain>--<file>" (the session-25 library of three dev sets)
    by_name = {Path(m.path).name.split("--", 1)[-1]: m.id for m in state.catalog.iter_media()}
    pairs = [(f, t) for f, t in pairs if f in by_name]
    settings = {"model alone": (None, None), "with its heads companion": (heads, None),
                "with both companions": (heads, further)}
    times: dict[str, list[float]] = {name: [] for name in settings}
    found: dict[str, list[bool]] = {name: [] for name in settings}
    service.state.evidence = frozenset({"model", "zero_shot", "words"})
    for file, text in pairs:  # interleaved: each setting sees the same machine state
        for name, (first, second) in settings.items():
            trained.companion = first
            if first is not None:
                first.companion = second
            started = time.perf_counter()
            ids, ranking, _, _ = service.search.rank_text(text)
            times[name].append(1000 * (time.perf_counter() - started))
            top = ids[ranking.rows[np.argsort(-ranking.total)[:10]]]
            found[name].append(by_name[file] in set(top.tolist()))
    trained.companion = heads
    if heads is not None:
        heads.companion = further
    base = np.percentile(times["model alone"], [50, 95])
    record = {"library": args.library, "items": state.catalog.counts()["total"] if "total" in state.catalog.counts()
              else None, "embed_ms_per_item": embed, "queries": len(pairs), "query_ms": {}, "r10": {}}
    for name, values in times.items():
        p50, p95 = np.percentile(values, [50, 95])
        record["query_ms"][name] = {"p50": round(float(p50), 2), "p95": round(float(p95), 2),
                                    "p95_ratio": round(float(p95 / base[1]), 2)}
        record["r10"][name] = round(100 * float(np.mean(found[name])), 1)
    print(json.dumps(record, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    service.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
