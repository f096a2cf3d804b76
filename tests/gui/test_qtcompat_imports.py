"""app.qtcompat: modules imported after the binding are not read for the ``__feature__`` switch (a background
job's first imports held the interpreter lock for the source reads as well, and the event loop waited)."""

from __future__ import annotations

import sys
from pathlib import Path

from app import qtcompat


def test_a_module_imported_after_the_binding_is_not_read_for_pyside_features(tmp_path: Path, monkeypatch) -> None:
    import inspect

    feature = sys.modules["shibokensupport.feature"]
    assert feature._mod_uses_pyside is qtcompat._uses_no_feature
    (tmp_path / "mentions_the_binding.py").write_text('"""Uses PySide6 (this word made the binding read it)."""\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    read: list[object] = []
    real = inspect.getsource
    monkeypatch.setattr(inspect, "getsource", lambda obj: read.append(obj) or real(obj))
    import mentions_the_binding  # noqa: F401

    assert read == []
    assert feature.pyside_feature_dict.get("mentions_the_binding", -1) == -1  # the feature switch ignores it
