"""Run engine calls off the GUI thread and hear about them as Qt signals.

One helper for every background job (the idea of napari's ``_qt/qthreading.py``): a :class:`Worker` runs a
plain function (its return value arrives as ``returned``) or a generator of :class:`engine.progress.Progress`
records (each arrives as ``progress``; the generator's own return value arrives as ``returned``). Cancelling
sets the job's :class:`CancelToken` and closes the generator at its next yield, so both cooperative jobs
(that poll the token) and plain generators stop.

Every public signal is emitted on the GUI thread. Pool threads never touch a job's own signals object: they
post to one process-wide relay (:class:`_Relay`, created on the GUI thread and never deleted), which finds the
job by its key and emits the public signal there, a time slice per turn of the event loop. So any callable,
lambdas included, connected to a public signal runs on the GUI thread, and a job's signals object can be freed
on the GUI thread once it finished without another thread possibly being inside one of its emits.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import shiboken6
from PySide6.QtCore import QCoreApplication, QObject, Qt, QThreadPool, Signal, Slot

from app import qtcompat  # noqa: F401  (binding work-around, before any signal is emitted)
from engine.progress import Cancelled, CancelToken, Progress

log = logging.getLogger(__name__)

FINISHED_KEPT = 64  # finished workers kept alive a while (see Worker._running)
# Progress records faster than this are coalesced (the newest wins) so a fast job cannot flood the GUI.
PROGRESS_INTERVAL_S = 1 / 30


class WorkerSignals(QObject):
    """The signals of one :class:`Worker`; all of them are emitted on the GUI thread (by :class:`_Relay`)."""

    started = Signal()
    progress = Signal(object)  # Progress
    returned = Signal(object)  # the function's result or the generator's return value
    errored = Signal(object)  # the exception
    cancelled = Signal()
    finished = Signal()  # always last, after returned / errored / cancelled
    event = Signal(object)  # a record the job hands to a callback of its own (:meth:`Worker.emit_event`)


class _Relay(QObject):
    """The one object pool threads hand their jobs' signals to (:meth:`post`); the GUI thread emits each on its
    job's own signals object, in the order posted. It lives as long as the process, so a pool thread never
    races the deletion of what it emits on.

    The GUI thread works through what was posted a slice of at most ``DISPATCH_SLICE_S`` at a time, then lets
    the event loop run (input, painting, timers) before the next slice: a hundred thumbnails finishing at
    once used to be delivered in one pass of the event loop, which then stalled for 60-90 ms.
    """

    DISPATCH_SLICE_S = 0.010
    _wake = Signal()
    _instance: _Relay | None = None

    def __init__(self) -> None:
        super().__init__()
        self._posted: deque[tuple[int, str, object]] = deque()
        self._lock = threading.Lock()
        self._scheduled = False  # a wake-up is on its way to the GUI thread
        self._wake.connect(self._dispatch, Qt.ConnectionType.QueuedConnection)

    @classmethod
    def instance(cls) -> _Relay:
        """The relay, made on first use by the thread that creates the first job (the GUI thread) and kept
        in the application's thread."""
        if cls._instance is None:
            relay = cls()
            app = QCoreApplication.instance()
            if app is not None and relay.thread() is not app.thread():
                relay.moveToThread(app.thread())
            cls._instance = relay
        return cls._instance

    def post(self, key: int, name: str, payload: object) -> None:
        """Have the GUI thread emit ``name`` (with ``payload``) on job ``key``'s signals. Any thread."""
        with self._lock:
            self._posted.append((key, name, payload))
            if self._scheduled:
                return
            self._scheduled = True
        self._wake.emit()

    @Slot()
    def _dispatch(self) -> None:
        deadline = time.perf_counter() + self.DISPATCH_SLICE_S
        while time.perf_counter() < deadline:
            with self._lock:
                if not self._posted:
                    self._scheduled = False
                    return
                key, name, payload = self._posted.popleft()
            worker = Worker._running.get(key)
            if worker is None:  # nothing is posted after ``finished``; a job that never started has no listener
                continue
            try:
                signal = getattr(worker.signals, name)
                if name in {"started", "cancelled", "finished"}:
                    signal.emit()
                else:
                    signal.emit(payload)
            except Exception:  # noqa: BLE001 - one job's failure must not stop the delivery of every later one
                log.exception("delivering %s of background job %d", name, key)
        self._wake.emit()  # the rest after the event loop's next turn (queued, as from any thread)


