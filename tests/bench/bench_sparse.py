"""A3VSE's sparse-corpus benchmark (Huang et al. 2019, §4.1 and Table 5) on Flickr8k: train -> dev.

    python tests/bench/bench_sparse.py [--settings 10%x5 20%x1 50%x1] [--runs vse pvse a3vse ...]
                                       [--epochs N] [--epoch-captions N] [--home DIR] [--resume]
                                       [--out bench-results/sparse.json]

Settings (§4.1): the training images are shuffled once (seed 0, nested: :mod:`trainer.sparse`) and the first
10% keep all 5 captions (``10%x5``), or the first 20% / 50% keep 1 of 5 (``20%x1``, ``50%x1``); the other
images are un-annotated. Every run of a setting sees the same split and the same training seed.

Runs: ``vse`` and ``pvse`` train on the annotated pairs only (the trainer drops un-annotated items for every
method but A3VSE); ``a3vse`` adds the un-annotated images with their regional-semantics pseudo captions; the
Table 5 ablations are ``a3vse-no-pseudo`` ("No s"), ``a3vse-no-attention`` ("s, without attention": mean
pooling) and ``a3vse-no-adversarial`` ("s, without L_adv").

Budget: each method's recipe (``trainer.train.RECIPES``) as it stands; the trainer already gives a sparse
epoch as many steps as the fully annotated corpus would (§4.2 keeps the baselines' iteration count
comparable), so the epochs are not stretched here. ``--epochs`` replaces the budget (e.g. 1 for a smoke
test); ``--epoch-captions`` the captions per item and epoch.

Features come from ``--home`` (a Polyseek home whose feature store already holds Flickr8k; missing features
are computed into it) and every run trains in this process. Rows go to ``--out`` (JSON) and a Markdown table
beside it, both rewritten after every run, so an interrupted benchmark keeps what it finished; ``--resume``
skips the (setting, run) pairs already there. Not run by CI.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
FLICKR = REPO.parent / "shared" / "datasets" / "flickr8k"
SEED = 0


@dataclass(frozen=True)
class Setting:
    """A §4.1 sparsity level: a fraction of the training images keeping ``captions`` of their 5 captions."""

    label: str
    fraction: float
    captions: int


@dataclass(frozen=True)
class RunSpec:
    """One model of the table: a method, its config overrides and whether A3VSE gets pseudo pairs."""

    label: str
    method: str
    overrides: dict[str, Any] = field(default_factory=dict)
    pseudo_pairs: bool = True
    pseudo_captions: str = "regions"  # trainer.pseudocaptions


SETTINGS = {s.label: s for s in (Setting("10%x5", 0.1, 5), Setting("20%x1", 0.2, 1), Setting("50%x1", 0.5, 1))}
RUNS = {r.label: r for r in (
    RunSpec("vse", "vse"),
    RunSpec("pvse", "pvse"),
    # VSE with A3VSE's un-annotated corpus D^u (the pseudo pairs as weighted pairs, trainer/methods/vse.py)
    RunSpec("vse-pseudo", "vse", {"pseudo_weight": 1.0}),
    RunSpec("a3vse", "a3vse"),
    RunSpec("a3vse-no-pseudo", "a3vse", pseudo_pairs=False),
    RunSpec("a3vse-no-attention", "a3vse", {"attention": False}),
    RunSpec("a3vse-no-adversarial", "a3vse", {"adversarial": False}),
    # the pseudo-pair effect without the adversarial terms (which hurt here: see bench-results/sparse.md)
    RunSpec("a3vse-no-pseudo-no-adversarial", "a3vse", {"adversarial": False}, pseudo_pairs=False),
    # the pseudo pairs' text carried over from the nearest annotated look-alikes instead of the regional semantics
    RunSpec("a3vse-neighbours", "a3vse", pseudo_captions="neighbours"),
    # the regional semantics with each region's colour, as indexing writes them (A3VSE's attribute + class)
    RunSpec("a3vse-colours", "a3vse", pseudo_captions="colours"),
    RunSpec("vse-pseudo-neighbours", "vse", {"pseudo_weight": 1.0}, pseudo_captions="neighbours"),
)}
SETTING_PATTERN = re.compile(r"^(\d+(?:\.\d+)?)%x([1-5])$")
TARGET_LIFT = 5.0  # issue #7: pseudo pairs lift t2i R@10 by >= 5 points at 10% annotations


def parse_setting(label: str) -> Setting:
    """A setting label ``P%xN``: the paper's three, or another (e.g. ``2%x5`` for a smoke test)."""
    if label in SETTINGS:
        return SETTINGS[label]
    match = SETTING_PATTERN.match(label)
    if not match or not 0 < float(match.group(1)) <= 100:
        raise argparse.ArgumentTypeError(f"{label!r}: expected P%xN with 0 < P <= 100 and N in 1..5, e.g. 10%x5")
    return Setting(label, float(match.group(1)) / 100, int(match.group(2)))


