"""Is phase two's whole-backbone training fed fast enough? Pictures/s of the pixel feed alone, of the training
step alone (random pictures already on the device), and of the two together, as the trainer runs them.

    python tests/bench/gpu_feed.py --images DIR [--device cuda] [--steps 8] [--threads 8,14]

Run on a lent GPU machine by ``tests/bench/gpu_check.sh``'s bundle (``--images .devsend/data/images``, with
the bundle's wheels on PYTHONPATH). The step is EfficientNet-Lite0 (BN frozen, as in phase two) under autocast
float16 with a GradScaler, batch 128, a stand-in loss on the pooled features; the optimiser is Adam; each in
the default (NCHW) memory layout and in channels-last (depthwise convolutions often run faster in it on GPUs).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from trainer.finetune import PixelFeed, load_backbone, to_pixels  # noqa: E402

BATCH = 128


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def feed_rate(paths: list[Path], threads: int, steps: int) -> float:
    feed = PixelFeed(paths, seed=0, threads=threads)
    order = np.random.default_rng(0).permutation(np.arange(BATCH * (steps + 1)) % len(paths))
    batches = [order[i * BATCH:(i + 1) * BATCH] for i in range(steps + 1)]
    it = feed.batches(batches, epoch=0)
    next(it)  # warm-up: the pool's threads, the decoders' first calls
    start = time.perf_counter()
    n = sum(len(b) for b in it)
    rate = n / (time.perf_counter() - start)
    feed.close()
    return rate


def step_rate(device: torch.device, steps: int, feed: PixelFeed | None = None, paths_n: int = 0,
              channels_last: bool = False, fused: bool = False) -> float:
    layout = torch.channels_last if channels_last else torch.contiguous_format
    backbone = load_backbone().to(device, memory_format=layout).train()
    optimizer = torch.optim.Adam([p for p in backbone.parameters() if p.requires_grad], lr=1e-5,
                                 **({"fused": True} if fused else {}))
    scaler = torch.amp.GradScaler(device.type, enabled=device.type == "cuda")
    if feed is None:
        rng = np.random.default_rng(0)
        source = (rng.integers(0, 256, (BATCH, 3, 224, 224), dtype=np.uint8) for _ in range(steps + 2))
    else:
        order = np.random.default_rng(1).permutation(np.arange(BATCH * (steps + 2)) % paths_n)
        source = feed.batches([order[i * BATCH:(i + 1) * BATCH] for i in range(steps + 2)], epoch=1)

    def one(images: np.ndarray) -> None:
        pixels = to_pixels(images, device).images.contiguous(memory_format=layout)
        with torch.autocast(device_type=device.type, dtype=torch.float16, enabled=device.type == "cuda"):
            loss = backbone(pixels).pooled.float().pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    for _ in range(2):  # warm-up: cuDNN's algorithm choice, the allocator
        one(next(source))
    _sync(device)
    start = time.perf_counter()
    for images in source:
        one(images)
    _sync(device)
    return BATCH * steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=Path, required=True)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--threads", default="8,14")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--variants", default="",
                        help="comma-separated step variants instead of the layouts: base, benchmark, fused, "
                             "benchmark+fused")
    args = parser.parse_args()
    device = torch.device(args.device)
    paths = sorted(args.images.iterdir())
    result: dict = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                    "batch": BATCH, "steps": args.steps, "feed_per_s": {}, "feed_and_step_per_s": {}}
    for threads in (int(t) for t in args.threads.split(",") if not args.variants):
        result["feed_per_s"][threads] = round(feed_rate(paths, threads, args.steps), 1)
        print(f"feed alone, {threads} threads: {result['feed_per_s'][threads]} pictures/s", flush=True)
    if args.variants:  # the GPU step's knobs, channels-last throughout: cuDNN autotuning, a fused Adam
        for name in args.variants.split(","):
            torch.backends.cudnn.benchmark = "benchmark" in name
            fused = "fused" in name
            rate = step_rate(device, args.steps, channels_last=True, fused=fused)
            feed = PixelFeed(paths, seed=0, threads=8)
            both = step_rate(device, args.steps, feed, len(paths), channels_last=True, fused=fused)
            feed.close()
            result[f"variant {name}"] = {"step_per_s": round(rate, 1), "feed_and_step_per_s": round(both, 1)}
            print(f"{name}: step alone {rate:.1f}, feed + step (8 threads) {both:.1f} pictures/s", flush=True)
    else:
        for layout in ("NCHW", "channels_last"):
            rate = step_rate(device, args.steps, channels_last=layout == "channels_last")
            result[f"step_per_s_{layout}"] = round(rate, 1)
            print(f"step alone, {layout}: {rate:.1f} pictures/s", flush=True)
            for threads in (int(t) for t in args.threads.split(",")):
                feed = PixelFeed(paths, seed=0, threads=threads)
                rate = step_rate(device, args.steps, feed, len(paths), channels_last=layout == "channels_last")
                feed.close()
                result["feed_and_step_per_s"][f"{threads} threads, {layout}"] = round(rate, 1)
                print(f"feed + step, {threads} threads, {layout}: {rate:.1f} pictures/s", flush=True)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
