"""The user's loop, measured as a user lives it (issue #17): a library of photos no model trained on, N of them
captioned once each, a retrain the way the app runs it, then search of the *other* photos.

    python tests/bench/bench_user_loop.py --home DIR [--data ../shared/datasets/flickr8k]
        [--ns 0 25 50 100 200 400] [--rows zero-shot starter scratch warm] [--vocabulary]
        [--out bench-results/user-loop.json]

The library is the caption folder's ``dev`` photos (Flickr8k dev: the starter model never trained or selected
epochs on them, see tools/build_starter.py). For each N the first N photos of a seeded permutation (so the sets
are nested) get one of their captions (a seeded choice) as a *user* caption; everything else about the library is
what a fresh install has. Rows:

- ``zero-shot``: regional-semantics ranking, no model (what a fresh install searched with before the starter);
- ``starter``: the shipped starter model, no retrain;
- ``scratch``: zero-shot active, ``polyseek retrain --from-scratch`` (the method today's app used: a3vse with
  pseudo pairs of the un-annotated photos), the result activated as before (no gate): what a user got;
- ``warm``: the starter active, ``polyseek retrain`` (the :class:`engine.loop.retrain.Retrain` job with its defaults:
  warm start from the active model, gated activation); the *active* model afterwards is measured, and the new
  version too when it was not activated.

Each is scored on the remaining photos with all five of their captions (text->photo and photo->text R@1/5/10,
rsum) by the engine's own evaluation (:meth:`engine.workspace.models.Models.evaluate`).

``--vocabulary``: the user's own word. Photos whose captions say "dog" become photos of *Biscuit* (every "dog"
/"dogs" replaced by "Biscuit"); N of them (25, 50, 100) are captioned that way, the rest of the library with
nothing; after a retrain, each remaining Biscuit photo's renamed captions are queries against the remaining
library (R@10: its photo in the top 10), and the bare query "Biscuit" is scored by precision@10 (dog photos among
its top 10). Not run by CI.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

if TYPE_CHECKING:
    from engine.trainercontract.reports import RetrievalReport

SEED = 0
ROWS = ("zero-shot", "starter", "scratch", "warm")
# the warm-start recipe's alternatives (trainer arguments after engine.loop.retrain.WARM_START_ARGS, overriding them)
VARIANTS = {"warm-no-l2sp": ("--l2sp", "0"), "warm-lr2e-4": ("--lr", "2e-4"),
            "warm-b32-lr2e-4": ("--batch-size", "32", "--lr", "2e-4", "--epochs", "20", "--patience", "20"),
            "warm-b32-lr2e-4-no-l2sp": ("--batch-size", "32", "--lr", "2e-4", "--epochs", "20", "--patience", "20",
                                        "--l2sp", "0"),
            "warm-b32-lr1e-4-l2sp0.1": ("--batch-size", "32", "--lr", "1e-4", "--epochs", "20", "--patience", "20",
                                        "--l2sp", "0.1"),
            "warm-pseudo1": ("--set", "pseudo_weight=1.0"),
            "warm-pseudo1-b32-lr1e-4": ("--set", "pseudo_weight=1.0", "--batch-size", "32", "--lr", "1e-4",
                                        "--epochs", "20", "--patience", "20"),
            "warm-pseudo0.5-b32-lr1e-4": ("--set", "pseudo_weight=0.5", "--batch-size", "32", "--lr", "1e-4",
                                          "--epochs", "20", "--patience", "20")}
WORD = "Biscuit"
DOG = re.compile(r"\b[Dd]ogs?\b")


def read_folder(data: Path, split: str) -> tuple[list[str], dict[str, list[str]]]:
    rows = list(csv.reader((data / "splits.tsv").open(encoding="utf-8"), delimiter="\t"))[1:]
    files = sorted(f for f, s in rows if s == split)
    captions: dict[str, list[str]] = {f: [] for f in files}
    for row in list(csv.reader((data / "captions.tsv").open(encoding="utf-8"), delimiter="\t"))[1:]:
        if row and row[0] in captions:
            captions[row[0]].append(row[1])
    return files, captions


def eval_folder(dest: Path, images: Path, files: list[str], captions: dict[str, list[str]]) -> Path:
    from engine.loop.trainingset import write_linked_folder

    entries = [(f, images / f) for f in files]
    texts = [(i, t) for i, f in enumerate(files) for t in captions[f]]
    write_linked_folder(dest, entries, texts)
    return dest


def dataset_name(data: Path) -> str:
    """The caption folder's name (flickr8k, webcaps): part of every library's and evaluation folder's name."""
    return Path(data).resolve().name


