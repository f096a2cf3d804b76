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
:class:`engine.search.modelrunner.ModelRunner`; their sum with the search is the end-to-end query time.

``--data flickr`` replaces the synthetic library with real embeddings (issue #5's second variant): the K
head embeddings of the Flickr8k train+dev photos, computed by a trained export (``--model DIR``) from the
backbone features cached in ``$POLYSEEK_HOME/features.sqlite``, replicated to ``--items`` items with
gaussian noise (:func:`replicate`, scale ``--noise``; the run reports how often a replicate's nearest
source photo is still its own and its mean cosine to it; ``--calibrate`` prints that for several scales).
Queries are real dev captions, timed end to end: MiniLM tokens + the export's text encoder + search +
the result list. The library is generated ``--batch`` items at a time and never held whole, so the exact
reference is accumulated chunk by chunk in float32 while the index is built, and the numpy brute-force
latency is measured on the index's own stored vectors (``search(..., exact=True)``)::

    POLYSEEK_HOME=/tmp/h4 POLYSEEK_ASSETS=.cache/test-assets python tests/bench/bench_search.py \
        --data flickr --model /tmp/t_pvse --items 200000 --out bench-results/search-flickr-200k.json

The 1M-item runs of issue #5 (each alone on a quiet machine; times and peaks estimated from the smaller
runs): ``--shape isotropic --ef-search 512,1024 --out bench-results/search-isotropic.json`` (~30 min,
~8.5 GB peak RSS; effective ef 768 / 1536 at 1M), the same without ``--shape`` into search.json (~15 min),
and with real embeddings (~60-75 min of building, ~19 GB peak RSS: 10 GB of index, a growth step of the
float16 vectors, the ``--batch`` chunk)::

    POLYSEEK_HOME=/tmp/h4 POLYSEEK_ASSETS=.cache/test-assets python tests/bench/bench_search.py \
        --data flickr --model /tmp/t_pvse --items 1000000 --batch 50000 --ef-search 512,1024,1365 \
        --out bench-results/search-flickr-1m.json

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
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere

from engine.search.vectorindex import AnnParams, MultiVectorIndex, search_ef  # noqa: E402
from engine.types import MediaKind, SearchHit  # noqa: E402

SENTENCES = ["a dog catching a frisbee on the beach", "two children laughing in the snow",
             "a red car parked under a tree", "people dancing at a wedding", "a cat sleeping on a laptop",
             "fireworks over the city at night", "a man surfing a big wave", "birthday cake with candles"]
FLICKR = Path("/work/shared/datasets/flickr8k")
FLICKR_NOISE = 0.5  # see replicate() and the choice in bench-results/search-flickr-*.md (--calibrate)
_NPROBES = [{"nprobe": n} for n in (8, 16, 32, 64)]
_EFS = [{"ef_search": e} for e in (64, 128, 256)]  # below the fetched k, faiss searches with ef = k
COMPARE = {  # the index, then the search settings measured on it
    "ivf-flat": (AnnParams(kind="ivf-flat"), _NPROBES),
    "ivf-sq8": (AnnParams(kind="ivf-sq8"), _NPROBES),
    "ivf-pq": (AnnParams(kind="ivf-pq", pq_m=32, pq_bits=8, oversample=8), _NPROBES),
    "hnsw": (AnnParams(kind="hnsw", hnsw_m=32, ef_construction=80), _EFS),
    "hnsw-sq8": (AnnParams(kind="hnsw-sq8", hnsw_m=32, ef_construction=80), _EFS),
    "hnsw+ivf": (AnnParams(kind="hnsw+ivf", hnsw_m=32, ef_construction=80), _EFS),
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
    parser.add_argument("--ef-search", type=_ints, default=[AnnParams().ef_search],
                        help="HNSW kinds; a comma-separated list measures each on the same index")
    parser.add_argument("--ef-growth", type=float, default=AnnParams().ef_growth,
                        help="HNSW kinds: ef_search's growth per tenfold of vectors (vectorindex.search_ef)")
    parser.add_argument("--nprobe", type=int, default=AnnParams().nprobe, help="IVF kinds and the lists of hnsw+ivf")
    parser.add_argument("--oversample", type=int, default=AnnParams().oversample)
    parser.add_argument("--batch", type=int, default=100_000, help="items per add() call (like an indexer)")
    parser.add_argument("--kinds", default="", help="with --compare: comma-separated subset of the indexes")
    parser.add_argument("--compare", action="store_true", help="measure IVF-Flat, IVF-PQ and HNSW")
    parser.add_argument("--no-encoders", action="store_true", help="skip the query-encoder timings")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--storage", default="auto", choices=("auto", "float32", "float16"),
                        help="type of the vectors the index keeps for exact rescoring")
    parser.add_argument("--data", choices=("synthetic", "flickr"), default="synthetic")
    parser.add_argument("--model", type=Path, help="--data flickr: trained export (model dir or its onnx/)")
    parser.add_argument("--flickr", type=Path, default=FLICKR, help="--data flickr: the caption folder")
    parser.add_argument("--noise", type=float, default=FLICKR_NOISE, help="--data flickr: see replicate()")
    parser.add_argument("--calibrate", default="", help="--data flickr: comma-separated noise scales to "
                        "report (nearest-source rate, cosine) before the run")
    parser.add_argument("--exact-queries", type=int, default=20, help="queries timed for the brute force")
    args = parser.parse_args(argv)
    if args.data == "flickr" and args.model is None:
        parser.error("--data flickr needs --model DIR (a trained export)")
    return args


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


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


