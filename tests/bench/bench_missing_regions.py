"""Does a model that reads regions rank an item lower when its regions are missing? (session 30)

    python tests/bench/bench_missing_regions.py --home DIR [--domain flickr8k-dev] [--out FILE]

A clip's frames and a photo past the feature store's local-feature cap have no stored 7x7 regions: the pooled
feature stands in for every region (``TrainedSearch._encode_pooled``). For each trained model of the shipped
starter (the starter, its PVSE companion, that one's probabilistic model) every caption of the domain's photos is
a query, the model alone ranks the photos (the K x K best cosine of its vectors): with real regions for all, with
the pooled feature for all, and mixed (the second half of the photos without regions). A model that does not
care whether regions are there ranks each half in the mixed library as it does when all have their regions;
``with_regions`` / ``without_regions`` against ``all_with_regions`` say how much the missing regions cost.
The library is the domain's (as ``bench_domains.py`` makes it) in ``--home``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def recall10(scores: np.ndarray, targets: np.ndarray, keep: np.ndarray) -> float:
    """t2i R@10 (points) of the queries whose target photo is in ``keep`` (a boolean over photos)."""
    from engine.trainercontract.metrics import recall_at

    at = scores[np.arange(len(targets)), targets]
    ranks = 1 + (scores > at[:, None]).sum(1)
    return round(recall_at(ranks[keep[targets]], 10), 1)


def max_cosine(queries: np.ndarray, items: np.ndarray) -> np.ndarray:
    """(Q, N) best cosine over the K x K pairs of each query's and item's vectors (the index's own scoring)."""
    from engine.search.vectorindex.scoring import kxk_scores

    return np.stack([kxk_scores(q, items)[0] for q in queries])


def measure(model, local: np.ndarray, pooled: np.ndarray, captions: list[str], targets: np.ndarray) -> dict:
    runner = model.runner
    reads = "local" in runner.manifest.encoders["image"].input_names
    query = model.encode_text(captions)[0].emb

    def vectors(real: bool) -> np.ndarray:
        out = []
        for start in range(0, len(pooled), 100):
            g = pooled[start:start + 100]
            regions = local[start:start + 100] if real else np.repeat(g[:, None], local.shape[1], 1)
            out.append(runner.encode_image(regions if reads else None, g).emb)
        return np.concatenate(out)

    real, flat = max_cosine(query, vectors(True)), max_cosine(query, vectors(False))
    second = np.arange(len(pooled)) >= len(pooled) // 2
    mixed = np.where(second[None, :], flat, real)
    every = np.ones(len(pooled), bool)
    return {"reads_regions": reads, "all_with_regions": recall10(real, targets, every),
            "all_without_regions": recall10(flat, targets, every),
            "mixed": {"with_regions": recall10(mixed, targets, ~second),
                      "without_regions": recall10(mixed, targets, second)},
            "all_with_regions_by_half": {"first": recall10(real, targets, ~second),
                                         "second": recall10(real, targets, second)}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "datasets")
    parser.add_argument("--domain", default="flickr8k-dev")
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "missing-regions.json")
    args = parser.parse_args()
    from tests.bench.bench_domains import domains, open_library, use_home, write_json

    if not use_home(args.home, args.data):
        return 0
    images, files, caps = domains(args.data)[args.domain]
    service = open_library(args.home, args.domain, images, files)
    try:
        service.search.rank_text("a photo")  # opens the model and its companions
        trained = service.state._trained
        models = {"starter": trained, "companion": getattr(trained, "companion", None)}
        models["probabilistic"] = getattr(models["companion"], "companion", None)
        media = {Path(m.path).name: m for m in service.state.catalog.iter_media()}
        hashes = [media[f].content_hash for f in files]
        records = trained.features.get_many(hashes, trained.encoders.backbone.id, ("global", "local"))
        if any(records[h].local is None for h in hashes):
            raise SystemExit("some photos have no stored regions (past the local-feature cap): use a smaller domain")
        pooled = np.stack([records[h].global_ for h in hashes]).astype(np.float32)
        local = np.stack([records[h].local for h in hashes]).astype(np.float32)
        captions = [c for f in files for c in caps[f]]
        targets = np.array([i for i, f in enumerate(files) for _ in caps[f]])
        record = {"domain": args.domain, "photos": len(files), "queries": len(captions),
                  "models": {name: measure(model, local, pooled, captions, targets)
                             for name, model in models.items() if model is not None}}
    finally:
        service.close()
    write_json(args.out, record)
    print(record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
