"""Work-arounds for bugs in the Qt binding, applied once when the GUI is imported.

PySide6 6.12.0 ``SignalInstance.emit()`` returns ``True`` without taking a new reference to it. Every
``emit()`` from Python (ours, pyqtgraph's, pytest-qt's) therefore lowers ``True``'s reference count by one,
and on CPython < 3.12, where ``True`` is not immortal, the interpreter aborts with "Fatal Python error:
bool_dealloc" after a few hundred to a few thousand emits: the app would die a minute into an indexing run.

The fix gives ``True`` and ``False`` the same status they have on CPython >= 3.12: a reference count so
large it never reaches zero. It is applied only where the bug is measured (a probe emits a signal and
watches the count), only on CPython < 3.12, and only when the count sits where CPython keeps it.
"""

from __future__ import annotations

import ctypes
import logging
import sys

log = logging.getLogger(__name__)

_CUSHION = 1 << 40  # ~10^12 emits before the count could run out
_PROBE_EMITS = 8
_applied = False


def emit_leaks_true() -> bool:
    """Whether this binding's ``emit()`` drops a reference to ``True`` (PySide6 6.12.0 does)."""
    from PySide6.QtCore import QObject, Signal

    class _Probe(QObject):
        ping = Signal()

    probe = _Probe()
    before = sys.getrefcount(True)
    for _ in range(_PROBE_EMITS):
        probe.ping.emit()
    return sys.getrefcount(True) < before


def _raise_refcount(value: bool) -> bool:
    cell = ctypes.c_ssize_t.from_address(id(value))
    if cell.value != sys.getrefcount(value) - 1:  # not the layout we expect (e.g. a debug build)
        return False
    cell.value += _CUSHION
    return True


def protect_bool_singletons() -> bool:
    """Apply the work-around if this interpreter and binding need it; returns whether it is in force."""
    global _applied
    if _applied:
        return True
    if sys.implementation.name != "cpython" or sys.version_info >= (3, 12):
        return False  # True and False are immortal there
    if not emit_leaks_true():
        return False
    _applied = all(_raise_refcount(value) for value in (True, False))
    if _applied:
        log.info("PySide6 emit() reference leak on True detected; True/False made effectively immortal")
    else:
        log.warning("PySide6 emit() leaks references to True and the work-around could not be applied; "
                    "a long session may abort with 'bool_dealloc'")
    return _applied


protect_bool_singletons()
