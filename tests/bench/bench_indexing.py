"""Indexing throughput end to end vs the backbone alone, measured in the same run.

    python tests/bench/bench_indexing.py [--n 512] [--n-large 48] [--out bench-results/indexing.json]

Two libraries: ``--n`` Flickr8k photos as they are (224x224 JPEGs, from ../shared/datasets/flickr8k) and
``--n-large`` 12-megapixel JPEGs (4000x3000, made here by enlarging Flickr8k photos). For each: (a) the backbone
alone on already-decoded 224x224 batches of the same size, (b) ``Library.index`` on a fresh home
(walk, hash, decode, backbone, regional semantics, feature store and catalog writes), (c) decoding alone: the
indexer's own decode (``engine.features.extract.decode_for_backbone``) on a pool of two threads, as the indexer runs it.
The ratio (b)/(a) is the figure of merit (the product's >= 0.8; issue #24: >= 0.9). Opening the service,
the backbone and the active model (the starter, which embeds the new items at the end of (b)) is session
opening, not indexing, and happens before (b) is timed. Medians of ``--repeat`` runs; (a), (c) and (b)
run one after the other in each repeat so a changing load on the machine hits them alike.

Two more figures explain the ratio:

- ``decode_bound``: decoding and the backbone both keep every core busy, so their times per item add up and
  end to end can reach at most ``1 / (1/decode + 1/backbone)`` items/s, i.e. ``decode / (decode + backbone)``
  of the backbone alone. For 12 MP JPEGs the entropy decoding of the whole file (no decoder can skip it for a
  baseline JPEG; draft mode only saves the IDCT and the pixels) costs about as much CPU as the backbone, so the
  target is out of reach on this machine's cores whatever the pipeline does.
- ``cpu_ratio``: backbone-alone CPU time per item over end-to-end CPU time per item (process CPU, all threads).
  It is what the throughput ratio tends to on a machine whose cores indexing has to itself, and it moves less
  than wall-clock figures when other programs load the machine.
- ``of_decode_bound`` (and its CPU form ``cpu_of_decode_bound``, (backbone + decode CPU) / end-to-end CPU): how
  close end to end comes to that bound; the 12 MP target is >= 0.9.

``--profile`` adds one more end-to-end run per library with the CPU per item of each stage, each thread's CPU,
waits on the stores' locks and the feature store's bytes per item (``tests/bench/indexing_profile.py``). Both
files are written: ``--out`` (JSON) and the same name with ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))
FLICKR = REPO.parent / "shared" / "datasets" / "flickr8k" / "images"


def backbone_alone(backbone, images: np.ndarray, batch: int) -> tuple[float, float]:
    """(items/s, CPU ms per item) of the backbone on ready 224 x 224 batches."""
    backbone(images[:batch])  # warm-up
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(0, len(images), batch):
        backbone(images[i:i + batch])
    return len(images) / (time.perf_counter() - start), 1000 * (time.process_time() - cpu) / len(images)


def decode_only(paths: list[Path], size: int) -> tuple[float, float]:
    """(items/s, CPU ms per item) of the indexer's decode on as many threads as the extractor's pool has, no
    backbone."""
    from engine.features.extract import decode_for_backbone, default_decode_threads

    with ThreadPoolExecutor(max_workers=default_decode_threads()) as pool:
        list(pool.map(lambda p: decode_for_backbone(p, size), paths[:2]))  # warm-up: imports, plugin init
        start, cpu = time.perf_counter(), time.process_time()
        list(pool.map(lambda p: decode_for_backbone(p, size), paths))
        return len(paths) / (time.perf_counter() - start), 1000 * (time.process_time() - cpu) / len(paths)


def end_to_end(folder: Path, assets: Path, profile: bool = False) -> tuple[float, float, dict | None]:
    """(items/s, CPU ms per item, the profile or None) of ``Library.index`` on a fresh home."""
    from contextlib import nullcontext

    from indexing_profile import profiled, report

    from engine.workspace import Workspace

    with tempfile.TemporaryDirectory() as home:
        os.environ["POLYSEEK_HOME"] = home
        service = Workspace.open("bench", assets)
        service.state.encoders.backbone  # noqa: B018 - session opening is not indexing
        service.models.active_trained()  # nor is opening the active model (the starter), which embeds the new items
        n = len(list(folder.iterdir()))
        with profiled(service) if profile else nullcontext() as figures:
            start, cpu = time.perf_counter(), time.process_time()
            for _ in service.library.index([folder]):
                pass
            wall, cpu_s = time.perf_counter() - start, time.process_time() - cpu
        stats = service.state.features.stats()
        service.close()
        store_bytes = stats.global_bytes + stats.local_bytes + stats.frame_bytes
        details = report(figures, n, cpu_s, wall, stats.file_bytes) if profile else None
        if details is not None:
            details["feature_payload_bytes_per_item"] = round(store_bytes / n)
    return n / wall, 1000 * cpu_s / n, details


def make_large(files: list[Path], dest: Path) -> None:
    for f in files:
        Image.open(f).convert("RGB").resize((4000, 3000), Image.BICUBIC).save(dest / f.name, quality=90)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=512)
    parser.add_argument("--n-large", type=int, default=48)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "indexing.json")
    parser.add_argument("--photos", type=Path, default=FLICKR, help="a folder of Flickr8k photos")
    parser.add_argument("--decode-threads", type=int, default=None,
                        help="the indexer's decode threads (default: engine.features.extract.default_decode_threads())")
    parser.add_argument("--profile", action="store_true",
                        help="one more end-to-end run per library with per-stage CPU, lock waits and bytes per item")
    args = parser.parse_args()
    if args.decode_threads:
        import engine.features.extract

        engine.features.extract.default_decode_threads = lambda: args.decode_threads
    if not args.photos.is_dir():
        print(f"skipped: {args.photos} is absent")
        return 0
    from engine.features.backbone import Backbone
    from engine.features.extract import decode_for_backbone, default_decode_threads
    from engine.library.indexer import BATCH
    from engine.paths import assets_dir

    assets = Path(os.environ.get("POLYSEEK_ASSETS") or assets_dir())
    files = sorted(args.photos.resolve().iterdir())[: args.n]
    backbone = Backbone(assets)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        small, large = Path(tmp) / "small", Path(tmp) / "large"
        small.mkdir()
        large.mkdir()
        for f in files:
            os.symlink(f, small / f.name)
        make_large(files[: args.n_large], large)
        for name, folder in (("flickr8k-224px", small), ("12MP-jpeg", large)):
            paths = sorted(folder.iterdir())
            images = np.concatenate([decode_for_backbone(p, 224).frames for p in paths])
            alone, decode, full = [], [], []
            for _ in range(args.repeat):
                alone.append(backbone_alone(backbone, images, BATCH))
                decode.append(decode_only(paths, backbone.image_size))
                full.append(end_to_end(folder, assets)[:2])
            row = {"n": len(paths),
                   "backbone_alone_per_s": statistics.median(a for a, _ in alone),
                   "end_to_end_per_s": statistics.median(f for f, _ in full),
                   "decode_only_per_s": statistics.median(d for d, _ in decode),
                   "decode_only_cpu_ms": statistics.median(c for _, c in decode),
                   "backbone_alone_cpu_ms": statistics.median(c for _, c in alone),
                   "end_to_end_cpu_ms": statistics.median(c for _, c in full),
                   "runs": {"backbone_alone_per_s": [a for a, _ in alone],
                            "decode_only_per_s": [d for d, _ in decode],
                            "end_to_end_per_s": [f for f, _ in full],
                            "backbone_alone_cpu_ms": [c for _, c in alone],
                            "end_to_end_cpu_ms": [c for _, c in full]}}
            row["ratio"] = row["end_to_end_per_s"] / row["backbone_alone_per_s"]
            row["decode_bound"] = row["decode_only_per_s"] / (row["decode_only_per_s"] + row["backbone_alone_per_s"])
            row["cpu_ratio"] = row["backbone_alone_cpu_ms"] / row["end_to_end_cpu_ms"]
            row["of_decode_bound"] = row["ratio"] / row["decode_bound"]
            row["cpu_of_decode_bound"] = ((row["backbone_alone_cpu_ms"] + row["decode_only_cpu_ms"])
                                          / row["end_to_end_cpu_ms"])
            if args.profile:
                row["profile"] = end_to_end(folder, assets, profile=True)[2]
                print(json.dumps(row["profile"], indent=1), flush=True)
            results[name] = row
            print(f"{name:16s} n={row['n']:4d}  backbone alone {row['backbone_alone_per_s']:6.1f}/s  "
                  f"end to end {row['end_to_end_per_s']:6.1f}/s  decode only {row['decode_only_per_s']:6.1f}/s  "
                  f"ratio {row['ratio']:.2f}  decode bound {row['decode_bound']:.2f}  "
                  f"cpu ms/item {row['backbone_alone_cpu_ms']:.1f} vs {row['end_to_end_cpu_ms']:.1f} "
                  f"(cpu ratio {row['cpu_ratio']:.2f})  of the decode bound {row['of_decode_bound']:.2f} "
                  f"(cpu {row['cpu_of_decode_bound']:.2f})", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    record = {"machine": f"{os.cpu_count()} cores", "decode_threads": default_decode_threads(),
              "load_average_1min_at_end": load, "target_ratio": 0.9, "results": results}
    args.out.write_text(json.dumps(record, indent=2))
    args.out.with_suffix(".md").write_text(markdown(record))
    return 0


def markdown(record: dict) -> str:
    """The run as tables: throughput and ratios, then (with --profile) CPU per item by stage."""
    lines = [f"# Indexing throughput ({record['machine']}, load average {record['load_average_1min_at_end']:.1f} "
             "at the end)", "",
             "| library | backbone alone /s | end to end /s | decode only /s | ratio | decode bound | of the bound "
             "| CPU ms/item alone vs end to end | CPU ratio | CPU of the bound |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in record["results"].items():
        lines.append(f"| {name} ({r['n']}) | {r['backbone_alone_per_s']:.1f} | {r['end_to_end_per_s']:.1f} | "
                     f"{r['decode_only_per_s']:.1f} | {r['ratio']:.2f} | {r['decode_bound']:.2f} | "
                     f"{r['of_decode_bound']:.2f} | {r['backbone_alone_cpu_ms']:.1f} vs {r['end_to_end_cpu_ms']:.1f} | "
                     f"{r['cpu_ratio']:.2f} | {r['cpu_of_decode_bound']:.2f} |")
    profiles = {name: r["profile"] for name, r in record["results"].items() if r.get("profile")}
    if profiles:
        stages = sorted({s for p in profiles.values() for s in p["stage_cpu_ms_per_item"]})
        lines += ["", "CPU ms per item by stage (one profiled run each):", "",
                  "| stage | " + " | ".join(profiles) + " |", "|---|" + "---|" * len(profiles)]
        for stage in stages:
            lines.append(f"| {stage} | " + " | ".join(f"{p['stage_cpu_ms_per_item'].get(stage, 0):.2f}"
                                                      for p in profiles.values()) + " |")
        for key, label in (("feature_store_bytes_per_item", "feature store file, bytes/item"),
                           ("feature_payload_bytes_per_item", "feature payloads, bytes/item")):
            lines.append(f"| {label} | " + " | ".join(str(p[key]) for p in profiles.values()) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
