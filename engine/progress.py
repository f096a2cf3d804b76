"""Progress records for long jobs (indexing, re-indexing, training).

Long jobs are generators that yield :class:`Progress`; the CLI draws them as a bar, the GUI turns them
into signals. Cancellation is cooperative through a :class:`CancelToken` the job checks between steps.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Progress:
    """One step of a long job: ``done`` of ``total`` units, with a human message."""

    done: int
    total: int
    message: str = ""

    @property
    def fraction(self) -> float:
        return 0.0 if self.total <= 0 else min(1.0, self.done / self.total)


def staged(progress: Progress, stage: str) -> Progress:
    """``progress`` as a part of a longer job's ``stage`` (its message prefixed with the stage's)."""
    return Progress(progress.done, progress.total, f"{stage}: {progress.message}" if progress.message else stage)


class Cancelled(Exception):
    """Raised inside a job when its token was cancelled."""


class CancelToken:
    """A thread-safe flag a job polls; ``cancel()`` may be called from any thread."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def raise_if_cancelled(self) -> None:
        if self._event.is_set():
            raise Cancelled()
