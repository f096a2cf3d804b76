"""GUI test setup: headless Qt, an isolated Polyseek home (settings, logs, caches), a fake service."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before anything imports Qt

from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from app import qtcompat  # noqa: E402, F401  (PySide6 emit() work-around, before any signal)
from app.collector import collect_on_gui_thread  # noqa: E402
from tests.gui.fakes import FakeService, make_media_folder  # noqa: E402


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own Polyseek home, so settings and logs never touch the developer's."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("POLYSEEK_HOME", str(home))
    return home


@pytest.fixture(autouse=True)
def gui_thread_collection(qapp) -> Iterator[None]:
    """As in the app (app.main): Python's cycles are collected on the GUI thread, never by a pool thread that
    happens to allocate (app/collector.py); the interpreter collects again once the test is over."""
    collector = collect_on_gui_thread(qapp)
    yield
    collector.stop()


@pytest.fixture
def media_folder(tmp_path: Path) -> Path:
    return make_media_folder(tmp_path / "media")


def indexed_service(store: Path, *folders: Path) -> FakeService:
    """A fake service (its files under ``store``) with ``folders`` added and indexed."""
    fake = FakeService(store)
    for folder in folders:
        fake.add_root(folder)
    for _ in fake.index_paths():
        pass
    return fake


def shown_window(qtbot, service: FakeService):
    """A main window over ``service``, shown; the caller shuts it down (``window.shutdown()``)."""
    from app.mainwindow import MainWindow
    from app.settings import GuiSettings

    win = MainWindow(GuiSettings(), service)
    qtbot.addWidget(win)
    win.show()
    return win


@pytest.fixture
def service(tmp_path: Path, media_folder: Path) -> FakeService:
    """A fake service with the media folder added and indexed."""
    return indexed_service(tmp_path / "fake", media_folder)


@pytest.fixture
def window(qtbot, service: FakeService) -> Iterator:
    """A main window over the indexed fake service, closed (and its workers drained) after the test."""
    win = shown_window(qtbot, service)
    yield win
    win.shutdown()
