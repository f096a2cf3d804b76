"""Variants of the fused ranking, judged on the train side (issue #30): is the zero-shot semantics' per-word concept
term worth its cost at query time, and does a per-query weight beat the fixed one?

    python tests/bench/bench_fusion_variants.py --home DIR [--tag=-v2] [--out bench-results/fusion-variants.md]

Uses bench_domains.py's libraries (the same home and tag). For each domain the raw scores of every caption
against every photo are computed once: the model, the zero-shot semantics with its three terms, and without the
concept term (which needs a second MiniLM pass over the query's words). Variants, each column z-scored over the
library and summed as :func:`engine.search.evidence.fuse` does:

- ``fixed w``: the zero-shot weight w for every query (0.2: today's default, ``MODEL`` = 0.8);
- ``per query``: w = a + b * clip((s - 0.3) / 0.3, 0, 1), s the query sentence's best cosine to a class name
  (how confidently the query speaks of ImageNet things), a and b on a small grid.

The choice is read on the two train-side slices only (bench_domains.py ``--sweep``); the dev rows are reported.
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

TRAIN = ("flickr8k-train-slice", "webcaps-train-slice")
DEV = ("flickr8k-dev", "webcaps-dev", "coco-val-80")


def score_columns(home: Path, name: str, tag: str, sets: dict) -> dict[str, np.ndarray]:
    """Raw (items, captions) scores of the model and both zero-shot variants, and each caption's features."""
    from engine.search import evidence
    from tests.bench.bench_domains import open_library

    images, files, caps = sets[name]
    service = open_library(home, name + tag, images, files)
    by_path = {Path(m.path).name: m.id for m in service.state.catalog.iter_media()}
    queries = [(f, c) for f in files for c in caps[f]]
    ids, index = service.state.indexes.zero_shot()
    trained = service.models.active_trained()
    rows = np.arange(len(ids))
    model, full, sentence_only, confidence = [], [], [], []
    for _, text in queries:
        stock = service.state.encoders.minilm.encode([text])
        sentence = stock.sentence[0]
        _, words = service.state.indexes.zero_shot_query(text, sentence=sentence)
        encoded, _ = trained.encode_text([text], minilm=stock)
        model.append(evidence.ModelEvidence(trained, encoded, ids).score(rows))
        source = evidence.ZeroShotEvidence(index, sentence, words)
        full.append(source.score(rows))
        sentence_only.append(evidence.ZeroShotEvidence(index, sentence, words[:0]).score(rows))
        confidence.append(float(source.query.sims.max()))
    row_of = {int(m): r for r, m in enumerate(ids.tolist())}
    service.close()
    return {"model": np.stack(model, 1), "zero_shot": np.stack(full, 1), "sentence_only": np.stack(sentence_only, 1),
            "confidence": np.array(confidence), "truth": np.array([row_of[by_path[f]] for f, _ in queries]),
            "active": trained.record.name}


def zscore(m: np.ndarray) -> np.ndarray:
    return (m - m.mean(0)) / np.maximum(m.std(0), 1e-9)


def judged(columns: dict, zero_shot: str, weight: np.ndarray) -> dict:
    from engine.trainercontract.metrics import retrieval_report

    fused = (1 - weight)[None] * zscore(columns["model"]) + weight[None] * zscore(columns[zero_shot])
    r = retrieval_report(fused.astype(np.float64), columns["truth"])
    return {"t2i_r10": round(r["t2i"]["r10"], 1), "rsum": round(r["rsum"], 1)}


def variants(confidence: np.ndarray) -> dict[str, tuple[str, np.ndarray]]:
    out = {f"fixed {w}, three terms": ("zero_shot", np.full(len(confidence), w)) for w in (0.15, 0.2, 0.25)}
    out["fixed 0.2, no concept term"] = ("sentence_only", np.full(len(confidence), 0.2))
    for a, b in itertools.product((0.1, 0.15), (0.1, 0.2)):
        out[f"per query a={a} b={b}"] = ("zero_shot", a + b * np.clip((confidence - 0.3) / 0.3, 0, 1))
    return out


def main() -> int:
    from tests.bench.bench_domains import domains, use_home

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "datasets")
    parser.add_argument("--tag", default="")
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "fusion-variants.md")
    args = parser.parse_args()
    if not use_home(args.home, args.data):
        return 0
    sets = domains(args.data)
    columns = {name: score_columns(args.home, name, args.tag, sets) for name in (*TRAIN, *DEV)}
    names = list(variants(np.zeros(1)))
    table = {v: {d: judged(columns[d], *variants(columns[d]["confidence"])[v]) for d in columns} for v in names}
    lines = [f"# Fusion variants (model: {columns[TRAIN[0]]['active']}; `tests/bench/bench_fusion_variants.py`)", "",
             "t2i R@10 / rsum; the choice reads the train-side columns only.", "",
             "| variant | " + " | ".join(columns) + " | train mean rsum |", "|---" * (len(columns) + 2) + "|"]
    for v in names:
        train = np.mean([table[v][d]["rsum"] for d in TRAIN])
        lines.append(f"| {v} | " + " | ".join(f"{table[v][d]['t2i_r10']} / {table[v][d]['rsum']}" for d in columns)
                     + f" | {train:.1f} |")
    args.out.write_text("\n".join(lines) + "\n")
    args.out.with_suffix(".json").write_text(json.dumps(table, indent=1) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