def summary(report: RetrievalReport | None) -> dict[str, Any] | None:
    if report is None:
        return None
    report = report.as_dict()
    return {"i2t": {k: round(report["i2t"][k], 1) for k in ("r1", "r5", "r10")},
            "t2i": {k: round(report["t2i"][k], 1) for k in ("r1", "r5", "r10")},
            "rsum": round(report["rsum"], 1), "n_media": report["n_media"], "n_captions": report["n_captions"]}


class Library:
    """One library in the bench's home: the dev photos indexed (features are shared across libraries)."""

    def __init__(self, name: str, images: Path, files: list[str], starter: bool) -> None:
        os.environ["POLYSEEK_STARTER"] = "on" if starter else "off"
        from engine.workspace import Workspace

        self.service = Workspace.open(name)
        # one media folder per caption folder (its dev photos): the same home serves Flickr8k and webcaps runs
        self.root = Path(os.environ["POLYSEEK_HOME"]) / "bench-media" / f"{images.parent.name}-dev"
        if not self.root.is_dir():
            self.root.mkdir(parents=True)
            for f in files:
                (self.root / f).symlink_to(images / f)
        self.service.library.add_root(self.root)
        for _ in self.service.models.reindex():
            pass
        self.by_file = {Path(m.path).name: m.id for m in self.service.state.catalog.iter_media()}

    def caption(self, texts: dict[str, str]) -> None:
        for f, text in texts.items():
            self.service.annotations.add_caption(self.by_file[f], text)

    def retrain(self, warm: bool, gate: bool = True, extra: tuple[str, ...] = ()) -> dict[str, Any]:
        from engine.loop.retrain import RetrainOptions

        options = (RetrainOptions(warm_start=True, trainer_args=extra) if warm
                   else RetrainOptions(method="a3vse", warm_start=False))
        job = self.service.models.retrain(options)
        started = time.monotonic()
        for _ in job.run():
            pass
        result = job.result
        assert result is not None
        for _ in self.service.models.adopt(result):
            pass
        if not gate and not result.activated:  # today's behaviour: the new model is activated regardless
            self.service.models.activate(result.model_name)
            for _ in self.service.models.reindex():
                pass
        return {"model": result.model_name, "init_from": result.init_from, "activated": result.activated,
                "decision": result.decision, "train_s": round(time.monotonic() - started, 1),
                "heldout_before": summary(result.before), "heldout_after": summary(result.after),
                "pseudo_before": summary(result.pseudo_before), "pseudo_after": summary(result.pseudo_after)}

    def active(self) -> str | None:
        record = self.service.state.catalog.active_model()
        return record.name if record else None

    def evaluate(self, folder: Path, model: str | None) -> dict[str, Any]:
        return summary(self.service.models.evaluate(folder, None, model))

    def difference(self, folder: Path, old: str | None, new: str) -> dict[str, Any]:
        """The other photos, searched with the start and with the retrained model: new - old rsum with its 90 %
        paired-bootstrap interval over the photos (the gate's :mod:`engine.loop.interval`), so "worse" is a
        decision, not a point estimate on one run."""
        from engine.loop.interval import report_interval

        before = self.service.models.evaluate(folder, None, old, per_query=True)
        after = self.service.models.evaluate(folder, None, new, per_query=True)
        interval = report_interval(before, after)
        assert interval is not None
        return {"old": old or "zero-shot", "new": new, "old_rsum": round(before.rsum, 1),
                "new_rsum": round(after.rsum, 1), **{k: (round(v, 2) if isinstance(v, float) else v)
                                                     for k, v in interval.as_dict().items()}}


