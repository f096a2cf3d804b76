"""The first search after a start (issue #44 point 19): how long the user waits for the first page of results, and
the GUI process's memory, in a real window over an indexed library.

    QT_QPA_PLATFORM=offscreen POLYSEEK_HOME=DIR python tests/bench/bench_first_search.py [--library default]
        [--settle 8] [--no-warm] [--index FOLDER ...] [--out bench-results/first-search.json]

The window opens the library as the app does; ``--settle`` seconds later (a person reading the window) a sentence is
searched through the search box and the time to its first page is taken; then 20 more searches. ``--no-warm``
turns the background warm-up off (:meth:`engine.workspace.search.Search.warm`), the app before it. Reported:
the first search's seconds, the median of the next 20, resident memory (VmRSS) after opening, after the first
search and after the 20. ``--index`` first adds the folders to the (new, empty) library through the window and
indexes them there, as a user does, and adds the indexing's seconds and the memory after it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tools.gui_memory import rss_mb  # noqa: E402  (the GUI process's resident memory, as tools/gui_memory.py reads it)

QUERIES = ("a man is cooking in a kitchen", "a dog running on the grass", "people dancing on a stage",
           "a red car parked on the street", "children playing in the snow", "a cartoon character is running",
           "a woman singing into a microphone", "a bowl of fruit on a table", "two men playing basketball",
           "a city skyline at night", "a cat sleeping on a sofa", "a boat on a lake", "a group of people hiking",
           "a plate of food", "a man riding a bicycle", "a girl with a balloon", "waves crashing on the beach",
           "a person giving a speech", "a bird on a branch", "a crowd at a concert", "a horse in a field")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--library", default="default")
    parser.add_argument("--settle", type=float, default=8.0)
    parser.add_argument("--no-warm", action="store_true")
    parser.add_argument("--index", type=Path, nargs="+", help="folders to add and index through the window first")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([])
    from app.mainwindow import MainWindow
    from app.settings import GuiSettings
    from engine.workspace import Search, Workspace

    if args.no_warm:
        Search.warm = lambda self, cancel=None: False
    from app.collector import collect_on_gui_thread

    collect_on_gui_thread(app)  # as app.main does
    window = MainWindow(GuiSettings())
    window.show()
    window.set_service(Workspace.open(args.library, None))

    def wait(condition, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not condition() and time.monotonic() < end:
            app.processEvents()
            time.sleep(0.005)

    indexing: dict[str, float] = {}
    if args.index:
        wait(lambda: window.service is not None and window.state.snapshot is not None, 30)
        finished: list[int] = []
        window.library.indexing_finished.connect(lambda *_: finished.append(1))
        started = time.monotonic()
        for folder in args.index:
            window.service.library.add_root(folder.resolve())
        window.library.index([folder.resolve() for folder in args.index])
        wait(lambda: bool(finished), 7200)
        indexing = {"indexing_s": round(time.monotonic() - started, 1), "rss_after_indexing_mb": rss_mb()}
    wait(lambda: False, args.settle)
    opened = rss_mb()
    times = []
    for query in QUERIES:
        loaded = []
        window.results_model.page_loaded.connect(lambda _n, box=loaded: box.append(1))
        started = time.monotonic()
        window.search(query)
        wait(lambda box=loaded: bool(box), 60)
        times.append(time.monotonic() - started)
        window.results_model.page_loaded.disconnect()
        if len(times) == 1:
            first_rss = rss_mb()
    record = {"items": window.state.snapshot.indexed, "warm": not args.no_warm, "settle_s": args.settle,
              "first_search_s": round(times[0], 2), "next_20_median_s": round(statistics.median(times[1:]), 3),
              "rss_mb": {"opened": opened, "after_first_search": first_rss, "after_21_searches": rss_mb()},
              **indexing}
    print(json.dumps(record))
    if args.out is not None:
        rows = json.loads(args.out.read_text()) if args.out.is_file() else []
        args.out.write_text(json.dumps([*rows, record], indent=1) + "\n")
    window.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
