"""Work-arounds for bugs in the Qt binding, applied once when the GUI is imported.

PySide6 6.12.0 hands some singletons back to Python without taking a new reference to them:

- ``SignalInstance.emit()`` returns ``True`` that way, so every ``emit()`` from Python (ours, pyqtgraph's,
  pytest-qt's) lowers ``True``'s reference count by one;
- every wrapped C++ method that returns ``void`` (``QLabel.setText``, ``QProgressBar.setValue``,
  ``QApplication.processEvents``, pyqtgraph's many setters...) returns ``None`` that way, so each such call
  lowers ``None``'s count by one.

On CPython < 3.12, where these objects are not immortal, the interpreter aborts with "Fatal Python error:
bool_dealloc" / "none_dealloc" once a count reaches zero: after a few thousand emits, or a few tens of
thousands of ordinary widget calls (a minute of live training plots).

The fix gives ``True``, ``False`` and ``None`` the same status they have on CPython >= 3.12: a reference count
so large it never reaches zero. It is applied only where a leak is measured (a probe emits a signal / calls
a void method and watches the count), only on CPython < 3.12, and only when the count sits where CPython
keeps it.

And one cost: the binding reads the source of every module imported after it (:func:`skip_feature_source_scans`).
"""

from __future__ import annotations

import ctypes
import logging
import sys

log = logging.getLogger(__name__)

_CUSHION = 1 << 40  # ~10^12 leaked references before a count could run out
_PROBE_CALLS = 64
_applied: set[str] = set()


def emit_leaks_true() -> bool:
    """Whether this binding's ``emit()`` drops a reference to ``True`` (PySide6 6.12.0 does)."""
    from PySide6.QtCore import QObject, Signal

    class _Probe(QObject):
        ping = Signal()

    probe = _Probe()
    before = sys.getrefcount(True)
    for _ in range(_PROBE_CALLS):
        probe.ping.emit()
    return sys.getrefcount(True) <= before - _PROBE_CALLS // 2


def void_call_leaks_none() -> bool:
    """Whether calling a ``void`` C++ method drops a reference to ``None`` (PySide6 6.12.0 does)."""
    from PySide6.QtCore import QObject

    probe = QObject()
    before = sys.getrefcount(None)
    for _ in range(_PROBE_CALLS):
        probe.setObjectName("probe")
    return sys.getrefcount(None) <= before - _PROBE_CALLS // 2


def _raise_refcount(value: object) -> bool:
    cell = ctypes.c_ssize_t.from_address(id(value))
    if cell.value != sys.getrefcount(value) - 1:  # not the layout we expect (e.g. a debug build)
        return False
    cell.value += _CUSHION
    return True


def protect_singletons() -> set[str]:
    """Apply the work-around where this interpreter and binding need it; returns what it protects now
    (a subset of ``{"bool", "None"}``)."""
    if sys.implementation.name != "cpython" or sys.version_info >= (3, 12):
        return set(_applied)  # True, False and None are immortal there
    needs = {"bool": (emit_leaks_true, (True, False)), "None": (void_call_leaks_none, (None,))}
    for name, (leaks, values) in needs.items():
        if name in _applied or not leaks():
            continue
        if all(_raise_refcount(value) for value in values):
            _applied.add(name)
            log.info("PySide6 leaks references to %s; made it effectively immortal", name)
        else:
            log.warning("PySide6 leaks references to %s and the work-around could not be applied; a long "
                        "session may abort with '%s_dealloc'", name, "bool" if name == "bool" else "none")
    return set(_applied)


def skip_feature_source_scans() -> bool:
    """PySide6's ``__feature__`` support (``snake_case``, ``true_property``) reads the source of every module
    imported after it (``inspect.getsource``, to see whether the module mentions PySide6), holding the interpreter
    lock: 61 of the 434 ms that importing the engine's indexing and search modules took, and what a background
    job's first imports cost the event loop. This app selects no feature, so every module is marked as one the
    feature switch ignores, without reading it. True when the hook was found and replaced."""
    import PySide6.QtCore  # noqa: F401  (installs the feature support this replaces a part of)

    feature = sys.modules.get("shibokensupport.feature")
    if feature is None or not callable(getattr(feature, "_mod_uses_pyside", None)):
        return False
    feature._mod_uses_pyside = _uses_no_feature
    return True


def _uses_no_feature(module: object) -> bool:
    return False


protect_singletons()
skip_feature_source_scans()
