"""The user's words find their items (issue #31): three dogs named by the user, searched by name, no retrain.

    python tests/bench/bench_words.py --home DIR [--data ../shared/datasets/flickr8k] [--split dev]
        [--retrain [--trainer-args '...']] [--out bench-results/words.json]

The library is the split's photos (Flickr8k dev: never trained on). Three dogs are the photos whose captions
mostly say "black dog", "brown dog" and "white dog"; the user calls them Shadow, Biscuit and Pearl: 16 photos of
each (a seeded choice) get one of their captions with the dog's phrase replaced by the name, as the user's
caption. Measured with the starter active:

- the bare name as a query: how many of its 16 are in the top 16;
- the *other* photos of that dog: their captions, renamed the same way, as queries against the library without
  the 48 captioned photos: R@10 (the photo in the top 10);
- ordinary searches: 300 photos that are none of the dogs' asked by one caption each, R@10 over the whole library
  (``ordinary_r10``: a retrain on the names must not cost them, #43), and by every caption of theirs
  (``ordinary_all_captions_r10``, 1,500 queries on dev); after a retrain, ``ordinary_change``: the difference with
  a 90 % paired bootstrap interval over the photos (better / worse / cannot tell);
- a rejected result: one of the top hits of a renamed query rejected, its rank after (must leave the top 60) and
  for a paraphrase (leave the top 10).

Rows: ``model only`` (the ranking before the user's words counted: the trained model alone) and ``default`` (the
app's ranking: model, zero-shot semantics and the user's words, :mod:`engine.search.evidence`). ``--general``: only
the general loop with ordinary captions (:func:`general`), which the words must not make worse. ``--retrain``: then
the app's retrain on the 48 captions (warm start from the starter, the library's pseudo pairs, the gate deciding),
and both rows again with whatever model is active afterwards.

``--split train-slice``: the same tests on the 500 Flickr8k train photos the starter held aside, where the words'
constants are chosen (:func:`dog_photos`: fewer dogs there, 8 / 16 / 16 captioned); never choose on dev.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shlex
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

DOGS = {"black": "Shadow", "brown": "Biscuit", "white": "Pearl"}
PER_DOG = 16


def rename(caption: str, colour: str, name: str) -> str | None:
    phrase = re.compile(rf"\b(?:(?:a|the|one)\s+)?(?:[\w-]+\s+and\s+|\w+-and-)?{colour}\s+dogs?\b", re.I)
    if phrase.search(caption):
        return phrase.sub(name, caption, count=1).strip()
    plain = re.compile(r"\b(?:a|the|one)\s+dogs?\b", re.I)
    if plain.search(caption):
        return plain.sub(name, caption, count=1).strip()
    return None


def groups(files: list[str], caps: dict[str, list[str]], mentions: int = 2) -> dict[str, list[str]]:
    """The photos of each dog: ``mentions`` or more of their captions say its colour, none says another's."""
    out: dict[str, list[str]] = {c: [] for c in DOGS}
    for f in files:
        counts = {c: sum(bool(re.search(rf"\b{c} dog", t, re.I)) for t in caps[f]) for c in DOGS}
        best = max(counts, key=counts.get)
        if counts[best] >= mentions and sorted(counts.values())[-2] == 0:
            out[best].append(f)
    return out


def dog_photos(data: Path, split: str) -> tuple[list[str], dict[str, list[str]], dict[str, list[str]]]:
    """The split's photos, their captions and the three dogs' photos. "train-slice" (the 500 Flickr8k train photos
    the starter held aside, where parameters are chosen) holds fewer dogs: a caption saying the colour is enough
    there, and each dog has half its photos captioned (:func:`per_dog`)."""
    from tests.bench.bench_domains import domains, read

    if split == "train-slice":
        _, files, caps = domains(data.parent)["flickr8k-train-slice"]
        return files, caps, groups(files, caps, mentions=1)
    files, caps = read(data, split)
    return files, caps, groups(files, caps)


def per_dog(photos: int) -> int:
    """How many of a dog's photos the user captions: :data:`PER_DOG` (Flickr8k dev's dogs have 31 to 45 photos),
    or half of a dog with fewer than 24 (the train slice's black dog: 16)."""
    return PER_DOG if photos >= PER_DOG + PER_DOG // 2 else photos // 2


