"""Fit the calibrated ranking (issue #40, :mod:`engine.search.calibration`) on held-aside train-side libraries.

    python tools/fit_calibration.py --home DIR [--data ../shared/datasets] [--out resources/calibration.json]
        [--rows DIR/calibration-rows.npz] [--report bench-results/calibration-fit.json]

Libraries: the 500 Flickr8k *train* photos the starter held aside (they chose its epoch, never trained it),
1,000 webcaps *train* photos it never saw and the 200 MSR-VTT *train* clips it held aside (real videos, issue #41;
tests/bench/bench_domains.py's train slices). Never a dev split.

Situations, each searched through the app's own ranking (:meth:`engine.workspace.search.Search.rank_text`), every
item of the library a row (label 1: the photo the query's caption was written for):

- ``plain``: one caption of each of up to 400 photos as the query, nothing written by the user;
- ``captioned``: 100 other photos captioned once with one of their captions (the ordinary captions users write),
  200 of the same queries again, plus queries for the captioned photos (another caption where the photo has one),
  weighed as the captioned share of the library (a user asks about them that often);
- ``names``: on the Flickr8k slice, three dogs named by the user (tests/bench/bench_words.py's train-slice dogs:
  half of each dog's photos captioned with a caption saying its name), queried by bare name (every photo of the
  dog a match); on both slices, 30 photos each given a made-up name in their caption, queried by the name alone
  and by the name with the rest of a caption;
- ``look-alikes``: the renamed captions of the named dogs' *other* photos (their captioned photos unjudged);
- ``nonsense``: 80 queries of made-up words (no item matches).

Two fits: ``model`` (the starter's ranking: model, zero-shot semantics, the user's words) and ``zero_shot`` (no
model). A logistic model (Newton's method, a little L2) over :data:`engine.search.calibration.FEATURES`, with the
library's size as an offset (log-odds fall by log N: one item in N is the caption's), each query weighing the same.
The strong / good thresholds: good is the highest probability below which at most 10 % of the true photos ranked
in the top 10 fall (train side), strong 0.5.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SYLLABLES = ("blor", "quiz", "zle", "wam", "mo", "frin", "dle", "snar", "vex", "tork", "glim", "pla", "zu", "kro",
             "nib", "dax", "yol", "fep", "grun", "osk", "tri", "vum", "jad", "plo")


def made_up(rng: random.Random, syllables: int = 2) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(syllables))


def clear(service) -> None:
    for caption in list(service.state.catalog.iter_captions("user")):
        service.annotations.delete_caption(caption.id)
    for pair in service.state.catalog.pairs():
        service.annotations.delete_pair(pair.id)


def collect(service, queries: list[tuple[str, set[int]]], situation: str, out: list,
            unjudged: set[int] = frozenset(), captioned: set[int] = frozenset(), weight: float = 1.0) -> None:
    """One record per query: the features of every item and the labels; ``unjudged`` items (a named dog's
    captioned photos, for a query about another photo of it) count neither way, as in bench_words.py."""
    for text, positives in queries:
        ids, ranking, _, _ = service.search.rank_text(text)
        n = len(ids)
        order = np.argsort(ranking.rows)
        assert len(ranking.rows) == n
        feats = {}
        for name in ("dense", "model", "lexical", "semantic", "spread", "novel", "described"):
            part = ranking.parts.get(name)
            feats[name] = np.zeros(n, np.float32) if part is None else np.asarray(part, np.float32)[order]
        label = np.isin(ids, np.fromiter(positives, np.int64, len(positives)))
        judged = ~np.isin(ids, np.fromiter(unjudged, np.int64, len(unjudged))) | label
        out.append({"situation": situation, "text": text, "familiar": ranking.query["familiar"],
                    "share": ranking.query["share"],
                    "log_items": ranking.query["log_items"], "label": label, "judged": judged,
                    "captioned": np.isin(ids, np.fromiter(captioned, np.int64, len(captioned))),
                    "weight": weight, **feats})


def library_queries(service, files, caps, by_name, rng, count=400):
    """``(query, {positive id})`` for up to ``count`` photos (a seeded caption each), and the photos left over."""
    order = files[:]
    rng.shuffle(order)
    asked = order[:count]
    return [(rng.choice(caps[f]), {by_name[f]}) for f in asked], order[count:]


def situations(service, domain: str, files, caps, data: Path, rng: random.Random, out: list) -> None:
    by_name = {Path(m.path).name: m.id for m in service.state.catalog.iter_media()}
    clear(service)
    queries, rest = library_queries(service, files, caps, by_name, rng, count=min(400, len(files) - 100))
    collect(service, queries, "plain", out)
    captioned = rest[:100]
    own = []
    for f in captioned:
        text = rng.choice(caps[f])
        service.annotations.add_caption(by_name[f], text)
        others = [c for c in caps[f] if c != text]
        own.append((rng.choice(others) if others else text, {by_name[f]}))
    # a user asks about a captioned photo as often as captioned photos are in the library: the queries about the
    # captioned photos weigh so that they are that share of the situation (a tenth on 1,000 photos)
    share = len(captioned) / len(files)
    ids = {by_name[f] for f in captioned}
    collect(service, queries[:200], "captioned", out, captioned=ids)
    collect(service, own, "captioned", out, captioned=ids, weight=share * 200 / ((1 - share) * len(own)))
    named = []
    if domain.startswith("flickr8k"):  # the user names three dogs (this clears the captions above), then captions
        from tests.bench.bench_words import DOGS, dog_photos, name_dogs

        _, _, dogs = dog_photos(data / "flickr8k", "train-slice")
        _, dog_queries, taken = name_dogs(service, files, caps, dogs, by_name)
        for f in captioned[:50]:  # ordinary captions beside the names
            service.annotations.add_caption(by_name[f], rng.choice(caps[f]))
        for colour, name in DOGS.items():
            named.append((name, {by_name[f] for f in dogs[colour]}))
            others = [(q, {by_name[f]}) for f, q in rng.sample(dog_queries[name], min(25, len(dog_queries[name])))]
            collect(service, others, "look-alikes", out, unjudged=taken)
    # made-up names: a photo's caption with a name in front, queried by the name and by the name with a caption
    for f in rng.sample(files, 30):
        name = made_up(rng).capitalize()
        service.annotations.add_caption(by_name[f], f"{name}: {rng.choice(caps[f])}")
        named += [(name, {by_name[f]}), (f"{name} {rng.choice(caps[f])}", {by_name[f]})]
    collect(service, named, "names", out)
    nonsense = [(" ".join(made_up(rng, rng.randint(2, 3)) for _ in range(rng.randint(2, 5))), set())
                for _ in range(80)]
    collect(service, nonsense, "nonsense", out)
    clear(service)


def design(records: list, features: list[str], equal: bool = False, weigh: dict[str, float] | None = None
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The rows of a fit, features as :func:`engine.search.evidence.fuse` makes them: ``(X, y, offset, weight)``,
    every item of every query a row (an unjudged item weighs 0, a query its situation's weight; ``equal``: each
    situation as much as any other; ``weigh``: a situation's queries times this)."""
    from engine.search import calibration

    counts: dict[str, float] = {}
    for r in records:
        counts[r["situation"]] = counts.get(r["situation"], 0.0) + r.get("weight", 1.0)
    each = sum(counts.values()) / len(counts)  # every situation weighs the same in all (--equal-situations)
    xs, ys, offs, ws = [], [], [], []
    for r in records:
        n = len(r["label"])
        made = calibration.features(r["dense"], r["share"], 1000, r["model"], r["lexical"], r["semantic"],
                                    r["spread"], r["novel"], r.get("described"))
        cols = [np.full(n, float(made[f])) if np.ndim(made[f]) == 0 else np.asarray(made[f], np.float64)
                for f in features]
        xs.append(np.stack(cols, axis=1))
        ys.append(r["label"].astype(np.float64))
        offs.append(np.full(n, -r["log_items"]))
        extra = (each / counts[r["situation"]] if equal else 1.0) * (weigh or {}).get(r["situation"], 1.0)
        ws.append(r["judged"].astype(np.float64) * r.get("weight", 1.0) * extra)
    return np.concatenate(xs), np.concatenate(ys), np.concatenate(offs), np.concatenate(ws)


