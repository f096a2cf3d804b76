"""A query's numerical work on the calling thread: the BLAS and OpenMP pools held to one thread while it runs.

A text query makes a few dozen small products (the query's class similarities, 1,000 x 384; the candidates'
scores, a few hundred rows): microseconds each, far too small to share. With the pools' default of every core,
each product still hands half its work to a pool thread and waits for it; on a busy machine (the app's own
indexing, other programs) that thread first waits for a core, and OpenBLAS's threads then spin, burning a core
between products. Measured at 100,000 items with the load at 4 on 2 cores (docs/benchmarks.md, "One ranking"): the
zero-shot query's two class products took 15 ms instead of 0.9 ms, and the query's CPU time was 3x its work.
Indexing and the trainer are untouched: the limit holds only while a query runs.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_lock = threading.Lock()
_controller: Any = None  # threadpoolctl's view of the pools loaded so far
_modules_seen = -1  # len(sys.modules) when it was made: a module imported since may have brought a pool
_active = 0  # queries running now: the first in limits the pools, the last out gives them back
_limit: Any = None


def _pools() -> Any:
    """threadpoolctl's controller of the loaded pools, made again when modules were imported since (cheap to
    check; making it reads the process's loaded libraries, ~1 ms)."""
    global _controller, _modules_seen
    if _modules_seen != len(sys.modules):
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:  # pragma: no cover - a dependency; without it a query only runs slower under load
            return None
        _controller, _modules_seen = ThreadpoolController(), len(sys.modules)
    return _controller


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run the block with the BLAS and OpenMP pools limited to one thread (a no-op without threadpoolctl)."""
    global _active, _limit
    with _lock:
        if _active == 0:
            controller = _pools()
            _limit = controller.limit(limits=1) if controller is not None else None
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0 and _limit is not None:
                _limit.restore_original_limits()
                _limit = None


def held() -> bool:
    """Whether the pools are held to one thread now (a query is running), so a BLAS product runs on the calling
    thread alone."""
    return _active > 0


def single_threaded(function: F) -> F:
    """:func:`one_thread` around every call of ``function``."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with one_thread():
            return function(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