def bench_brute_force(vectors: np.ndarray, queries: np.ndarray, top: int, count: int = 20) -> dict[str, Any]:
    count = min(count, len(queries))  # each query reads every vector: a few are enough for the percentiles
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
    index = MultiVectorIndex(vectors.shape[2], vectors.shape[1], model_id="bench", params=params,
                             storage=args.storage)
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
               "effective_ef": effective_ef(index, args.top),
               **summary(ms), "recall_at_10": round(recall(found, ids[truth_rows]), 4),
               "build_s": round(build, 1), "index_rss_mb": grown, "index_bytes": index.nbytes(), **memory_mb()}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def effective_ef(index: MultiVectorIndex, top: int) -> int | None:
    """The HNSW ef a search for ``top`` items uses at the index's size (None for IVF kinds)."""
    if not index.params.kind.startswith("hnsw"):
        return None
    fetch = max(top, 10) * index.heads * index.params.oversample
    return search_ef(index.params, len(index) * index.heads, fetch)


def bench_encoders(args: argparse.Namespace) -> dict[str, Any]:
    """Query-encoding latency: MiniLM tokens + sentence vector, then a PVSE text encoder on ONNX Runtime."""
    out: dict[str, Any] = {}
    tokens = None
    try:
        from engine.features.text import MiniLMEncoder

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

    from engine.search.modelrunner import ModelRunner
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


