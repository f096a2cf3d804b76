"""Search benchmark (issue #5): a text query against a large multi-vector library on this 2-core machine.

Run on demand, not by CI::

    python tests/bench/bench_search.py --out bench-results/search.json       # 1M items, the default index
    python tests/bench/bench_search.py --compare --items 200000 --out bench-results/search-compare.json

The library is synthetic: ``--clusters`` gaussian clusters on the unit sphere with Zipf-like sizes (a few
big topics, many small ones); each item is its cluster centre plus item noise (``--shape``: along a
low-dimensional subspace of its cluster, or isotropic, the hardest case; see :class:`Mixture`), each of its
K heads the item plus head noise (PVSE's K embeddings of one photo are related but not equal). Queries are
fresh draws from the same mixture with K heads. Items are added ``--batch`` at a time, as the indexer
would, so the build time includes growing the index. For every index the run reports build time, latency
(p50/p95 over ``--queries`` queries after a warm-up), recall@10 against exact K x K search, and memory; numpy
brute force over the same vectors is measured in the same run as the reference. Query encoding is measured
separately: MiniLM on a short sentence (if the prepared assets exist under ``$POLYSEEK_ASSETS``) and, when
torch is installed, a PVSE text encoder of the benchmark's size exported to ONNX and run by
:class:`engine.modelrunner.ModelRunner`; their sum with the search is the end-to-end query time.

Results go to ``--out`` (JSON) and a Markdown table beside it (same name, ``.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere

from engine.vectorindex import AnnParams, MultiVectorIndex  # noqa: E402

SENTENCES = ["a dog catching a frisbee on the beach", "two children laughing in the snow",
             "a red car parked under a tree", "people dancing at a wedding", "a cat sleeping on a laptop",
             "fireworks over the city at night", "a man surfing a big wave", "birthday cake with candles"]
_NPROBES = [{"nprobe": n} for n in (8, 16, 32, 64)]
_EFS = [{"ef_search": e} for e in (64, 128, 256)]  # below the fetched k, faiss searches with ef = k
COMPARE = {  # the index, then the search settings measured on it
    "ivf-flat": (AnnParams(kind="ivf-flat"), _NPROBES),
    "ivf-sq8": (AnnParams(kind="ivf-sq8"), _NPROBES),
    "ivf-pq": (AnnParams(kind="ivf-pq", pq_m=32, pq_bits=8, oversample=8), _NPROBES),
    "hnsw": (AnnParams(kind="hnsw", hnsw_m=32, ef_construction=80), _EFS),
    "hnsw-sq8": (AnnParams(kind="hnsw-sq8", hnsw_m=32, ef_construction=80), _EFS),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("bench-results/search.json"))
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--heads", type=int, default=3)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--clusters", type=int, default=5_000)
    parser.add_argument("--shape", choices=("subspace", "isotropic"), default="subspace",
                        help="how items spread inside a cluster (see Mixture)")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--kind", default=AnnParams().kind, help="approximate index of the main run")
    parser.add_argument("--ef-search", type=int, default=AnnParams().ef_search, help="HNSW kinds")
    parser.add_argument("--nprobe", type=int, default=AnnParams().nprobe, help="IVF kinds")
    parser.add_argument("--oversample", type=int, default=AnnParams().oversample)
    parser.add_argument("--batch", type=int, default=100_000, help="items per add() call (like an indexer)")
    parser.add_argument("--kinds", default="", help="with --compare: comma-separated subset of the indexes")
    parser.add_argument("--compare", action="store_true", help="measure IVF-Flat, IVF-PQ and HNSW")
    parser.add_argument("--no-encoders", action="store_true", help="skip the query-encoder timings")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


# -- data ------------------------------------------------------------------------------------------------


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


class Mixture:
    """Gaussian clusters on the sphere; ``draw`` gives (n, K, D) unit vectors of items or queries.

    ``shape='isotropic'``: an item is its centre plus noise of norm 1.2 spread over all D dimensions (cosine
    ~0.64 to the centre); all members of a cluster are then about equally far from each other, the hardest
    case for any approximate index (local intrinsic dimension = D). ``shape='subspace'``: the item varies
    along a ``rank``-dimensional subspace of its cluster (norm 1.2, sub-topics) plus isotropic noise of norm
    0.3, the low local intrinsic dimension learned embeddings show (Ansuini et al., NeurIPS 2019, measure
    10-20 in the last layers of image networks). Either way each of the K heads is the item plus isotropic
    noise of norm 0.6 (cosine ~0.86 to the item).
    """

    def __init__(self, clusters: int, heads: int, dim: int, seed: int, shape: str = "isotropic",
                 rank: int = 16) -> None:
        rng = np.random.default_rng(seed)
        self.heads, self.dim, self.shape, self.rank = heads, dim, shape, rank
        self.centres = unit(rng.standard_normal((clusters, dim))).astype(np.float32)
        weights = 1.0 / np.arange(1, clusters + 1) ** 0.7  # Zipf-like topic sizes
        self.weights = weights / weights.sum()
        self.bases = None
        if shape == "subspace":  # (clusters, rank, D) orthonormal rows: each topic's sub-topic directions
            self.bases = np.linalg.qr(rng.standard_normal((clusters, dim, rank)).astype(np.float32))[0]
            self.bases = np.ascontiguousarray(self.bases.transpose(0, 2, 1))

    def draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        labels = rng.choice(len(self.centres), size=n, p=self.weights)
        iso = unit(rng.standard_normal((n, self.dim), dtype=np.float32))
        if self.bases is None:
            item = unit(self.centres[labels] + 1.2 * iso)
        else:
            coeffs = unit(rng.standard_normal((n, self.rank), dtype=np.float32))
            along = np.einsum("nr,nrd->nd", coeffs, self.bases[labels])
            item = unit(self.centres[labels] + 1.2 * along + 0.3 * iso)
        noise = unit(rng.standard_normal((n, self.heads, self.dim), dtype=np.float32))
        return unit(item[:, None, :] + 0.6 * noise).astype(np.float32)

    def library(self, n: int, seed: int, chunk: int = 16_384) -> np.ndarray:
        out = np.empty((n, self.heads, self.dim), np.float32)
        for start in range(0, n, chunk):
            out[start:start + chunk] = self.draw(min(chunk, n - start), np.random.default_rng([seed, start]))
        return out


def brute_force(vectors: np.ndarray, queries: np.ndarray, top: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top rows (B, top) and scores by the K x K rule, in plain numpy (the reference)."""
    batch, kq, dim = queries.shape
    flat = queries.reshape(-1, dim).T
    block = max(4096, (1 << 24) // (vectors.shape[1] * batch * kq))  # ~64 MB of similarities at a time
    best_scores = np.full((batch, 0), -np.inf, np.float32)
    best_rows = np.zeros((batch, 0), np.int64)
    for start in range(0, len(vectors), block):
        part = vectors[start:start + block]
        sims = (part.reshape(-1, dim) @ flat).reshape(len(part), part.shape[1], batch, kq).max(axis=(1, 3))
        scores = np.concatenate([best_scores, sims.T], axis=1)
        rows = np.concatenate([best_rows, np.broadcast_to(np.arange(start, start + len(part)),
                                                          (batch, len(part)))], axis=1)
        keep = np.argpartition(-scores, min(top, scores.shape[1]) - 1, axis=1)[:, :top]
        best_scores, best_rows = np.take_along_axis(scores, keep, 1), np.take_along_axis(rows, keep, 1)
    order = np.argsort(-best_scores, axis=1, kind="stable")
    return np.take_along_axis(best_rows, order, 1), np.take_along_axis(best_scores, order, 1)


# -- measuring -------------------------------------------------------------------------------------------


def latencies(fn: Callable[[int], Any], count: int, warmup: int = 5) -> list[float]:
    """Milliseconds of ``fn(i)`` for i in range(count), after ``warmup`` untimed calls."""
    for i in range(warmup):
        fn(i)
    out = []
    for i in range(count):
        started = time.perf_counter()
        fn(i)
        out.append((time.perf_counter() - started) * 1000.0)
    return out


def summary(ms: list[float]) -> dict[str, float]:
    return {"p50_ms": round(float(np.percentile(ms, 50)), 2),
            "p95_ms": round(float(np.percentile(ms, 95)), 2), "mean_ms": round(float(np.mean(ms)), 2)}


def memory_mb() -> dict[str, float]:
    """Current and peak resident memory of this process (Linux /proc)."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = round(int(value.split()[0]) / 1024.0, 1)
    return {"rss_mb": fields.get("VmRSS", 0.0), "peak_rss_mb": fields.get("VmHWM", 0.0)}


def recall(found: list[np.ndarray], truth: np.ndarray) -> float:
    hits = [len(set(f.tolist()) & set(t.tolist())) for f, t in zip(found, truth, strict=True)]
    return float(np.mean(hits)) / truth.shape[1]


def bench_brute_force(vectors: np.ndarray, queries: np.ndarray, top: int) -> dict[str, Any]:
    count = min(20, len(queries))  # each query reads every vector: a few are enough for the percentiles
    ms = latencies(lambda i: brute_force(vectors, queries[i:i + 1], top), count, warmup=1)
    return {"index": "numpy brute force", **summary(ms), "recall_at_10": 1.0, "build_s": 0.0,
            "queries": count}


def timed_searches(index: MultiVectorIndex, queries: np.ndarray, top: int
                   ) -> tuple[list[float], list[np.ndarray]]:
    """Milliseconds and found ids of one search per query (after a warm-up)."""
    found: list[np.ndarray] = []
    ms = latencies(lambda i: found.append(index.search(queries[i % len(queries)], top)[0]), len(queries))
    return ms, found[-len(queries):]


def bench_index(name: str, params: AnnParams, settings: list[dict[str, Any]], ids: np.ndarray,
                vectors: np.ndarray, queries: np.ndarray, truth_rows: np.ndarray, args: argparse.Namespace
                ) -> list[dict[str, Any]]:
    """Build one index (adding ``args.batch`` items at a time, as an indexer does), then measure latency
    and recall for each of ``settings`` (search-time overrides of ``params``, e.g. nprobe)."""
    before = memory_mb()["rss_mb"]
    index = MultiVectorIndex(vectors.shape[2], vectors.shape[1], model_id="bench", params=params)
    started = time.perf_counter()
    for start in range(0, len(ids), args.batch):
        index.add(ids[start:start + args.batch], vectors[start:start + args.batch])
    build = time.perf_counter() - started
    grown = round(memory_mb()["rss_mb"] - before, 1)
    rows = []
    for setting in settings:
        index.params = replace(params, **setting)
        ms, found = timed_searches(index, queries, args.top)
        label = ", ".join(f"{k}={v}" for k, v in setting.items())
        row = {"index": f"{name} {label}".strip(), "params": asdict(index.params), "state": index.describe(),
               **summary(ms), "recall_at_10": round(recall(found, ids[truth_rows]), 4),
               "build_s": round(build, 1), "index_rss_mb": grown, **memory_mb()}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def bench_encoders(args: argparse.Namespace) -> dict[str, Any]:
    """Query-encoding latency: MiniLM tokens + sentence vector, then a PVSE text encoder on ONNX Runtime."""
    out: dict[str, Any] = {}
    tokens = None
    try:
        from engine.text import MiniLMEncoder

        minilm = MiniLMEncoder(threads=2)
        out["minilm"] = summary(latencies(lambda i: minilm.encode([SENTENCES[i % len(SENTENCES)]]), 100))
        tokens = minilm.encode([SENTENCES[0]])
    except Exception as exc:  # assets missing or not prepared: report why and go on
        out["minilm"] = {"skipped": f"{type(exc).__name__}: {exc}"}
    try:
        out["pvse_text"] = _pvse_text_latency(args, tokens)
    except ImportError as exc:
        out["pvse_text"] = {"skipped": f"torch/trainer not installed ({exc})"}
    return out


def _pvse_text_latency(args: argparse.Namespace, tokens: Any) -> dict[str, Any]:
    import torch

    from engine.modelrunner import ModelRunner
    from trainer.methods import build_config, build_model, export_model

    torch.manual_seed(0)
    config = build_config("pvse", {"embed_dim": args.dim, "num_embeds": args.heads, "text_encoder": "minilm"})
    with tempfile.TemporaryDirectory() as folder:
        export_model(build_model(config).eval(), Path(folder) / "pvse", modalities=("text",))
        runner = ModelRunner.load(Path(folder) / "pvse", threads=2)
        if tokens is None:  # no MiniLM assets: random token vectors of a short sentence
            vectors, mask = np.random.default_rng(0).standard_normal((1, 10, 384)), np.ones((1, 10))
        else:
            vectors, mask = tokens.vectors, tokens.mask
        return {**summary(latencies(lambda i: runner.encode_text(vectors, mask), 100)),
                "config": {"embed_dim": args.dim, "num_embeds": args.heads, "text_encoder": "minilm"}}


# -- report ----------------------------------------------------------------------------------------------


def markdown(results: dict[str, Any]) -> str:
    s = results["setup"]
    lines = [f"# Search benchmark ({s['items']:,} items x K={s['heads']} x D={s['dim']}, {s['clusters']:,} "
             f"clusters, {s['queries']} queries, top {s['top']}, {s['cpus']} cores)", "",
             "| index | build (s) | p50 (ms) | p95 (ms) | recall@10 | RSS growth in build (MB) | RSS (MB) |",
             "|---|---|---|---|---|---|---|"]
    for r in results["indexes"]:
        lines.append(f"| {r['index']} | {r['build_s']} | {r['p50_ms']} | {r['p95_ms']} | "
                     f"{r['recall_at_10']} | {r.get('index_rss_mb', '-')} | {r.get('rss_mb', '-')} |")
    enc = results.get("encoders", {})
    if enc:
        lines += ["", "| query encoding | p50 (ms) | p95 (ms) |", "|---|---|---|"]
        for name, r in enc.items():
            lines.append(f"| {name} | {r.get('p50_ms', r.get('skipped'))} | {r.get('p95_ms', '-')} |")
    if "end_to_end" in results:
        e = results["end_to_end"]
        lines += ["", f"End to end (MiniLM + PVSE text encoder + search, sum of p50 / p95): "
                      f"{e['p50_ms']} / {e['p95_ms']} ms."]
    load = results["load_average"]
    lines += ["", f"Peak process RSS: {results['memory']['peak_rss_mb']} MB; data generation "
                  f"{results['setup']['generate_s']} s; exact reference {results['setup']['reference_s']} s; "
                  f"load average (1/5/15 min) {load['start']} at the start, {load['end']} at the end."]
    return "\n".join(lines) + "\n"


def end_to_end(results: dict[str, Any]) -> dict[str, float] | None:
    enc = results.get("encoders", {})
    parts = [enc.get("minilm", {}), enc.get("pvse_text", {}), results["indexes"][-1]]
    if any("p50_ms" not in p for p in parts):
        return None
    return {k: round(sum(p[k] for p in parts), 2) for k in ("p50_ms", "p95_ms")}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load_start = os.getloadavg()  # other work on the machine skews latencies: record it
    mixture = Mixture(args.clusters, args.heads, args.dim, args.seed, args.shape)
    started = time.perf_counter()
    vectors = mixture.library(args.items, args.seed)
    queries = mixture.draw(args.queries, np.random.default_rng([args.seed, 1, 0]))  # not a chunk's seed
    generate_s = time.perf_counter() - started
    ids = np.arange(args.items, dtype=np.int64) * 3 + 17  # ids unlike row numbers
    started = time.perf_counter()
    truth_rows, _ = brute_force(vectors, queries, args.top)
    reference_s = time.perf_counter() - started
    rows = [bench_brute_force(vectors, queries, args.top)]
    print(json.dumps(rows[0]), flush=True)
    search = {"ef_search": args.ef_search} if args.kind.startswith("hnsw") else {"nprobe": args.nprobe}
    chosen = {args.kind: (AnnParams(kind=args.kind), [{**search, "oversample": args.oversample}])}
    compare = {k: v for k, v in COMPARE.items() if not args.kinds or k in args.kinds.split(",")}
    for name, (params, settings) in (compare if args.compare else chosen).items():
        rows += bench_index(name, params, settings, ids, vectors, queries, truth_rows, args)
    results: dict[str, Any] = {
        "setup": {**{k: v for k, v in vars(args).items() if k != "out"}, "cpus": os.cpu_count(),
                  "machine": platform.processor() or platform.machine(), "python": platform.python_version(),
                  "generate_s": round(generate_s, 1), "reference_s": round(reference_s, 1)},
        "indexes": rows, "memory": memory_mb(), "load_average": {"start": load_start, "end": os.getloadavg()}}
    if not args.no_encoders:
        results["encoders"] = bench_encoders(args)
        if (e2e := end_to_end(results)) is not None:
            results["end_to_end"] = e2e
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(results))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