class Worker:
    """A job for a :class:`QThreadPool` (its :meth:`run` is what the pool calls): ``fn(*args, **kwargs)``,
    optionally given a cancel token.

    If ``fn`` accepts a ``cancel`` keyword it receives the worker's :class:`CancelToken`. If it returns a
    generator, the worker iterates it and forwards every yielded :class:`Progress`.
    """

    # Python owns the workers; this keeps them alive until they finish, and then for FINISHED_KEPT more finished
    # jobs: ``finished`` reaches the GUI thread while the pool thread may still be returning from run(), and the
    # last reference must go on the GUI thread, where the signals object lives.
    _running: dict[int, Worker] = {}
    _finished: deque[Worker] = deque(maxlen=FINISHED_KEPT)
    _keys = itertools.count(1)

    def __init__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self.signals = WorkerSignals()
        self._relay = _Relay.instance()
        self._key = next(Worker._keys)  # how the relay finds this job (ids of freed objects come back)
        self.token = CancelToken()
        # failures that are the job's ordinary outcome (its owner reports them): logged without a traceback
        self.expected_errors: tuple[type[BaseException], ...] = ()
        self._fn, self._args, self._kwargs = fn, args, kwargs
        if _accepts_cancel(fn):
            self._kwargs.setdefault("cancel", self.token)
        # the slot holds the worker's key, not the worker: a slot that captured it made a cycle through the Qt
        # connection that Python's garbage collector cannot see, and every worker ever started stayed alive
        self.signals.finished.connect(partial(Worker._retire, self._key))

    @staticmethod
    def _retire(key: int) -> None:
        worker = Worker._running.pop(key, None)
        if worker is not None:
            # Kept a while longer, then freed here on the GUI thread with its signals object (whose C++ side goes
            # with its Python side, and with it every callback connected to it). Not ``deleteLater()``: PySide6
            # 6.12 keeps a reference to the Python side of an object deleted that way, so every job's signals
            # object stayed as an empty shell (98,000 of them after scrolling a 100,000-item library).
            Worker._finished.append(worker)

    def emit_event(self, record: object) -> None:
        """Pass ``record`` to the GUI thread as ``event``: a callback for jobs that report more than
        :class:`Progress` (the retraining job's trainer events and output lines). Callable from any thread;
        records arrive in order, none is coalesced."""
        self._emit("event", record)

    def cancel(self) -> None:
        """Ask the job to stop; ``cancelled`` follows when it has."""
        self.token.cancel()

    @property
    def is_cancelled(self) -> bool:
        return self.token.cancelled

    def start(self, pool: QThreadPool | None = None, priority: int = 0) -> Worker:
        """Queue the job on ``pool`` (the global pool by default) and return ``self``."""
        Worker._running[self._key] = self
        # handed to the pool as a callable: a QRunnable passed to start() (with autoDelete off) stayed a child of the
        # pool's Python object for the pool's whole life, so every worker ever started stayed alive
        (pool or QThreadPool.globalInstance()).start(self.run, priority)
        return self

    def run(self) -> None:  # runs on a pool thread
        emit = self._emit
        emit("started", None)
        try:
            result = self._fn(*self._args, **self._kwargs)
            if inspect.isgenerator(result):
                result = self._drain(result)
            if self.token.cancelled:
                emit("cancelled", None)
            else:
                emit("returned", result)
        except Cancelled:
            emit("cancelled", None)
        except Exception as exc:  # noqa: BLE001 - a job's failure is reported, never fatal
            if isinstance(exc, self.expected_errors):  # e.g. a file that cannot be read: one line, no traceback
                log.debug("background job %s: %s", getattr(self._fn, "__qualname__", self._fn), exc)
            else:
                log.exception("background job %s failed", getattr(self._fn, "__qualname__", self._fn))
            emit("errored", exc)
        finally:
            emit("finished", None)

    def _emit(self, name: str, payload: object) -> None:
        """Relay a signal to the GUI thread; once the relay is gone (the app is quitting) nobody listens any
        more, so the job is asked to stop instead."""
        try:
            self._relay.post(self._key, name, payload)
        except RuntimeError:  # "Signal source has been deleted"
            self.token.cancel()

    def _drain(self, gen: Iterator[Any]) -> Any:
        emit = self._emit
        last_emit, pending = 0.0, None
        try:
            while True:
                if self.token.cancelled:
                    gen.close()
                    raise Cancelled()
                try:
                    item = next(gen)
                except StopIteration as stop:
                    return stop.value
                if not isinstance(item, Progress):
                    continue
                pending = item
                now = time.monotonic()
                if now - last_emit >= PROGRESS_INTERVAL_S or item.done >= item.total > 0:
                    emit("progress", item)
                    last_emit, pending = now, None
        finally:
            if pending is not None:
                emit("progress", pending)


