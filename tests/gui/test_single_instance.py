"""One window per home (app/singleinstance.py): a second start raises the first window and exits."""

from __future__ import annotations

import uuid
from pathlib import Path

from PySide6.QtNetwork import QLocalServer

from app.singleinstance import InstanceServer, ask_running_window, server_name


def _name() -> str:
    return f"polyseek-test-{uuid.uuid4().hex[:12]}"


def test_a_second_start_reaches_the_first_window_and_asks_it_forward(qtbot) -> None:
    name = _name()
    server = InstanceServer(name)
    assert server.listen()
    try:
        with qtbot.waitSignal(server.raise_requested, timeout=5000):
            assert ask_running_window(name)
    finally:
        server.close()
    assert not ask_running_window(name)  # closed: the next start opens its own window


def test_without_a_window_the_start_goes_on(qtbot) -> None:
    assert not ask_running_window(_name())


def test_a_socket_left_by_a_crashed_window_is_taken_over(qtbot, tmp_path: Path) -> None:
    name = _name()
    first = InstanceServer(name)
    assert first.listen()
    path = Path(first._server.fullServerName())
    first._server.close()
    path.write_bytes(b"")  # what a crash leaves: the socket's file, nobody listening
    assert not ask_running_window(name)
    second = InstanceServer(name)
    try:
        assert second.listen()
        with qtbot.waitSignal(second.raise_requested, timeout=5000):
            assert ask_running_window(name)
    finally:
        second.close()
    QLocalServer.removeServer(name)


def test_the_name_is_one_per_home(tmp_path: Path) -> None:
    a, b = server_name(tmp_path / "a"), server_name(tmp_path / "b")
    assert a != b and a == server_name(tmp_path / "a" / ".." / "a")
    assert a.startswith("polyseek-") and len(a) < 40