def fit_logistic(x: np.ndarray, y: np.ndarray, offset: np.ndarray, weight: np.ndarray, l2: float = 1.0
                 ) -> tuple[np.ndarray, float]:
    """Weighted logistic regression with an offset (L-BFGS on the exact gradient; a ridge of ``l2`` on the
    coefficients only: about one query's worth of evidence)."""
    from scipy.optimize import minimize

    xb = np.hstack([x, np.ones((len(x), 1))])
    ridge = np.full(xb.shape[1], l2)
    ridge[-1] = 0.0

    def loss(beta: np.ndarray) -> tuple[float, np.ndarray]:
        z = xb @ beta + offset
        value = float(weight @ (np.logaddexp(0.0, z) - y * z)) + 0.5 * float(ridge @ beta ** 2)
        p = 1.0 / (1.0 + np.exp(-np.clip(z, -40, 40)))
        return value, xb.T @ (weight * (p - y)) + ridge * beta

    beta = minimize(loss, np.zeros(xb.shape[1]), jac=True, method="L-BFGS-B", options={"maxiter": 500}).x
    return beta[:-1], float(beta[-1])


def probabilities(records, features, coef, intercept) -> list[np.ndarray]:
    x, _, off, _ = design(records, features)
    p = 1 / (1 + np.exp(-(x @ coef + intercept + off)))
    out, at = [], 0
    for r in records:
        out.append(p[at:at + len(r["label"])])
        at += len(r["label"])
    return out


