"""Handing the C heap's free memory back to the system once a burst of work is over."""

from __future__ import annotations

import ctypes
import sys


def trim() -> bool:
    """Return the free pages of every malloc arena to the system (glibc's ``malloc_trim``). After indexing, the
    decode threads' and ONNX Runtime's freed buffers stay in glibc's per-thread arenas, counted in the process's
    resident memory, until something asks for them back. True when pages were returned; False where there is
    no glibc (other systems, musl) or nothing to return."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return False
    return bool(malloc_trim(0))
