"""A second trained model beside the starter, as one more kind of evidence in the one ranking (issue #42, a measurement
before any such model ships).

    python tests/bench/bench_companion.py --home DIR --companion MODEL_DIR [--data ../shared/datasets]
        [--domains flickr8k-train-slice webcaps-train-slice] [--shares 0 0.25 0.5 0.75] [--beside]
        [--out bench-results/companion.json]

Each domain is a library of its photos with the shipped starter active (tests/bench/bench_domains.py's
libraries); ``MODEL_DIR`` (e.g. a PVSE starter built by ``tools/build_starter.py --method pvse``) is registered
beside it and embeds every item. Every caption of the domain is a query through the app's own ranking
(:meth:`engine.workspace.search.Search.rank_text`), with the companion's score (its K x K best cosine) as a further
dense kind: of the trained models' weight (:data:`engine.search.evidence.MODEL`) the companion takes ``share`` and
the starter the rest; the calibration is the shipped one (fitted without the companion). Reported per share: the
app's t2i / i2t R@K and rsum of the calibrated total. Choose the share on the train-side slices; dev once after.

``--beside``: the model is a further kind beside the starter's own shipped companion (which ranks as the app ranks
it), taking ``share`` of all the trained models' weight (e.g. a probabilistic model for its uncertainty, #42).
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


def with_companion(state: dict, kind: str = "companion") -> None:
    """Make :func:`engine.search.evidence.fuse` add ``state["companion"]``'s score (a TrainedSearch) of the query in
    ``state["text"]`` as the dense ``kind``, weighted ``state["share"]`` of the trained models' weight (the model's,
    and with ``kind`` "further" its shipped companion's too)."""
    from engine.search import evidence

    fuse, weights = evidence.fuse, evidence.weights
    trained = ("model", "companion") if kind != "companion" else ("model",)

    def fuse_with(dense, rows, sample=None, **kwargs):
        if "model" in dense and state["share"] > 0:
            companion = state["companion"]
            encoded, _ = companion.encode_text([state["text"]])
            dense = {**dense, kind: evidence.ModelEvidence(companion, encoded, dense["model"].ids, kind)}
        return fuse(dense, rows, sample, **kwargs)

    def weights_with(sources, user_share=0.0):
        out = weights([s for s in sources if s != kind], user_share)
        if kind in sources:
            out[kind] = sum(out.get(t, 0.0) for t in trained) * state["share"]
            for t in trained:
                if t in out:
                    out[t] *= 1.0 - state["share"]
        return out

    evidence.fuse, evidence.weights = fuse_with, weights_with


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--companion", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "datasets")
    parser.add_argument("--domains", nargs="+", default=["flickr8k-train-slice", "webcaps-train-slice"])
    parser.add_argument("--shares", type=float, nargs="+", default=[0.0, 0.25, 0.5, 0.75])
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "companion.json")
    parser.add_argument("--beside", action="store_true", help="a further kind beside the shipped companion")
    args = parser.parse_args()
    from engine.search.trained import TrainedSearch
    from tests.bench.bench_domains import domains, open_library, report, use_home, write_json

    if not use_home(args.home, args.data, starter=True):
        return 0
    sets = domains(args.data)
    state = {"text": "", "share": 0.0, "companion": None}
    with_companion(state, "further" if args.beside else "companion")
    results = []
    for name in args.domains:
        images, files, caps = sets[name]
        started = time.monotonic()
        service = open_library(args.home, name, images, files)
        service.models.activate("starter")
        service.state.evidence = frozenset({"model", "zero_shot"})
        companion = args.companion.resolve()
        registered = service.models.register(companion, name=f"companion-{companion.name}")
        lib = service.state  # not ``state``: that is the hook's
        companion = TrainedSearch.open(lib.catalog.model(registered), lib.catalog, lib.features, lib.encoders,
                                       service.library_dir)
        for _ in companion.sync():
            pass
        state["companion"] = companion
        by_path = {Path(m.path).name: m.id for m in service.state.catalog.iter_media()}
        queries = [(f, c) for f in files for c in caps[f]]
        record: dict = {"domain": name, "photos": len(files), "captions": len(queries),
                        "companion": str(args.companion), "shares": {}}
        for share in args.shares:
            state["share"] = share
            columns, ids = [], None
            for _, caption in queries:
                state["text"] = caption
                ids, ranking, _, _ = service.search.rank_text(caption)
                column = np.full(len(ids), -np.inf, np.float32)
                column[ranking.rows] = ranking.total
                columns.append(column)
            row_of = {int(m): r for r, m in enumerate(ids.tolist())}
            truth = np.array([row_of[by_path[f]] for f, _ in queries])
            record["shares"][str(share)] = report(np.stack(columns, axis=1), truth)
            print(name, share, json.dumps(record["shares"][str(share)]), flush=True)
        record["wall_s"] = round(time.monotonic() - started, 1)
        results.append(record)
        service.close()
    write_json(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
