"""Search on several kinds of library (issue #30): each dev set searched the way the app searches it.

    python tests/bench/bench_domains.py --home DIR [--data ../shared/datasets] [--out bench-results/domains.json]
        [--domains flickr8k-dev webcaps-dev coco-val-80 clips msrvtt-dev] [--sweep]

For each domain a library of its photos is indexed with the shipped starter model active (as a fresh install),
then every caption is a query through :meth:`engine.workspace.search.Search.rank_text` (the app's one ranking).
Rows: ``zero-shot`` (regional semantics alone), ``starter`` (the trained model alone) and ``default`` (what the app
ranks with: both, fused by :mod:`engine.search.evidence`). Text->photo and photo->text R@1/5/10 and rsum of the
fused score matrix (photo->text reads each caption's standardised scores).

``--sweep`` adds the train-side domains the fusion weight was chosen on (the 500 Flickr8k *train* photos that
picked the starter's epoch but were never trained on, see tools/build_starter.py, and 1,000 webcaps *train*
photos, which the starter never saw) and reports R@K for each model weight. Dev splits are never swept.

``clips``: 25 slideshow MP4s (4 Flickr8k dev photos each, 1 s a photo) and 25 GIFs (one dev photo slowly zoomed,
12 frames; ``--zooms N`` for more) added to the Flickr8k dev library; for each caption of a photo a clip shows,
whether the clip is in the top 10, beside whether the photo itself is (the clip should rank about where its best
photo ranks), with a 95 % interval of the gap that resamples whole clips.

``msrvtt-dev`` (issue #41): the 200 real MSR-VTT dev clips, every one of their captions a query (20 a clip), ranked
by the app's whole ranking (the calibrated total the grid shows, and each model alone) among the 200 clips, and
again among the clips + the 1,000 Flickr8k dev photos (a library as users have them). ``msrvtt-train-slice``: the
200 msrvtt *train* clips tools/build_starter.py holds aside (the recipe is chosen there, never on dev).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

WEIGHTS = (0.0, 0.3, 0.4, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.9, 1.0)


def read(folder: Path, split: str | None) -> tuple[list[str], dict[str, list[str]]]:
    captions: dict[str, list[str]] = {}
    for row in list(csv.reader((folder / "captions.tsv").open(encoding="utf-8"), delimiter="\t"))[1:]:
        if row:
            captions.setdefault(row[0], []).append(row[1])
    files = sorted(captions)
    if split is not None:
        rows = list(csv.reader((folder / "splits.tsv").open(encoding="utf-8"), delimiter="\t"))[1:]
        wanted = {f for f, s in rows if s == split}
        files = [f for f in files if f in wanted]
    return files, captions


def domains(data: Path) -> dict[str, tuple[Path, list[str], dict[str, list[str]]]]:
    out = {}
    f8 = data / "flickr8k"
    files, caps = read(f8, "dev")
    out["flickr8k-dev"] = (f8 / "images", files, caps)
    train, caps = read(f8, "train")
    out["flickr8k-train-slice"] = (f8 / "images", sorted(random.Random(0).sample(train, 500)), caps)  # starter-val
    web = data / "webcaps"
    files, caps = read(web, "dev")
    out["webcaps-dev"] = (web / "images", files, caps)
    train, caps = read(web, "train")
    out["webcaps-train-slice"] = (web / "images", sorted(random.Random(1).sample(train, 1000)), caps)
    video = data / "msrvtt-clips"
    if video.is_dir():
        files, caps = read(video, "dev")
        out["msrvtt-dev"] = (video / "media", files, caps)
        train, caps = read(video, "train")
        out["msrvtt-train-slice"] = (video / "media", sorted(random.Random(2).sample(train, 200)), caps)
    coco = data / "coco-val-80"
    files, caps = read(coco, None)
    out["coco-val-80"] = (coco / "images", files, caps)
    return out


def write_json(path: Path, record) -> None:
    """A benchmark's record written to ``path`` (its folder made), indented."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


def use_home(home: Path, data: Path, starter: bool = False) -> bool:
    """Point the engine at the benchmark's ``POLYSEEK_HOME`` (``starter``: new libraries get the shipped starter);
    False, with a line saying so, when the datasets folder ``data`` is absent."""
    if not data.is_dir():
        print(f"skipped: {data} is absent (the benchmark needs ../shared/datasets)")
        return False
    os.environ["POLYSEEK_HOME"] = str(home)
    if starter:
        os.environ["POLYSEEK_STARTER"] = "on"
    home.mkdir(parents=True, exist_ok=True)
    return True


