"""GUI responsiveness: time to a visible window, and the worst event-loop stall while indexing for real.

    QT_QPA_PLATFORM=offscreen python tests/bench/bench_gui.py [--n 300] [--out bench-results/gui.json]

(1) Launch ``python -m app --no-demo --quit-after 1`` five times and read the "window shown" instant from the
log against the process start: median seconds to a visible window, and whether torch was imported (it must not
be). (2) In-process: the real ``SearchService`` indexes ``--n`` generated photos through the main window's
library panel while a 5 ms QTimer measures how late each tick fires; the worst delay is the worst stall.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


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


def stall_while_indexing(n: int) -> dict:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PIL import Image, ImageDraw
    from PySide6.QtCore import QElapsedTimer, QTimer
    from PySide6.QtWidgets import QApplication

    import app.qtcompat  # noqa: F401
    from app.mainwindow import MainWindow
    from app.settings import GuiSettings
    from engine.service import SearchService

    home = tempfile.mkdtemp()
    os.environ["POLYSEEK_HOME"] = home
    folder = Path(home) / "photos"
    folder.mkdir()
    for i in range(n):
        img = Image.new("RGB", (320, 240), ((i * 37) % 255, (i * 91) % 255, (i * 53) % 255))
        ImageDraw.Draw(img).ellipse([40 + i % 50, 30, 200, 190], fill=((i * 11) % 255, 80, 160))
        img.save(folder / f"p{i:04d}.jpg")
    app = QApplication.instance() or QApplication([])
    service = SearchService.open("bench", Path(os.environ["POLYSEEK_ASSETS"]) if "POLYSEEK_ASSETS" in os.environ
                                 else None)
    window = MainWindow(GuiSettings(), service)
    window.show()
    delays: list[float] = []
    clock = QElapsedTimer()
    clock.start()
    last = [clock.elapsed()]

    def tick() -> None:
        now = clock.elapsed()
        delays.append(now - last[0] - 5)
        last[0] = now

    probe = QTimer()
    probe.timeout.connect(tick)
    probe.start(5)
    start = time.perf_counter()
    window.library.index([folder])
    while window.library._job is not None:
        app.processEvents()
        time.sleep(0.001)
    elapsed = time.perf_counter() - start
    probe.stop()
    window.shutdown()
    service.close()
    ordered = sorted(delays)
    return {"items": n, "index_s": elapsed, "ticks": len(delays), "worst_stall_ms": ordered[-1],
            "p99_stall_ms": ordered[int(0.99 * (len(ordered) - 1))]}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "gui.json")
    args = parser.parse_args()
    result = {"time_to_window": time_to_window(), "indexing": stall_while_indexing(args.n)}
    print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "runs"} for k, v in result.items()}, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