def sparse_config(setting: Setting, extra: tuple[str, ...] = ()):  # noqa: ANN201
    from trainer.sparse import SparseConfig

    return SparseConfig(setting.fraction, setting.captions, SEED, extra)


def epoch_budget(method: str, epochs: int | None) -> int:
    """``epochs`` if given, else the method's recipe's."""
    from trainer.train import RECIPES

    return epochs if epochs else RECIPES[method].epochs


def train_run(*, label: str, method: str, setting: Setting, overrides: dict[str, Any], pseudo_pairs: bool,
              args: argparse.Namespace, source: Any, extra: tuple[str, ...] = (),
              pseudo_captions: str = "regions") -> dict[str, Any]:
    """Train one model on ``setting`` (plus ``extra`` annotated items) and return its table row."""
    from trainer.checkpoint import load_state
    from trainer.train import Reporter, TrainOptions, train

    tag = setting.label.replace("%", "")
    out = Path(args.models or Path(args.home) / "models") / f"{label}-{tag}-{time.strftime('%m%d-%H%M%S')}"
    options = TrainOptions(method=method, data=args.data, out=out, device=args.device,
                           epochs=epoch_budget(method, args.epochs), sparse=sparse_config(setting, extra),
                           pseudo_pairs=pseudo_pairs, pseudo_captions=pseudo_captions, overrides=dict(overrides),
                           seed=SEED,
                           epoch_captions=args.epoch_captions)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    report = train(options, source=source, reporter=Reporter(False, enabled=args.verbose))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    state = load_state(out)
    return {"setting": setting.label, "run": label, "method": method, "overrides": overrides,
            "pseudo_pairs": pseudo_pairs and method == "a3vse", "pseudo_captions": pseudo_captions,
            "extra_annotated": len(extra),
            "i2t": {k: round(report["i2t"][k], 2) for k in ("r1", "r5", "r10")},
            "t2i": {k: round(report["t2i"][k], 2) for k in ("r1", "r5", "r10")},
            "rsum": round(report["rsum"], 2), "best_epoch": report.get("best_epoch"), "epochs": state.epoch,
            "epoch_budget": options.epochs, "train_s": round(wall, 1), "cpu_s": round(cpu, 1),
            "model_dir": str(out)}


def lifts(rows: list[dict]) -> list[tuple[str, float]]:
    """(setting, t2i R@10 of a3vse minus a3vse-no-pseudo) for every setting that has both runs."""
    by = {(r["setting"], r["run"]): r for r in rows if "t2i" in r}
    return [(s, round(by[(s, "a3vse")]["t2i"]["r10"] - by[(s, "a3vse-no-pseudo")]["t2i"]["r10"], 2))
            for s in dict.fromkeys(r["setting"] for r in rows) if (s, "a3vse") in by and (s, "a3vse-no-pseudo") in by]


