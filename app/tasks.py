"""Background work awaited from the GUI: asyncio on Qt's own event loop, through qasync.

A one-off service call that the GUI waits for (count the missing items, ask the user, purge them; switch the
model, then re-index; read one item, then show it) reads top to bottom as a coroutine::

    async def purge(self) -> None:
        items, captions, pairs = await off_thread(self, service.library.missing_summary, pool=self.pool)
        if ask(...):
            await off_thread(self, service.library.purge_missing, pool=self.write_pool)

:func:`start` runs such a coroutine on the qasync loop; :func:`off_thread` runs the blocking call on one of the
window's ``QThreadPool`` s (so its priority, its order on a one-thread pool and the window's wait for its pools
at closing stay what they were) and resumes the coroutine on the GUI thread with the result or the exception.
A coroutine whose ``owner`` widget was deleted meanwhile is cancelled at that ``await`` instead of resumed, so
it never touches a dead widget (what :func:`app.workers.while_alive` does for callbacks).

The stream of many small jobs (thumbnails, result pages, annotation states) and the jobs that report progress
or events while they run (indexing, retraining) stay on :mod:`app.workers`: its relay delivers a burst of
finished jobs in time slices and coalesces progress, which measured GUI stalls asked for (docs/architecture.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import qasync
import shiboken6
from PySide6.QtCore import QCoreApplication, QObject, QThreadPool

from app import qtcompat  # noqa: F401  (binding work-around, before any signal is emitted)

log = logging.getLogger(__name__)

T = TypeVar("T")
_loop: asyncio.AbstractEventLoop | None = None
_running: set[asyncio.Task[Any]] = set()  # asyncio keeps only weak references to tasks


def event_loop() -> asyncio.AbstractEventLoop:
    """The asyncio loop on Qt's event loop (a ``qasync.QEventLoop``), made on first use on the GUI thread.

    Its callbacks are Qt timer events, so whatever runs Qt's loop runs it: ``app.main`` runs the application
    through it (:func:`run_application`), and tests' ``qtbot.wait*`` process it like any other event.
    """
    global _loop
    if _loop is None:
        app = QCoreApplication.instance()
        if app is None:
            raise RuntimeError("the GUI's event loop needs a QApplication first")
        _loop = qasync.QEventLoop(app)
        asyncio.set_event_loop(_loop)
    return _loop


def run_application() -> int:
    """Run Qt's event loop as asyncio's running loop until the application quits; its exit code."""
    return int(event_loop().run_forever())


def start(coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """Run ``coro`` on the GUI's loop; a failure it does not handle is logged, never silent."""
    task = event_loop().create_task(coro)
    _running.add(task)
    task.add_done_callback(_finished)
    return task


def _finished(task: asyncio.Task[Any]) -> None:
    _running.discard(task)
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.error("GUI task %s failed", task.get_coro(), exc_info=exc)


def off_thread(owner: QObject, fn: Callable[..., T], *args: Any, pool: QThreadPool | None = None,
               priority: int = 0) -> asyncio.Future[T]:
    """``fn(*args)`` on ``pool`` (the global pool by default), awaited on the GUI thread: the future holds its
    result or its exception, and is cancelled instead when ``owner`` was deleted before it finished."""
    loop = event_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:  # on the GUI thread
        if future.done():  # the awaiting task was cancelled meanwhile
            return
        if not shiboken6.isValid(owner):
            future.cancel()
        elif ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def run() -> None:  # on a pool thread
        try:
            ok, value = True, fn(*args)
        except Exception as exc:  # noqa: BLE001 - handed to the awaiting coroutine, which says it to the user
            log.error("background call %s failed", getattr(fn, "__qualname__", fn), exc_info=exc)
            ok, value = False, exc
        loop.call_soon_threadsafe(settle, ok, value)

    (pool or QThreadPool.globalInstance()).start(run, priority)
    return future
