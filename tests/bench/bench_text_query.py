"""A text query's latency end to end (``Search.text``: tokenise, encode, rank) with a model that carries
its own fine-tuned MiniLM (``text_encoder.onnx``, issue #19) against the shipped starter (stock MiniLM).

    python tests/bench/bench_text_query.py --model TUNED_MODEL_DIR --photos ../shared/datasets/flickr8k/images \
        [--items 500] [--queries 200] [--json bench-results/text-query.json]

Both models search the same library of ``--items`` photos; each query is a distinct Flickr8k-like sentence, timed
after 10 warm-up queries. Not run by CI.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

SUBJECTS = ["a dog", "two children", "a man in a red shirt", "a woman", "a group of people", "a black cat",
            "a boy on a bike", "a girl in a pink dress", "three dogs", "an old man"]
ACTIONS = ["runs across the grass", "jumps into the water", "sits on a bench", "climbs a rock", "plays in the snow",
           "walks down the street", "rides a wave", "stands near a fountain", "looks at the camera",
           "throws a ball on the beach"]


def queries(n: int) -> list[str]:
    return [f"{SUBJECTS[i % 10]} {ACTIONS[(i // 10) % 10]}" + ("" if i < 100 else f" at dusk {i}") for i in range(n)]


def timed(svc, texts: list[str]) -> dict:
    for text in texts[:10]:
        svc.search.text(text, top=10)
    ms = []
    for text in texts:
        start = time.perf_counter()
        svc.search.text(text, top=10)
        ms.append((time.perf_counter() - start) * 1000)
    return {"p50_ms": round(float(np.percentile(ms, 50)), 2), "p95_ms": round(float(np.percentile(ms, 95)), 2),
            "queries": len(ms)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="a model folder with its own text encoder")
    parser.add_argument("--photos", type=Path, required=True)
    parser.add_argument("--items", type=int, default=500)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="polyseek-textq-"))
    os.environ["POLYSEEK_HOME"] = str(home)
    from engine.workspace import Workspace

    media = home / "photos"
    media.mkdir()
    for f in sorted(args.photos.iterdir())[: args.items]:
        os.symlink(f, media / f.name)
    svc = Workspace.open("bench")
    try:
        list(svc.library.index([media]))
        texts = queries(args.queries)
        result = {"items": len(list(svc.state.catalog.iter_media())), "cpu_cores": os.cpu_count()}
        result["starter"] = {"model": svc.active_model_name(), **timed(svc, texts)} \
            if hasattr(svc, "active_model_name") else timed(svc, texts)
        svc.models.activate(str(args.model.resolve()))
        result["tuned_text_encoder"] = {"model": str(args.model), **timed(svc, texts)}
    finally:
        svc.close()
        shutil.rmtree(home, ignore_errors=True)
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