def markdown(rows: list[dict], command: str) -> str:
    """The results table plus the issue's pseudo-pair target."""
    lines = [f"Measured with `{command}`; train on Flickr8k train (sparse, seed {SEED}), evaluate on dev "
             "(1,000 photos, 5,000 captions).", "",
             "| setting | run | i2t R@1 | R@5 | R@10 | t2i R@1 | R@5 | R@10 | rsum | best epoch | train s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['setting']} | {r['run']} | failed: {r['error']} |||||||||")
            continue
        i, t = r["i2t"], r["t2i"]
        lines.append(f"| {r['setting']} | {r['run']} | {i['r1']} | {i['r5']} | {i['r10']} | {t['r1']} | {t['r5']} "
                     f"| {t['r10']} | {r['rsum']} | {r['best_epoch']}/{r['epochs']} | {r['train_s']:.0f} |")
    for setting, lift in lifts(rows):
        verdict = ("met" if lift >= TARGET_LIFT else "not met") if setting == "10%x5" else "no target"
        lines += ["", f"Pseudo pairs at {setting}: t2i R@10 a3vse - a3vse-no-pseudo = {lift:+.2f} points "
                  f"(target >= {TARGET_LIFT:.0f} at 10%x5: {verdict})."]
    return "\n".join(lines) + "\n"


def write(rows: list[dict], out: Path, command: str) -> None:
    """Rewrite the JSON and the Markdown table (each through a temporary file, so a kill leaves a whole one)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    for path, text in ((out, json.dumps(rows, indent=2) + "\n"), (out.with_suffix(".md"), markdown(rows, command))):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)


def has_caption_folder(args: argparse.Namespace) -> bool:
    """Whether ``--data`` is a caption folder; says what is missing on stderr when not."""
    if (args.data / "captions.tsv").is_file():
        return True
    print(f"no caption folder at {args.data}: this benchmark needs ../shared/datasets/flickr8k", file=sys.stderr)
    return False


def common_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared with ``bench_active.py``."""
    parser.add_argument("--data", type=Path, default=FLICKR)
    parser.add_argument("--epochs", type=int, default=None,
                        help="epochs of every run (default: each recipe's)")
    parser.add_argument("--epoch-captions", type=int, default=None,
                        help="captions of each annotated item per epoch (0: all; default: the recipe's)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--home", default=os.environ.get("POLYSEEK_HOME") or "/tmp/polyseek-bench-home")
    parser.add_argument("--models", type=Path, default=None, help="where the trained models go (default: HOME/models)")
    parser.add_argument("--resume", action="store_true", help="keep the rows in --out and skip what they cover")
    parser.add_argument("--verbose", action="store_true", help="log every epoch")


def open_source(args: argparse.Namespace) -> Any:
    """The feature source of ``--home`` (set as POLYSEEK_HOME before anything reads it)."""
    import logging

    os.environ["POLYSEEK_HOME"] = str(args.home)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    from trainer.data import FeatureSource

    return FeatureSource.open()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", nargs="+", type=parse_setting, default=list(SETTINGS.values()),
                        metavar="P%xN", help="sparsity settings (default: 10%%x5 20%%x1 50%%x1)")
    parser.add_argument("--runs", nargs="+", default=list(RUNS), choices=list(RUNS))
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "sparse.json")
    common_arguments(parser)
    args = parser.parse_args()
    if not has_caption_folder(args):
        return 2
    from trainer.data import DataError
    from trainer.methods import ConfigError
    from trainer.train import TrainingError

    command = "python tests/bench/bench_sparse.py " + " ".join(sys.argv[1:])
    rows = json.loads(args.out.read_text()) if args.resume and args.out.is_file() else []
    done = {(r["setting"], r["run"]) for r in rows if "error" not in r}
    rows = [r for r in rows if "error" not in r]
    source = open_source(args)
    try:
        for setting in args.settings:
            for spec in (RUNS[r] for r in args.runs):
                if (setting.label, spec.label) in done:
                    continue
                try:
                    row = train_run(label=spec.label, method=spec.method, setting=setting,
                                    overrides=spec.overrides, pseudo_pairs=spec.pseudo_pairs, args=args,
                                    source=source, pseudo_captions=spec.pseudo_captions)
                except (TrainingError, ConfigError, DataError) as exc:  # one failed run must not lose the rest
                    row = {"setting": setting.label, "run": spec.label, "error": str(exc)[:200]}
                rows.append(row)
                write(rows, args.out, command)
                summary = row.get("error") or (f"i2t {row['i2t']}  t2i {row['t2i']}  rsum {row['rsum']}  "
                                               f"best {row['best_epoch']}/{row['epochs']}  {row['train_s']:.0f}s")
                print(f"{setting.label:6s} {spec.label:22s} {summary}", flush=True)
    finally:
        source.close()
    print(f"written to {args.out} and {args.out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
