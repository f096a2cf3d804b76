"""The engine's vocabulary for its front ends: the words the GUI (and the CLI) share with the engine besides the
workspace's parts, gathered in one light module so a front end never reaches into the engine's rooms for them.

Read here, defined where they belong: the hold-out share and the default method (:mod:`engine.loop.defaults`); the
trainer process's stop wait and failure (:mod:`engine.loop.trainerprocess`); the trainer's events, its run folder
and command line (:mod:`engine.trainercontract`); the one figure of a model (:mod:`engine.loop.figures`); what an
explanation can honestly say in words (:mod:`engine.search.readings`); and the engine's picture decoder, its error
type and the file suffixes indexing reads (:mod:`engine.media`), for pictures Qt cannot read.

Importing this module loads only the light ones (no numpy beyond :mod:`engine.types`, no ONNX, no decoders), so
the GUI's window appears before the engine is loaded; the readings and the decoder are loaded on first use of one
of their names (:func:`__getattr__`). The records the parts return are :mod:`engine.types`; progress and
cancelling are :mod:`engine.progress`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.loop.defaults import DEFAULT_HOLDOUT, DEFAULT_METHOD
from engine.loop.figures import MIN_MEANINGFUL_ITEMS, Figure, comparison_text, model_figure, report_figure
from engine.loop.trainerprocess import STOP_WAIT_S, TrainerFailed
from engine.trainercontract import events
from engine.trainercontract.command import TRAINER_PROGRAM
from engine.trainercontract.runfolder import find_interrupted_run, saved_checkpoint

if TYPE_CHECKING:  # for a type checker; at run time these load on first use (__getattr__ below)
    from engine.media import MediaError, load_image, probe
    from engine.media.discover import ANIMATION_SUFFIXES, MEDIA_SUFFIXES, PHOTO_SUFFIXES, VIDEO_SUFFIXES
    from engine.search.readings import (
        ellipse_axes,
        ellipse_magnification,
        sigma_text,
        significant,
        uncertainty_reading,
        word_match_text,
    )

__all__ = [
    "DEFAULT_HOLDOUT", "DEFAULT_METHOD", "MIN_MEANINGFUL_ITEMS", "STOP_WAIT_S", "TRAINER_PROGRAM", "Figure",
    "TrainerFailed", "comparison_text", "events", "find_interrupted_run", "model_figure", "report_figure",
    "saved_checkpoint",
    # loaded on first use (engine.search.readings)
    "ellipse_axes", "ellipse_magnification", "sigma_text", "significant", "uncertainty_reading", "word_match_text",
    # loaded on first use (engine.media)
    "MediaError", "load_image", "probe", "ANIMATION_SUFFIXES", "MEDIA_SUFFIXES", "PHOTO_SUFFIXES", "VIDEO_SUFFIXES",
]

_READINGS = {"ellipse_axes", "ellipse_magnification", "sigma_text", "significant", "uncertainty_reading",
             "word_match_text"}
_DECODING = {"MediaError", "load_image", "probe"}
_SUFFIXES = {"ANIMATION_SUFFIXES", "MEDIA_SUFFIXES", "PHOTO_SUFFIXES", "VIDEO_SUFFIXES"}


def __getattr__(name: str) -> Any:
    """The names whose modules are heavy (numpy and the zero-shot vocabulary; Pillow, OpenCV), loaded when first
    asked for (PEP 562)."""
    if name in _READINGS:
        from engine.search import readings

        return getattr(readings, name)
    if name in _DECODING:
        from engine import media

        return getattr(media, name)
    if name in _SUFFIXES:
        from engine.media import discover

        return getattr(discover, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
