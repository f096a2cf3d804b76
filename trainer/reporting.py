"""How a training process reports and is stopped: progress events (``--json-progress``), the time left they
carry (:class:`Eta`) and stop requests.

Only rank 0 reports. SIGINT / SIGTERM (or the events' reader going away) set a :class:`StopRequest`; the loop
(:mod:`trainer.train`) finishes its step, writes a resumable checkpoint and raises :class:`Interrupted`.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections.abc import Callable

from engine.progress import Progress
from engine.trainercontract import events

log = logging.getLogger(__name__)

STEP_EVENT_INTERVAL_S = 0.25  # at most ~4 step events a second (plus every epoch's last step)


class Interrupted(Exception):
    """Training stopped on a signal after writing a resumable checkpoint; ``signum`` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


class StopRequest:
    """Set from a signal handler; the loop polls it between steps."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def request(self, signum: int) -> None:
        self.signum = signum

    @property
    def requested(self) -> bool:
        return self.signum is not None


class Reporter:
    """Progress events: JSON lines on stdout (``--json-progress``), or readable log lines on stderr.
    Only rank 0 reports."""

    def __init__(self, json_lines: bool, enabled: bool = True,
                 write: Callable[[str], None] | None = None) -> None:
        self.json_lines, self.enabled = json_lines, enabled
        self._write = write or (lambda line: print(line, flush=True))
        self._last_step = 0.0
        self.on_reader_gone: Callable[[], None] | None = None  # train() asks the loop to stop

    def emit(self, event: events.TrainerEvent) -> None:
        if not self.enabled:
            return
        if self.json_lines:
            try:
                self._write(events.dumps(event))
            except BrokenPipeError:  # whoever read the events (the app, `polyseek retrain`) is gone
                self._reader_gone()
        else:
            log.info("%s", events.describe(event))

    def _reader_gone(self) -> None:
        self.enabled = False
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - no flush at exit may fail on the dead pipe
        except OSError:
            pass
        log.warning("the events' reader is gone: stopping with a resumable checkpoint")
        if self.on_reader_gone is not None:
            self.on_reader_gone()

    def step(self, event: events.Step, last: bool) -> None:
        """A step event, throttled to :data:`STEP_EVENT_INTERVAL_S` except for an epoch's last step."""
        now = time.monotonic()
        interval = STEP_EVENT_INTERVAL_S if self.json_lines else 5.0
        if last or now - self._last_step >= interval:
            self._last_step = now
            self.emit(event)

    def progress(self, stage: str) -> Callable[[Progress], None]:
        """A :class:`Progress` callback that reports :class:`events.StageProgress`."""
        last = {"t": 0.0}

        def report(p: Progress) -> None:
            now = time.monotonic()
            if p.done >= p.total or now - last["t"] >= 1.0:
                last["t"] = now
                self.emit(events.StageProgress(stage, p.done, p.total, p.message))

        return report


class Eta:
    """Seconds left: the mean step time of this process so far times the steps left, plus validations."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.steps = 0
        self.val_s = 0.0
        self.val_count = 0

    def tick(self) -> None:
        self.steps += 1

    def validation(self, seconds: float) -> None:
        self.val_s += seconds
        self.val_count += 1

    def eta(self, steps_left: int, validations_left: int) -> float:
        train_s = time.monotonic() - self.start - self.val_s
        per_step = train_s / max(1, self.steps)
        per_validation = self.val_s / self.val_count if self.val_count else 0.0
        return round(per_step * steps_left + per_validation * validations_left, 1)