MODEL_DIR: Path | None = None  # --model: a model folder searched with instead of the shipped starter


def open_library(home: Path, name: str, images: Path, files: list[str], extra: list[Path] = ()):
    os.environ["POLYSEEK_STARTER"] = "on"
    from engine.workspace import Workspace

    service = Workspace.open(name)
    if MODEL_DIR is not None:
        service.models.activate(str(MODEL_DIR))
    root = home / "bench-media" / name
    if not root.is_dir():
        root.mkdir(parents=True)
        for f in files:
            (root / f).symlink_to(images / f)
        for p in extra:
            (root / p.name).symlink_to(p)
    service.library.add_root(root)
    for _ in service.models.reindex():
        pass
    return service


def score_matrices(service, queries: list[str]) -> tuple[np.ndarray, dict[str, np.ndarray], dict[int, int]]:
    """``(ids, {source: (items, queries) raw scores}, query -> ...)`` through the app's own ranking."""
    parts: dict[str, list[np.ndarray]] = {"model": [], "zero_shot": [], "app": []}
    ids = None
    service.state.evidence = frozenset({"model", "zero_shot"})
    for q in queries:
        ids, ranking, _, _ = service.search.rank_text(q)
        assert len(ranking.rows) == len(ids)  # dense: every item scored
        if "companion" in ranking.parts and "companion" not in parts:  # the model's companion (#42), alone
            parts["companion"] = []
        for name in parts:
            column = np.empty(len(ids), np.float32)
            column[ranking.rows] = ranking.total if name == "app" else ranking.parts[name]
            parts[name].append(column)
    return ids, {k: np.stack(v, axis=1) for k, v in parts.items()}, {}


def fused(parts: dict[str, np.ndarray], weight: float) -> np.ndarray:
    from engine.search.evidence import standardise

    out = np.zeros_like(parts["model"])
    for j in range(out.shape[1]):
        out[:, j] = weight * standardise(parts["model"][:, j]) + (1 - weight) * standardise(parts["zero_shot"][:, j])
    return out


def report(scores: np.ndarray, truth: np.ndarray) -> dict:
    from engine.trainercontract.metrics import retrieval_report

    r = retrieval_report(scores.astype(np.float64), truth)
    return {"t2i": {k: round(r["t2i"][k], 1) for k in ("r1", "r5", "r10")},
            "i2t": {k: round(r["i2t"][k], 1) for k in ("r1", "r5", "r10")}, "rsum": round(r["rsum"], 1),
            "n_media": r["n_media"], "n_captions": r["n_captions"]}


def run_domain(home: Path, name: str, images: Path, files: list[str], caps: dict[str, list[str]],
               sweep: bool) -> dict:
    from engine.search.evidence import MODEL

    started = time.monotonic()
    service = open_library(home, name, images, files)
    by_path = {Path(m.path).name: m.id for m in service.state.catalog.iter_media()}
    queries = [(f, c) for f in files for c in caps[f]]
    ids, parts, _ = score_matrices(service, [c for _, c in queries])
    row_of = {int(m): r for r, m in enumerate(ids.tolist())}
    truth = np.array([row_of[by_path[f]] for f, _ in queries])
    out = {"domain": name, "photos": len(files), "captions": len(queries),
           "zero-shot": report(parts["zero_shot"], truth), "starter": report(parts["model"], truth),
           "default": report(fused(parts, MODEL), truth), "model_weight": MODEL,
           "app": report(parts["app"], truth)}  # the calibrated total the grid shows (issue #40)
    if "companion" in parts:
        out["companion"] = report(parts["companion"], truth)
    if sweep:
        out["sweep"] = {str(w): report(fused(parts, w), truth) for w in WEIGHTS}
    out["wall_s"] = round(time.monotonic() - started, 1)
    service.close()
    return out


