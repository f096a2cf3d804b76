"""The library loop's errors."""

from __future__ import annotations


class RetrainError(RuntimeError):
    """A retraining cannot run or failed; the message says which step and why."""


class AnnotationError(ValueError):
    """An annotation export or import cannot be done; the message names the file or the format."""
