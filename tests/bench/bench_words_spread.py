"""Where the user's words spread (issue #31): neighbour spaces and kernels scored on the app's own rankings.

    python tests/bench/bench_words_spread.py --home DIR [--tag=-v2] [--model NAME]
        [--out bench-results/words-spread-train-slice.json]

The train side only (the 500 Flickr8k train photos the starter held aside): the named dogs of
``bench_words.py --split train-slice`` and its general loop. Each query is ranked once by the app
(:meth:`engine.workspace.search.Search.rank_text`) with the spread switched off; a variant then adds its own spread
to that ranking exactly as the app does (``words = max(direct match, spread)``, :data:`engine.search.evidence.WORDS`
z-units), so every variant is scored against the same model, zero-shot semantics and direct matches. ``--model``:
the dogs with a model retrained on their captions (``bench_words.py --split train-slice --retrain`` leaves it).
The choice and its rule: docs/benchmarks.md, "The user's words at query time".
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

VARIANTS: list[tuple[str, dict]] = [  # (space, kernel)
    ("model", {"kind": "rank", "top": 100, "floor": 0.3}),  # last session's spread
    ("model", {"kind": "rank", "top": 200, "floor": -1.0}),
    ("globals", {"kind": "rank", "top": 200, "floor": 0.3}),
    ("globals", {"kind": "rank", "top": 200, "floor": -1.0}),
    ("gem3", {"kind": "rank", "top": 200, "floor": 0.3}),
    ("max", {"kind": "rank", "top": 200, "floor": 0.3}),
    ("model centred", {"kind": "rank", "top": 200, "floor": 0.0}),
    ("model centred + globals centred", {"kind": "rank", "top": 200, "floor": 0.0}),
    ("globals centred", {"kind": "prototype", "z0": 1.0, "z1": 3.0}),
    ("globals centred", {"kind": "rank", "top": 200, "floor": 0.0}),  # the app's now
    ("globals centred", {"kind": "rank", "top": 100, "floor": 0.0}),
    ("globals centred", {"kind": "rank", "top": 300, "floor": 0.0}),
    ("globals centred", {"kind": "rank", "top": 200, "floor": 0.1}),
    ("globals centred", {"kind": "rank", "top": 200, "floor": 0.0, "share": 0.5}),
    ("globals centred", {"kind": "rank", "top": 200, "floor": 0.0, "share": 1.5}),
    ("globals centred", {"kind": "rank", "top": 200, "floor": 0.0, "prior": 1}),
    ("globals centred", {"kind": "rank", "top": 200, "floor": 0.0, "prior": 6}),
]


def unit(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-9)


def centred(x: np.ndarray) -> np.ndarray:
    return unit(x - x.mean(axis=0))


def spaces(service, ids: np.ndarray) -> dict[str, np.ndarray]:
    """Unit rows (N, D) per candidate neighbour space, in ``ids`` order."""
    model = unit(service.models.active_trained().index.get(ids).mean(axis=1))
    _, globals_ = service.state.indexes.global_matrix()
    _, hashes = service.state.indexes.ok_items()
    local = service.state.features.stack(hashes, service.state.encoders.backbone.id, "local").astype(np.float32)
    gem3 = unit(((np.maximum(local, 0) + 1e-6) ** 3).mean(axis=1) ** (1 / 3))  # GeM pooling, p = 3
    both = unit(np.concatenate([centred(model), centred(globals_)], axis=1))
    return {"model": model, "globals": globals_, "gem3": gem3, "max": unit(local.max(axis=1)),
            "model centred": centred(model), "globals centred": centred(globals_),
            "model centred + globals centred": both}


def capture(service, queries: list[tuple[str, str, str]], by_name: dict[str, int]) -> list[dict]:
    """Per ``(group, photo, query)``: the app's ranking without the spread (``base``), the direct matches of the
    user's words and the labels and novelty the spread would read."""
    import engine.search.words as words
    from engine.search.evidence import WORDS

    seen: dict = {}

    def no_spread(labels, neighbours, novelty=None):
        seen.update(labels=labels, novelty=dict(novelty or {}))
        return {}

    kept, words.spread = words.spread, no_spread
    out = []
    try:
        for group, photo, query in queries:
            seen.clear()
            ids, ranking, _, _ = service.search.rank_text(query)
            total = np.empty(len(ids), np.float32)
            total[ranking.rows] = ranking.total
            direct = np.zeros(len(ids), np.float32)
            if "words" in ranking.parts:
                direct[ranking.rows] = ranking.parts["words"]
            out.append({"group": group, "target": by_name[photo], "base": total - WORDS * direct, "direct": direct,
                        "labels": seen.get("labels", {}), "novelty": seen.get("novelty", {})})
    finally:
        words.spread = kept
    return out


