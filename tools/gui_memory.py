"""Measure the GUI process's resident memory (VmRSS) through a real session: the window, the real engine over
a folder of media, indexing it, browsing, a text search, inspecting results, a search by example.

    POLYSEEK_ASSETS=... python tools/gui_memory.py FOLDER --out bench-results/gui-memory.json

It runs offscreen in a temporary ``POLYSEEK_HOME`` (the assets are read from ``POLYSEEK_ASSETS`` or the usual
place) and prints one line per stage, plus the peak sampled every 50 ms. Linux only (/proc/self/status).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def rss_mb() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="media to index (e.g. ~90 photos and GIFs)")
    parser.add_argument("--out", type=Path, default=None, help="write the stages as JSON here")
    parser.add_argument("--browse-all", action="store_true",
                        help="after indexing, scroll the library's grid to its end (every item loaded as a row)")
    args = parser.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    if "POLYSEEK_ASSETS" not in os.environ:
        from engine import paths

        os.environ["POLYSEEK_ASSETS"] = str(paths.assets_dir())
    os.environ["POLYSEEK_HOME"] = tempfile.mkdtemp(prefix="polyseek-memory-")
    stages: list[tuple[str, int]] = []
    peak = [0]

    def sample() -> None:
        while True:
            peak[0] = max(peak[0], rss_mb())
            time.sleep(0.05)

    threading.Thread(target=sample, daemon=True).start()

    def mark(name: str) -> None:
        stages.append((name, rss_mb()))
        print(f"{name:42s} {stages[-1][1]:6d} MB", flush=True)

    mark("python started")
    from PySide6.QtWidgets import QApplication

    from app import qtcompat  # noqa: F401
    from app.collector import collect_on_gui_thread
    from app.main import open_service
    from app.mainwindow import MainWindow
    from app.settings import GuiSettings

    app = QApplication([])
    collect_on_gui_thread(app)  # as app.main does (app/collector.py)

    def wait(done: Callable[[], bool], timeout_s: float = 900) -> None:
        end = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() > end:
                raise TimeoutError("a stage did not finish")
            app.processEvents()
            time.sleep(0.01)

    def settle(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            app.processEvents()
            time.sleep(0.01)

    window = MainWindow(GuiSettings())
    window.show()
    settle(0.5)
    mark("window shown")
    service = open_service("default")
    window.set_service(service)
    wait(lambda: not window.results_model.is_loading)
    mark("library opened")
    service.library.add_root(args.folder.resolve())
    window.library.refresh()
    window.library.index([args.folder.resolve()])
    wait(lambda: window.library.is_indexing)
    wait(lambda: not window.library.is_indexing)
    wait(lambda: window.results_model.rowCount() > 0 and not window.results_model.is_loading)
    mark(f"indexed {service.library.counts()['total']} items")
    if args.browse_all:
        model = window.results_model
        while model.canFetchMore() or model.is_loading:
            model.fetchMore()
            app.processEvents()
            time.sleep(0.001)
        mark(f"browsed to the end ({model.rowCount()} rows)")
    ids = [window.results_model.hit(r).media_id for r in range(min(40, window.results_model.rowCount()))]
    for media_id in ids:
        window.thumbnails.thumbnail(media_id)
    wait(lambda: all(i in window.thumbnails._thumbs for i in ids))
    mark("40 thumbnails shown")
    window.search_bar.edit.setText("a dog running on the grass")
    window.search_bar.submit()
    wait(lambda: window.results_model.rowCount() > 0 and not window.results_model.is_loading)
    mark("text search")
    for row in range(12):
        window.results.select_row(row)
        settle(1.0)
    mark("12 results inspected")
    window.search_bar.search_example(Path(window.results_model.hit(0).path))
    wait(lambda: window.results_model.rowCount() > 0 and not window.results_model.is_loading)
    mark("search by example")
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    mark("after malloc_trim (freed but unreturned heap)")
    print(f"{'peak':42s} {peak[0]:6d} MB")
    if args.out is not None:
        args.out.write_text(json.dumps({"stages": stages, "peak_mb": peak[0]}, indent=2) + "\n")
    window.close()
    service.close()
    shutil.rmtree(os.environ["POLYSEEK_HOME"], ignore_errors=True)  # its library and features (GBs at 10,000)
    return 0


if __name__ == "__main__":
    sys.exit(main())
