"""The GUI tests' one fake service (tests/gui/fakes.py) keeps the real ``SearchService``'s shape: every method the
GUI's protocol (``app.service_api.SearchServiceLike``) names exists on both with the real one's parameters (names,
kinds, defaults), the protocol says them as the real one does, and the fake offers nothing under a real method's
name that the real one would not accept. So a change to the service's public face fails here until the
protocol and the fake follow it, instead of the GUI tests passing against a service that no longer exists."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from app.service_api import SearchServiceLike
from tests.gui.fakes import FakeService

# What the GUI opens: the Workspace (engine.workspace), the SearchService with the library loop's jobs above it
workspace_module = pytest.importorskip("engine.workspace")
SearchService = workspace_module.Workspace

# The fake's own test helpers: not part of the service (a test reaches into the fake's state through them).
FAKE_ONLY = {"add_caption_from", "matched_frame", "missing_assets", "pairs"}


def public_methods(cls: type) -> set[str]:
    """The public methods of ``cls`` and of the classes it inherits from (the Workspace's come from SearchService)."""
    return {name for klass in cls.__mro__ if klass is not object for name, value in vars(klass).items()
            if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, classmethod))}


def parameters(cls: type, name: str) -> list[tuple[str, str, Any]]:
    """``(name, kind, default)`` of each parameter; a trailing ``_`` (the real ``index_paths(paths_)``, named so
    beside the module ``engine.paths``) is Python's spelling of the same name."""
    function = inspect.getattr_static(cls, name)
    function = function.__func__ if isinstance(function, classmethod) else function
    return [(p.name.rstrip("_"), p.kind.name, p.default) for p in inspect.signature(function).parameters.values()]


def protocol_methods() -> set[str]:
    return {name for name, value in vars(SearchServiceLike).items()
            if not name.startswith("_") and inspect.isfunction(value)}


def test_the_protocol_says_the_real_services_methods_as_it_does() -> None:
    missing = protocol_methods() - public_methods(SearchService)
    assert not missing, f"the GUI's protocol names methods SearchService does not have: {sorted(missing)}"
    drift = {name: (parameters(SearchServiceLike, name), parameters(SearchService, name))
             for name in protocol_methods() if parameters(SearchServiceLike, name) != parameters(SearchService, name)}
    assert not drift, f"protocol vs SearchService parameters differ: {drift}"


def test_the_fake_has_every_method_the_gui_uses_with_the_real_parameters() -> None:
    missing = protocol_methods() - public_methods(FakeService)
    assert not missing, f"FakeService lacks what the GUI calls: {sorted(missing)}"
    shared = public_methods(FakeService) & public_methods(SearchService)
    drift = {name: (parameters(FakeService, name), parameters(SearchService, name))
             for name in shared if parameters(FakeService, name) != parameters(SearchService, name)}
    assert not drift, f"FakeService vs SearchService parameters differ: {drift}"


def test_the_fake_offers_nothing_the_real_service_does_not_but_its_test_helpers() -> None:
    extra = public_methods(FakeService) - public_methods(SearchService) - FAKE_ONLY
    assert not extra, f"FakeService methods the real SearchService does not have (renamed there?): {sorted(extra)}"
    assert FAKE_ONLY <= public_methods(FakeService)  # the list of helpers is kept current too