def kernel(sim: np.ndarray, rows: np.ndarray, cfg: dict) -> np.ndarray:
    """A label's spread (N,) before its weight, from the similarities (N, N) of the library's items."""
    prior = cfg.get("prior", 3)
    n = sim.shape[1]
    if cfg["kind"] == "rank":  # as engine.search.words.spread: 1 - r / top over each item's neighbours
        total = np.zeros(n, np.float32)
        for r in rows:
            s = sim[r].copy()
            s[r] = -np.inf
            order = np.argsort(-s)[:cfg["top"]]
            k = 1.0 - np.arange(len(order)) / cfg["top"]
            k[s[order] < cfg["floor"]] = 0.0
            total[order] += k
        return total / (len(rows) + prior)
    mean = sim[rows].mean(axis=0)  # a prototype: the mean similarity to the label's items, z over the others
    others = np.setdiff1d(np.arange(n), rows)
    z = (mean - mean[others].mean()) / max(float(mean[others].std()), 1e-9)
    k = np.clip((z - cfg["z0"]) / (cfg["z1"] - cfg["z0"]), 0.0, 1.0)
    k[rows] = 0.0
    return k * len(rows) / (len(rows) + prior)


def score(records: list[dict], ids: np.ndarray, taken: set[int], space: np.ndarray, cfg: dict) -> dict:
    """R@10 among the uncaptioned photos per group and their mean, with this variant's spread."""
    from engine.search.evidence import WORDS

    position = {int(m): i for i, m in enumerate(ids.tolist())}
    out_of = np.isin(ids, list(taken))
    sim = space @ space.T
    cache: dict = {}
    hits: dict[str, list[bool]] = {}
    for rec in records:
        shared = np.zeros(len(ids), np.float32)
        for term, (weight, items) in rec["labels"].items():
            weight *= rec["novelty"].get(term, 1.0)
            if weight <= 0 or not items:
                continue
            if (term, items) not in cache:
                cache[term, items] = kernel(sim, np.array([position[m] for m in items]), cfg)
            shared += cfg.get("share", 1.0) * weight * cache[term, items]
        total = rec["base"] + WORDS * np.maximum(rec["direct"], shared)
        total[out_of] = -np.inf
        hits.setdefault(rec["group"], []).append(position[rec["target"]] in np.argsort(-total, kind="stable")[:10])
    per = {g: round(100 * float(np.mean(h)), 1) for g, h in hits.items()}
    return {"mean": round(float(np.mean(list(per.values()))), 1), **per}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "datasets" / "flickr8k")
    parser.add_argument("--tag", default="")
    parser.add_argument("--model", default="starter", help="the dogs' library's model (default the starter)")
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "words-spread-train-slice.json")
    args = parser.parse_args()
    from tests.bench.bench_domains import open_library, use_home

    if not use_home(args.home, args.data, starter=True):
        return 0
    from tests.bench.bench_words import caption_hundred, dog_photos, name_dogs

    files, caps, dogs = dog_photos(args.data, "train-slice")
    results: dict = {"model": args.model, "variants": []}
    tests = {}
    service = open_library(args.home, f"words-train-slice{args.tag}", args.data / "images", files)
    service.models.activate("starter")
    by_name = {Path(m.path).name: m.id for m in service.state.catalog.iter_media()}
    _, queries, taken = name_dogs(service, files, caps, dogs, by_name)
    service.models.activate(args.model)
    service.state.evidence = frozenset({"model", "zero_shot", "words"})
    records = capture(service, [(n, f, q) for n, qs in queries.items() for f, q in qs], by_name)
    ids = service.state.indexes.zero_shot()[0]
    tests["dogs"] = (records, ids, taken, spaces(service, ids))
    service.close()
    if args.model == "starter":  # the general loop, as bench_words.general
        service = open_library(args.home, f"words-train-slice-general{args.tag}", args.data / "images", files)
        by_name, order = caption_hundred(service, files, caps)
        service.state.evidence = frozenset({"model", "zero_shot", "words"})
        records = capture(service, [("general", f, q) for f in order[100:400] for q in caps[f]], by_name)
        ids = service.state.indexes.zero_shot()[0]
        tests["general"] = (records, ids, {by_name[f] for f in order[:100]}, spaces(service, ids))
        service.close()
    for space, cfg in VARIANTS:
        row = {"space": space, **cfg}
        for test, (records, ids, taken, found) in tests.items():
            row[test] = score(records, ids, taken, found[space], cfg)
        results["variants"].append(row)
        print(json.dumps(row), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
