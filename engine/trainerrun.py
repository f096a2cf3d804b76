"""``polyseek train`` and ``evaluate`` of a trained model on a terminal: the trainer's events drawn as a bar.

The trainer runs in its own process (torch lives there). Asked for ``--json-progress`` it reports one JSON
event per line on stdout (README, "--json-progress"); this module reads them and shows steps and feature
extraction as a bar, epochs, phases and resumes as lines above it, and ends with what the plain run prints
("model written to ...", or ``evaluate``'s report), once the bar is gone. The trainer's stderr (warnings,
errors) is relayed line by line above the bar. Used only when stderr is a terminal and the user asked for
neither ``--json`` nor ``--json-progress`` (their output stays exactly as it was).
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Sequence

from engine.progressbar import ProgressBar
from engine.trainercontract import events
from engine.trainercontract.command import trainer_command


def run_with_progress(argv: Sequence[str], bar: ProgressBar | None = None,
                      command: Sequence[str] | None = None) -> int:
    """Run ``python -m trainer ARGV --json-progress`` (or ``command``), drawing its events; its exit status.

    Ctrl+C reaches the trainer too (same process group); it then writes a resumable checkpoint, and this
    waits for it to finish instead of leaving it behind.
    """
    bar = bar or ProgressBar()
    child = subprocess.Popen(list(command or trainer_command(*argv, json_progress=True)), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, errors="backslashreplace")
    assert child.stdout is not None and child.stderr is not None
    relay = threading.Thread(target=lambda: [bar.log(line.rstrip("\n")) for line in child.stderr], daemon=True)
    relay.start()
    output: list[str] = []  # stdout that is not an event (the report): printed once the bar is gone
    try:
        for line in child.stdout:
            output.extend(_show(line, bar))
        status = child.wait()
    except KeyboardInterrupt:
        status = child.wait()
    finally:
        relay.join(timeout=5)  # the trainer's last words go above the bar, before it closes
        bar.close()
    sys.stdout.write("".join(output))
    sys.stdout.flush()
    return status


def _show(line: str, bar: ProgressBar) -> list[str]:
    """Draw one line of the trainer's stdout; returns what it adds to the output (a line that is not an event,
    or the closing summary for the "done" event)."""
    event = events.parse(line)
    if event is None:
        return [line]  # not an event: what the trainer printed, passed on
    if isinstance(event, events.EpochEnd | events.Phase | events.Resumed):
        bar.log(events.describe(event))  # a line above the bar
    elif isinstance(event, events.Done):
        return [events.describe(event) + "\n"]
    else:
        progress = events.to_progress(event)
        if progress is not None:
            bar(progress)
    # "error" and "stopped" are also said on stderr by the trainer, which is relayed
    return []
