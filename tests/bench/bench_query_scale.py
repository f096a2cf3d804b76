"""Text query latency of the fused ranking at library scale (issue #30: within 20 % of the model alone).

    python tests/bench/bench_query_scale.py --items 100000 [--work /tmp] [--json bench-results/query-scale.json]

The library is bench_library.py's part-8 synthetic library (``synthetic_library_with_features``: real Flickr8k
feature records copied onto N files of their own, the shipped starter active, every item embedded), searched with
``--queries`` Flickr8k dev captions, first page of 60 as the GUI asks, three ways in the same process: the app's
ranking (model + zero-shot semantics + the user's words, :mod:`engine.search.evidence`), the trained model alone
through the same path, and the zero-shot semantics alone. Labelled ``synthetic``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def main() -> int:
    from tests.bench.bench_library import _query_figures, dev_captions, load, synthetic_library_with_features

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--real-photos", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--assets", type=Path, default=Path.home() / ".local/share/polyseek/assets")
    parser.add_argument("--json", type=Path, default=REPO / "bench-results" / "query-scale.json")
    parser.add_argument("--reuse", type=Path, help="the work folder of an earlier run: its library, not built again")
    args = parser.parse_args()
    work = args.reuse or Path(tempfile.mkdtemp(prefix="polyseek-query-scale-", dir=args.work))
    home = work / "home"
    os.environ.update(POLYSEEK_HOME=str(home), POLYSEEK_ASSETS=str(args.assets))
    os.environ.pop("POLYSEEK_STARTER", None)
    from engine.service import SearchService

    result: dict = {"synthetic": True, "items": args.items, "reused": bool(args.reuse)}
    if not args.reuse:
        result["library"] = synthetic_library_with_features(args.items, work / "files", args.assets,
                                                            args.real_photos)
        result["library"].pop("photos", None)
    service = SearchService.open("synthetic", args.assets)
    start = time.perf_counter()
    for _ in service.reindex():
        pass
    result["embedding_s"] = round(time.perf_counter() - start, 1)
    queries = dev_captions(args.queries)
    for label, evidence in (("default", {"model", "zero_shot", "words"}), ("model alone", {"model"}),
                            ("default again", {"model", "zero_shot", "words"})):
        service.evidence = frozenset(evidence)
        result[label] = _query_figures(service, queries)
        print(label, json.dumps(result[label]), flush=True)
    service.use_model("zero-shot")
    result["zero-shot"] = _query_figures(service, queries)
    result["load_end"] = load()
    service.close()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