def make_clips(home: Path, images: Path, files: list[str], zooms: int = 25) -> list[tuple[Path, list[str]]]:
    """25 slideshow MP4s of 4 photos and ``zooms`` zooming GIFs of one photo, from ``files`` (seeded; the first 25
    zooms are always the same, more come from other photos)."""
    import cv2
    from PIL import Image

    folder = home / "clips"
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(7)
    chosen = rng.sample(files, 125)
    clips = []
    for i in range(25):
        group = chosen[4 * i:4 * i + 4]
        path = folder / f"slideshow-{i:02d}.mp4"
        if not path.exists():
            writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 8, (224, 224))
            for f in group:
                frame = cv2.resize(cv2.imread(str(images / f)), (224, 224))
                for _ in range(8):
                    writer.write(frame)
            writer.release()
        clips.append((path, group))
    for i in range(25):
        f = chosen[100 + i]
        path = folder / f"zoom-{i:02d}.gif"
        if not path.exists():
            photo = Image.open(images / f).convert("RGB").resize((224, 224))
            frames = []
            for k in range(12):
                margin = int(k * 4)
                frames.append(photo.crop((margin, margin, 224 - margin, 224 - margin)).resize((160, 160)))
            frames[0].save(path, save_all=True, append_images=frames[1:], duration=120, loop=0)
        clips.append((path, [f]))
    more = random.Random(8).sample(sorted(set(files) - set(chosen)), max(0, zooms - 25))
    for i, f in enumerate(more, start=25):
        path = folder / f"zoom-{i:03d}.gif"
        if not path.exists():
            photo = Image.open(images / f).convert("RGB").resize((224, 224))
            frames = [photo.crop((4 * k, 4 * k, 224 - 4 * k, 224 - 4 * k)).resize((160, 160)) for k in range(12)]
            frames[0].save(path, save_all=True, append_images=frames[1:], duration=120, loop=0)
        clips.append((path, [f]))
    return clips


def grouped_bootstrap(keys: list, deltas: list[float], levels: tuple[float, float] = (2.5, 97.5),
                      draws: int = 2000) -> tuple[float, float, float]:
    """``(mean, low, high)`` of ``deltas`` in points (x 100), the interval at percentiles ``levels`` from a bootstrap
    that resamples whole groups (the deltas with the same key go together: a clip's or a photo's queries)."""
    by_key: dict = {}
    for key, delta in zip(keys, deltas, strict=True):
        by_key.setdefault(key, []).append(float(delta))
    groups = list(by_key.values())
    rng = np.random.default_rng(0)
    means = []
    for _ in range(draws):
        picked = [groups[i] for i in rng.integers(0, len(groups), len(groups))]
        means.append(100.0 * float(np.mean([g for group in picked for g in group])))
    mean = 100.0 * float(np.mean([g for group in groups for g in group]))
    low, high = (round(float(np.percentile(means, q)), 1) for q in levels)
    return round(mean, 1), low, high


def clip_interval(pairs: list[tuple[int, bool, bool]]) -> tuple[float, float]:
    """95 % interval of (clip R@10 - photo R@10) in points, resampling whole clips (a clip's queries go
    together): ``pairs`` are (clip, clip in top 10, photo in top 10)."""
    _, low, high = grouped_bootstrap([c for c, _, _ in pairs], [float(a) - float(b) for _, a, b in pairs])
    return low, high


def run_clips(home: Path, images: Path, files: list[str], caps: dict[str, list[str]], tag: str = "",
              zooms: int = 25) -> dict:
    clips = make_clips(home, images, files, zooms)
    name = "clips" + tag + ("" if zooms == 25 else f"-z{zooms}")
    service = open_library(home, name, images, files, [p for p, _ in clips])
    by_path = {Path(m.path).name: m.id for m in service.state.catalog.iter_media()}
    rows = {"slideshow": [], "zoom": []}
    for path, group in clips:
        kind = "slideshow" if path.suffix == ".mp4" else "zoom"
        clip_id = by_path[path.name]
        for f in group:
            for caption in caps[f]:
                hits = [h.media_id for h in service.search.text(caption, top=10)]
                rows[kind].append((clip_id, clip_id in hits, by_path[f] in hits))
    out = {}
    for kind, pairs in rows.items():
        out[kind] = {"clips": len({c for c, _, _ in pairs}), "queries": len(pairs),
                     "clip_r10": round(100 * np.mean([a for _, a, _ in pairs]), 1),
                     "photo_r10": round(100 * np.mean([b for _, _, b in pairs]), 1),
                     "gap_95": clip_interval(pairs)}
    service.close()
    return {"domain": "clips" + tag, **out}


