"""Active-learning simulation on sparse Flickr8k (issue #7): which 100 images should a person caption next?

    python tests/bench/bench_active.py [--methods pvse pcme] [--add 100] [--epochs N] [--home DIR]
                                       [--resume] [--out bench-results/active.json]

Start from the ``10%x5`` setting of ``bench_sparse.py`` (600 training images with all 5 captions, seed 0;
``--setting`` picks another) and train each method there (the ``none`` row). Its model then scores the 5,400
un-annotated training images with a policy of :mod:`engine.loop.activelearning`, the ``--add`` best get all 5 of their
captions (``SparseConfig.extra_annotated``), and the same method is trained again from scratch with the same
budget and seed; the dev R@10 of each retrained model (both directions) says how much each policy's picks helped:

- ``pvse``: ``random`` vs ``head-disagreement`` (its K=3 heads' top-``--top`` caption neighbours among the
  annotated training captions; a caption's K embeddings are averaged into its one vector);
- ``pcme``: ``random`` vs ``sigma`` (geometric mean of the predicted sigma, PCME §3.2.1).

``random`` draws the same images for every method (seeded by ``--random-seed``). Budgets as in
``bench_sparse.py`` (``--epochs`` replaces them). Rows go to ``--out`` and a Markdown table beside it after
every run. Not run by CI.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sparse import (  # noqa: E402
    REPO,
    SEED,
    common_arguments,
    has_caption_folder,
    open_source,
    parse_setting,
    sparse_config,
    train_run,
)

POLICIES = {"pvse": ("random", "head-disagreement"), "pcme": ("random", "sigma")}


def sparse_split_of(args: argparse.Namespace) -> Any:
    """The ``--setting`` split exactly as the trainer builds it (same views, same seed)."""
    from engine.library.captionfolder import load_caption_folder
    from trainer.sparse import sparse_split_folder
    from trainer.splits import resolve_splits

    train_view, _ = resolve_splits(load_caption_folder(args.data), "train", "dev", SEED)
    return sparse_split_folder(train_view, sparse_config(args.setting))


def policy_scores(policy: str, model_dir: Path, split: Any, source: Any, args: argparse.Namespace
                  ) -> tuple[np.ndarray, list[str]]:
    """(N,) scores of the un-annotated images that have features, and their files (same order)."""
    import torch

    from engine.loop.activelearning import head_disagreement, uncertainty_scores
    from trainer.checkpoint import load_model
    from trainer.data import FeatureNeeds
    from trainer.evaluation import encode_captions, encode_items
    from trainer.train import resolve_device

    if policy == "random":  # needs no model: every un-annotated image is a candidate
        return np.zeros(len(split.unannotated)), [item.file for item in split.unannotated]
    device = resolve_device(args.device)
    model = load_model(model_dir, device)
    needs = FeatureNeeds.of(model)
    visual, kept = source.visual(split.unannotated, needs)
    files = [split.unannotated[i].file for i in kept]
    items = encode_items(model, visual, device)
    if policy == "sigma":
        if items.logsigma is None:
            raise SystemExit(f"--methods: {model.config.method} has no sigma; the sigma policy needs pcme")
        return uncertainty_scores(items.logsigma.cpu().numpy()), files
    captions = [caption for _, texts in split.annotated for caption in texts]
    text = encode_captions(model, source.text(captions, needs), device).emb.mean(1)
    caption_vecs = torch.nn.functional.normalize(text, dim=-1).cpu().numpy()
    return head_disagreement(items.emb.cpu().numpy(), caption_vecs, top=args.top), files


def choose(policy: str, scores: np.ndarray, files: list[str], args: argparse.Namespace) -> list[str]:
    """The ``--add`` files the policy annotates next."""
    from engine.loop.activelearning import pick

    rng = np.random.default_rng(args.random_seed)
    index = pick(scores, args.add, rng=rng, policy="random" if policy == "random" else "score")
    return [files[i] for i in index]


def markdown(rows: list[dict], command: str) -> str:
    """The table, with each policy's R@10 gain over no additions and over random picks."""
    lines = [f"Measured with `{command}`; start: Flickr8k train {rows[0]['setting'] if rows else ''} (seed {SEED}), "
             "evaluate on dev "
             "(1,000 photos, 5,000 captions).", "",
             "| method | policy | added | i2t R@1 | R@5 | R@10 | t2i R@1 | R@5 | R@10 | rsum | Δ R@10 i2t/t2i vs none "
             "| vs random | train s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    by = {(r["method"], r["policy"]): r for r in rows}
    for r in rows:
        i, t = r["i2t"], r["t2i"]

        def delta(other: str, r: dict = r) -> str:
            base = by.get((r["method"], other))
            if base is None or base is r:
                return ""
            return f"{r['i2t']['r10'] - base['i2t']['r10']:+.2f} / {r['t2i']['r10'] - base['t2i']['r10']:+.2f}"

        lines.append(f"| {r['method']} | {r['policy']} | {r['extra_annotated']} | {i['r1']} | {i['r5']} | {i['r10']} "
                     f"| {t['r1']} | {t['r5']} | {t['r10']} | {r['rsum']} | {delta('none')} "
                     f"| {delta('random') if r['policy'] not in ('none', 'random') else ''} | {r['train_s']:.0f} |")
    return "\n".join(lines) + "\n"


def write(rows: list[dict], out: Path, command: str) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(rows, command))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=list(POLICIES), choices=list(POLICIES))
    parser.add_argument("--setting", type=parse_setting, default=parse_setting("10%x5"), metavar="P%xN",
                        help="the starting sparse setting (default 10%%x5)")
    parser.add_argument("--add", type=int, default=100, help="images annotated per policy")
    parser.add_argument("--top", type=int, default=10, help="caption neighbours per head (head disagreement)")
    parser.add_argument("--random-seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "active.json")
    common_arguments(parser)
    args = parser.parse_args()
    if not has_caption_folder(args):
        return 2
    command = "python tests/bench/bench_active.py " + " ".join(sys.argv[1:])
    rows: list[dict] = json.loads(args.out.read_text()) if args.resume and args.out.is_file() else []
    source = open_source(args)
    try:
        split = sparse_split_of(args)
        for method in args.methods:
            base = next((r for r in rows if (r["method"], r["policy"]) == (method, "none")
                         and Path(r["model_dir"]).is_dir()), None)
            if base is None:
                base = _run(method, "none", (), args, source, rows, command)
            for policy in POLICIES[method]:
                if any((r["method"], r["policy"]) == (method, policy) for r in rows):
                    continue
                scores, files = policy_scores(policy, Path(base["model_dir"]), split, source, args)
                picked = choose(policy, scores, files, args)
                chosen = np.isin(files, picked)
                row = _run(method, policy, tuple(picked), args, source, rows, command, extra_fields={
                    "picked": picked, "score_picked_mean": float(scores[chosen].mean()) if chosen.any() else None,
                    "score_all_mean": float(scores.mean()) if len(scores) else None})
                print(f"  {policy}: mean score {row['score_picked_mean']} picked vs {row['score_all_mean']} all",
                      flush=True)
    finally:
        source.close()
    print(f"written to {args.out} and {args.out.with_suffix('.md')}")
    return 0


def _run(method: str, policy: str, extra: tuple[str, ...], args: argparse.Namespace, source: Any,
         rows: list[dict], command: str, extra_fields: dict | None = None) -> dict:
    row = train_run(label=f"active-{method}-{policy}", method=method, setting=args.setting, overrides={},
                    pseudo_pairs=False, args=args, source=source, extra=extra)
    row.update(policy=policy, **(extra_fields or {}))
    rows.append(row)
    write(rows, args.out, command)
    print(f"{method:5s} {policy:18s} +{len(extra):3d}  i2t {row['i2t']}  t2i {row['t2i']}  {row['train_s']:.0f}s",
          flush=True)
    return row


if __name__ == "__main__":
    sys.exit(main())