def name_dogs(service, files: list[str], caps: dict[str, list[str]], dogs: dict[str, list[str]],
              by_name: dict[str, int]) -> tuple[dict[str, list[str]], dict[str, list[tuple[str, str]]], set[int]]:
    """The user names the dogs: the library's user captions and pairs removed (a run starts from the library as
    indexed), then :func:`per_dog` photos of each dog (a seeded choice) captioned with one of their captions
    renamed. Returns the captioned photos per name, the renamed captions of the dog's other photos as
    ``(photo, query)`` and the captioned media ids."""
    rng = random.Random(0)
    captioned: dict[str, list[str]] = {}
    queries: dict[str, list[tuple[str, str]]] = {}
    for caption in list(service.state.catalog.iter_captions("user")):
        service.annotations.delete_caption(caption.id)
    for pair in service.state.catalog.pairs():
        service.annotations.delete_pair(pair.id)
    for colour, name in DOGS.items():
        photos = dogs[colour][:]
        rng.shuffle(photos)
        chosen = [f for f in photos if any(rename(t, colour, name) for t in caps[f])][:per_dog(len(photos))]
        captioned[name] = chosen
        for f in chosen:
            text = next(rename(t, colour, name) for t in caps[f] if rename(t, colour, name))
            service.annotations.add_caption(by_name[f], text)
        queries[name] = [(f, q) for f in photos if f not in chosen
                         for q in (rename(t, colour, name) for t in caps[f]) if q]
    return captioned, queries, {by_name[f] for fs in captioned.values() for f in fs}


def retrain(service, extra: tuple[str, ...]) -> dict:
    """The app's retrain (:class:`engine.loop.retrain.Retrain`, its defaults plus ``extra`` trainer options) on the
    library's annotations: the new model is activated only if the gate accepts it, as in the app."""
    import time

    from engine.loop.retrain import RetrainOptions

    job = service.models.retrain(RetrainOptions(warm_start=True, trainer_args=extra))
    started = time.monotonic()
    for _ in job.run():
        pass
    job_s = time.monotonic() - started  # exporting, both trainer runs, measuring (the adopt's re-index not counted)
    for _ in service.models.adopt(job.result):
        pass
    result = job.result
    return {"extra_args": list(extra), "model": result.model_name, "activated": result.activated,
            "decision": result.decision, "train_s": round(time.monotonic() - started, 1),
            "heldout_rsum_before": round(result.before.rsum, 1) if result.before else None,
            "heldout_rsum_after": round(result.after.rsum, 1) if result.after else None,
            "companion": result.companion.as_dict() if result.companion is not None else None,
            "job_s": round(job_s, 1)}


def r10_among_uncaptioned(service, queries: list[tuple[str, str]], taken: set[int], by_name: dict[str, int]) -> float:
    """R@10 (percent) of ``(photo file, query)`` pairs through the app's ranking, the captioned items (``taken``) left
    out of each ranking."""
    hits = []
    for f, q in queries:
        ids, ranking, _, _ = service.search.rank_text(q)
        ranked = [m for m in (int(ids[ranking.rows[p]]) for p in ranking.order()) if m not in taken][:10]
        hits.append(by_name[f] in ranked)
    return round(100 * float(np.mean(hits)), 1)


def ordinary_queries(files: list[str], caps: dict[str, list[str]], dogs: dict[str, list[str]],
                     count: int = 300) -> list[tuple[str, str]]:
    """Ordinary searches beside the names (#43: a retrain on the names must not cost them): ``count`` photos that
    are none of the three dogs' (a seeded choice), each asked by one seeded caption of its own."""
    named = {f for fs in dogs.values() for f in fs}
    others = [f for f in files if f not in named]
    random.Random(1).shuffle(others)
    return [(f, random.Random(f).choice(caps[f])) for f in others[:count]]


def hits_whole_library(service, queries: list[tuple[str, str]], by_name: dict[str, int]) -> list[bool]:
    """Per ``(photo file, query)`` pair: the photo in the top 10 of the app's ranking of the whole library."""
    hits = []
    for f, q in queries:
        ids, ranking, _, _ = service.search.rank_text(q)
        hits.append(by_name[f] in {int(ids[ranking.rows[p]]) for p in ranking.order()[:10]})
    return hits