def report(records, probs, good: float, strong: float) -> dict:
    """Per situation: R@1/R@10 of the positives, the share of true photos in the top 10 said good or strong, the
    share of nonsense queries with any good/strong hit, and the expected calibration error of the top 10."""
    out = {}
    for situation in sorted({r["situation"] for r in records}):
        chosen = [(r, p) for r, p in zip(records, probs, strict=True) if r["situation"] == situation]
        r1 = r10 = said = in10 = 0
        loud = 0
        pred, obs = [], []
        for r, p in chosen:
            p = np.where(r["judged"], p, -1.0)
            order = np.argsort(-p, kind="stable")[:10]
            pred += p[order].tolist()
            obs += r["label"][order].tolist()
            if p.max() >= good:
                loud += 1
            if r["label"].any():
                top = r["label"][order]
                r1 += bool(top[0])
                r10 += bool(top.any())
                for k in np.flatnonzero(top):
                    in10 += 1
                    said += p[order[k]] >= good
        others = [(r, p) for r, p in chosen if r["captioned"].any() and not (r["label"] & r["captioned"]).any()]
        if others:  # the queries about uncaptioned photos, with 100 other photos captioned: the harm
            pairs = [(r, np.argsort(-p, kind="stable")[:10]) for r, p in others]
            out[situation + " (about other photos)"] = {
                "queries": len(others),
                "r10": round(100 * float(np.mean([r["label"][t].any() for r, t in pairs])), 1),
                "captioned_share_top10": round(100 * float(np.mean([r["captioned"][t].mean() for r, t in pairs])), 1),
                "captioned_first": round(100 * float(np.mean([r["captioned"][t[0]] for r, t in pairs])), 1)}
        out[situation] = {"queries": len(chosen), "r1": round(100 * r1 / len(chosen), 1),
                          "r10": round(100 * r10 / len(chosen), 1),
                          "top10_true_said_good": round(100 * said / max(in10, 1), 1),
                          "queries_with_a_good_hit": round(100 * loud / len(chosen), 1),
                          "ece_top10": round(ece(np.array(pred), np.array(obs)), 4)}
    return out


def ece(pred: np.ndarray, obs: np.ndarray, bins: int = 10) -> float:
    edges = np.linspace(0, 1, bins + 1)
    total = 0.0
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        inside = (pred >= lo) & (pred < hi) if hi < 1 else (pred >= lo)
        if inside.any():
            total += inside.sum() * abs(pred[inside].mean() - obs[inside].mean())
    return total / max(len(pred), 1)