def _accepts_cancel(fn: Callable[..., Any]) -> bool:
    try:
        return "cancel" in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # builtins without a signature
        return False


BACKGROUND_NICE = 10  # the indexing job's CPU priority (the trainer runs at nice 10 too)


def lower_this_thread(nice: int = BACKGROUND_NICE) -> bool:
    """Run the calling thread, and the threads it starts from now on (ONNX Runtime's, the decoders' and the hashers'
    inherit it), at a lower CPU priority, so the GUI thread gets a core first when all are busy: as an index run
    started, its threads took both cores of the test machine and the event loop waited 60-80 ms. Linux only (per
    thread there); True when the thread now runs at ``nice`` or lower (it may have already)."""
    if not hasattr(os, "setpriority") or not sys.platform.startswith("linux"):
        return False
    thread = threading.get_native_id()
    try:
        if os.getpriority(os.PRIO_PROCESS, thread) < nice:
            os.setpriority(os.PRIO_PROCESS, thread, nice)
        return True
    except OSError:
        return False


def run_in_background(
    fn: Callable[..., Any],
    *args: Any,
    on_result: Callable[[Any], None] | None = None,
    on_error: Callable[[BaseException], None] | None = None,
    pool: QThreadPool | None = None,
    priority: int = 0,
    **kwargs: Any,
) -> Worker:
    """Start ``fn`` on ``pool`` and call ``on_result`` / ``on_error`` on the GUI thread when it ends."""
    worker = Worker(fn, *args, **kwargs)
    if on_result is not None:
        worker.signals.returned.connect(on_result)
    if on_error is not None:
        worker.signals.errored.connect(on_error)
    return worker.start(pool, priority)


def while_alive(owner: QObject, fn: Callable[..., Any]) -> Callable[..., None]:
    """``fn``, called only while ``owner``'s C++ object exists.

    A job's result is queued to the GUI thread; if the widget that asked for it was deleted meanwhile (a
    closed dialog, a test's widget), a plain callback would touch a dead widget and raise. Lambdas have no
    receiver object Qt could disconnect on deletion, so callbacks that capture a widget go through this.
    """

    def call(*args: Any) -> None:
        if shiboken6.isValid(owner):
            fn(*args)

    return call


def serial_pool(name: str) -> QThreadPool:
    """A pool with one thread: jobs run one at a time, in the order they were queued."""
    pool = QThreadPool()
    pool.setObjectName(name)
    pool.setMaxThreadCount(1)
    return pool