def paired_change(photos: list[str], before: list[bool], after: list[bool]) -> dict:
    """R@10 after - before (points) over the same queries, with a 90 % paired bootstrap interval that resamples
    whole photos (a photo's captions go together)."""
    from tests.bench.bench_domains import grouped_bootstrap

    diff, low, high = grouped_bootstrap(photos, [float(a) - float(b) for a, b in zip(after, before, strict=True)],
                                        levels=(5, 95))
    return {"difference": diff, "interval_90": [low, high],
            "verdict": "better" if low > 0 else "worse" if high < 0 else "cannot tell"}


def caption_hundred(service, files: list[str], caps: dict[str, list[str]]) -> tuple[dict[str, int], list[str]]:
    """The general loop's library state: the starter active, the user's captions cleared, then 100 photos (the
    first of a seeded shuffle of ``files``) captioned once with a seeded caption of theirs. Returns the items' ids
    by file name and the shuffled order (its first 100 captioned, the next 300 the queries' photos)."""
    service.models.activate("starter")
    by_name = {Path(m.path).name: m.id for m in service.state.catalog.iter_media()}
    for caption in list(service.state.catalog.iter_captions("user")):
        service.annotations.delete_caption(caption.id)
    order = files[:]
    random.Random(0).shuffle(order)
    for f in order[:100]:
        service.annotations.add_caption(by_name[f], random.Random(f).choice(caps[f]))
    return by_name, order


