"""Rebuild the starter model that ships in ``resources/models/starter/`` from a caption folder.

    python tools/build_starter.py --data ../shared/datasets/flickr8k [--out resources/models/starter]

The recipe (recorded in the folder's ``starter.json``, checked by ``tests/unit/test_starter.py``):

- method ``vse`` (VSE++ hardest-negative triplet on the frozen EfficientNet-Lite0 pooled feature and the frozen
  MiniLM sentence vector, the trainer's default recipe for that method), seed 0, with two captions of each photo an
  epoch (``--epoch-captions 2``): Flickr8k's photos have five captions and webcaps' one, so one caption a photo an
  epoch left most of Flickr8k's text unread, and all of them drowned webcaps (chosen on the train-side slices,
  docs/benchmarks.md);
- trained on the caption folder's ``train`` split minus a seeded slice of ``--val-items`` photos, which is the
  validation split that picks the best epoch and stops early. The folder's other splits (Flickr8k ``dev``) are
  never read, so ``tests/bench/bench_user_loop.py`` can measure the starter on photos it has not seen.

With your own captions: point ``--data`` at any caption folder (``images/`` + ``captions.tsv`` [+ ``splits.tsv``
with a ``train`` split; without one the whole folder is ``train``]) and ``--out`` at a new folder; then
``polyseek models --activate /that/folder`` makes it the library's model.

Only what the engine and a warm-started retrain need is kept (config, weights, metrics, ONNX export); the
resume checkpoints are removed. The models searched beside the starter (``--method pvse --out
resources/models/starter/companion``, then its PCME) are built with ``--no-graphs``: they ship as float16 weights and
``polyseek prepare`` exports their graphs at install (``trainer/startergraphs.py``).
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from engine.trainercontract.command import TRAINER_PROGRAM
from engine.trainercontract.runfolder import read_metrics
from trainer.methods.export import drop_untrained_encoders

RECIPE = {"method": "vse", "seed": 0, "train_split": "train", "val_items": 500, "epoch_captions": 2,
          "clip_input": "stills", "clip_captions": 2}
SPLIT_TRAIN, SPLIT_VAL = "starter-train", "starter-val"
KEEP = ("config.json", "model.safetensors", "metrics.json", "onnx", "caption_words.json")
TEXT_WEIGHTS = "text-*.safetensors"  # the fine-tuned MiniLM layers of a run with --text-layers
# the starter's companions (engine/search/companion.py): the PVSE model built by this tool with ``--method pvse
# --out resources/models/starter/companion``, the file that names it, and the companion's own PCME model (``pcme``,
# named by ``companion/companion.json``)
COMPANION_PARTS = ("companion", "companion.json", "pcme")


def _train_rows(data: Path) -> tuple[Path, list[str], list[list[str]]]:
    """A caption folder's media folder, its sorted train files and its caption rows (other splits never read)."""
    media = next((data / name for name in ("images", "media") if (data / name).is_dir()), None)
    if media is None:
        raise SystemExit(f"{data}: no images/ or media/ folder")
    splits_file = data / "splits.tsv"
    captions = list(csv.reader((data / "captions.tsv").open(encoding="utf-8"), delimiter="\t"))[1:]
    if splits_file.is_file():
        rows = list(csv.reader(splits_file.open(encoding="utf-8"), delimiter="\t"))[1:]
        train = sorted(f for f, split in rows if split == RECIPE["train_split"])
    else:
        train = sorted({f for f, _ in captions})
    return media, train, captions


