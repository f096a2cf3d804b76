"""The GUI entry point: ``polyseek`` with no subcommand, or ``python -m app``.

It configures logging (a rotating file in ``engine.paths.log_dir()``), installs an excepthook that logs and
shows a dialog instead of dying silently, shows the window at once, and opens the library on a worker
thread (the engine's ONNX sessions take a moment to load). On the first start it sets up the demo library
and indexes it in the background. It never imports torch: training runs in its own process.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import logging.handlers
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from PySide6.QtCore import QObject, Signal

from app import qtcompat  # noqa: F401  (binding work-around, before any signal is emitted)
from app.tasks import off_thread, run_application, start
from engine import paths

log = logging.getLogger("app")

LOG_FILE = "polyseek-gui.log"
LOG_BYTES = 2_000_000
LOG_BACKUPS = 3


class LibraryOpenError(Exception):
    """The library (or the demo library) could not be opened; the message says which and why."""


def setup_logging(level: int = logging.INFO) -> Path:
    """Log to a rotating file in the user's log folder (and warnings to stderr); returns the file."""
    folder = paths.log_dir()
    folder.mkdir(parents=True, exist_ok=True)
    log_file = folder / LOG_FILE
    file_handler = logging.handlers.RotatingFileHandler(log_file, maxBytes=LOG_BYTES, backupCount=LOG_BACKUPS,
                                                        encoding="utf-8")
    file_handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s"))
    console = logging.StreamHandler()
    console.setLevel(logging.WARNING)
    root = logging.getLogger()
    root.setLevel(level)
    root.addHandler(file_handler)
    root.addHandler(console)
    return log_file


ShowError = Callable[[str, str], None]


def _show_dialog(title: str, text: str) -> None:
    from PySide6.QtWidgets import QApplication, QMessageBox

    from app.widgets.plaintext import show_message

    if QApplication.instance() is not None:
        show_message(None, QMessageBox.Icon.Critical, title, text)


def install_excepthook(log_file: Path | None, show: ShowError = _show_dialog) -> None:
    """Log every uncaught exception; on the GUI thread also ``show`` it (a message box by default).

    Exceptions on other threads are logged only: a dialog can only be shown from the GUI thread, and the
    app's workers already report their failures as signals.
    """
    showing = threading.Lock()  # an error raised while the dialog is up is logged, not stacked

    def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        if issubclass(kind, KeyboardInterrupt):
            sys.__excepthook__(kind, value, tb)
            return
        log.critical("uncaught exception", exc_info=(kind, value, tb))
        if threading.current_thread() is not threading.main_thread() or not showing.acquire(blocking=False):
            return
        try:
            where = f"\n\nDetails were written to {log_file}" if log_file else ""
            summary = "".join(traceback.format_exception_only(kind, value)).strip()
            show("Polyseek hit an unexpected error", f"{summary}{where}")
        finally:
            showing.release()

    def thread_hook(args: threading.ExceptHookArgs) -> None:
        log.critical("uncaught exception in thread %s", getattr(args.thread, "name", "?"),
                     exc_info=(args.exc_type, args.exc_value, args.exc_traceback))

    sys.excepthook = hook
    threading.excepthook = thread_hook


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="polyseek", description="Search your photos, GIFs and videos.")
    parser.add_argument("--library", default=None, help="library to open (default: the last one opened)")
    parser.add_argument("--no-demo", action="store_true", help="skip the first-start demo library")
    parser.add_argument("--debug", action="store_true", help="log debug messages")
    parser.add_argument("--quit-after", type=float, default=None, metavar="SECONDS",
                        help="quit after this many seconds (smoke tests, screenshots)")
    return parser.parse_args(list(argv) if argv is not None else None)


def open_service(library: str) -> Any:
    """Open the real engine service (on a worker; the engine is imported here to keep start-up fast)."""
    try:
        from engine.workspace import Workspace
    except ImportError as exc:
        raise LibraryOpenError(f"the search engine is not available ({exc})") from exc
    try:
        return Workspace.open(library)
    except Exception as exc:  # noqa: BLE001 - any failure to open is shown to the user with its cause
        raise LibraryOpenError(f"cannot open library {library!r}: {exc}") from exc


def demo_folder() -> Path:
    """The demo library's media folder, created on first use by ``resources.demo``."""
    try:
        from resources.demo import ensure_demo_library
    except ImportError as exc:
        raise LibraryOpenError(f"the demo library is not available ({exc})") from exc
    return Path(ensure_demo_library())


DEMO_ACTIVITY = "Preparing the demo library (sample photos, GIFs and a video), then indexing it…"


