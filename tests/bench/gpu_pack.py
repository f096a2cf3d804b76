"""Bring trained runs back from a lent GPU within the device tool's limits, and rebuild them here.

A device call returns at most 8 files of at most 16 MiB each (64 MiB in all). A run of ``tests/bench/gpu_full.sh``
leaves in ``HOME/models/<run>/`` its head (``model.safetensors``), config, metrics and words, and, after phase
two, ``backbone-<id>.safetensors`` (EfficientNet-Lite0, 18 MB) and ``text-<id>.safetensors`` (MiniLM's tuned
layers). On the device::

    python tests/bench/gpu_pack.py --home H --out $OUT --runs vse-s0 pvse-s1 ...      # heads + logs + summary
    python tests/bench/gpu_pack.py --home H --out $OUT --weights vse-s1 pvse-s1       # their backbone/text files

``--runs`` writes ``<run>.tgz`` per run (config, metrics, words, the JSON event log and the head as float16
without the branches that learnt nothing: a photo-only run's video encoder is its random initialisation) and
``summary.json`` (each run's validation rsum per epoch). ``--weights`` writes each run's backbone and text files as
float16 (9 and 7 MB). Here::

    python tests/bench/gpu_pack.py --unpack FILES_AT --into DIR

rebuilds every run found in ``FILES_AT`` as a trainer model folder ``DIR/<run>`` (float32 again; the untrained
video branch filled with a fresh initialisation of the same config, which the export then leaves out), ready for
``polyseek export`` / ``evaluate``.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

KEEP = ("config.json", "metrics.json", "caption_words.json")
UNTRAINED = ".video."  # the branch a photo-only run never trains (state-dict keys containing this)


def _epochs(log: Path) -> list[dict]:
    rows = []
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if log.is_file() else []:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if event.get("event") in ("epoch", "phase", "stopped", "done", "error"):
            rows.append({k: event.get(k) for k in ("event", "epoch", "best", "phase", "signal", "message")}
                        | {"rsum": (event.get("val") or {}).get("rsum")})
    return rows


def _half(weights: Path, drop: str | None) -> tuple[bytes, list[str]]:
    import torch
    from safetensors import safe_open
    from safetensors.torch import save

    with safe_open(str(weights), "pt") as f:
        metadata = f.metadata() or {}
        keys = list(f.keys())
        dropped = [k for k in keys if drop and drop in k]
        tensors = {k: (t.half() if t.is_floating_point() else t)
                   for k in keys if k not in dropped for t in [f.get_tensor(k)]}
    assert all(t.dtype != torch.float32 for t in tensors.values())
    return save(tensors, metadata=metadata), dropped


def pack_runs(home: Path, out: Path, logs: Path, runs: list[str]) -> None:
    summary = {}
    for run in runs:
        folder, log = home / "models" / run, home / "models" / f"{run}.jsonl"
        epochs = _epochs(log)
        best = [e["rsum"] for e in epochs if e["event"] == "epoch" and e.get("best") and e["rsum"] is not None]
        summary[run] = {"best_val_rsum": max(best) if best else None, "events": epochs,
                        "weights": sorted(p.name for p in folder.glob("*.safetensors") if "-" in p.stem
                                          and not p.name.startswith("last-"))}
        if not (folder / "model.safetensors").is_file():
            continue
        data, dropped = _half(folder / "model.safetensors", UNTRAINED)
        summary[run]["dropped"] = len(dropped)
        with tarfile.open(out / f"{run}.tgz", "w:gz") as tar:
            for name in KEEP:
                if (folder / name).is_file():
                    tar.add(folder / name, arcname=name)
            if log.is_file():
                tar.add(log, arcname="events.jsonl")
            info = tarfile.TarInfo("model.fp16.safetensors")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
            blob = json.dumps(dropped).encode()
            info = tarfile.TarInfo("dropped.json")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    (logs / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    with tarfile.open(out / "logs.tgz", "w:gz") as tar:  # one file: a call brings back at most 8
        tar.add(logs, arcname="logs")
    for run, row in summary.items():
        rsums = [e["rsum"] for e in row["events"] if e["event"] == "epoch"]
        print(run, "best", row["best_val_rsum"], "val rsum per epoch", rsums, row["events"][-1:] if row["events"]
              else "no events")


def pack_weights(home: Path, out: Path, runs: list[str]) -> None:
    for run in runs:
        for weights in sorted((home / "models" / run).glob("*-*.safetensors")):
            if weights.name.startswith(("backbone-", "text-")):
                data, _ = _half(weights, None)
                (out / f"{run}--{weights.name}").write_bytes(data)
                print(run, weights.name, len(data) // 2**20, "MiB")


def unpack(files: Path, into: Path) -> None:
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    from trainer.checkpoint import load_config
    from trainer.methods.registry import build_model

    for archive in sorted(files.glob("*.tgz")):
        run = archive.name.removesuffix(".tgz")
        folder = into / run
        folder.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive) as tar:
            tar.extractall(folder, filter="data")
        fresh = build_model(load_config(folder)).state_dict()
        with safe_open(str(folder / "model.fp16.safetensors"), "pt") as f:
            metadata = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        missing = [k for k in fresh if k not in tensors]
        if any(UNTRAINED not in k for k in missing):
            raise SystemExit(f"{archive}: keys missing beyond the untrained branch: {missing[:5]}")
        tensors.update({k: fresh[k] for k in missing})
        tensors = {k: (t.float() if t.is_floating_point() else t).contiguous() for k, t in tensors.items()}
        save_file(tensors, str(folder / "model.safetensors"), metadata=metadata)
        (folder / "model.fp16.safetensors").unlink()
        for weights in files.glob(f"{run}--*.safetensors"):
            with safe_open(str(weights), "pt") as f:
                meta = f.metadata() or {}
                tensors = {k: (t.float() if t.is_floating_point() else t) for k in f.keys() for t in [f.get_tensor(k)]}
            save_file(tensors, str(folder / weights.name.split("--", 1)[1]), metadata=meta)
        print(folder, "metadata", metadata, "filled", len(missing), "untrained keys", torch.__version__)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--runs", nargs="+")
    parser.add_argument("--logs", type=Path, help="with --runs: the folder of the runs' stderr, packed as logs.tgz")
    parser.add_argument("--weights", nargs="+")
    parser.add_argument("--unpack", type=Path)
    parser.add_argument("--into", type=Path)
    args = parser.parse_args()
    if args.unpack:
        unpack(args.unpack, args.into)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    if args.runs:
        pack_runs(args.home, args.out, args.logs, args.runs)
    if args.weights:
        pack_weights(args.home, args.out, args.weights)


if __name__ == "__main__":
    main()