def choose_good(records, probs, miss: float = 0.10) -> float:
    """The highest threshold under which at most ``miss`` of the true photos ranked in the top 10 fall."""
    true_p = []
    for r, p in zip(records, probs, strict=True):
        p = np.where(r["judged"], p, -1.0)
        order = np.argsort(-p, kind="stable")[:10]
        true_p += p[order][r["label"][order]].tolist()
    return float(np.quantile(np.array(true_p), miss)) if true_p else 0.1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "datasets")
    parser.add_argument("--out", type=Path, default=REPO / "resources" / "calibration.json")
    parser.add_argument("--rows", type=Path, help="cache of the collected rows (npz-free pickle); reused if present")
    parser.add_argument("--report", type=Path, default=REPO / "bench-results" / "calibration-fit.json")
    parser.add_argument("--equal-situations", action="store_true", help="each situation weighs the same (tried: "
                        "names gain, ordinary captions harm more)")
    parser.add_argument("--weigh", nargs="*", default=[], metavar="SITUATION=W",
                        help="a situation's queries weigh W each (e.g. look-alikes=4)")
    parser.add_argument("--drop", nargs="*", default=["dense"], help="features left out of the fit (default: the "
                        "dense sum unscaled by the familiar share, which gave made-up words good matches in a small "
                        "library)")
    args = parser.parse_args()
    import pickle

    from engine.search import calibration
    from tests.bench.bench_domains import domains, open_library, use_home

    if not use_home(args.home, args.data, starter=True):
        return 0
    # the clips' frames bias is chosen apart (tests/bench/bench_clip_bias.py): a refit keeps the shipped one (read
    # before collecting, which blanks calibration.load)
    kept = {kind: calibration.load(kind, args.out) if args.out.is_file() else None for kind in ("model", "zero_shot")}
    rows_path = args.rows or args.home / "calibration-rows.pkl"
    if rows_path.exists():
        collected = pickle.loads(rows_path.read_bytes())
    else:
        zero = calibration.Calibration(dict.fromkeys(calibration.FEATURES, 0.0), 0.0, 0.5, 0.1, "collecting")
        calibration.load = lambda kind, path=None: zero  # every feature in the ranking's parts, nothing weighed
        collected = {"model": [], "zero_shot": []}
        sets = domains(args.data)
        for domain in ("flickr8k-train-slice", "webcaps-train-slice", "msrvtt-train-slice"):
            if domain not in sets:
                continue
            images, files, caps = sets[domain]
            service = open_library(args.home, domain, images, files)
            service.models.activate("starter")
            for kind, evidence in (("model", {"model", "zero_shot", "words"}), ("zero_shot", {"zero_shot", "words"})):
                service.state.evidence = frozenset(evidence)
                situations(service, domain, files, caps, args.data, random.Random(0), collected[kind])
                print(domain, kind, len(collected[kind]), flush=True)
            service.close()
        rows_path.write_bytes(pickle.dumps(collected))
    fitted, fit_report = {}, {}
    for kind, records in collected.items():
        features = [f for f in calibration.FEATURES if f != "log_items" and f not in args.drop
                    and (kind == "model" or f != "model_cos")]
        weigh = {k: float(v) for k, v in (item.split("=") for item in args.weigh)}
        x, y, off, w = design(records, features, args.equal_situations, weigh)
        coef, intercept = fit_logistic(x, y, off, w)
        coefs = dict(zip(features, coef.tolist(), strict=True))
        coefs["log_items"] = -1.0
        probs = probabilities(records, features, coef, intercept)
        good = round(choose_good([r for r in records if r["situation"] in ("plain", "captioned")],
                                 [p for r, p in zip(records, probs, strict=True)
                                  if r["situation"] in ("plain", "captioned")]), 4)
        what = ("Flickr8k train photos the starter held aside (500), webcaps train photos it never saw (1,000) and "
                "MSR-VTT train clips it held aside (200): plain captions, 100 ordinary user captions, names, made-up "
                "words (tools/fit_calibration.py)")
        fitted[kind] = calibration.Calibration(coefs, intercept, 0.5, good, what,
                                               kept[kind].frames_bias if kept[kind] is not None else 0.0).to_dict()
        fit_report[kind] = {"coef": fitted[kind]["coef"], "intercept": fitted[kind]["intercept"], "good": good,
                            "train_side": report(records, probs, good, 0.5)}
        print(kind, json.dumps(fit_report[kind], indent=1), flush=True)
    args.out.write_text(json.dumps(fitted, indent=1) + "\n", encoding="utf-8")
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps(fit_report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