def video_ranks(service, clips: dict[str, list[str]], by_path: dict[str, int]) -> dict[str, np.ndarray]:
    """0-based rank of the right clip for each caption of ``clips`` (file -> captions): in the app's whole ranking
    (``app``: the calibrated total the grid shows) and by each dense model alone."""
    ranks: dict[str, list[int]] = {"app": [], "model": [], "zero_shot": []}
    service.state.evidence = frozenset({"model", "zero_shot", "words"})
    for f, captions in clips.items():
        target = by_path[f]
        for caption in captions:
            ids, ranking, _, _ = service.search.rank_text(caption)
            at = int(np.flatnonzero(ids[ranking.rows] == target)[0])
            scores = {"app": ranking.total, **{k: ranking.parts[k] for k in ("model", "zero_shot")
                                               if k in ranking.parts}}
            for name, score in scores.items():
                ranks[name].append(int((score > score[at]).sum()))
    return {k: np.array(v) for k, v in ranks.items() if v}


def recall(ranks: np.ndarray) -> dict:
    return {f"r{k}": round(100 * float((ranks < k).mean()), 1) for k in (1, 5, 10)} | {
        "medr": float(np.median(ranks) + 1)}


def run_video(home: Path, name: str, media: Path, files: list[str], caps: dict[str, list[str]], tag: str,
              photos: list[Path], per_clip: int) -> dict:
    """Text -> video among the clips alone and, with ``photos`` (their paths), among clips + photos."""
    started = time.monotonic()
    clips = {f: caps[f][:per_clip] if per_clip else caps[f] for f in files}
    out: dict = {"domain": name + tag, "clips": len(files), "queries": sum(map(len, clips.values()))}
    service = open_library(home, name + tag, media, files)
    by_path = {Path(m.path).name: m.id for m in service.state.catalog.iter_media()}
    out["among_clips"] = {k: recall(v) for k, v in video_ranks(service, clips, by_path).items()}
    service.close()
    if photos:
        service = open_library(home, name + "-photos" + tag, media, files, photos)
        by_path = {Path(m.path).name: m.id for m in service.state.catalog.iter_media()}
        out["photos"] = len(photos)
        out["among_clips_and_photos"] = {k: recall(v) for k, v in video_ranks(service, clips, by_path).items()}
        service.close()
    out["wall_s"] = round(time.monotonic() - started, 1)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "datasets")
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "domains.json")
    parser.add_argument("--domains", nargs="+", default=["flickr8k-dev", "webcaps-dev", "coco-val-80", "clips"])
    parser.add_argument("--sweep", action="store_true", help="also the train-side domains, every model weight")
    parser.add_argument("--tag", default="", help="appended to each domain's library name (another model's run)")
    parser.add_argument("--model", type=Path, help="a model folder to search with instead of the shipped starter")
    parser.add_argument("--zooms", type=int, default=25, help="clips: this many zooming GIFs (the first 25 as "
                        "always; more narrow the interval of the clip-photo gap)")
    parser.add_argument("--per-clip", type=int, default=0, help="msrvtt: the first N captions of each clip as "
                        "queries (0: all 20)")
    args = parser.parse_args()
    global MODEL_DIR
    MODEL_DIR = args.model.resolve() if args.model else None
    if not use_home(args.home, args.data):
        return 0
    sets = domains(args.data)
    names = list(args.domains)
    if args.sweep:
        names = ["flickr8k-train-slice", "webcaps-train-slice"] + [n for n in names if n != "clips"]
    results = json.loads(args.out.read_text()) if args.out.is_file() else []
    for name in names:
        if name == "clips":
            record = run_clips(args.home, *sets["flickr8k-dev"], tag=args.tag, zooms=args.zooms)
        elif name.startswith("msrvtt"):
            # among photos users have: the 1,000 Flickr8k dev photos (dev); on the train side the photo slices
            slices = ["flickr8k-dev"] if name == "msrvtt-dev" else ["flickr8k-train-slice", "webcaps-train-slice"]
            photos = [sets[s][0] / f for s in slices for f in sets[s][1]][:1000]
            record = run_video(args.home, name, *sets[name], tag=args.tag, photos=photos, per_clip=args.per_clip)
        else:
            sweep = args.sweep and name.endswith("train-slice")
            record = run_domain(args.home, name + args.tag, *sets[name], sweep=sweep)
        results = [r for r in results if r.get("domain") != record["domain"]] + [record]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")
        print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
