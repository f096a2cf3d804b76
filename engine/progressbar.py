"""The command line's progress bar: :class:`engine.progress.Progress` records drawn with ``rich`` on stderr.

Core code never sees the bar (docs/contributing.md): jobs yield records, the CLI hands them to a
:class:`ProgressBar`. The bar is drawn only when stderr is a terminal and the output is not ``--json``, so
pipes, logs and machine-readable output stay exactly as they were.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from types import TracebackType
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress

from engine.progress import Progress

if TYPE_CHECKING:
    from rich.console import Console


class ProgressBar:
    """A bar for one job: call it with each record, :meth:`close` it at the end (or use ``with``).

    A record with ``total`` 0 shows a pulsing bar (the size of the job is not known yet); the message is
    the record's own ("indexing cat.jpg", "epoch 3 step 40/120").
    """

    def __init__(self, quiet: bool = False, console: Console | None = None) -> None:
        """``console``: where to draw (default: stderr, and only when it is a terminal)."""
        self._progress = None
        self._task = None
        if quiet or (console is None and not sys.stderr.isatty()):
            return

        self._progress = RichProgress(
            BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.description}", markup=False),  # file names may hold '[' and ']'
            console=console or Console(stderr=True), transient=False,
            redirect_stdout=False,  # stdout is the command's output (maybe a pipe): never moved to the bar's stream
        )
        self._progress.start()
        self._task = self._progress.add_task("", total=None)

    @property
    def live(self) -> bool:
        return self._progress is not None

    def log(self, line: str) -> None:
        """A line of text on stderr, printed above the bar while it is drawn (thread-safe)."""
        progress = self._progress  # close() may run meanwhile on another thread
        if progress is not None:
            progress.console.print(line, markup=False, highlight=False, soft_wrap=True)
        else:
            print(line, file=sys.stderr, flush=True)

    def __call__(self, record: Progress) -> None:
        if self._progress is None or self._task is None:
            return
        self._progress.update(self._task, completed=record.done, total=record.total or None,
                              description=record.message[:60])

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()


def drain(records: Iterable[Progress], quiet: bool = False) -> None:
    """Run a job to its end, drawing its records."""
    with ProgressBar(quiet) as bar:
        for record in records:
            bar(record)