def general(home: Path, data: Path, split: str, tag: str, shares: list[float] | None = None) -> dict:
    """The general loop with ordinary captions: 100 photos captioned once (a seeded caption of theirs), the captions
    of 300 other photos as queries, R@10 among the uncaptioned photos: the model alone, with the zero-shot
    semantics, and the app's ranking (the user's words on). The words must not hurt ordinary captions.
    ``split`` "train-slice": the 500 Flickr8k train photos the starter held aside (never trained on); ``shares``:
    the app's ranking again with each of these :data:`engine.search.words.SPREAD_SHARE` values."""
    import engine.search.words as words
    from tests.bench.bench_domains import domains, open_library, read

    if split == "train-slice":
        _, files, caps = domains(data.parent)["flickr8k-train-slice"]
    else:
        files, caps = read(data, split)
    service = open_library(home, f"words-{split}-general{tag}", data / "images", files)
    by_name, order = caption_hundred(service, files, caps)
    taken = {by_name[f] for f in order[:100]}
    queries = [(f, q) for f in order[100:400] for q in caps[f]]
    out: dict = {"captioned": 100, "queries": len(queries)}
    for row, evidence in (("model only", {"model"}), ("model + zero-shot", {"model", "zero_shot"}),
                          ("default", {"model", "zero_shot", "words"})):
        service.state.evidence = frozenset(evidence)
        out[row] = r10_among_uncaptioned(service, queries, taken, by_name)
        print("general", row, out[row], flush=True)
    kept = words.SPREAD_SHARE
    for share in shares or []:
        words.SPREAD_SHARE = share
        service.state.evidence = frozenset({"model", "zero_shot", "words"})
        out[f"default, spread share {share}"] = r10_among_uncaptioned(service, queries, taken, by_name)
        print("general share", share, out[f"default, spread share {share}"], flush=True)
    words.SPREAD_SHARE = kept
    service.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "datasets" / "flickr8k")
    parser.add_argument("--split", default="dev", help="dev, train, or train-slice: the 500 train photos the starter "
                        "held aside (choose constants there)")
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "words.json")
    parser.add_argument("--tag", default="", help="appended to the library's name (a new library: today's starter)")
    parser.add_argument("--general", action="store_true", help="only the general loop with ordinary captions")
    parser.add_argument("--spread-shares", type=float, nargs="*", help="--general: also these spread shares")
    parser.add_argument("--retrain", action="store_true", help="then retrain as the app does (warm start, gate) "
                        "and measure again")
    parser.add_argument("--trainer-args", default="", help="extra trainer options of that retrain, one string, e.g. "
                        "'--finetune-epochs 4 --finetune-blocks 0 --text-layers 2' (default: the app's recipe)")
    args = parser.parse_args()
    from tests.bench.bench_domains import open_library, use_home

    if not use_home(args.home, args.data, starter=True):
        return 0

    if args.general:
        record = general(args.home, args.data, args.split, args.tag, args.spread_shares)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=1) + "\n")
        return 0
    files, caps, dogs = dog_photos(args.data, args.split)
    service = open_library(args.home, f"words-{args.split}{args.tag}", args.data / "images", files)
    service.models.activate("starter")  # an earlier run's retrain may have left its model active
    by_name = {Path(m.path).name: m.id for m in service.state.catalog.iter_media()}
    captioned, queries, taken = name_dogs(service, files, caps, dogs, by_name)
    ordinary = ordinary_queries(files, caps, dogs)
    ordinary_all = [(f, c) for f, _ in ordinary for c in caps[f]]  # every caption of the same photos: more power
    one_each = [ordinary_all.index(pair) for pair in ordinary]  # where the one-caption queries sit among them
    ordinary_hits: dict[str, list[bool]] = {}
    results: dict = {"split": args.split, "photos": len(files), "per_dog": {n: len(c) for n, c in captioned.items()},
                     "others": {n: len({f for f, _ in q}) for n, q in queries.items()}}
    def measure(row: str, evidence: set[str]) -> None:
        service.state.evidence = frozenset(evidence)
        record: dict = {"active": service.state.catalog.active_model().name}
        for name in DOGS.values():
            top = [h.media_id for h in service.search.text(name, top=len(captioned[name]))]
            found = len(set(top) & {by_name[f] for f in captioned[name]})
            record[name] = {"bare_name_in_top16": found, "captioned": len(captioned[name]),
                            "others_r10": r10_among_uncaptioned(service, queries[name], taken, by_name),
                            "queries": len(queries[name])}
        record["mean_others_r10"] = round(float(np.mean([record[n]["others_r10"] for n in DOGS.values()])), 1)
        ordinary_hits[row] = hits_whole_library(service, ordinary_all, by_name)
        record["ordinary_r10"] = round(100 * float(np.mean([ordinary_hits[row][i] for i in one_each])), 1)
        record["ordinary_all_captions_r10"] = round(100 * float(np.mean(ordinary_hits[row])), 1)
        results[row] = record
        print(row, json.dumps(record), flush=True)

    def alone(row: str) -> None:
        """The active model by itself, its companion (engine/search/companion.py) left out: #43's "model alone"."""
        trained = service.models.active_trained()
        kept, trained.companion = trained.companion, None
        try:
            measure(row, {"model"})
        finally:
            trained.companion = kept

    measure("model only", {"model"})
    alone("model alone, without its companion")
    measure("default", {"model", "zero_shot", "words"})
    if args.retrain:
        results["retrain"] = retrain(service, tuple(shlex.split(args.trainer_args)))
        print("retrain", json.dumps(results["retrain"]), flush=True)
        measure("after a retrain: model only", {"model"})
        alone("after a retrain: model alone, without its companion")
        measure("after a retrain: default", {"model", "zero_shot", "words"})
        photos = [f for f, _ in ordinary_all]
        results["ordinary_change"] = {row: paired_change(photos, ordinary_hits[row],
                                                         ordinary_hits["after a retrain: " + row])
                                      for row in ("model only", "model alone, without its companion", "default")}
        print("ordinary change", json.dumps(results["ordinary_change"]), flush=True)
    # a rejection takes effect at once
    service.state.evidence = frozenset({"model", "zero_shot", "words"})
    query, paraphrase = "a dog swimming in a lake", "a dog is swimming in the water of a lake"
    victim = service.search.text(query, top=1)[0].media_id
    service.annotations.reject_pair(query, victim)
    after = [h.media_id for h in service.search.text(query, top=60)]
    para = [h.media_id for h in service.search.text(paraphrase, top=10)]
    results["rejection"] = {"query": query, "left_top60": victim not in after, "paraphrase": paraphrase,
                            "left_paraphrase_top10": victim not in para}
    print(json.dumps(results["rejection"]))
    service.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