def user_loop(args: argparse.Namespace, files: list[str], captions: dict[str, list[str]], images: Path,
              results: list[dict[str, Any]]) -> None:
    rng = random.Random(args.seed)
    order = files[:]
    rng.shuffle(order)
    chosen = {f: random.Random(f"{args.seed}:{f}").choice(captions[f]) for f in files}
    for n in args.ns:
        captioned = set(order[:n])
        remaining = [f for f in files if f not in captioned]
        where = f"rest-{n}" + (f"-seed{args.seed}" if args.seed != SEED else "")
        # each caption folder its own evaluation folders and libraries: two runs on one home (Flickr8k and webcaps,
        # at once or one after the other with the same --tag) must not share a library or its annotations
        folder = eval_folder(Path(args.home) / "eval" / dataset_name(args.data) / where, images, remaining, captions)
        for row in args.rows:
            if any(r["n"] == n and r["row"] == row and r.get("seed", SEED) == args.seed for r in results):
                continue
            started = time.monotonic()
            warm = row.startswith("warm")
            lib = Library(f"loop-{dataset_name(args.data)}-{n}-{row}-{args.tag}"
                          + (f"-seed{args.seed}" if args.seed != SEED else ""), images, files,
                          starter=row == "starter" or warm)
            record: dict[str, Any] = {"n": n, "row": row, "seed": args.seed}
            if (row == "scratch" or warm) and n > 0:
                lib.caption({f: chosen[f] for f in order[:n]})
                start = lib.active()
                record["retrain"] = lib.retrain(warm=warm, gate=warm, extra=VARIANTS.get(row, ()))
                new = record["retrain"]["model"]
                if not record["retrain"]["activated"]:
                    record["new_model"] = lib.evaluate(folder, new)
                record["other_photos"] = lib.difference(folder, start, new)
            record["active"] = lib.active() or "zero-shot"
            record["eval"] = lib.evaluate(folder, lib.active())
            record["wall_s"] = round(time.monotonic() - started, 1)
            lib.service.close()
            results.append(record)
            write(args.out, results)
            print(json.dumps(record), flush=True)


def vocabulary(args: argparse.Namespace, files: list[str], captions: dict[str, list[str]], images: Path,
               results: list[dict[str, Any]]) -> None:
    """The user's own word for their dog (module docstring)."""
    import numpy as np

    dogs = [f for f in files if sum(bool(DOG.search(c)) for c in captions[f]) >= 3]
    rng = random.Random(SEED + 1)
    rng.shuffle(dogs)
    renamed = {f: [DOG.sub(WORD, c) for c in captions[f] if DOG.search(c)] for f in dogs}
    for n in args.vocab_ns:
        if n >= len(dogs) - 10:
            print(f"vocabulary: only {len(dogs)} dog photos; N={n} skipped", flush=True)
            continue
        captioned, held = dogs[:n], dogs[n:]
        remaining = [f for f in files if f not in set(captioned)]
        for state in ("before", "after"):
            key = f"vocab-{n}-{state}" + (f"-{args.vocab_variant}" if args.vocab_variant else "")
            if any(r.get("row") == key for r in results):
                continue
            lib = Library(f"vocab-{dataset_name(args.data)}-{n}-{args.vocab_variant or 'default'}-{args.tag}", images,
                          files, starter=True)
            if state == "after":
                lib.caption({f: random.Random(f"{SEED}:{f}").choice(renamed[f]) for f in captioned})
                retrain = lib.retrain(warm=True, extra=VARIANTS.get(args.vocab_variant, ()))
            else:
                retrain = None
            trained = lib.service.models.active_trained()
            ids = np.array([lib.by_file[f] for f in remaining])
            position = {int(i): k for k, i in enumerate(ids)}
            queries = [(f, t) for f in held for t in renamed[f]]
            hits10 = 0
            for f, text in queries:
                top = [h.media_id for h in lib.service.search.text(text, top=10)]
                hits10 += lib.by_file[f] in top
            bare = [h.media_id for h in lib.service.search.text(WORD, top=10 + len(captioned))
                    if h.media_id in position][:10]
            dog_ids = {lib.by_file[f] for f in held}
            record = {"row": key, "n": n, "state": state, "active": lib.active(), "retrain": retrain,
                      "queries": len(queries), "held_photos": len(held),
                      "r10": round(100.0 * hits10 / max(1, len(queries)), 1),
                      "bare_precision10": round(100.0 * sum(i in dog_ids for i in bare) / 10, 1),
                      "trained": trained is not None}
            lib.service.close()
            results.append(record)
            write(args.out, results)
            print(json.dumps(record), flush=True)


