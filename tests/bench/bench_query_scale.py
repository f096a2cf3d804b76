"""Text query latency of the fused ranking at library scale (issue #30: within 20 % of the model alone).

    python tests/bench/bench_query_scale.py --items 100000 [--work /tmp] [--json bench-results/query-scale.json]
    python tests/bench/bench_query_scale.py --reuse WORK --versions OLD_TREE:label[:WORK2] THIS_TREE:label [--rounds 2]

The library is bench_library.py's part-8 synthetic library (``synthetic_library_with_features``: real Flickr8k
feature records copied onto N files of their own, the shipped starter active, every item embedded), searched with
``--queries`` Flickr8k dev captions, first page of 60 as the GUI asks, three ways in the same process: the app's
ranking (model + zero-shot semantics + the user's words, :mod:`engine.search.evidence`), the trained model alone
through the same path, and the zero-shot semantics alone. Labelled ``synthetic``.

``--versions``: the same library searched by other checkouts of the code (e.g. a git worktree of the commit before
the fused ranking), each in its own process, in turns (``--rounds``), so a loaded machine weighs on each alike: the
app's text query (``Search.text``, first page) as each version ranks it, wall and CPU percentiles. A version whose
catalog schema is older needs its own copy of the work folder (``:WORK2``; the schema version set back in the copy).

``--assets`` is used as it is: the app builds the zero-shot query words' table (:mod:`engine.features.wordtable`) in
its own assets folder at the first indexing, but not in a folder named explicitly, so build it there first
(``python -c "from pathlib import Path; from engine.features.wordtable import ensure_table;
list(ensure_table(Path('ASSETS')))"``); the result records whether it was there (``word_table``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def child(work: Path, assets: Path, queries: int) -> None:
    """One version's text queries over the reused library (run with that version's code first on the path)."""
    os.environ.update(POLYSEEK_HOME=str(work / "home"), POLYSEEK_ASSETS=str(assets))
    os.environ.pop("POLYSEEK_STARTER", None)
    tree = os.environ.get("POLYSEEK_CODE", str(REPO))
    sys.path.insert(0, tree)
    import engine.state
    from engine.workspace import Workspace
    from tests.bench.bench_library import _query_figures, dev_captions

    assert Path(engine.state.__file__).is_relative_to(tree), engine.state.__file__

    service = Workspace.open("synthetic", assets)
    for _ in service.models.reindex():
        pass
    print(json.dumps(_query_figures(service, dev_captions(queries))), flush=True)
    service.close()


def versions(args: argparse.Namespace) -> int:
    """Each ``TREE:label`` in turn, ``--rounds`` times, each run a fresh process with TREE's code."""
    import subprocess

    runs: dict[str, list[dict]] = {}
    for _ in range(args.rounds):
        for spec in args.versions:
            tree, label, *work = spec.split(":")  # a third field: that version's own copy of the work folder
            env = {**os.environ, "POLYSEEK_CODE": str(Path(tree).resolve())}
            out = subprocess.run([sys.executable, __file__, "--child", "--reuse", work[0] if work else str(args.reuse),
                                  "--queries",
                                  str(args.queries), "--assets", str(args.assets)], env=env, cwd=tree,
                                 capture_output=True, text=True, check=True).stdout
            runs.setdefault(label, []).append(json.loads(out.strip().splitlines()[-1]))
            print(label, runs[label][-1], flush=True)
    summary = {label: {k: float(np.median([r[k] for r in rs])) for k in rs[0] if isinstance(rs[0][k], float)}
               for label, rs in runs.items()}
    first = args.versions[0].split(":")[1]  # each round's ratio to the first version's run of the same round
    paired = {label: {k: round(float(np.median([r[k] / b[k] for r, b in zip(rs, runs[first], strict=True)])), 3)
                      for k in ("p50_ms", "p95_ms", "cpu_p50_ms", "cpu_p95_ms")}
              for label, rs in runs.items() if label != first}
    result = {"synthetic": True, "reused": str(args.reuse), "queries": args.queries, "rounds": args.rounds,
              "assets": str(args.assets), "word_table": (args.assets / "zeroshot" / "word_embeddings.npz").is_file(),
              "runs": runs, "median_of_rounds": summary, f"median_ratio_to_{first}_same_round": paired}
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({"median_of_rounds": summary, "paired": paired}, indent=1))
    return 0


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
    parser.add_argument("--versions", nargs="+", metavar="TREE:LABEL", help="checkouts of the code to compare")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.reuse, args.assets, args.queries)
        return 0
    if args.versions:
        return versions(args)
    work = args.reuse or Path(tempfile.mkdtemp(prefix="polyseek-query-scale-", dir=args.work))
    home = work / "home"
    os.environ.update(POLYSEEK_HOME=str(home), POLYSEEK_ASSETS=str(args.assets))
    os.environ.pop("POLYSEEK_STARTER", None)
    from engine.workspace import Workspace

    result: dict = {"synthetic": True, "items": args.items, "reused": bool(args.reuse)}
    if not args.reuse:
        result["library"] = synthetic_library_with_features(args.items, work / "files", args.assets,
                                                            args.real_photos)
        result["library"].pop("photos", None)
    service = Workspace.open("synthetic", args.assets)
    start = time.perf_counter()
    for _ in service.models.reindex():
        pass
    result["embedding_s"] = round(time.perf_counter() - start, 1)
    queries = dev_captions(args.queries)
    for label, evidence in (("default", {"model", "zero_shot", "words"}), ("model alone", {"model"}),
                            ("default again", {"model", "zero_shot", "words"})):
        service.state.evidence = frozenset(evidence)
        result[label] = _query_figures(service, queries)
        print(label, json.dumps(result[label]), flush=True)
    service.models.use_here("zero-shot")
    result["zero-shot"] = _query_figures(service, queries)
    result["load_end"] = load()
    service.close()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
