"""Living in a big library on this machine, end to end: indexing, re-scans, disk, the GUI, search, a retrain.

    python tests/bench/bench_library.py --items 3000 --json bench-results/library-3000.json

A library of ``--items`` files is written under ``--work`` (default /tmp): the Flickr8k photos
(../shared/datasets/flickr8k/images) copied as they are, then distinct variants of them (crops, flips, colour
shifts, rescales, re-encodes at other JPEG qualities: every file has its own content hash), and ~5 % animations
(3 % GIFs, 2 % MPEG-4 videos, each a few frames panning across a photo), in folders of 1,000 with spread-out
modification times. One run then measures, in a fresh ``POLYSEEK_HOME`` with the shipped starter model active:

1. the backbone alone on decoded 224 x 224 batches, then the first index end to end (``Library.index``:
   walk, hash, decode, backbone, stores, and the starter embedding every item): items/s and their ratio;
2. re-scans: nothing changed (median of 3, on the open service; and once on a freshly opened service, as the
   app's start-up does), then 1 % of the files changed (re-encoded), moved (to another folder) or deleted;
3. disk per item: catalog, feature store (and its part past the local-feature cap), vector index, thumbnails;
4. text query and find-similar latency (p50/p95 over ``--queries`` Flickr8k dev captions and library files,
   first page of 60 hits as the GUI asks) with the starter model and with zero-shot ranking;
5. a retrain (``engine.loop.retrain.Retrain``, the app's defaults) after ``--annotations`` items got their
   Flickr8k caption: wall time and the trainer's peak resident memory;
6. the GUI, in a process of its own (``--gui-probe``): time to a shown window and to the first page, resident
   memory, event-loop stalls while the whole library is scrolled in the browse view (every page fetched, the
   thumbnails in view drawn), and while a text query runs (the probe is ``bench_gui.StallProbe``);
7. ``--synthetic N`` (default 100,000; 0 skips it): the parts that need no backbone, at N items without running
   it -- a catalog of N rows over N real (hard-linked) files: no-change re-scan and browse pages deep in the
   library; the zero-shot ranking over N random class distributions; the default model's vector index over N
   random vectors of the starter's shape -- so the 100k targets are checked here even when indexing 100k
   photos (~20 min at ~100 items/s when the machine is quiet) is not run. Labelled ``synthetic`` in the output.

Targets (issue #23, 2 cores): no-change re-scan of 100k < 10 s; query p95 < 50 ms (default model), < 150 ms
(zero-shot); GUI resident < 1.5 GB and no stall > 50 ms while scrolling; storage < 30 KB per item past the
local-feature cap; retrain < 30 min. The machine may be shared: the load average is recorded with each part.

Part 8 runs on its own (it needs Flickr8k): ``--synthetic-retrain N`` (e.g. 100000) builds a library of N items
whose feature store holds realistic records without running the backbone N times -- ``--real-photos`` Flickr8k
photos are run through the extractor and each item is a file of its own (a photo's bytes plus a trailer) whose
record copies that photo's (global feature perturbed; local features up to the store's cap) -- lets the starter
embed it, gives ``--annotations`` items their Flickr8k caption and runs the app's retrain with its defaults: wall
time, trainer and engine CPU, both processes' peak memory, and each stage (export, the trainer's epochs, the
before/after evaluation, the activation's re-scan and re-embedding of all N items), plus the starter's and the
new model's query latency over the N items::

    python tests/bench/bench_library.py --synthetic-retrain 100000 --json bench-results/library-100k-retrain.json
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "bench"))
FLICKR = REPO.parent / "shared" / "datasets" / "flickr8k"
FOLDER_SIZE = 1000
PAGE = 60  # hits per page, as the GUI asks (GuiSettings.page_size)


def load() -> float:
    return round(os.getloadavg()[0], 2)


def percentiles(seconds: list[float], cpu: list[float] | None = None) -> dict:
    """p50 / p95 / max of wall times; with ``cpu`` (process CPU seconds of the same calls, every thread) also
    their p50 / p95: on a shared machine the CPU time is what the call costs, the wall time what it got."""
    ms = np.array(seconds) * 1000
    out = {"p50_ms": round(float(np.percentile(ms, 50)), 2), "p95_ms": round(float(np.percentile(ms, 95)), 2),
           "max_ms": round(float(ms.max()), 2), "n": len(seconds)}
    if cpu:
        cpu_ms = np.array(cpu) * 1000
        out.update(cpu_p50_ms=round(float(np.percentile(cpu_ms, 50)), 2),
                   cpu_p95_ms=round(float(np.percentile(cpu_ms, 95)), 2))
    return out


# ------------------------------------------------------------------------------------------- the library


def _variant(img, rng: random.Random):
    """A distinct picture from a photo: a random crop, maybe a flip, a colour shift, a rescale."""
    from PIL import Image, ImageEnhance, ImageOps

    w, h = img.size
    scale = rng.uniform(0.6, 0.95)
    cw, ch = int(w * scale), int(h * scale)
    x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
    out = img.crop((x, y, x + cw, y + ch))
    if rng.random() < 0.5:
        out = ImageOps.mirror(out)
    out = ImageEnhance.Color(out).enhance(rng.uniform(0.5, 1.5))
    out = ImageEnhance.Brightness(out).enhance(rng.uniform(0.8, 1.2))
    side = rng.choice((160, 224, 256, 320))
    return out.resize((side, int(side * ch / cw) or 1), Image.BILINEAR)


def _pan_frames(img, n: int, size: tuple[int, int] = (160, 120)) -> list:
    w, h = img.size
    cw, ch = int(w * 0.7), int(h * 0.7)
    return [img.crop((int((w - cw) * i / max(1, n - 1)), (h - ch) // 2, int((w - cw) * i / max(1, n - 1)) + cw,
                      (h - ch) // 2 + ch)).resize(size) for i in range(n)]


def make_library(dest: Path, n: int, photos: list[Path], seed: int = 0) -> dict:
    """``n`` media files under ``dest`` (module docstring); returns how many of each kind."""
    import cv2
    from PIL import Image

    rng = random.Random(seed)
    n_gif, n_video = round(0.03 * n), round(0.02 * n)
    n_still = n - n_gif - n_video
    base_mtime = time.time() - 3 * 365 * 86400
    counts = {"photos": 0, "variants": 0, "gifs": 0, "videos": 0}
    for i in range(n):
        folder = dest / f"part{i // FOLDER_SIZE:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        source = photos[i % len(photos)]
        if i < n_still and i < len(photos):
            path = folder / source.name
            shutil.copyfile(source, path)
            counts["photos"] += 1
        elif i < n_still:
            path = folder / f"v{i:06d}-{source.stem}.jpg"
            with Image.open(source) as img:
                _variant(img.convert("RGB"), rng).save(path, quality=rng.randint(70, 95))
            counts["variants"] += 1
        elif i < n_still + n_gif:
            path = folder / f"g{i:06d}.gif"
            with Image.open(source) as img:
                frames = _pan_frames(_variant(img.convert("RGB"), rng), 6)
            frames[0].save(path, save_all=True, append_images=frames[1:], duration=100, loop=0)
            counts["gifs"] += 1
        else:
            path = folder / f"m{i:06d}.mp4"
            with Image.open(source) as img:
                frames = _pan_frames(_variant(img.convert("RGB"), rng), 16)
            writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 10.0, (160, 120))
            for frame in frames:
                writer.write(np.ascontiguousarray(np.asarray(frame)[:, :, ::-1]))
            writer.release()
            counts["videos"] += 1
        stamp = base_mtime + rng.uniform(0, 3 * 365 * 86400)
        os.utime(path, (stamp, stamp))
    return counts


def tree_bytes(*paths: Path) -> int:
    total = 0
    for path in paths:
        if path.is_file():
            total += path.stat().st_size
        elif path.is_dir():
            # a link counts as itself, not as the file it points to (the training set is links)
            total += sum(f.lstat().st_size for f in path.rglob("*") if f.is_symlink() or f.is_file())
    return total


def sqlite_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if p.is_file())


class PeakChildRss:
    """Samples the resident memory of this process's descendants (the trainer) every 100 ms; keeps the peak."""

    def __init__(self) -> None:
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _descendants(self) -> list[int]:
        children, frontier = [], [os.getpid()]
        while frontier:
            pid = frontier.pop()
            try:
                with open(f"/proc/{pid}/task/{pid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                kids = []
            children += kids
            frontier += kids
        return children

    def _run(self) -> None:
        while not self._stop.is_set():
            for pid in self._descendants():
                try:
                    with open(f"/proc/{pid}/status") as f:
                        rss = next((int(ln.split()[1]) for ln in f if ln.startswith("VmRSS")), 0)
                except OSError:
                    continue
                self.peak_mb = max(self.peak_mb, rss / 1024)
            time.sleep(0.1)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return round(self.peak_mb, 1)


# ------------------------------------------------------------------------------------------- the parts


def backbone_throughput(assets: Path, photos: list[Path]) -> dict:
    from bench_indexing import backbone_alone

    from engine.features.backbone import Backbone
    from engine.features.extract import decode_for_backbone
    from engine.library.indexer import BATCH

    backbone = Backbone(assets)
    images = np.concatenate([decode_for_backbone(p, backbone.image_size).frames for p in photos[:256]])
    rate, cpu_ms = backbone_alone(backbone, images, BATCH)
    return {"items_per_s": round(rate, 1), "cpu_ms_per_item": round(cpu_ms, 2), "n": len(images), "load": load()}


def first_index(service, library: Path, n: int, backbone_rate: float) -> dict:
    """``Library.index`` on the new library; the indexer's part ends with its last "indexed" record, the rest is
    the active model embedding the new items."""
    start = time.perf_counter()
    indexed_at = None
    for progress in service.library.index([library]):
        if progress.message.startswith("indexed"):
            indexed_at = time.perf_counter()
    end = time.perf_counter()
    counts = service.library.counts()
    indexer_s = (indexed_at or end) - start
    return {"items": n, "wall_s": round(end - start, 1), "items_per_s": round(n / (end - start), 1),
            "indexer_s": round(indexer_s, 1), "indexer_items_per_s": round(n / indexer_s, 1),
            "model_embedding_s": round(end - (indexed_at or end), 1),
            "ratio_to_backbone_alone": round(n / (end - start) / backbone_rate, 3),
            "indexer_ratio_to_backbone_alone": round(n / indexer_s / backbone_rate, 3),
            "counts": counts, "load": load()}


def rescans(service, library: Path, n: int, seed: int = 0) -> dict:
    from engine.workspace import Workspace

    cpu_used: list[float] = []

    def timed(svc) -> float:
        start, cpu = time.perf_counter(), time.process_time()
        for _ in svc.library.index(None):
            pass
        cpu_used.append(time.process_time() - cpu)
        return time.perf_counter() - start

    warm = [timed(service) for _ in range(3)]
    fresh = Workspace.open(service.name, Path(os.environ["POLYSEEK_ASSETS"]))
    cold = timed(fresh)
    fresh.close()
    rng = random.Random(seed)
    files = sorted(p for p in library.rglob("*") if p.is_file() and p.suffix == ".jpg")
    k = max(1, n // 300)  # 1 % in all: a third changed, a third moved, a third deleted
    chosen = rng.sample(files, 3 * k)
    changed, moved, deleted = chosen[:k], chosen[k:2 * k], chosen[2 * k:]
    from PIL import Image

    for path in changed:
        with Image.open(path) as img:
            img.convert("RGB").transpose(Image.FLIP_TOP_BOTTOM).save(path, quality=88)
    (library / "moved").mkdir(exist_ok=True)
    for path in moved:
        path.rename(library / "moved" / f"{path.parent.name}-{path.name}")
    for path in deleted:
        path.unlink()
    one_percent = timed(service)
    counts = service.library.counts()
    return {"no_change_s": {"runs": [round(s, 3) for s in warm], "median": round(statistics.median(warm), 3),
                            "cpu_median": round(statistics.median(cpu_used[:3]), 3),
                            "fresh_service": round(cold, 3), "fresh_service_cpu": round(cpu_used[3], 3)},
            "one_percent_s": round(one_percent, 2), "one_percent_cpu_s": round(cpu_used[4], 2),
            "changed": k, "moved": k, "deleted": k,
            "counts_after": counts, "missing_ok": counts["missing"] == k, "load": load()}


def disk(service, home: Path, n: int) -> dict:
    stats = service.state.features.stats()
    catalog = sqlite_bytes(service.state.catalog.path)
    features = sqlite_bytes(home / "features.sqlite")
    index = tree_bytes(service.library_dir / "index")  # every model's vector index (engine/search/trained.py)
    training = tree_bytes(service.library_dir / "retrain")  # the last retrain's caption folder (links)
    thumbs = tree_bytes(service.state.cache_dir)
    local = getattr(stats, "local_bytes", 0)
    past_cap = catalog + (features - local) + index + thumbs
    return {"items": n, "catalog_bytes": catalog, "features_bytes": features, "features_local_bytes": local,
            "vector_index_bytes": index, "thumbnail_bytes": thumbs, "training_set_bytes": training,
            "models": [m.name for m in service.state.catalog.models()],
            "kb_per_item": {"catalog": round(catalog / n / 1024, 2), "features": round(features / n / 1024, 2),
                            "features_without_local": round((features - local) / n / 1024, 2),
                            "vector_index": round(index / n / 1024, 2), "thumbnails": round(thumbs / n / 1024, 2),
                            "total": round((catalog + features + index + thumbs) / n / 1024, 2),
                            "past_local_cap": round(past_cap / n / 1024, 2)},
            "feature_store": {k: v for k, v in vars(stats).items()} if hasattr(stats, "__dict__") else str(stats)}


def dev_captions(limit: int, seed: int = 0) -> list[str]:
    splits = dict(line.split("\t") for line in (FLICKR / "splits.tsv").read_text().splitlines()[1:])
    rows = [line.split("\t") for line in (FLICKR / "captions.tsv").read_text().splitlines()[1:]]
    texts = [text for file, text in rows if splits.get(file) == "dev"]
    return random.Random(seed).sample(texts, limit)


def query_latency(service, queries: list[str], examples: list[Path]) -> dict:
    out = {}
    for label, model in (("starter", None), ("zero-shot", "zero-shot")):
        service.models.use_here(model)
        start = time.perf_counter()
        service.search.text(queries[0], top=PAGE)  # opening the model / building the index is not a query
        opened = time.perf_counter() - start
        text, similar, text_cpu, similar_cpu = [], [], [], []
        for q in queries:
            start, cpu = time.perf_counter(), time.process_time()
            service.search.text(q, top=PAGE)
            text.append(time.perf_counter() - start)
            text_cpu.append(time.process_time() - cpu)
        for path in examples:
            start, cpu = time.perf_counter(), time.process_time()
            service.search.example(path, top=PAGE)
            similar.append(time.perf_counter() - start)
            similar_cpu.append(time.process_time() - cpu)
        out[label] = {"first_query_s": round(opened, 2), "text": percentiles(text, text_cpu),
                      "find_similar": percentiles(similar, similar_cpu), "load": load()}
    service.models.use_here(None)
    return out


def retrain(service, n_annotations: int, epochs: int | None, seed: int = 0) -> dict:
    from engine.loop.retrain import RetrainOptions

    rows = [line.split("\t") for line in (FLICKR / "captions.tsv").read_text().splitlines()[1:]]
    first = {}
    for file, text in rows:
        first.setdefault(file, text)
    by_name = {m.path.name: m.id for m in service.state.catalog.iter_media("ok") if m.path.name in first}
    names = random.Random(seed).sample(sorted(by_name), min(n_annotations, len(by_name)))
    for name in names:
        service.annotations.add_caption(by_name[name], first[name])
    import resource

    peak = PeakChildRss()
    start = time.perf_counter()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    job = service.models.retrain(RetrainOptions(epochs=epochs))
    for _ in job.run():
        pass
    for _ in service.models.adopt(job.result):  # the rule's choice made active, as polyseek retrain does
        pass
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    trainer_cpu = (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)
    result = job.result
    ts = result.training_set
    return {"annotations": len(names), "epochs": epochs or "default", "wall_s": round(wall, 1),
            "wall_min": round(wall / 60, 2), "trainer_cpu_s": round(trainer_cpu, 1),
            "trainer_cpu_min_per_core": round(trainer_cpu / 60 / (os.cpu_count() or 1), 2),
            "trainer_peak_rss_mb": peak.stop(), "model": result.model_name,
            "activated": result.activated, "annotated_items": ts.n_annotated_items,
            "unannotated_items": ts.n_unannotated,
            "unannotated_in_library": getattr(ts, "n_unannotated_library", ts.n_unannotated), "load": load()}


def gui(home: Path, library_name: str, assets: Path, query: bool = True, **env_extra: str) -> dict:
    out = home / "gui-probe.json"
    env = {**os.environ, "POLYSEEK_HOME": str(home), "POLYSEEK_ASSETS": str(assets),
           "QT_QPA_PLATFORM": os.environ.get("QT_QPA_PLATFORM", "offscreen"), **env_extra}
    started = time.perf_counter()
    subprocess.run([sys.executable, __file__, "--gui-probe", library_name, "--json", str(out),
                    *([] if query else ["--gui-no-query"])], env=env, cwd=REPO, check=True)
    record = json.loads(out.read_text())
    record["probe_wall_s"] = round(time.perf_counter() - started, 1)
    return record


def gui_probe(library_name: str, out: Path, query: bool = True) -> int:
    """In a process of its own: the main window over the bench library (see the module docstring, part 6)."""
    t0 = time.perf_counter()
    from bench_gui import StallProbe
    from PySide6.QtWidgets import QApplication

    import app.qtcompat  # noqa: F401
    from app.mainwindow import MainWindow
    from app.settings import GuiSettings
    from engine.workspace import Workspace
    from tools.gui_memory import rss_mb

    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss_mb())
            time.sleep(0.05)

    threading.Thread(target=sample, daemon=True).start()
    qapp = QApplication.instance() or QApplication([])
    service = Workspace.open(library_name, Path(os.environ["POLYSEEK_ASSETS"]))
    window = MainWindow(GuiSettings(), service)
    window.show()
    qapp.processEvents()
    shown = time.perf_counter() - t0
    model = window.results_model

    def wait(until, timeout_s: float = 1800) -> None:
        end = time.monotonic() + timeout_s
        while not until():
            if time.monotonic() > end:
                raise TimeoutError("the GUI did not get there")
            qapp.processEvents()
            time.sleep(0.001)

    wait(lambda: model.rowCount() > 0 and not model.is_loading)
    first_page = time.perf_counter() - t0
    gc.freeze()  # as app.main does once the library is open
    rss_open = rss_mb()
    bar = window.results.verticalScrollBar()
    page_cpu, page_rows = [], []  # the GUI thread's CPU from one page's arrival to the next, and the rows then
    last_cpu = [time.thread_time()]

    def page_arrived(_added: int) -> None:
        now = time.thread_time()
        page_cpu.append(now - last_cpu[0])
        page_rows.append(PAGE * len(page_cpu))  # how deep the scroll is: pages load in order on the way down
        last_cpu[0] = now

    model.page_loaded.connect(page_arrived)
    full_gc = []  # (at s, ms) of Python's full (generation 2) garbage collections while scrolling
    gc_began = [0.0]

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            gc_began[0] = time.perf_counter()
        elif info["generation"] == 2:
            full_gc.append((round(gc_began[0] - start, 3), round(1000 * (time.perf_counter() - gc_began[0]), 1)))

    # BENCH_SAMPLE_STACKS=1: name what the GUI thread did in each pass over 50 ms (the sampler competes for the GIL)
    probe = StallProbe(sample_stacks=os.environ.get("BENCH_SAMPLE_STACKS") == "1")
    start = time.perf_counter()
    gc.callbacks.append(on_gc)
    while True:  # a screen at a time, as a user paging down does: the pages the screens show load on the way
        bar.setValue(bar.value() + bar.pageStep())
        qapp.processEvents()
        wait(lambda: not model.is_loading)
        last_shown = window.results.viewport().rect().intersects(
            window.results.visualRect(model.index(model.rowCount() - 1)))  # a batched layout may still run
        if bar.value() >= bar.maximum() and not model.canFetchMore() and last_shown:
            break
    for _ in range(20):  # the thumbnails of the last screen
        qapp.processEvents()
        time.sleep(0.01)
    scroll_s = time.perf_counter() - start
    scrolling = probe.stop()
    gc.callbacks.remove(on_gc)
    model.page_loaded.disconnect(page_arrived)
    rows = model.rowCount()
    rss_scrolled = rss_mb()
    tracked = Counter(type(o).__name__ for o in gc.get_objects())  # what a full collection has to walk
    querying, query_s = {}, None
    if query:
        probe = StallProbe()
        start = time.perf_counter()
        window.search_bar.edit.setText("a dog running on the grass")
        window.search_bar.submit()
        wait(lambda: model.rowCount() > 0 and not model.is_loading and time.perf_counter() - start > 0.05)
        query_s = round(time.perf_counter() - start, 2)
        querying = probe.stop()
    rss_end = rss_mb()
    done.set()
    record = {"time_to_window_s": round(shown, 2), "time_to_first_page_s": round(first_page, 2),
              "rss_mb": {"opened": rss_open, "scrolled_to_end": rss_scrolled, "after_query": rss_end,
                         "peak": peak[0]},
              "scroll": {"rows": rows, "seconds": round(scroll_s, 1), **scrolling,
                         "gui_cpu_per_page": page_work(page_cpu, page_rows),
                         "full_gc": {"count": len(full_gc), "worst_ms": max((ms for _, ms in full_gc), default=0),
                                     "over_50ms": [list(g) for g in full_gc if g[1] > 50][:20],
                                     "tracked_objects": sum(tracked.values()),
                                     "frozen_at_start": gc.get_freeze_count(),
                                     "most_tracked": tracked.most_common(8)}},
              "query": {"seconds": query_s, **querying} if query else None, "load": load()}
    window.shutdown()
    service.close()
    out.write_text(json.dumps(record, indent=2))
    # No interpreter teardown: with 100,000 jobs (a thumbnail each) behind it PySide's clean-up at exit took many
    # minutes (when app.workers still kept every finished Worker alive).
    logging.shutdown()
    os._exit(0)


def page_work(cpu: list[float], rows: list[int], buckets: int = 10) -> dict:
    """GUI-thread CPU per page loaded while scrolling: p50/p99/worst overall and in ``buckets`` depth bands."""
    def summary(ms: list[float]) -> dict:
        ordered = sorted(ms)
        return {"pages": len(ordered), "p50_ms": round(statistics.median(ordered), 1),
                "p99_ms": round(ordered[round(0.99 * (len(ordered) - 1))], 1), "worst_ms": round(ordered[-1], 1)}

    if not cpu:
        return {"pages": 0}
    ms = [1000 * c for c in cpu[1:] or cpu]  # the first page's share includes the window's first paint
    depth = rows[1:] or rows
    band = max(1, -(-max(depth) // buckets))
    by_depth = {}
    for lo in range(0, max(depth), band):
        inside = [m for m, r in zip(ms, depth, strict=True) if lo < r <= lo + band]
        if inside:
            by_depth[f"rows_{lo}-{lo + band}"] = summary(inside)
    return {**summary(ms), "by_depth": by_depth}


# ------------------------------------------------------------------------------------------- synthetic N


def synthetic(n: int, work: Path, assets: Path, seed: int = 0, with_gui: bool = True,
              with_vector_index: bool = True, gui_only: bool = False) -> dict:
    """The parts that need no backbone, at ``n`` items (module docstring, part 7); ``gui_only``: the catalog
    rows and the GUI probe over them, nothing else."""
    from engine.features.encoders import Encoders
    from engine.features.featurestore import FeatureStore
    from engine.library.browse import browse
    from engine.library.catalog import Catalog
    from engine.library.indexer import Indexer
    from engine.search.zeroshot import ZeroShotIndex
    from engine.types import MediaKind

    rng = np.random.default_rng(seed)
    root = work / "synthetic-files"
    shutil.rmtree(root, ignore_errors=True)
    start = time.perf_counter()
    paths = []
    for i in range(n):
        folder = root / f"part{i // FOLDER_SIZE:03d}"
        if i % FOLDER_SIZE == 0:  # one real file per folder, hard-linked (a file has at most 65,000 links)
            folder.mkdir(parents=True)
            source = folder / ".source"
            source.write_bytes(b"\xff\xd8\xff" + bytes(997))
        path = folder / f"s{i:07d}.jpg"
        os.link(source, path)
        paths.append(path)
    files_s = time.perf_counter() - start
    home = work / "synthetic-home"
    (home / "libraries" / "synthetic").mkdir(parents=True)
    catalog = Catalog(home / "libraries" / "synthetic" / "catalog.sqlite")
    root_id = catalog.add_root(root, os.stat(root).st_dev)
    start = time.perf_counter()
    with catalog.transaction("synthetic rows"):
        for i, path in enumerate(paths):
            st = path.stat()
            media_id, _ = catalog.upsert_media(path, st.st_size, st.st_mtime_ns, f"{i:064x}", root_id)
            catalog.set_media_ok(media_id, MediaKind.IMAGE, "jpeg", 224, 224, 1, None, "synthetic")
            catalog.set_pseudo_caption(media_id, "a dog and a ball on the grass, green and brown")
    rows_s = time.perf_counter() - start
    if gui_only:
        catalog.close()
        window = gui(home, "synthetic", assets, query=False, POLYSEEK_STARTER="off")
        shutil.rmtree(root, ignore_errors=True)
        return {"synthetic": True, "items": n, "make_rows_s": round(rows_s, 1), "gui_browse": window, "load": load()}
    features = FeatureStore(home / "features.sqlite")

    def no_extractor():
        raise AssertionError("a no-change re-scan must not open the backbone")

    indexer = Indexer(catalog, features, no_extractor)
    rescan, rescan_cpu = [], []
    for _ in range(3):
        start, cpu = time.perf_counter(), time.process_time()
        for _ in indexer.index([root]):
            pass
        rescan.append(time.perf_counter() - start)
        rescan_cpu.append(time.process_time() - cpu)
    pages = {}
    for sort in ("newest", "name"):
        for where, offset in (("first", 0), ("middle", n // 2), ("last", n - PAGE)):
            runs = []
            for _ in range(5):
                start = time.perf_counter()
                hits = browse(catalog, offset=offset, top=PAGE, sort=sort)
                runs.append(time.perf_counter() - start)
            assert len(hits) == PAGE
            pages[f"{sort}_{where}_ms"] = round(1000 * statistics.median(runs), 2)
    catalog_bytes = sqlite_bytes(catalog.path)
    catalog.close()
    features.close()
    # the grid scrolled over all n rows (no model: POLYSEEK_STARTER=off; the files are not pictures, so every
    # thumbnail fails and is drawn as a placeholder; no query: these items have no features)
    window = gui(home, "synthetic", assets, query=False, POLYSEEK_STARTER="off") if with_gui else None
    shutil.rmtree(root, ignore_errors=True)

    encoders = Encoders(assets)
    classes = encoders.class_embeddings
    ids = rng.integers(0, classes.shape[0], (n, 32))
    probs = rng.dirichlet(np.full(32, 0.3), n).astype(np.float32)
    start = time.perf_counter()
    zero_shot = ZeroShotIndex(classes, ids, probs)
    zs_build = time.perf_counter() - start
    from engine.features.regional import content_words

    queries = dev_captions(60, seed) if FLICKR.is_dir() else ["a dog running on the grass"] * 60
    zs_score, zs_total, zs_cpu = [], [], []
    for q in queries:
        start, cpu = time.perf_counter(), time.process_time()
        words = content_words(q)  # encoded as LibraryIndexes.zero_shot_query does: sentence, then its words
        sentence = encoders.minilm.encode([q]).sentence[0]
        encoded = encoders.minilm.encode(words).sentence if words else np.zeros((0, len(sentence)), np.float32)
        mid = time.perf_counter()
        scores = zero_shot.score(sentence, encoded)
        np.argpartition(-scores, PAGE)[:PAGE]  # the page, as the search takes it (ranking.page_of_hits)
        end = time.perf_counter()
        zs_score.append(end - mid)
        zs_total.append(end - start)
        zs_cpu.append(time.process_time() - cpu)
    vector = synthetic_vector_index(n, rng) if with_vector_index else None
    return {"synthetic": True, "items": n, "make_files_s": round(files_s, 1), "make_rows_s": round(rows_s, 1),
            "rescan_no_change_s": {"runs": [round(s, 3) for s in rescan], "median": round(statistics.median(rescan), 3),
                                   "cpu_median": round(statistics.median(rescan_cpu), 3)},
            "browse_page": pages, "catalog_kb_per_item": round(catalog_bytes / n / 1024, 2), "gui_browse": window,
            "zero_shot": {"build_s": round(zs_build, 2), "rank_only": percentiles(zs_score),
                          "encode_and_rank": percentiles(zs_total, zs_cpu)},
            "default_model_index": vector, "load": load()}


def synthetic_vector_index(n: int, rng: np.random.Generator) -> dict:
    """The starter's vector index over ``n`` random items of its shape: build, p50/p95 of a first page."""
    from engine.search.starter import shipped_starter
    from engine.search.vectorindex import MultiVectorIndex, normalise

    starter = shipped_starter()
    manifest = json.loads((starter / "onnx" / "manifest.json").read_text()) if starter else {}
    heads = max(1, int(manifest.get("attention_heads", 0)))  # the VSE starter: one embedding per item
    dim = int(manifest.get("embed_dim", 1024))
    index = MultiVectorIndex(dim, heads)
    start = time.perf_counter()
    for lo in range(0, n, 20_000):
        m = min(20_000, n - lo)
        index.add(np.arange(lo, lo + m), normalise(rng.standard_normal((m, heads, dim)).astype(np.float32)))
    build = time.perf_counter() - start
    times, cpu_times = [], []
    for _ in range(100):
        q = normalise(rng.standard_normal((1, dim)).astype(np.float32))
        start, cpu = time.perf_counter(), time.process_time()
        index.search(q, PAGE)
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu)
    return {"heads": heads, "dim": dim, "build_s": round(build, 1), "search": percentiles(times, cpu_times),
            "approximate": index.approximate}


# ------------------------------------------------------------------------------------------- synthetic retrain


class PeakOwnRss:
    """Samples this process's resident memory every 100 ms from ``start``; keeps the peak (the engine's side of
    a retrain: export, evaluation, re-embedding, index build)."""

    def __init__(self) -> None:
        self.start_mb = self.peak_mb = self.stage_peak_mb = self._rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @staticmethod
    def _rss() -> float:
        with open("/proc/self/status") as f:
            return next((int(ln.split()[1]) for ln in f if ln.startswith("VmRSS")), 0) / 1024

    def _run(self) -> None:
        while not self._stop.is_set():
            rss = self._rss()
            self.peak_mb, self.stage_peak_mb = max(self.peak_mb, rss), max(self.stage_peak_mb, rss)
            time.sleep(0.1)

    def stage_peak(self) -> float:
        """The peak since the last call (or the start), and a new stage from now."""
        peak, self.stage_peak_mb = self.stage_peak_mb, self._rss()
        return round(max(peak, self.stage_peak_mb), 1)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return round(self.peak_mb, 1)


def _flickr_first_captions() -> dict[str, str]:
    first: dict[str, str] = {}
    for line in (FLICKR / "captions.tsv").read_text().splitlines()[1:]:
        file, text = line.split("\t")
        first.setdefault(file, text)
    return first


def _small_jpegs(photos: list[Path], side: int = 256) -> list[bytes]:
    """Each photo re-encoded with its longer side ``side`` (larger than the backbone's 224 input): the bytes every
    synthetic copy of it starts with, small enough that 100,000 copies fit on /tmp (~1.5 GB)."""
    import io

    from PIL import Image

    out = []
    for photo in photos:
        with Image.open(photo) as img:
            img = img.convert("RGB")
            img.thumbnail((side, side))
            buf = io.BytesIO()
            img.save(buf, format="JPEG", quality=85)
        out.append(buf.getvalue())
    return out


def synthetic_library_with_features(n: int, work: Path, assets: Path, n_real: int, seed: int = 0) -> dict:
    """A library of ``n`` items in a fresh ``POLYSEEK_HOME`` whose feature store holds realistic records, without
    running the backbone ``n`` times (part 8; labelled synthetic).

    ``n_real`` Flickr8k train photos are re-encoded small and run through the app's extractor once. Item ``i`` is
    a file of its own: photo ``i % n_real``'s bytes plus a trailer naming ``i`` (after the JPEG's end marker, so it
    decodes as that photo but has its own content hash). Its feature record is the photo's, with the global
    feature scaled by a random factor in [0.95, 1.05] and Gaussian noise of 2 % of its spread added (so no two
    items are equal), the local features and region/image top classes copied; the store keeps local features up
    to its cap (50,000) and drops the rest, as it does for indexed photos. Catalog rows carry the real content
    hashes, sizes and times and the photo's pseudo caption, as the indexer writes them."""
    from engine.features.encoders import Encoders
    from engine.features.featurestore import FeatureRecord, FeatureStore
    from engine.files import content_hash
    from engine.library.catalog import Catalog

    splits = dict(line.split("\t") for line in (FLICKR / "splits.tsv").read_text().splitlines()[1:])
    train = sorted(FLICKR / "images" / f for f, s in splits.items() if s == "train")
    photos = random.Random(seed).sample(train, min(n_real, len(train)))
    out: dict = {"items": n, "real_photos": len(photos), "load_before": load()}
    start = time.perf_counter()
    sources = _small_jpegs(photos)
    out["reencode_s"] = round(time.perf_counter() - start, 1)
    encoders = Encoders(assets)
    extractor = encoders.extractor()
    start, cpu = time.perf_counter(), time.process_time()
    src_dir = work / "sources"
    src_dir.mkdir(parents=True, exist_ok=True)
    src_paths = []
    for k, data in enumerate(sources):
        path = src_dir / f"{k:05d}-{photos[k].name}"
        path.write_bytes(data)
        src_paths.append(path)
    extracted = [r for batch in extractor.iter_batches([src_paths[i:i + 64] for i in range(0, len(src_paths), 64)])
                 for r in batch]
    failed = [p for p, r in zip(src_paths, extracted, strict=True) if not hasattr(r, "record")]
    if failed:
        raise RuntimeError(f"{len(failed)} re-encoded photos could not be decoded, e.g. {failed[0]}")
    out["backbone_on_real_photos"] = {"s": round(time.perf_counter() - start, 1),
                                      "cpu_s": round(time.process_time() - cpu, 1), "load": load()}
    backbone = encoders.backbone.id
    rng = np.random.default_rng(seed)
    root = work / "library"
    start = time.perf_counter()
    files, written = [], 0
    for i in range(n):
        folder = root / f"part{i // FOLDER_SIZE:03d}"
        if i % FOLDER_SIZE == 0:
            folder.mkdir(parents=True)
        path = folder / f"s{i:07d}-{photos[i % len(photos)].name}"
        written += path.write_bytes(sources[i % len(sources)] + f"polyseek-synthetic-{i:07d}".encode())
        files.append(path)
    out["write_files_s"] = round(time.perf_counter() - start, 1)
    out["files_bytes"] = written
    home = Path(os.environ["POLYSEEK_HOME"])
    (home / "libraries" / "synthetic").mkdir(parents=True)
    catalog = Catalog(home / "libraries" / "synthetic" / "catalog.sqlite")
    store = FeatureStore(home / "features.sqlite")
    root_id = catalog.add_root(root, os.stat(root).st_dev)
    start = time.perf_counter()
    for lo in range(0, n, 2000):
        records = []
        with catalog.transaction("synthetic rows"):
            for i in range(lo, min(n, lo + 2000)):
                path, real = files[i], extracted[i % len(extracted)]
                st = path.stat()
                digest = content_hash(path)
                media_id, _ = catalog.upsert_media(path, st.st_size, st.st_mtime_ns, digest, root_id)
                info = real.info
                catalog.set_media_ok(media_id, info.kind, info.format, info.width, info.height, info.n_frames,
                                     info.duration_s, backbone)
                catalog.set_pseudo_caption(media_id, real.semantics.caption)
                source = real.record
                pooled = source.global_.astype(np.float32)
                pooled = pooled * rng.uniform(0.95, 1.05) + rng.normal(0, 0.02 * float(pooled.std()), pooled.shape)
                records.append((digest, FeatureRecord(
                    global_=pooled.astype(np.float16), local=source.local, frames=source.frames,
                    region_top_ids=source.region_top_ids, region_top_probs=source.region_top_probs,
                    image_top_ids=source.image_top_ids, image_top_probs=source.image_top_probs)))
        store.put_many(records, backbone)
    out["write_rows_and_features_s"] = round(time.perf_counter() - start, 1)
    stats = store.stats()
    out["feature_store"] = {k: v for k, v in vars(stats).items()} if hasattr(stats, "__dict__") else str(stats)
    out["features_bytes"] = sqlite_bytes(home / "features.sqlite")
    out["catalog_bytes"] = sqlite_bytes(catalog.path)
    catalog.close()
    store.close()
    out["photos"] = [p.name for p in photos]
    out["load"] = load()
    return out


def _query_figures(service, queries: list[str]) -> dict:
    service.search.text(queries[0], top=PAGE)  # opening the model / its index is not a query
    times, cpu = [], []
    for q in queries:
        start, c = time.perf_counter(), time.process_time()
        service.search.text(q, top=PAGE)
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - c)
    return {**percentiles(times, cpu), "load": load()}


def _stage_of(message: str) -> str:
    if message.startswith(("writing the training set", "training set:")):
        return "export_training_set"
    if message.startswith(("training", "epoch")):
        return "trainer"
    if message.startswith("comparing"):
        return "before_after_evaluation"
    if message.startswith("re-indexing"):
        return "activation_rescan_and_embedding"
    return "done" if message == "done" else "other"


def synthetic_retrain(n: int, work: Path, assets: Path, n_real: int, n_annotations: int, epochs: int | None,
                      n_queries: int = 100, seed: int = 0, on_update=None) -> dict:
    """Part 8: the app's retrain (``engine.loop.retrain.Retrain``, its defaults) after ``n_annotations`` items of a
    synthetic ``n``-item library (:func:`synthetic_library_with_features`) got their Flickr8k caption: wall time,
    engine and trainer CPU, both processes' peak resident memory, and each stage's time (the trainer's epochs, the
    before/after evaluation, the activation: a re-scan and the whole library embedded with the new model).
    ``on_update(result)`` is called with what is measured so far after each step and epoch (a long run stopped
    early keeps its figures)."""
    update = on_update or (lambda _record: None)
    import resource

    from engine.loop.retrain import RetrainOptions
    from engine.trainercontract import events as trainerevents
    from engine.workspace import Workspace

    home = work / "home"
    os.environ.update(POLYSEEK_HOME=str(home), POLYSEEK_ASSETS=str(assets))
    os.environ.pop("POLYSEEK_STARTER", None)
    result: dict = {"synthetic": True, "items": n, "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    result["library"] = synthetic_library_with_features(n, work / "files", assets, n_real, seed)
    photos = result["library"].pop("photos")
    update(result)
    service = Workspace.open("synthetic", assets)
    start, cpu = time.perf_counter(), time.process_time()
    for _ in service.models.reindex():  # a no-change re-scan, then the starter embeds every item (as after indexing)
        pass
    active = service.state.catalog.active_model()
    result["starter_embedding"] = {"s": round(time.perf_counter() - start, 1),
                                   "cpu_s": round(time.process_time() - cpu, 1), "load": load(),
                                   "model": active.name if active else None}
    queries = dev_captions(n_queries, seed)
    result["query_before"] = _query_figures(service, queries)
    update(result)
    captions = _flickr_first_captions()
    by_photo: dict[str, int] = {}
    for media in service.state.catalog.iter_media("ok"):
        by_photo.setdefault(media.path.name.split("-", 1)[1], media.id)
    chosen = random.Random(seed).sample([p for p in photos if p in by_photo], min(n_annotations, len(photos)))
    for name in chosen:
        service.annotations.add_caption(by_photo[name], captions[name])
    trainer_peak, engine_peak = PeakChildRss(), PeakOwnRss()
    stages: dict[str, dict] = {}
    epochs_at: list[dict] = []
    t0, c0 = time.perf_counter(), time.process_time()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)

    def on_event(event) -> None:
        if isinstance(event, trainerevents.EpochEnd):
            epochs_at.append({"epoch": event.epoch, "at_s": round(time.perf_counter() - t0, 1),
                              "rsum": event.rsum, "best": event.best, "load": load()})
            result["retrain_so_far"] = {"stages": stages, "epoch_ends": epochs_at}
            update(result)

    job = service.models.retrain(RetrainOptions(epochs=epochs), on_event=on_event)

    def run_and_adopt():  # the job, then the rule's choice made active and the library re-indexed (polyseek retrain)
        yield from job.run()
        yield from service.models.adopt(job.result)

    current = None
    for progress in run_and_adopt():
        stage = _stage_of(progress.message)
        if stage != current:
            now, cpu_now = time.perf_counter() - t0, time.process_time() - c0
            if current is not None:
                stages[current].update(end_s=round(now, 1), engine_cpu_end_s=round(cpu_now, 1),
                                       engine_peak_rss_mb=engine_peak.stage_peak())
            else:
                engine_peak.stage_peak()
            stages.setdefault(stage, {"start_s": round(now, 1), "engine_cpu_start_s": round(cpu_now, 1),
                                      "load_at_start": load()})
            current = stage
            result["retrain_so_far"] = {"stages": stages, "epoch_ends": epochs_at}
            update(result)
    wall = time.perf_counter() - t0
    engine_cpu = time.process_time() - c0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    trainer_cpu = (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)
    res = job.result
    ts = res.training_set
    for info in stages.values():
        if "end_s" in info:
            info["wall_s"] = round(info["end_s"] - info["start_s"], 1)
            info["engine_cpu_s"] = round(info["engine_cpu_end_s"] - info["engine_cpu_start_s"], 1)
    result["retrain"] = {
        "annotations": len(chosen), "epochs": res.epochs, "epochs_asked": epochs or "default",
        "wall_s": round(wall, 1), "wall_min": round(wall / 60, 2), "trainer_cpu_s": round(trainer_cpu, 1),
        "engine_cpu_s": round(engine_cpu, 1), "trainer_peak_rss_mb": trainer_peak.stop(),
        "engine_rss_at_start_mb": round(engine_peak.start_mb, 1),
        "engine_peak_rss_mb": engine_peak.stop(), "engine_max_rss_mb_whole_run":
            round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "stages": stages, "epoch_ends": epochs_at, "model": res.model_name, "activated": res.activated,
        "decision": res.decision, "before": res.before and {"rsum": res.before.rsum, "n_media": res.before.n_media},
        "after": res.after and {"rsum": res.after.rsum, "n_media": res.after.n_media},
        "annotated_items": ts.n_annotated_items, "heldout_items": ts.n_heldout_items,
        "unannotated_items": ts.n_unannotated, "unannotated_in_library": ts.n_unannotated_library,
        "load": load()}
    result.pop("retrain_so_far", None)
    update(result)
    result["query_after"] = _query_figures(service, queries)
    service.close()
    result["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    return result


# ------------------------------------------------------------------------------------------- main


def _run_synthetic_retrain(args: argparse.Namespace) -> int:
    if not (FLICKR / "images").is_dir():
        print(f"skipped: {FLICKR} is absent (../shared/datasets/flickr8k)")
        return 0
    from engine.paths import assets_dir

    work = Path(tempfile.mkdtemp(prefix="polyseek-synthetic-retrain-", dir=args.work))
    command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])

    def update(record: dict) -> None:
        print(json.dumps({k: v for k, v in record.items() if k != "library"}, default=str)[-1500:], flush=True)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"synthetic_retrain": {**record, "command": command}}, indent=2,
                                            default=str))

    try:
        record = synthetic_retrain(args.synthetic_retrain, work, Path(os.environ.get("POLYSEEK_ASSETS")
                                                                      or assets_dir()),
                                   args.real_photos, args.annotations, args.retrain_epochs, args.queries,
                                   on_update=update)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    record["command"] = command
    record["machine"] = f"{os.cpu_count()} cores, shared"
    print(json.dumps(record, indent=1, default=str))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"synthetic_retrain": record}, indent=2, default=str))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=3000, help="files in the library")
    parser.add_argument("--json", type=Path, default=None, help="write every figure here")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()), help="where the library goes")
    parser.add_argument("--queries", type=int, default=100, help="text queries (and find-similar examples / 3)")
    parser.add_argument("--annotations", type=int, default=200, help="items captioned before the retrain")
    parser.add_argument("--retrain-epochs", type=int, default=None, help="default: the app's warm-start epochs")
    parser.add_argument("--synthetic", type=int, default=100_000, help="items of the synthetic part (0: skip)")
    parser.add_argument("--skip", nargs="*", default=[],
                        choices=["retrain", "gui", "synthetic", "vector-index"],
                        help="parts not to run (vector-index: the synthetic part's HNSW build, ~0.5 ms a vector)")
    parser.add_argument("--synthetic-retrain", type=int, default=0, metavar="N",
                        help="run only part 8: a retrain over a synthetic N-item library with realistic features")
    parser.add_argument("--real-photos", type=int, default=2000,
                        help="part 8: Flickr8k photos run through the backbone, whose records the N items copy")
    parser.add_argument("--synthetic-only", action="store_true",
                        help="run only part 7 (no Flickr8k needed: the queries fall back to one sentence)")
    parser.add_argument("--keep", action="store_true", help="keep the library and its home afterwards")
    parser.add_argument("--gui-only", action="store_true",
                        help="with --synthetic-only: the N catalog rows and the GUI probe scrolling them, nothing else")
    parser.add_argument("--gui-probe", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--gui-no-query", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.gui_probe:
        return gui_probe(args.gui_probe, args.json, query=not args.gui_no_query)
    if args.synthetic_retrain:
        return _run_synthetic_retrain(args)
    if args.synthetic_only:
        from engine.paths import assets_dir

        work = Path(tempfile.mkdtemp(prefix="polyseek-synthetic-", dir=args.work))
        try:
            record = synthetic(args.synthetic, work, Path(os.environ.get("POLYSEEK_ASSETS") or assets_dir()),
                               with_gui="gui" not in args.skip, with_vector_index="vector-index" not in args.skip,
                               gui_only=args.gui_only)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print(json.dumps(record, indent=1))
        if args.json:
            args.json.write_text(json.dumps({"synthetic": record}, indent=2))
        return 0
    if not (FLICKR / "images").is_dir():
        print(f"skipped: {FLICKR} is absent (../shared/datasets/flickr8k)")
        return 0
    from engine.paths import assets_dir

    assets = Path(os.environ.get("POLYSEEK_ASSETS") or assets_dir())
    os.environ["POLYSEEK_ASSETS"] = str(assets)
    work = Path(tempfile.mkdtemp(prefix=f"polyseek-library-{args.items}-", dir=args.work))
    home, library = work / "home", work / "library"
    os.environ["POLYSEEK_HOME"] = str(home)
    os.environ.pop("POLYSEEK_STARTER", None)
    photos = sorted((FLICKR / "images").iterdir())
    result: dict = {"command": " ".join([Path(sys.argv[0]).name, *(argv or sys.argv[1:])]), "items": args.items,
                    "machine": f"{os.cpu_count()} cores, shared", "started": time.strftime("%Y-%m-%d %H:%M:%S UTC",
                                                                                           time.gmtime())}

    def part(name: str, fn) -> None:
        print(f"-- {name} (load {load()})", flush=True)
        start = time.perf_counter()
        result[name] = fn()
        print(json.dumps(result[name], indent=1, default=str)[:3000], flush=True)
        print(f"   {name}: {time.perf_counter() - start:.1f} s", flush=True)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(result, indent=2, default=str))

    try:
        part("library", lambda: {**make_library(library, args.items, photos), "folder": str(library)})
        from engine.workspace import Workspace

        service = Workspace.open("bench", assets)
        active = service.state.catalog.active_model()
        result["model"] = active.name if active else "zero-shot"
        part("backbone_alone", lambda: backbone_throughput(assets, photos))
        part("first_index", lambda: first_index(service, library, args.items,
                                                result["backbone_alone"]["items_per_s"]))
        part("rescan", lambda: rescans(service, library, args.items))
        examples = sorted(p for p in library.rglob("*") if p.is_file())[:: max(1, args.items // max(1,
                                                                                   args.queries // 3))]
        examples = examples[: max(1, args.queries // 3)]
        part("query", lambda: query_latency(service, dev_captions(args.queries), examples))
        if "retrain" not in args.skip:
            part("retrain", lambda: retrain(service, args.annotations, args.retrain_epochs))
        service.close()
        if "gui" not in args.skip:
            part("gui", lambda: gui(home, "bench", assets))
        service = Workspace.open("bench", assets)
        part("disk", lambda: disk(service, home, args.items))
        service.close()
        if "synthetic" not in args.skip and args.synthetic:
            part("synthetic", lambda: synthetic(args.synthetic, work, assets, with_gui="gui" not in args.skip,
                                                with_vector_index="vector-index" not in args.skip))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    result["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
