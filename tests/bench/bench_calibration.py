"""What the user writes helps where it matches and nowhere else, and the words about a match mean something
(issue #40), measured on dev libraries as a user lives them.

    python tests/bench/bench_calibration.py --home DIR [--data ../shared/datasets]
        [--domains flickr8k-dev webcaps-dev coco-val-80] [--tag -v1] [--out bench-results/calibration-dev.json]
        [--uncalibrated]

Each domain is a fresh library of its dev photos with the shipped starter active (never trained on them). Through
the app's own ranking (:meth:`engine.workspace.search.Search.rank_text`, every item of the library ranked):

- ``before``: 300 photos (seeded) asked by one seeded caption each, nothing written by the user: R@10 over the whole
  library, beside the same ranking's dense part alone (the fused model + zero-shot order before #40), and how many
  of the true photos in the top 10 are said good or strong;
- ``reliability``: the top 10 of every ``before`` query, binned by predicted probability against the observed rate
  of the true photo, and the expected calibration error (ECE, weighted by bin size);
- ``made_up``: 100 queries of made-up words (a generator unlike the fit's): how many get no good or strong hit;
- ``after``: 100 *other* photos each captioned once with one of their own captions (the ordinary captions users
  write), the same 300 queries: R@10 over the whole library, the captioned share of the top-10 places, and how
  often a captioned photo is first (against their share of the library). coco-val-80 (80 photos) has no room for
  it and asks all of its captions instead.

``--uncalibrated``: the hand-set sum of z-scores (no calibration file), for comparison.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

ONSETS = ("br", "kl", "dr", "st", "fl", "gr", "sn", "pl", "tw", "qu", "sk", "thr", "v", "z", "m", "n")
VOWELS = ("a", "e", "i", "o", "u", "ai", "oo", "ee")
CODAS = ("p", "x", "mp", "nk", "rb", "sh", "lf", "tt", "zz", "g", "ck", "")


def made_up_words(rng: random.Random) -> str:
    words = ["".join(rng.choice(p) for p in (ONSETS, VOWELS, CODAS, VOWELS, CODAS)) for _ in range(rng.randint(1, 5))]
    return " ".join(words)


def ranked(service, text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """``(ids best first, the probabilities in that order or None, the dense part's order, ids)``."""
    ids, ranking, _, _ = service.search.rank_text(text)
    order = ranking.order()
    best = ids[ranking.rows[order]]
    prob = ranking.parts.get("probability")
    dense = ranking.parts.get("dense")
    dense_best = ids[ranking.rows[np.lexsort((ranking.rows, -dense))]] if dense is not None else None
    return best, (prob[order] if prob is not None else None), dense_best, ranking


def reliability(pred: list[float], obs: list[bool], bins: int = 10) -> dict:
    pred_a, obs_a = np.array(pred), np.array(obs, float)
    edges = [0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0001][: bins + 1]
    rows, ece = [], 0.0
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        inside = (pred_a >= lo) & (pred_a < hi)
        if inside.any():
            mean_p, rate = float(pred_a[inside].mean()), float(obs_a[inside].mean())
            ece += inside.sum() * abs(mean_p - rate)
            rows.append({"from": lo, "to": min(hi, 1.0), "n": int(inside.sum()), "predicted": round(mean_p, 4),
                         "observed": round(rate, 4)})
    return {"bins": rows, "ece": round(ece / max(len(pred_a), 1), 4), "n": len(pred_a)}


def run_domain(home: Path, data: Path, domain: str, tag: str) -> dict:
    from tests.bench.bench_domains import domains, open_library

    images, files, caps = domains(data)[domain]
    service = open_library(home, domain + tag, images, files)
    service.models.activate("starter")
    service.state.evidence = frozenset({"model", "zero_shot", "words"})
    by_name = {Path(m.path).name: m.id for m in service.state.catalog.iter_media()}
    for caption in list(service.state.catalog.iter_captions("user")):
        service.annotations.delete_caption(caption.id)
    for pair in service.state.catalog.pairs():
        service.annotations.delete_pair(pair.id)
    rng = random.Random(0)
    order = files[:]
    rng.shuffle(order)
    harm = len(files) >= 500
    if harm:
        captioned, asked = order[:100], order[100:400]
        queries = [(f, random.Random(f).choice(caps[f])) for f in asked]
    else:
        captioned, queries = [], [(f, c) for f in files for c in caps[f]]
    out: dict = {"domain": domain, "photos": len(files), "queries": len(queries)}
    started = time.monotonic()

    def measure(state: str) -> dict:
        hit10 = hit10_dense = first_captioned = said = in10 = 0
        share10 = []
        pred, obs = [], []
        taken = {by_name[f] for f in captioned} if state == "after" else set()
        for f, q in queries:
            best, prob, dense_best, ranking = ranked(service, q)
            target = by_name[f]
            top = best[:10].tolist()
            hit10 += target in top
            if dense_best is not None:
                hit10_dense += target in dense_best[:10].tolist()
            if taken:
                share10.append(np.mean([m in taken for m in top]))
                first_captioned += top[0] in taken
            if prob is not None:
                pred += prob[:10].tolist()
                obs += [m == target for m in top]
                if target in top:
                    in10 += 1
                    said += ranking.calibrated.word(float(prob[top.index(target)])) != "weak"
        n = len(queries)
        record = {"r10_whole_library": round(100 * hit10 / n, 1)}
        if state == "before":
            record["r10_dense_only"] = round(100 * hit10_dense / n, 1)
        if taken:
            record["captioned_share_of_library"] = round(100 * len(taken) / len(files), 1)
            record["captioned_share_of_top10"] = round(100 * float(np.mean(share10)), 1)
            record["captioned_first"] = round(100 * first_captioned / n, 1)
        if pred:
            record["true_in_top10_said_good_or_strong"] = round(100 * said / max(in10, 1), 1)
            record["reliability_top10"] = reliability(pred, obs)
        return record

    out["before"] = measure("before")
    print(domain, "before", json.dumps({k: v for k, v in out["before"].items() if k != "reliability_top10"}),
          flush=True)
    made_rng = random.Random(2026)
    made = [made_up_words(made_rng) for _ in range(100)]
    quiet = 0
    words_of = []
    for q in made:
        hits = service.search.text(q, top=10)
        words_of.append(hits[0].match if hits else None)
        quiet += all(h.match in (None, "weak") for h in hits) if hits and hits[0].match is not None else 0
    out["made_up"] = {"queries": len(made), "no_good_match": quiet, "examples": made[:5],
                      "calibrated": words_of[0] is not None}
    print(domain, "made_up", json.dumps(out["made_up"]), flush=True)
    if harm:
        for f in captioned:
            service.annotations.add_caption(by_name[f], random.Random(f + "/caption").choice(caps[f]))
        out["after"] = measure("after")
        print(domain, "after", json.dumps({k: v for k, v in out["after"].items() if k != "reliability_top10"}),
              flush=True)
        for caption in list(service.state.catalog.iter_captions("user")):
            service.annotations.delete_caption(caption.id)
    out["wall_s"] = round(time.monotonic() - started, 1)
    service.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "datasets")
    parser.add_argument("--domains", nargs="*", default=["flickr8k-dev", "webcaps-dev", "coco-val-80"])
    parser.add_argument("--tag", default="", help="appended to each library's name")
    parser.add_argument("--uncalibrated", action="store_true", help="the hand-set sum of z-scores, for comparison")
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "calibration-dev.json")
    args = parser.parse_args()
    from tests.bench.bench_domains import use_home

    if not use_home(args.home, args.data, starter=True):
        return 0
    if args.uncalibrated:
        from engine.search import calibration

        calibration.load = lambda kind, path=None: None
    results = {"calibrated": not args.uncalibrated,
               "domains": [run_domain(args.home, args.data, d, args.tag) for d in args.domains]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