class Startup(QObject):
    """Opens the library off the GUI thread, hands it to the window, and sets up the demo on first start.

    It is a child of the window, so it lives as long as the window does; a reply that arrives after that is
    dropped (:func:`app.tasks.off_thread` cancels the waiting coroutine instead of resuming it).
    """

    opened = Signal()  # the window has its library

    def __init__(self, window: Any, library: str, offer_demo: bool,
                 opener: Callable[[str], Any] = open_service, demo: Callable[[], Path] = demo_folder) -> None:
        super().__init__(window)
        self.window, self.library, self.offer_demo = window, library, offer_demo
        self._opener, self._demo = opener, demo

    def start(self) -> asyncio.Task[None]:
        """Open the library off the GUI thread and show it; then, on a first start, the demo (:mod:`app.tasks`)."""
        return start(self._open())

    async def _open(self) -> None:
        try:
            service = await off_thread(self, self._opener, self.library, pool=self.window.pool)
        except Exception as exc:  # noqa: BLE001 - shown to the user with its cause
            log.error("opening library %s failed: %s", self.library, exc)
            self.window.show_error("Cannot open the library", str(exc))
            return
        log.info("library %s opened", self.library)
        self.window.set_service(service)
        self.opened.emit()
        self.window.settings.library = self.library
        if self.offer_demo and not self.window.settings.demo_offered:
            await self._offer_demo(service)

    async def _offer_demo(self, service: Any) -> None:
        # the grid says what is happening, not that the library is empty (issue #32)
        self.window.state.set_activity(DEMO_ACTIVITY)
        try:
            folder = await off_thread(self, self._add_demo, service, pool=self.window.pool)
        except Exception as exc:  # noqa: BLE001 - said to the user; the demo is offered again next start
            log.error("demo library: %s", exc)
            self.window.state.set_activity("")
            self.window.statusBar().showMessage(f"Demo library unavailable: {exc}", 15000)
            return
        self.window.settings.demo_offered = True
        if self.window.state.activity == DEMO_ACTIVITY:
            self.window.state.set_activity("")
        if folder is not None:
            self.window.library.refresh()
            self.window.library.index([folder])
            self.window.statusBar().showMessage(f"Indexing the demo library in {folder}…", 8000)

    def _add_demo(self, service: Any) -> Path | None:
        if service.library.roots():  # the user already has folders: the demo would only get in the way
            return None
        folder = self._demo()
        service.library.add_root(folder)
        return folder


def bring_forward(window: Any) -> None:
    """Show ``window`` in front, restored if it was minimised (a second start asked for it)."""
    if window.isMinimized():
        window.showNormal()
    window.show()
    window.raise_()
    window.activateWindow()


def main(argv: Sequence[str] | None = None) -> int:
    """Start the desktop application; returns the process exit code."""
    args = parse_args(argv)
    log_file = setup_logging(logging.DEBUG if args.debug else logging.INFO)
    install_excepthook(log_file)
    from app.platformcheck import EXIT_MISSING_LIBRARIES, startup_problem

    problem = startup_problem()  # said in words, before Qt aborts with "Could not load the Qt platform plugin"
    if problem is not None:
        log.error("%s", problem)  # stderr too (the console handler)
        return EXIT_MISSING_LIBRARIES
    from PySide6.QtWidgets import QApplication

    from app.collector import collect_on_gui_thread
    from app.mainwindow import MainWindow
    from app.settings import GuiSettings
    from app.singleinstance import InstanceServer, ask_running_window, server_name

    app = QApplication.instance() or QApplication(sys.argv[:1])
    name = server_name(paths.home())
    if ask_running_window(name):  # one window per home (app/singleinstance.py): the open one comes forward
        log.warning("Polyseek is already open on %s: its window was brought to the front", paths.home())
        return 0
    collect_on_gui_thread(app)  # a pool thread must never free the window's widgets (app/collector.py)
    app.setApplicationName("Polyseek")
    app.setOrganizationName("Polyseek")
    settings = GuiSettings()
    window = MainWindow(settings)
    guard = InstanceServer(name, window)
    guard.raise_requested.connect(lambda: bring_forward(window))
    guard.listen()
    window.show()
    startup = Startup(window, args.library or settings.library, offer_demo=not args.no_demo)
    # What exists once the library is open (modules, the engine, the widgets) lives as long as the app: Python's
    # full garbage collections need not walk it again each time (they grew long enough to stall the GUI).
    startup.opened.connect(gc.freeze)
    startup.start()
    log.info("window shown; opening library in the background")
    if args.quit_after is not None:
        from PySide6.QtCore import QTimer

        QTimer.singleShot(int(args.quit_after * 1000), app.quit)
    code = run_application()  # Qt's event loop, asyncio's running loop too (app/tasks.py)
    guard.close()  # a start from now on opens its own window, while this one finishes closing
    window.shutdown()  # app.quit() without a close event must still stop and wait for the workers
    close = getattr(window.service, "close", None)
    if callable(close):  # the workers are done (closeEvent waited): release the catalog cleanly
        close()
    return code
