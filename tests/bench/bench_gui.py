"""GUI responsiveness: time to a visible window, and the worst event-loop stall while indexing and training.

    QT_QPA_PLATFORM=offscreen python tests/bench/bench_gui.py [--n 300] [--only training] [--out bench-results/gui.json]

(1) Launch ``python -m app --no-demo --quit-after 1`` five times and read the "window shown" instant from the
log against the process start: median seconds to a visible window, and whether torch was imported (it must not
be). (2) In-process: the real ``Workspace`` indexes ``--n`` generated photos through the main window's
library panel while a 5 ms QTimer measures how late each tick fires; the worst delay is the worst stall.
(3) The training dialog runs the real trainer (``python -m trainer train``, ``test`` preset, CPU) on a generated
caption folder of ``--train-items`` photos for ``--epochs`` epochs while the same probe runs: the GUI process
parses every JSON progress line and redraws both plots, and that must never stall the event loop (target:
worst < 50 ms). (4) Resident memory (VmRSS) of the GUI process through a real session
(``tools/gui_memory.py``, a fresh process each): with the demo library, and with ``--memory-items`` generated
tiny distinct photos (default 10,000), the grid scrolled to the end of the library (target: peak under
:data:`MEMORY_TARGET_MB` in both). ``--only`` runs one part and merges it into the existing result file.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, deque
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
MEMORY_TARGET_MB = 1024  # the GUI process's peak VmRSS, with the demo library and with 10,000 items


def time_to_window(runs: int = 5) -> dict:
    seconds = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as home:
            env = {**os.environ, "POLYSEEK_HOME": home, "QT_QPA_PLATFORM": os.environ.get("QT_QPA_PLATFORM",
                                                                                            "offscreen")}
            code = ("import time, sys; t0 = time.perf_counter(); import app.main as m; "
                    "from PySide6.QtCore import QTimer; "
                    "QTimer.singleShot(0, lambda: (print('shown', time.perf_counter() - t0, 'torch' in sys.modules),"
                    " sys.stdout.flush())); sys.exit(m.main(['--no-demo', '--quit-after', '1']))")
            start = time.perf_counter()
            out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=REPO)
            wall = time.perf_counter() - start
            line = next(ln for ln in out.stdout.splitlines() if ln.startswith("shown"))
            _, in_process, torch = line.split()
            seconds.append({"in_process_s": float(in_process), "torch_imported": torch == "True", "wall_s": wall})
    return {"median_in_process_s": statistics.median(s["in_process_s"] for s in seconds),
            "torch_imported": any(s["torch_imported"] for s in seconds), "runs": seconds}


class StackSampler(threading.Thread):
    """Samples the GUI thread's Python stack every ``interval_s``, so a long event-loop pass can say what it was
    doing: :meth:`during` names the most frequent places (the innermost frame of the repository's own code, and
    the innermost frame of all) among the samples of a time window."""

    def __init__(self, interval_s: float = 0.002) -> None:
        super().__init__(daemon=True)
        self.interval_s, self.thread_id = interval_s, threading.get_ident()
        self.samples: deque[tuple[float, str]] = deque(maxlen=20_000)
        self._stop = threading.Event()
        self.start()

    def run(self) -> None:
        while not self._stop.is_set():
            frame = sys._current_frames().get(self.thread_id)
            if frame is not None:
                self.samples.append((time.perf_counter(), _where(frame)))
            time.sleep(self.interval_s)

    def stop(self) -> None:
        self._stop.set()

    def during(self, start: float, end: float, top: int = 3) -> list[tuple[str, int]]:
        return Counter(where for at, where in list(self.samples) if start < at <= end).most_common(top)


def _where(frame) -> str:
    innermost, ours = f"{Path(frame.f_code.co_filename).name}:{frame.f_code.co_name}", None
    while frame is not None and ours is None:
        name = frame.f_code.co_filename
        if f"{REPO}/app/" in name or f"{REPO}/engine/" in name:
            ours = f"{Path(name).relative_to(REPO)}:{frame.f_code.co_name}:{frame.f_lineno}"
        frame = frame.f_back
    return f"{ours} | {innermost}"


class StallProbe:
    """A QTimer due every ``interval_ms``; how late each tick fires is how long the event loop was blocked.

    Each delay is also split by cause: the GUI thread's own CPU time between two ticks (``busy``: work done
    on the event loop, which this app must keep short) versus the rest (the process waiting for a CPU, which
    on a loaded machine is the operating system's doing, not the app's). With ``sample_stacks`` a
    :class:`StackSampler` names what the GUI thread was doing in each pass that worked over 50 ms.
    """

    def __init__(self, interval_ms: int = 5, sample_stacks: bool = False) -> None:
        from PySide6.QtCore import QElapsedTimer, QTimer

        self.interval_ms = interval_ms
        self.delays: list[float] = []
        self.busy: list[float] = []
        self.worst: list[tuple[float, float, float]] = []  # (at s, delay ms, busy ms) of delays over 50 ms
        self.busiest: list[tuple[float, float]] = []  # (at s, busy ms) of the ticks the GUI thread worked > 50 ms
        self._clock = QElapsedTimer()
        self._clock.start()
        self._last = self._clock.elapsed()
        self._last_cpu = time.thread_time()
        self._sampler = StackSampler() if sample_stacks else None
        self._last_wall = time.perf_counter()
        self.busy_where: list[tuple[float, list[tuple[str, int]]]] = []  # (at s, most sampled places) of those passes
        self._timer = QTimer()
        self._timer.timeout.connect(self._tick)
        self._timer.start(interval_ms)

    def _tick(self) -> None:
        now, cpu, wall = self._clock.elapsed(), time.thread_time(), time.perf_counter()
        delay, busy = now - self._last - self.interval_ms, (cpu - self._last_cpu) * 1000
        self.delays.append(delay)
        self.busy.append(busy)
        if delay > 50:
            self.worst.append((now / 1000, delay, round(busy, 1)))
        if busy > 50:
            self.busiest.append((now / 1000, round(busy, 1)))
            if self._sampler is not None:
                self.busy_where.append((now / 1000, self._sampler.during(self._last_wall, wall)))
        self._last, self._last_cpu, self._last_wall = now, cpu, wall

    def stop(self) -> dict:
        """Stop and summarise: ticks, worst and 99th-percentile delay and GUI-thread busy time in ms."""
        self._timer.stop()
        if self._sampler is not None:
            self._sampler.stop()
        ordered, busy = sorted(self.delays), sorted(self.busy)
        return {"ticks": len(ordered), "worst_stall_ms": ordered[-1],
                "p99_stall_ms": ordered[int(0.99 * (len(ordered) - 1))],
                "worst_gui_busy_ms": round(busy[-1], 1), "p99_gui_busy_ms": round(busy[int(0.99 * (len(busy) - 1))], 1),
                "stalls_over_50ms": [list(w) for w in self.worst[:20]], "busy_over_50ms_count": len(self.busiest),
                "busy_over_50ms": [list(b) for b in self.busiest[:20]],
                **({"busy_over_50ms_where": [[at, [list(p) for p in where]] for at, where in self.busy_where[:40]]}
                   if self._sampler is not None else {})}


def stall_while_indexing(n: int) -> dict:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PIL import Image, ImageDraw
    from PySide6.QtWidgets import QApplication

    import app.qtcompat  # noqa: F401
    from app.collector import collect_on_gui_thread
    from app.mainwindow import MainWindow
    from app.settings import GuiSettings
    from engine.workspace import Workspace

    home = tempfile.mkdtemp()
    os.environ["POLYSEEK_HOME"] = home
    folder = Path(home) / "photos"
    folder.mkdir()
    for i in range(n):
        img = Image.new("RGB", (320, 240), ((i * 37) % 255, (i * 91) % 255, (i * 53) % 255))
        ImageDraw.Draw(img).ellipse([40 + i % 50, 30, 200, 190], fill=((i * 11) % 255, 80, 160))
        img.save(folder / f"p{i:04d}.jpg")
    app = QApplication.instance() or QApplication([])
    collect_on_gui_thread(app)  # as app.main does (app/collector.py)
    service = Workspace.open("bench", Path(os.environ["POLYSEEK_ASSETS"]) if "POLYSEEK_ASSETS" in os.environ
                                 else None)
    window = MainWindow(GuiSettings(), service)
    window.show()
    probe = StallProbe()
    start = time.perf_counter()
    window.library.index([folder])
    while window.library._job is not None:
        app.processEvents()
        time.sleep(0.001)
    elapsed = time.perf_counter() - start
    stalls = probe.stop()
    window.shutdown()
    service.close()
    return {"items": n, "index_s": elapsed, **stalls}


def stall_while_training(n_items: int, epochs: int) -> dict:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    import app.qtcompat  # noqa: F401
    from app.collector import collect_on_gui_thread
    from app.widgets.training import TrainingDialog
    from tests.synthetic import make_toy_photo_folder

    home = tempfile.mkdtemp()
    os.environ["POLYSEEK_HOME"] = home
    if "POLYSEEK_ASSETS" not in os.environ and (REPO / ".cache" / "test-assets").is_dir():
        os.environ["POLYSEEK_ASSETS"] = str(REPO / ".cache" / "test-assets")
    folder = Path(home) / "toy"
    make_toy_photo_folder(folder, n_items, seed=3, dev_fraction=0.25)
    app = QApplication.instance() or QApplication([])
    collect_on_gui_thread(app)  # as app.main does (app/collector.py)
    extra = ("--preset", "test", "--batch-size", "8", "--patience", "100000", "--schedule", "constant")
    dialog = TrainingDialog([sys.executable, "-m", "trainer"], Path(home) / "models", str(folder), extra_args=extra)
    dialog.device.setCurrentText("cpu")
    dialog.method.setCurrentText("pvse")
    dialog.epochs.setValue(epochs)
    dialog.show()
    settle = time.perf_counter() + 0.5  # the first paint of the window is not part of training
    while time.perf_counter() < settle:
        app.processEvents()
        time.sleep(0.005)
    probe = StallProbe()
    start = time.perf_counter()
    dialog.start()
    while dialog.state == "running":
        app.processEvents()
        time.sleep(0.001)
    elapsed = time.perf_counter() - start
    stalls = probe.stop()
    outcome = dialog.state
    dialog.close()
    if outcome != "done":
        raise RuntimeError(f"training ended {outcome}: {dialog.log_view.toPlainText()[-2000:]}")
    return {"method": "pvse", "preset": "test", "items": n_items, "epochs": epochs, "train_s": elapsed,
            "loss_points": len(dialog.losses), "epoch_points": len(dialog.rsums), **stalls,
            "target_worst_stall_ms": 50, "load_average_1min": os.getloadavg()[0], "cpus": os.cpu_count()}


def tiny_photos(folder: Path, n: int) -> Path:
    """``n`` distinct 64 x 48 JPEGs (a colour and a disc that move with the index: no two share a hash)."""
    from PIL import Image, ImageDraw

    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        img = Image.new("RGB", (64, 48), ((i * 37) % 256, (i * 91) % 256, (i * 53) % 256))
        ImageDraw.Draw(img).ellipse([i % 40, (i // 40) % 24, i % 40 + 20, (i // 40) % 24 + 20],
                                    fill=((i * 11) % 256, 255 - (i * 7) % 256, (i // 256) % 256))
        img.save(folder / f"p{i:05d}.jpg", quality=90)
    return folder


def gui_memory(n_items: int) -> dict:
    """VmRSS stages of ``tools/gui_memory.py`` over the demo library and over ``n_items`` tiny photos."""
    home = Path(tempfile.mkdtemp(prefix="polyseek-bench-memory-"))
    env = {**os.environ, "POLYSEEK_HOME": str(home), "QT_QPA_PLATFORM": "offscreen"}
    demo = subprocess.run([sys.executable, "-c", "from resources.demo import ensure_demo_library as d; print(d())"],
                          env=env, capture_output=True, text=True, cwd=REPO, check=True).stdout.strip()
    runs = {}
    for label, folder in (("demo library", Path(demo)), (f"{n_items} items", tiny_photos(home / "tiny", n_items))):
        out = home / "stages.json"
        start = time.perf_counter()
        subprocess.run([sys.executable, str(REPO / "tools" / "gui_memory.py"), str(folder), "--browse-all",
                        "--out", str(out)], env=env, cwd=REPO, check=True)
        record = json.loads(out.read_text())
        runs[label] = {"stages_mb": dict(record["stages"]), "peak_mb": record["peak_mb"],
                       "within_target": record["peak_mb"] < MEMORY_TARGET_MB,
                       "session_s": round(time.perf_counter() - start, 1)}
    shutil.rmtree(home, ignore_errors=True)
    return {"sessions": runs, "target_peak_mb": MEMORY_TARGET_MB, "cpus": os.cpu_count(),
            "load_average_1min": os.getloadavg()[0]}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=300, help="photos to index")
    parser.add_argument("--train-items", type=int, default=64, help="photos in the training folder")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--memory-items", type=int, default=10_000, help="generated photos for the memory run")
    parser.add_argument("--only", choices=["window", "indexing", "training", "memory"], default=None,
                        help="run one part and merge it into --out")
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "gui.json")
    args = parser.parse_args()
    parts = {"time_to_window": lambda: time_to_window(), "indexing": lambda: stall_while_indexing(args.n),
             "training": lambda: stall_while_training(args.train_items, args.epochs),
             "memory": lambda: gui_memory(args.memory_items)}
    chosen = {"window": ["time_to_window"], "indexing": ["indexing"], "training": ["training"],
              "memory": ["memory"]}.get(
        args.only, list(parts))
    result = json.loads(args.out.read_text()) if args.only and args.out.is_file() else {}
    for name in chosen:
        result[name] = parts[name]()
    print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "runs"} for k, v in result.items()}, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