def derived_folder(data: Path | list[Path], work: Path, val_items: int | list[int], seed: int) -> dict[str, int]:
    """A caption folder in ``work`` whose media are ``data``'s (links) and whose splits re-divide ``data``'s
    train split into starter-train and a seeded starter-val slice; other splits are left out. Several folders
    (``data`` and ``val_items`` lists) are merged, folder k's slice drawn with seed ``seed + k``."""
    datas = data if isinstance(data, list) else [data]
    vals = val_items if isinstance(val_items, list) else [val_items] * len(datas)
    work.mkdir(parents=True, exist_ok=True)
    train_rows: list[tuple[str, str]] = []
    caption_rows: list[list[str]] = []
    sources: dict[str, Path] = {}
    for k, (folder, n_val) in enumerate(zip(datas, vals, strict=True)):
        media, train, captions = _train_rows(folder)
        if len(train) <= n_val:
            raise SystemExit(f"{folder}: {len(train)} training photos; need more than --val-items {n_val}")
        val = set(random.Random(seed + k).sample(train, n_val))
        clash = [f for f in train if f in sources]
        if clash:
            raise SystemExit(f"{folder}: {clash[0]} is also in another --data folder")
        sources.update((f, media / f) for f in train)
        train_rows += [(f, SPLIT_VAL if f in val else SPLIT_TRAIN) for f in train]
        keep = set(train)
        caption_rows += [row for row in captions if row and row[0] in keep]
    if len(datas) == 1:
        media = _train_rows(datas[0])[0]
        (work / media.name).symlink_to(media.resolve(), target_is_directory=True)
    else:
        (work / "images").mkdir()
        for name, path in sources.items():
            (work / "images" / name).symlink_to(path.resolve())
    with (work / "splits.tsv").open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(["file", "split"])
        w.writerows(train_rows)
    with (work / "captions.tsv").open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
        w.writerow(["file", "caption"])
        w.writerows(caption_rows)
    n_val = sum(s == SPLIT_VAL for _, s in train_rows)
    return {"train_photos": len(train_rows) - n_val, "val_photos": n_val}


TERMS = {
    "flickr8k": "Flickr8k (Hodosh, Young & Hockenmaier 2013), distributed for research use",
    "webcaps": "webcaps, a Conceptual Captions sample (Sharma et al. 2018; captions Google's release, images their "
               "owners'), research use; its terms allow releasing weights trained on it",
    "msrvtt-clips": "MSR-VTT (Xu, Mei, Yao & Rui, CVPR 2016; Microsoft Research, non-commercial research use; the "
                    "videos are their YouTube owners'), 1,000 clips of its train split; its terms allow shipping "
                    "models trained on it as the project's own weights",
}


def _terms(datas: list[Path]) -> str:
    known = [TERMS.get(d.name, f"{d.name} (see its SOURCE.txt)") for d in datas]
    return ("trained on " + "; and ".join(known) + ". The weights are Polyseek's own training output; no photo or "
            "caption is included")


def half_precision(weights: Path, trained_on: dict[str, int] | None = None) -> None:
    """Store the weights as float16 (half the size in the repository; a warm start loads them into float32
    parameters, and the engine ranks with the float32 ONNX export, so search is unchanged), without the branches
    ``trained_on`` (the export manifest's counts) says learnt from nothing (``trainer.checkpoint.drop_untrained``:
    a warm start builds them afresh)."""
    from safetensors.numpy import load_file, save_file

    from trainer.checkpoint import drop_untrained, safetensors_metadata, untrained_prefixes

    kept = safetensors_metadata(weights)  # e.g. ``text``: the fine-tuned text encoder the head was trained with
    tensors = {k: (v.astype("float16") if v.dtype.kind == "f" else v) for k, v in load_file(weights).items()}
    tensors, metadata = drop_untrained(tensors, untrained_prefixes(tensors, trained_on or {"video": 1}))
    save_file(tensors, weights, metadata={**kept, **metadata} or None)


