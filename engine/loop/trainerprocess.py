"""Running ``python -m trainer train`` as a child process for the retraining job.

:class:`TrainerProcess` starts a :class:`~engine.trainercontract.command.TrainerRequest`, turns its stdout into
typed events (:mod:`engine.trainercontract.events`), relays every other line (stdout and stderr) as text, and on
cancellation asks the trainer to stop (SIGTERM: it finishes its step and writes a resumable checkpoint), killing
it only when it stays silent for ``stop_wait_s``. What the run leaves on disk, and reading its checkpoint back,
is :mod:`engine.trainercontract.runfolder`.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from engine.loop.errors import RetrainError
from engine.progress import Cancelled, CancelToken
from engine.trainercontract import events as trainerevents
from engine.trainercontract.command import TrainerRequest

log = logging.getLogger(__name__)

# After a stop request the trainer finishes its step and writes a checkpoint. Niced (--low-priority) on a busy
# machine, with the backbone being fine-tuned, that took well over 3 s once, so it was killed mid-save.
STOP_WAIT_S = 60.0


class TrainerFailed(RetrainError):
    """The trainer exited with a non-zero status (or could not start: ``status`` None)."""

    def __init__(self, status: int | None, reason: str) -> None:
        self.status, self.reason = status, reason
        where = "could not start the trainer" if status is None else f"training failed (trainer exit status {status})"
        super().__init__(f"{where}: {reason}")


class TrainerProcess:
    """A started trainer: its events as an iterator (:meth:`events`), cancellable, never left behind."""

    def __init__(self, command: Sequence[str], request: TrainerRequest,
                 on_output: Callable[[str], None] | None = None, stop_wait_s: float = STOP_WAIT_S) -> None:
        self.command = request.command(command)
        self.on_output = on_output or (lambda _line: None)
        self.stop_wait_s = stop_wait_s
        self._stderr_tail: list[str] = []
        self.on_output("$ " + " ".join(self.command))
        log.info("running %s", " ".join(self.command))
        Path(request.out).parent.mkdir(parents=True, exist_ok=True)
        try:
            self.process = subprocess.Popen(
                self.command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, encoding="utf-8",
                errors="replace", env={**os.environ, "PYTHONUNBUFFERED": "1"})
        except OSError as exc:
            raise TrainerFailed(None, f"{self.command[0]}: {exc}") from exc

    @property
    def pid(self) -> int:
        return self.process.pid

    def events(self, cancel: CancelToken) -> Iterator[trainerevents.TrainerEvent]:
        """The trainer's events until it exits; :class:`TrainerFailed` for a non-zero exit status, and
        :class:`Cancelled` once ``cancel`` is set (the trainer is then stopped). A reader thread lets
        cancellation act while the trainer is quiet."""
        lines: queue.Queue[tuple[str, str] | None] = queue.Queue()
        readers = [threading.Thread(target=self._read, args=(stream, name, lines), daemon=True,
                                    name=f"trainer-{name}")
                   for stream, name in ((self.process.stdout, "stdout"), (self.process.stderr, "stderr"))]
        for reader in readers:
            reader.start()
        error: str | None = None
        try:
            open_streams = len(readers)
            while open_streams:
                if cancel.cancelled:
                    raise Cancelled()
                try:
                    item = lines.get(timeout=0.2)
                except queue.Empty:
                    continue
                if item is None:
                    open_streams -= 1
                    continue
                name, line = item
                event = trainerevents.parse(line) if name == "stdout" else None
                if event is None:
                    self.on_output(line)
                    continue
                if isinstance(event, trainerevents.Error):
                    error = event.message
                yield event
            status = self.process.wait()
        except BaseException:  # cancelled, or the consumer closed the generator: no orphan trainer
            self.stop()
            raise
        if status != 0:
            raise TrainerFailed(status, error or (self._stderr_tail or ["no message"])[-1])

    def _read(self, stream: Any, name: str, lines: queue.Queue) -> None:
        try:
            for line in stream or ():
                text = line.rstrip("\r\n")
                if name == "stderr" and text.strip():
                    self._stderr_tail = [*self._stderr_tail[-19:], text]
                if text.strip():
                    lines.put((name, text))
        except (OSError, ValueError):  # the pipe was closed under us: the job is over either way
            pass
        lines.put(None)

    def stop(self) -> None:
        """Ask the trainer to stop (SIGTERM: it writes a resumable checkpoint); kill it if it stays running
        longer than ``stop_wait_s``."""
        process = self.process
        if process.poll() is not None:
            return
        try:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=self.stop_wait_s)
        except subprocess.TimeoutExpired:
            self.on_output(f"the trainer did not stop within {self.stop_wait_s:g} s; killed it")
            process.kill()
            process.wait()
        except OSError:
            process.kill()
            process.wait()