def _plain_args(args: argparse.Namespace) -> dict[str, Any]:
    """The command line as JSON-ready values (paths as text), without ``--out``."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "out"}


def search_settings(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The search-time settings of the main run: one per ``--ef-search`` value (HNSW) or ``--nprobe``."""
    if args.kind.startswith("hnsw"):
        return [{"ef_search": ef, "ef_growth": args.ef_growth, "nprobe": args.nprobe, "oversample": args.oversample}
                for ef in args.ef_search]  # nprobe: the lists of "hnsw+ivf"
    return [{"nprobe": args.nprobe, "oversample": args.oversample}]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.data == "flickr":
        return main_flickr(args)
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
    rows = [bench_brute_force(vectors, queries, args.top, args.exact_queries)]
    print(json.dumps(rows[0]), flush=True)
    chosen = {args.kind: (AnnParams(kind=args.kind), search_settings(args))}
    compare = {k: v for k, v in COMPARE.items() if not args.kinds or k in args.kinds.split(",")}
    for name, (params, settings) in (compare if args.compare else chosen).items():
        rows += bench_index(name, params, settings, ids, vectors, queries, truth_rows, args)
    results: dict[str, Any] = {
        "setup": {**_plain_args(args), "cpus": os.cpu_count(),
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



# -- real embeddings: Flickr8k through a trained export ---------------------------------------------------


@dataclass
class FlickrData:
    """The source photos' head embeddings and what encodes a query with the same model."""

    sources: np.ndarray  # (S, K, D) float32 unit vectors of the train+dev photos
    captions: list[str]  # every dev caption (the query pool)
    runner: Any  # engine.search.modelrunner.ModelRunner
    minilm: Any  # engine.features.text.MiniLMEncoder
    encode_s: float  # seconds spent computing ``sources``

    def encode(self, texts: list[str]) -> np.ndarray:
        """(B, K, D) query embeddings of captions: MiniLM tokens, then the export's text encoder."""
        text = self.minilm.encode(texts)
        sentence = text.sentence if self.runner.manifest.text_encoder == "minilm-sentence" else None
        return self.runner.encode_text(text.vectors, text.mask.astype(np.float32), sentence).emb


def load_flickr(model_dir: Path, folder: Path) -> FlickrData:
    """Head embeddings of the train+dev photos of ``folder`` from their cached backbone features (as
    :meth:`engine.search.trained.TrainedSearch.encode_items` computes them), and the dev captions."""
    from engine import paths
    from engine.features.encoders import Encoders
    from engine.features.featurestore import FeatureStore
    from engine.features.text import MiniLMEncoder
    from engine.files import content_hash
    from engine.library.captionfolder import load_caption_folder
    from engine.search.modelrunner import ModelRunner
    from engine.search.trained import model_export_dir

    data = load_caption_folder(folder)
    keep = [item for item in data.items if item.split in ("train", "dev")]
    backbone = Encoders().backbone.id
    runner = ModelRunner.load(model_export_dir(model_dir), threads=2, backbone_id=backbone)
    started = time.perf_counter()
    hashes = [content_hash(item.path) for item in keep]
    parts = []
    with FeatureStore(paths.home() / "features.sqlite") as store:
        missing = store.missing(hashes, backbone)
        if missing:
            raise SystemExit(f"{len(missing)} of {len(hashes)} photos of {folder} have no {backbone} features in "
                             f"{store.path}: extract them first (engine.features.extract.ensure_features)")
        for start in range(0, len(hashes), 512):
            chunk = hashes[start:start + 512]
            records = store.get_many(chunk, backbone, ("global", "local"))
            pooled = np.stack([records[h].global_ for h in chunk]).astype(np.float32)
            local = np.stack([records[h].local if records[h].local is not None
                              else np.repeat(records[h].global_[None], 49, 0) for h in chunk]).astype(np.float32)
            parts.append(runner.encode_image(local, pooled).emb)
    sources = unit(np.concatenate(parts).astype(np.float32))
    captions = [text for i, text in data.captions if data.items[i].split == "dev"]
    return FlickrData(sources, captions, runner, MiniLMEncoder(threads=2), time.perf_counter() - started)


def replicate(sources: np.ndarray, start: int, stop: int, noise: float, seed: int) -> np.ndarray:
    """Items ``start .. stop`` (n, K, D) of a library of replicated source items.

    Item i copies source ``i % S``: the first S items are the sources themselves, every later one is its
    source plus independent gaussian noise on each head, of expected norm ``noise`` (per coordinate
    ``noise / sqrt(D)``), re-normalised, so a replicate head's cosine to its source head is about
    ``1 / sqrt(1 + noise**2)`` (0.894 at the default 0.5). Deterministic per (seed, start).
    """
    rows = np.arange(start, stop)
    count, dim = len(sources), sources.shape[2]
    rng = np.random.default_rng([seed, 2, start])
    eps = rng.standard_normal((len(rows), *sources.shape[1:]), dtype=np.float32) * np.float32(noise / np.sqrt(dim))
    eps[rows < count] = 0.0
    return unit(sources[rows % count] + eps).astype(np.float32)


def noise_report(sources: np.ndarray, noise: float, seed: int, sample: int = 500) -> dict[str, float]:
    """How recognisable a replicate is: over ``sample`` replicates, the share whose K x K nearest source is
    their own source, their mean head cosine to it, and the mean K x K score of the nearest other source."""
    rng = np.random.default_rng([seed, 3])
    picks = rng.choice(len(sources), size=min(sample, len(sources)), replace=False)
    reps = np.concatenate([replicate(sources, len(sources) + int(p), len(sources) + int(p) + 1, noise, seed)
                           for p in picks])
    top_rows, top_scores = brute_force(sources, reps, 2)
    own = top_rows[:, 0] == picks
    other = np.where(own, top_scores[:, 1], top_scores[:, 0])
    cosine = np.einsum("nkd,nkd->nk", reps, sources[picks])
    return {"noise": noise, "nearest_is_source": round(float(own.mean()), 4),
            "mean_cosine_to_source": round(float(cosine.mean()), 4),
            "mean_best_other_score": round(float(other.mean()), 4)}


def _merge_top(rows: np.ndarray, scores: np.ndarray, new_rows: np.ndarray, new_scores: np.ndarray, top: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """Best ``top`` of two (B, n) candidate lists by score."""
    rows, scores = np.concatenate([rows, new_rows], 1), np.concatenate([scores, new_scores], 1)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :top]
    return np.take_along_axis(rows, order, 1), np.take_along_axis(scores, order, 1)


def timed_queries(flickr: FlickrData, index: MultiVectorIndex, texts: list[str], top: int
                  ) -> tuple[dict[str, Any], list[np.ndarray]]:
    """End-to-end latency of each caption (encode + search + the result list the app builds)."""
    stages: dict[str, list[float]] = {"encode": [], "search": [], "aggregate": [], "total": []}
    found = []
    for i in range(-5, len(texts)):  # five untimed warm-up queries
        text = texts[i % len(texts)]
        t0 = time.perf_counter()
        query = flickr.encode([text])[0]
        t1 = time.perf_counter()
        ids, scores, pairs = index.search(query, top)
        t2 = time.perf_counter()
        ranked = [SearchHit(int(m), "", MediaKind.IMAGE, float(s), head_pair=(int(p[0]), int(p[1])))
                  for m, s, p in zip(ids, scores, pairs, strict=True)]
        t3 = time.perf_counter()
        if i >= 0:
            for name, ms in zip(stages, (t1 - t0, t2 - t1, t3 - t2, t3 - t0), strict=True):
                ms_list = stages[name]
                ms_list.append(ms * 1000.0)
            found.append(np.array([r.media_id for r in ranked], np.int64))
    return {name: summary(ms) for name, ms in stages.items()}, found


def main_flickr(args: argparse.Namespace) -> int:
    """``--data flickr``: see the module docstring."""
    load_start = os.getloadavg()
    flickr = load_flickr(args.model, args.flickr)
    sources = flickr.sources
    heads, dim = sources.shape[1:]
    print(f"{len(sources)} source photos encoded in {flickr.encode_s:.1f} s: K={heads}, D={dim}", flush=True)
    calibration = [noise_report(sources, float(x), args.seed) for x in args.calibrate.split(",") if x]
    for row in calibration:
        print(json.dumps(row), flush=True)
    replicas = noise_report(sources, args.noise, args.seed)
    picks = np.random.default_rng([args.seed, 4]).choice(len(flickr.captions), size=args.queries, replace=False)
    texts = [flickr.captions[i] for i in sorted(picks)]
    queries = flickr.encode(texts)
    ids = np.arange(args.items, dtype=np.int64) * 3 + 17
    truth = (np.zeros((len(texts), 0), np.int64), np.zeros((len(texts), 0), np.float32))
    searches = search_settings(args)
    params = replace(AnnParams(kind=args.kind), **searches[0])
    index = MultiVectorIndex(dim, heads, model_id=flickr.runner.model_id, params=params, storage=args.storage)
    before = memory_mb()["rss_mb"]
    build_s = generate_s = reference_s = 0.0
    for start in range(0, args.items, args.batch):  # the library is never held whole: see the docstring
        stop = min(start + args.batch, args.items)
        t0 = time.perf_counter()
        chunk = replicate(sources, start, stop, args.noise, args.seed)
        t1 = time.perf_counter()
        rows, scores = brute_force(chunk, queries, args.top)
        truth = _merge_top(truth[0], truth[1], rows + start, scores, args.top)
        t2 = time.perf_counter()
        index.add(ids[start:stop], chunk)
        t3 = time.perf_counter()
        generate_s, reference_s, build_s = generate_s + t1 - t0, reference_s + t2 - t1, build_s + t3 - t2
        del chunk
        print(f"{stop} items, build {build_s:.0f} s", flush=True)
    grown = round(memory_mb()["rss_mb"] - before, 1)
    truth_ids = ids[truth[0]]
    count = min(args.exact_queries, len(queries))
    exact_found: list[np.ndarray] = []
    exact_ms = latencies(lambda i: exact_found.append(index.search(queries[i], args.top, exact=True)[0]), count,
                         warmup=1)
    rows_out = [{"index": f"numpy exact K x K over the stored {index.storage} vectors", **summary(exact_ms),
                 "recall_at_10": round(recall(exact_found[-count:], truth_ids[:count]), 4), "queries": count,
                 "build_s": 0.0}]
    print(json.dumps(rows_out[0]), flush=True)
    for setting in searches:
        index.params = replace(params, **setting)
        stages, found = timed_queries(flickr, index, texts, args.top)
        label = ", ".join(f"{k}={v}" for k, v in setting.items())
        row = {"index": f"{args.kind} {label}", "params": asdict(index.params), "state": index.describe(),
               "effective_ef": effective_ef(index, args.top),
               **stages["search"], "recall_at_10": round(recall(found, truth_ids), 4), "stages": stages,
               "build_s": round(build_s, 1), "index_rss_mb": grown, "index_bytes": index.nbytes(), **memory_mb()}
        print(json.dumps(row), flush=True)
        rows_out.append(row)
    results: dict[str, Any] = {
        "setup": {**_plain_args(args),
                  "sources": len(sources), "heads": int(heads), "dim": int(dim), "model_id": flickr.runner.model_id,
                  "storage": index.storage, "cpus": os.cpu_count(), "python": platform.python_version(),
                  "source_encode_s": round(flickr.encode_s, 1), "generate_s": round(generate_s, 1),
                  "reference_s": round(reference_s, 1)},
        "replicas": replicas, "calibration": calibration, "indexes": rows_out, "memory": memory_mb(),
        "load_average": {"start": load_start, "end": os.getloadavg()}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown_flickr(results))
    print(markdown_flickr(results))
    return 0


def markdown_flickr(results: dict[str, Any]) -> str:
    s, r = results["setup"], results["replicas"]
    lines = [f"# Search benchmark, real embeddings ({s['items']:,} items x K={s['heads']} x D={s['dim']}: "
             f"{s['sources']:,} Flickr8k train+dev photos replicated with noise {s['noise']}; {s['queries']} dev "
             f"captions, top {s['top']}, {s['cpus']} cores)", "",
             f"Model `{s['model_id']}` from `{s['model']}`; stored vectors {s['storage']}. Replicas: the nearest "
             f"source photo (K x K) of a replicate is its own for {r['nearest_is_source']:.1%} of them; mean head "
             f"cosine to the source {r['mean_cosine_to_source']}, mean best score of another source "
             f"{r['mean_best_other_score']}.", "",
             "| search | build (s) | search p50 (ms) | search p95 (ms) | end to end p50 (ms) | end to end p95 (ms) "
             "| recall@10 |", "|---|---|---|---|---|---|---|"]
    for row in results["indexes"]:
        total = row.get("stages", {}).get("total", {})
        lines.append(f"| {row['index']} | {row['build_s']} | {row['p50_ms']} | {row['p95_ms']} | "
                     f"{total.get('p50_ms', '-')} | {total.get('p95_ms', '-')} | {row['recall_at_10']} |")
    last = results["indexes"][-1]
    if "stages" in last:
        st = last["stages"]
        lines += ["", "End to end = " + ", ".join(f"{k} {v['p50_ms']} / {v['p95_ms']} ms" for k, v in st.items()
                                                   if k != "total") + " (p50 / p95 of each stage)."]
        b = last["index_bytes"]
        lines += ["", "Index memory (MB): " + ", ".join(f"{k} {v / 2**20:.0f}" for k, v in b.items()) +
                  f"; RSS growth while building {last['index_rss_mb']} MB."]
    if results["calibration"]:
        lines += ["", "| noise | nearest source is own | mean cosine to source | best other source |",
                  "|---|---|---|---|"]
        lines += [f"| {c['noise']} | {c['nearest_is_source']} | {c['mean_cosine_to_source']} | "
                  f"{c['mean_best_other_score']} |" for c in results["calibration"]]
    load = results["load_average"]
    lines += ["", f"Peak process RSS: {results['memory']['peak_rss_mb']} MB; source encoding {s['source_encode_s']} s, "
                  f"generation {s['generate_s']} s, float32 exact reference {s['reference_s']} s; load average "
                  f"(1/5/15 min) {load['start']} at the start, {load['end']} at the end."]
    return "\n".join(lines) + "\n"

if __name__ == "__main__":
    raise SystemExit(main())