def write(out: Path, results: list[dict[str, Any]]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=1) + "\n")
    os.replace(tmp, out)
    lines = ["| N captioned | row | active model | t2i R@1 | R@5 | R@10 | i2t R@1 | R@5 | R@10 | rsum | retrain |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "eval" not in r:
            continue
        e = r["eval"]
        note = ""
        if r.get("retrain"):
            rt = r["retrain"]
            note = f"{rt['train_s']:.0f} s; {rt['decision']}"
            if r.get("new_model"):
                nm = r["new_model"]
                note += f" (new version: t2i R@10 {nm['t2i']['r10']}, rsum {nm['rsum']})"
            if r.get("other_photos"):
                d = r["other_photos"]
                note += (f"; the other photos, new - start: {d['difference']:+.1f} rsum (90 % interval "
                         f"{d['low']:+.1f}..{d['high']:+.1f}: {d['verdict']})")
        lines.append(f"| {r['n']} | {r['row']} | {r['active']} | {e['t2i']['r1']} | {e['t2i']['r5']} | "
                     f"{e['t2i']['r10']} | {e['i2t']['r1']} | {e['i2t']['r5']} | {e['i2t']['r10']} | {e['rsum']} | "
                     f"{note} |")
    vocab = [r for r in results if str(r.get("row", "")).startswith("vocab-")]
    if vocab:
        lines += ["", f"| N photos captioned with '{WORD}' | state | active model | queries | R@10 of the renamed "
                      f"captions | '{WORD}' precision@10 |", "|---|---|---|---|---|---|"]
        for r in vocab:
            lines.append(f"| {r['n']} | {r['state']} | {r['active']} | {r['queries']} | {r['r10']} | "
                         f"{r['bare_precision10']} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True, help="POLYSEEK_HOME for the bench's libraries")
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "datasets" / "flickr8k")
    parser.add_argument("--ns", type=int, nargs="+", default=[0, 25, 50, 100, 200, 400])
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=[*ROWS, *VARIANTS])
    parser.add_argument("--seed", type=int, default=SEED, help="which photos are captioned, and with which caption "
                        "(another seed: another user of the same library)")
    parser.add_argument("--vocabulary", action="store_true", help="also the user's-own-word case")
    parser.add_argument("--vocab-ns", type=int, nargs="+", default=[25, 50, 100])
    parser.add_argument("--only-vocabulary", action="store_true")
    parser.add_argument("--vocab-variant", default=None, choices=list(VARIANTS),
                        help="the warm-start recipe variant the vocabulary case retrains with")
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "user-loop.json")
    parser.add_argument("--tag", default=time.strftime("%Y%m%d-%H%M%S"),
                        help="names this run's libraries (a retrain must start from a fresh library)")
    args = parser.parse_args()
    if not (args.data / "splits.tsv").is_file():
        print(f"{args.data}: no caption folder with splits (../shared/datasets/flickr8k is needed)")
        return 2
    os.environ["POLYSEEK_HOME"] = str(args.home.resolve())
    args.home.mkdir(parents=True, exist_ok=True)
    images = (args.data / "images").resolve()
    files, captions = read_folder(args.data, "dev")
    results: list[dict[str, Any]] = json.loads(args.out.read_text()) if args.out.is_file() else []
    if not args.only_vocabulary:
        user_loop(args, files, captions, images, results)
    if args.vocabulary or args.only_vocabulary:
        vocabulary(args, files, captions, images, results)
    write(args.out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
