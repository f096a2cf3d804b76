"""#44 (point 8): on a system without the X11 libraries Qt's xcb plugin needs, `polyseek` says in words what is
missing and the one command that installs it, and exits non-zero, instead of Qt's "Could not load the Qt
platform plugin 'xcb'" abort."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest

from app import main as app_main
from app import platformcheck

REPO = Path(__file__).resolve().parents[2]
ABSENT = {"xcb-cursor", "xcb-icccm", "xcb-keysyms"}  # what a bare Debian lacks


def lookup_without(absent: set[str]):
    return lambda name: None if name in absent else f"lib{name}.so.1"


def test_missing_xcb_libraries_are_named_with_their_packages_and_the_one_command() -> None:
    problem = platformcheck.startup_problem({"DISPLAY": ":0"}, find=lookup_without(ABSENT), platform="linux")
    assert problem is not None
    for library in ("libxcb-cursor.so", "libxcb-icccm.so", "libxcb-keysyms.so"):
        assert library in problem
    assert "apt-get install -y libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1" in problem
    assert "libxcb1" not in problem  # only what is missing


def test_nothing_is_said_when_qt_will_not_use_xcb_or_has_everything() -> None:
    missing = lookup_without(ABSENT)
    assert platformcheck.startup_problem({"DISPLAY": ":0"}, find=lambda n: "x", platform="linux") is None
    assert platformcheck.startup_problem({"DISPLAY": ":0", "QT_QPA_PLATFORM": "offscreen"}, find=missing,
                                         platform="linux") is None
    assert platformcheck.startup_problem({}, find=missing, platform="linux") is None  # no X display
    assert platformcheck.startup_problem({"DISPLAY": ":0"}, find=missing, platform="darwin") is None
    wayland = {"DISPLAY": ":0", "WAYLAND_DISPLAY": "wayland-0", "XDG_SESSION_TYPE": "wayland"}
    assert platformcheck.startup_problem(wayland, find=missing, platform="linux") is None


def test_polyseek_exits_with_the_words_before_creating_the_application(
        monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DISPLAY", ":57")
    monkeypatch.delenv("QT_QPA_PLATFORM", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr("sys.platform", "linux")
    monkeypatch.setattr(platformcheck, "find_library", lookup_without(ABSENT))
    created: list[object] = []
    monkeypatch.setattr("app.mainwindow.MainWindow.__init__", lambda *a, **k: created.append(a))
    root = logging.getLogger()
    before = list(root.handlers)
    try:
        code = app_main.main([])
    finally:
        for handler in set(root.handlers) - set(before):
            root.removeHandler(handler)
            handler.close()
    assert code == platformcheck.EXIT_MISSING_LIBRARIES != 0
    err = capfd.readouterr().err
    assert "cannot open its window" in err and "libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1" in err
    assert "Could not load the Qt platform plugin" not in err
    assert not created  # no window was built


def test_the_check_runs_as_a_command_for_the_installer() -> None:
    import sys

    done = subprocess.run([sys.executable, "-m", "app.platformcheck", "--packages"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode in (0, 1)
    assert (done.returncode == 1) == bool(done.stdout.strip())  # the packages to install, or nothing


def test_the_installer_checks_the_xcb_libraries() -> None:
    script = (REPO / "installer" / "install.sh").read_text()
    assert "app.platformcheck --packages" in script
    done = subprocess.run(["bash", str(REPO / "installer" / "install.sh"), "--help"], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0 and "--no-system-packages" in done.stdout
