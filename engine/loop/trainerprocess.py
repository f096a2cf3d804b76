"""Running ``python -m trainer train`` as a child process for the retraining job, and what a run leaves on disk.

:class:`TrainerRequest` is the one place a training command line is spelt; :func:`run_trainer` starts it, turns
its stdout into typed events (:mod:`engine.trainerevents`), relays every other line (stdout and stderr) as text,
and on cancellation asks the trainer to stop (SIGTERM: it finishes its step and writes a resumable checkpoint),
killing it only when it stays silent for ``stop_wait_s``. :func:`saved_checkpoint` reads that checkpoint back
from the disk, which is where the truth is: a trainer killed while saving never says "stopped", yet its
previous checkpoint is intact.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import trainerevents
from engine.loop.errors import RetrainError
from engine.progress import Cancelled, CancelToken

log = logging.getLogger(__name__)

TRAINER_COMMAND: tuple[str, ...] = (sys.executable, "-m", "trainer")
STATE_FILE = "trainer_state.json"  # written last by trainer.checkpoint, naming a complete checkpoint
# After a stop request the trainer finishes its step and writes a checkpoint. Niced (--low-priority) on a busy
# machine, with the backbone being fine-tuned, that took well over 3 s once, so it was killed mid-save.
STOP_WAIT_S = 60.0


class TrainerFailed(RetrainError):
    """The trainer exited with a non-zero status (or could not start: ``status`` None)."""

    def __init__(self, status: int | None, reason: str) -> None:
        self.status, self.reason = status, reason
        where = "could not start the trainer" if status is None else f"training failed (trainer exit status {status})"
        super().__init__(f"{where}: {reason}")


@dataclass(frozen=True, slots=True)
class TrainerRequest:
    """One ``train`` run (the CLI contract of ``polyseek train``): the arguments after the program itself."""

    method: str
    data: Path
    out: Path
    epochs: int | None = None  # None: the method's recipe
    train_split: str = "train"
    val_split: str = "dev"
    resume: bool = False
    options: tuple[str, ...] = ()  # further trainer options: --device, --init-from, --set, --preset, ...

    def arguments(self) -> list[str]:
        args = ["train", "--method", self.method, "--data", str(self.data), "--out", str(self.out),
                "--train-split", self.train_split, "--val-split", self.val_split,
                *(["--epochs", str(self.epochs)] if self.epochs else []), *(["--resume"] if self.resume else []),
                *self.options]
        # a killed app or `polyseek retrain` must not leave a trainer running on: it stops with a checkpoint
        return [*args, "--stop-with-parent", "--json-progress"]


class TrainerProcess:
    """A started trainer: its events as an iterator (:meth:`events`), cancellable, never left behind."""

    def __init__(self, command: Sequence[str], request: TrainerRequest,
                 on_output: Callable[[str], None] | None = None, stop_wait_s: float = STOP_WAIT_S) -> None:
        self.command = [*command, *request.arguments()]
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


@dataclass(frozen=True, slots=True)
class SavedCheckpoint:
    """A resumable checkpoint a run left on disk: ``epochs_done`` finished epochs, ``step`` steps of the next."""

    folder: Path
    epochs_done: int
    step: int
    method: str = ""
    options: dict[str, Any] | None = None  # the run's trainer options (data, splits, epochs)

    def describe(self) -> str:
        where = f"epoch {self.epochs_done}" + (f", step {self.step} of the next" if self.step else "")
        return f"a resumable checkpoint (after {where}) is in {self.folder}"


def saved_checkpoint(folder: Path | None) -> SavedCheckpoint | None:
    """What ``--resume`` would continue from in ``folder``, read from the disk, or None.

    ``trainer.checkpoint`` writes ``trainer_state.json`` last, naming the ``last-*.safetensors`` and
    ``optimizer-*.pt`` files of the checkpoint, so a state file whose files exist is a complete checkpoint; a
    finished run has nothing to resume.
    """
    if folder is None:
        return None
    try:
        state = json.loads((Path(folder) / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    files = state.get("resume") if isinstance(state, dict) else None
    if not isinstance(files, dict) or state.get("finished") or not files:
        return None
    if not all(isinstance(name, str) and (Path(folder) / name).is_file() for name in files.values()):
        return None
    options = state.get("options")
    return SavedCheckpoint(Path(folder), int(state.get("epoch", 0)), int(state.get("step", 0)),
                           str(state.get("method", "")), options if isinstance(options, dict) else None)


def find_interrupted_run(models_dir: Path) -> SavedCheckpoint | None:
    """The most recently checkpointed run under ``models_dir`` that did not finish (it can be resumed after
    the app was closed or crashed), if its options say what it trained on."""
    try:
        states = sorted(Path(models_dir).glob(f"*/{STATE_FILE}"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return None
    for state in states:
        saved = saved_checkpoint(state.parent)
        if saved is not None and saved.method and saved.options and saved.options.get("data"):
            return saved
    return None
