"""The trainer's command lines: the one place ``python -m trainer ...`` is spelt.

:func:`trainer_command` builds any of them (``polyseek train`` passed through, ``prepare``);
:class:`TrainerRequest` is a ``train`` run the engine starts itself (the retraining job), whose arguments always
ask for the JSON events and for a stop when the parent goes away.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

TRAINER_PROGRAM: tuple[str, ...] = (sys.executable, "-m", "trainer")
JSON_PROGRESS = "--json-progress"  # the trainer then writes one event per line on stdout (events.dumps)


def trainer_command(*arguments: str, json_progress: bool = False,
                    program: Sequence[str] = TRAINER_PROGRAM) -> list[str]:
    """``python -m trainer ARGUMENTS`` (or ``program ARGUMENTS``), asking for the JSON events when
    ``json_progress`` is set."""
    return [*program, *arguments, *([JSON_PROGRESS] if json_progress else [])]


def prepare_command(force: bool = False) -> list[str]:
    """The child process that prepares the pretrained assets into :func:`engine.paths.assets_dir`."""
    return trainer_command("prepare", *(["--force"] if force else []), json_progress=True)


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
        """``train --method ... --json-progress``: what follows the program on the command line."""
        args = ["train", "--method", self.method, "--data", str(self.data), "--out", str(self.out),
                "--train-split", self.train_split, "--val-split", self.val_split,
                *(["--epochs", str(self.epochs)] if self.epochs else []), *(["--resume"] if self.resume else []),
                *self.options]
        # a killed app or `polyseek retrain` must not leave a trainer running on: it stops with a checkpoint
        return [*args, "--stop-with-parent", JSON_PROGRESS]

    def command(self, program: Sequence[str] = TRAINER_PROGRAM) -> list[str]:
        """The whole command line, ``program`` first."""
        return [*program, *self.arguments()]
