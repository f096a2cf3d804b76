"""The entry point: no torch, errors are logged and shown, the library opens in the background."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from app import main as app_main
from app.mainwindow import MainWindow
from app.settings import GuiSettings, settings_file
from engine.workspace import Workspace
from tests.standins import make_media_folder

REPO = Path(__file__).resolve().parents[2]


def test_the_gui_never_imports_torch() -> None:
    code = ("import sys, app.main, app.mainwindow, app.widgets.training; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=60)


def test_excepthook_logs_and_shows_the_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)
    shown: list[tuple[str, str]] = []
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logging.getLogger("app").addHandler(handler)
    try:
        app_main.install_excepthook(tmp_path / "gui.log",
                                    show=lambda title, text: shown.append((title, text)))
        try:
            raise ValueError("bad thing in a slot")
        except ValueError as exc:
            sys.excepthook(type(exc), exc, exc.__traceback__)
    finally:
        logging.getLogger("app").removeHandler(handler)
    assert len(shown) == 1 and "ValueError: bad thing in a slot" in shown[0][1]
    assert str(tmp_path / "gui.log") in shown[0][1]
    assert records and records[0].exc_info is not None


def test_setup_logging_writes_to_the_home_log_folder(isolated_home: Path) -> None:
    root = logging.getLogger()
    before = list(root.handlers)
    try:
        log_file = app_main.setup_logging()
        logging.getLogger("app.test").warning("hello log")
        for handler in root.handlers:
            handler.flush()
        assert log_file.parent == isolated_home / "logs"
        assert "hello log" in log_file.read_text()
    finally:
        for handler in set(root.handlers) - set(before):
            root.removeHandler(handler)
            handler.close()


def test_open_service_names_the_missing_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "engine.workspace", None)  # makes the import fail
    with pytest.raises(app_main.LibraryOpenError, match="search engine is not available"):
        app_main.open_service("default")


def test_first_start_opens_the_library_and_indexes_the_demo(qtbot, tmp_path: Path) -> None:
    from tests.gui.conftest import open_workspace

    fake = open_workspace("default", models=False)
    demo = make_media_folder(tmp_path / "demo", n_images=3, n_gifs=1, video=False, broken=False)
    window = MainWindow(GuiSettings())
    qtbot.addWidget(window)
    assert window.service is None and not window.search_bar.isEnabled()
    with qtbot.waitSignal(window.library.indexing_finished, timeout=5000):
        app_main.Startup(window, "default", True, opener=lambda name: fake, demo=lambda: demo).start()
    assert window.service is fake and window.search_bar.isEnabled()
    assert fake.library.roots() == [demo.resolve()]
    assert fake.library.counts() == {"image": 3, "animation": 1, "failed": 0, "pending": 0, "missing": 0, "total": 4}
    assert window.settings.demo_offered
    window.shutdown()
    fake.close()


def test_failing_to_open_shows_the_reason(qtbot, monkeypatch: pytest.MonkeyPatch) -> None:
    shown: list[str] = []
    monkeypatch.setattr("app.mainwindow.show_message", lambda parent, icon, title, text: shown.append(text))
    window = MainWindow(GuiSettings())
    qtbot.addWidget(window)

    def opener(name: str):
        raise app_main.LibraryOpenError(f"cannot open library {name!r}: assets missing")

    app_main.Startup(window, "photos", True, opener=opener).start()
    qtbot.waitUntil(lambda: bool(shown), timeout=3000)
    assert "'photos'" in shown[0] and "assets missing" in window.empty_label.text()
    window.shutdown()


def test_window_state_persists_in_the_isolated_home(qtbot, isolated_home: Path, service: Workspace) -> None:
    first = MainWindow(GuiSettings(), service)
    qtbot.addWidget(first)
    first.resize(700, 500)
    first.search_bar.cutoff.setValue(40)
    first.splitter.setSizes([200, 500, 300])
    first.close()
    assert settings_file() == isolated_home / "gui.ini" and settings_file().exists()
    second = MainWindow(GuiSettings(), service)
    qtbot.addWidget(second)
    assert (second.size().width(), second.size().height()) == (700, 500)
    assert second.search_bar.cutoff.value() == 40
    second.shutdown()


def test_parse_args() -> None:
    args = app_main.parse_args(["--library", "photos", "--no-demo"])
    assert args.library == "photos" and args.no_demo and not args.debug