def _write_words(work: Path, out: Path) -> int:
    """The counted words of the starter-train split's captions (what the trainer writes after training)."""
    from engine.features.vocabulary import count_caption_words, write_caption_words

    split = dict(list(csv.reader((work / "splits.tsv").open(encoding="utf-8"), delimiter="\t"))[1:])
    rows = list(csv.reader((work / "captions.tsv").open(encoding="utf-8"), delimiter="\t"))[1:]
    captions = [caption for file, caption in rows if split.get(file) == SPLIT_TRAIN]
    path = write_caption_words(out, count_caption_words(captions), len(captions))
    print(f"{path}: the words of {len(captions)} training captions")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, nargs="+", required=True,
                        help="caption folder(s) (Flickr8k and webcaps for the shipped one)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "resources" / "models"
                        / "starter")
    parser.add_argument("--val-items", type=int, nargs="+", default=[RECIPE["val_items"]],
                        help="photos of each --data folder's train split held aside to pick the epoch")
    parser.add_argument("--seed", type=int, default=RECIPE["seed"])
    parser.add_argument("--method", default=RECIPE["method"], help="the trainer's method (the shipped one: vse)")
    parser.add_argument("--trainer-args", default="", help="more trainer options, one string (e.g. '--set "
                        "num_embeds=2')")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--epoch-captions", type=int, default=RECIPE["epoch_captions"],
                        help="captions of each item an epoch reads (0: all)")
    parser.add_argument("--clip-captions", type=int, default=RECIPE["clip_captions"],
                        help="captions of each clip an epoch reads (0: all)")
    parser.add_argument("--clip-input", default=RECIPE["clip_input"], choices=["stills", "video"],
                        help="how the clips of --data train: as their mean frame through the image encoder, or "
                        "through the video encoder (trainer config clip_input)")
    parser.add_argument("--no-graphs", action="store_true", help="ship the weights without the ONNX export: "
                        "`polyseek prepare` exports it at install (the models searched beside the starter, #42)")
    parser.add_argument("--words-only", action="store_true", help="only (re)write --out's caption_words.json from "
                        "the recipe's training captions (a starter built before the trainer wrote it)")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    with tempfile.TemporaryDirectory(prefix="polyseek-starter-") as tmp:
        work, run = Path(tmp) / "data", Path(tmp) / "run"
        datas = [d.resolve() for d in args.data]
        vals = args.val_items * len(datas) if len(args.val_items) == 1 else args.val_items
        if len(vals) != len(datas):
            raise SystemExit("--val-items: one number, or one per --data folder")
        sizes = derived_folder(datas if len(datas) > 1 else datas[0], work, vals if len(datas) > 1 else vals[0],
                               args.seed)
        if args.words_only:
            return _write_words(work, out)
        command = [*TRAINER_PROGRAM, "train", "--method", args.method, "--data", str(work),
                   "--train-split", SPLIT_TRAIN, "--val-split", SPLIT_VAL, "--out", str(run),
                   "--seed", str(args.seed), "--device", args.device,
                   "--epoch-captions", str(args.epoch_captions), "--clip-captions", str(args.clip_captions),
                   "--set", f"clip_input={args.clip_input}", *shlex.split(args.trainer_args)]
        print("running", " ".join(command), flush=True)
        subprocess.run(command, check=True)
        staging = out.with_name(out.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        for name in [*KEEP, *(p.name for p in run.glob(TEXT_WEIGHTS))]:
            src = run / name
            (shutil.copytree if src.is_dir() else shutil.copy2)(src, staging / name)
        trained_on = json.loads((staging / "onnx" / "manifest.json").read_text()).get("trained_on") or {}
        half_precision(staging / "model.safetensors", trained_on)
        for text in staging.glob(TEXT_WEIGHTS):  # MiniLM's fine-tuned layers: float16 too; their graph (90 MB) is
            half_precision(text, {})                # exported by `polyseek prepare` (trainer/startergraphs.py)
            (staging / "onnx" / "text_encoder.onnx").unlink(missing_ok=True)
        drop_untrained_encoders(staging / "onnx")
        if args.no_graphs:  # trainer/startergraphs.py exports them from the weights and trained_on below
            shutil.rmtree(staging / "onnx")
        metrics = read_metrics(run)
        if metrics is None:
            raise SystemExit(f"{run}: the run wrote no metrics.json")
        record = {**RECIPE, "method": args.method, "clip_input": args.clip_input, "epoch_captions": args.epoch_captions,
                  "clip_captions": args.clip_captions, "val_items": vals if len(vals) > 1 else vals[0],
                  "seed": args.seed, **sizes,
                  "data": " + ".join(d.name for d in datas),
                  "command": "python tools/build_starter.py --data " + " ".join(str(d) for d in args.data)
                  + (" --val-items " + " ".join(map(str, vals)) if len(vals) > 1 else "")
                  + (f" --method {args.method}" if args.method != RECIPE["method"] else "")
                  + (f" --trainer-args '{args.trainer_args}'" if args.trainer_args else "")
                  + (" --no-graphs" if args.no_graphs else ""),
                  "validation": {"rsum": metrics.rsum, "best_epoch": metrics.best_epoch, "epochs": metrics.epochs},
                  "trained_on": trained_on,
                  "terms": _terms(datas)}
        (staging / "starter.json").write_text(json.dumps(record, indent=2) + "\n")
        for name in COMPANION_PARTS:  # a starter rebuilt over the shipped one keeps its companion (#42)
            if (out / name).exists() and not (staging / name).exists():
                (shutil.copytree if (out / name).is_dir() else shutil.copy2)(out / name, staging / name)
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    print(f"starter model written to {out} (validation rsum {record['validation']['rsum']:.1f} on "
          f"{sizes['val_photos']} held-aside train photos)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
