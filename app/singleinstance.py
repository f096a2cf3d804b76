"""One window per Polyseek home: a second start raises the first window instead of opening the library again.

Two windows on one home would both index its folders, both keep their own picture of the user's captions and
both offer to retrain: what one writes the other would not show. So the first window listens on a local socket
named after the home (:func:`server_name`), and a later start that reaches it asks it to come forward and exits.
A socket left by a window that crashed answers nobody: the next start removes it and listens itself.
"""

from __future__ import annotations

import getpass
import hashlib
import logging
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket

log = logging.getLogger(__name__)

RAISE = b"raise\n"
CONNECT_MS = 500  # a running window answers at once; a stale socket refuses at once


def server_name(home: Path) -> str:
    """The local socket of the window that has ``home`` open (one per user and home; short enough for any OS)."""
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name in this environment: the home alone names it
        user = ""
    digest = hashlib.sha256(f"{user}\0{home.resolve()}".encode()).hexdigest()[:16]
    return f"polyseek-{digest}"


def ask_running_window(name: str) -> bool:
    """Whether a window already listens on ``name``; if so it has been asked to come forward."""
    socket = QLocalSocket()
    socket.connectToServer(name)
    if not socket.waitForConnected(CONNECT_MS):
        return False
    socket.write(RAISE)
    socket.waitForBytesWritten(CONNECT_MS)
    socket.disconnectFromServer()
    return True


class InstanceServer(QObject):
    """The first window's listener: ``raise_requested`` when a later start asks for the window."""

    raise_requested = Signal()

    def __init__(self, name: str, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.name = name
        self._server = QLocalServer(self)
        self._server.newConnection.connect(self._accept)

    def listen(self) -> bool:
        """Listen on the name (a stale socket file of a crashed window removed first); False when that fails,
        which leaves the window working without the guard (logged)."""
        QLocalServer.removeServer(self.name)
        if self._server.listen(self.name):
            return True
        log.warning("cannot listen on %s (%s): a second start will open a second window",
                    self.name, self._server.errorString())
        return False

    def close(self) -> None:
        self._server.close()

    def _accept(self) -> None:
        # the asking start writes at once after connecting: read it here (at most CONNECT_MS), then let it go
        while self._server.hasPendingConnections():
            connection = self._server.nextPendingConnection()
            if connection.bytesAvailable() or connection.waitForReadyRead(CONNECT_MS):
                asked = bytes(connection.readAll().data())
            else:
                asked = b""
            connection.disconnectFromServer()
            connection.deleteLater()
            if asked.startswith(RAISE.strip()):
                self.raise_requested.emit()
