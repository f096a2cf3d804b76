"""Rebuild the starter model that ships in ``resources/models/starter/`` from a caption folder.

    python tools/build_starter.py --data ../shared/datasets/flickr8k [--out resources/models/starter]

The recipe (recorded in the folder's ``starter.json``, checked by ``tests/unit/test_starter.py``):

- method ``vse`` (VSE++ hardest-negative triplet on the frozen EfficientNet-Lite0 pooled feature and the frozen
  MiniLM sentence vector, the trainer's default recipe for that method), seed 0;
- trained on the caption folder's ``train`` split minus a seeded slice of ``--val-items`` photos, which is the
  validation split that picks the best epoch and stops early. The folder's other splits (Flickr8k ``dev``) are
  never read, so ``tests/bench/bench_user_loop.py`` can measure the starter on photos it has not seen.

With your own captions: point ``--data`` at any caption folder (``images/`` + ``captions.tsv`` [+ ``splits.tsv``
with a ``train`` split; without one the whole folder is ``train``]) and ``--out`` at a new folder; then
``polyseek models --activate /that/folder`` makes it the library's model.

Only what the engine and a warm-started retrain need is kept (config, weights, metrics, ONNX export); the
resume checkpoints are removed.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

RECIPE = {"method": "vse", "seed": 0, "train_split": "train", "val_items": 500}
SPLIT_TRAIN, SPLIT_VAL = "starter-train", "starter-val"
KEEP = ("config.json", "model.safetensors", "metrics.json", "onnx")


def derived_folder(data: Path, work: Path, val_items: int, seed: int) -> dict[str, int]:
    """A caption folder in ``work`` whose media are ``data``'s (a link) and whose splits re-divide ``data``'s
    train split into starter-train and a seeded starter-val slice; other splits are left out."""
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
    if len(train) <= val_items:
        raise SystemExit(f"{data}: {len(train)} training photos; need more than --val-items {val_items}")
    val = set(random.Random(seed).sample(train, val_items))
    work.mkdir(parents=True, exist_ok=True)
    (work / media.name).symlink_to(media.resolve(), target_is_directory=True)
    with (work / "splits.tsv").open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(["file", "split"])
        w.writerows((name, SPLIT_VAL if name in val else SPLIT_TRAIN) for name in train)
    keep = set(train)
    with (work / "captions.tsv").open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
        w.writerow(["file", "caption"])
        w.writerows(row for row in captions if row and row[0] in keep)
    return {"train_photos": len(train) - val_items, "val_photos": val_items}


def half_precision(weights: Path) -> None:
    """Store the weights as float16 (half the size in the repository; a warm start loads them into float32
    parameters, and the engine ranks with the float32 ONNX export, so search is unchanged)."""
    from safetensors.numpy import load_file, save_file

    tensors = {k: (v.astype("float16") if v.dtype.kind == "f" else v) for k, v in load_file(weights).items()}
    save_file(tensors, weights)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="caption folder (Flickr8k for the shipped one)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "resources" / "models"
                        / "starter")
    parser.add_argument("--val-items", type=int, default=RECIPE["val_items"])
    parser.add_argument("--seed", type=int, default=RECIPE["seed"])
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    args = parser.parse_args(argv)
    out = args.out.resolve()
    with tempfile.TemporaryDirectory(prefix="polyseek-starter-") as tmp:
        work, run = Path(tmp) / "data", Path(tmp) / "run"
        sizes = derived_folder(args.data.resolve(), work, args.val_items, args.seed)
        command = [sys.executable, "-m", "trainer", "train", "--method", RECIPE["method"], "--data", str(work),
                   "--train-split", SPLIT_TRAIN, "--val-split", SPLIT_VAL, "--out", str(run),
                   "--seed", str(args.seed), "--device", args.device]
        print("running", " ".join(command), flush=True)
        subprocess.run(command, check=True)
        staging = out.with_name(out.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        for name in KEEP:
            src = run / name
            (shutil.copytree if src.is_dir() else shutil.copy2)(src, staging / name)
        half_precision(staging / "model.safetensors")
        metrics = json.loads((run / "metrics.json").read_text())
        record = {**RECIPE, "val_items": args.val_items, "seed": args.seed, **sizes,
                  "data": args.data.name, "command": "python tools/build_starter.py --data " + str(args.data),
                  "validation": {k: metrics.get(k) for k in ("rsum", "best_epoch", "epochs")},
                  "terms": "trained on Flickr8k (Hodosh, Young & Hockenmaier 2013), distributed for research use; "
                           "the weights are Polyseek's own training output, the photos are not included"}
        (staging / "starter.json").write_text(json.dumps(record, indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    print(f"starter model written to {out} (validation rsum {record['validation']['rsum']:.1f} on "
          f"{args.val_items} held-aside train photos)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
