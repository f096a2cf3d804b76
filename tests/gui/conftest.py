"""GUI test setup: headless Qt, an isolated Polyseek home (settings, logs, caches), and the real
:class:`engine.workspace.Workspace` over the encoders' stand-in (tests/standins.py)."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before anything imports Qt

import atexit  # noqa: E402
import functools  # noqa: E402
import inspect  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from app import qtcompat  # noqa: E402, F401  (PySide6 emit() work-around, before any signal)
from app.collector import collect_on_gui_thread  # noqa: E402
from engine.workspace import Workspace  # noqa: E402
from tests.standins import StandinEncoders, export_tiny_model, make_media_folder  # noqa: E402

PVSE, PCME = "tiny-pvse", "tiny-pcme"  # the two models every test library has registered (none active)
_MODELS: dict[str, Path] = {}


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own Polyseek home, so settings and logs never touch the developer's."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("POLYSEEK_HOME", str(home))
    return home


@pytest.fixture(autouse=True)
def gui_thread_collection(qapp) -> Iterator[None]:
    """As in the app (app.main): Python's cycles are collected on the GUI thread, never by a pool thread that
    happens to allocate (app/collector.py); the interpreter collects again once the test is over."""
    collector = collect_on_gui_thread(qapp)
    yield
    collector.stop()


def tiny_models() -> dict[str, Path]:
    """A tiny real PVSE (K=2 heads) and PCME export over the stand-in's features, made once per test run; beside
    them one export per method the fake trainer (tests/gui/fake_trainer.py) hands in as a finished run's."""
    if not _MODELS:
        root = Path(tempfile.mkdtemp(prefix="polyseek-tiny-models-"))
        atexit.register(shutil.rmtree, root, True)
        _MODELS[PVSE] = export_tiny_model("pvse", root / PVSE, {"rsum": 301.5}, num_embeds=2)
        _MODELS[PCME] = export_tiny_model("pcme", root / PCME, {"rsum": 288.0})
        for method in ("vse", "pvse", "pcme", "a3vse"):
            export_tiny_model(method, root / "trainer" / method, **({"num_embeds": 2} if method == "pvse" else {}))
        os.environ["FAKE_TRAINER_EXPORTS"] = str(root / "trainer")
    return _MODELS


def open_workspace(name: str = "gui", encoders: StandinEncoders | None = None, models: bool = True) -> Workspace:
    """The real workspace of library ``name`` in this test's home, over the encoders' stand-in; with ``models``
    the two tiny models registered (zero-shot ranking stays active)."""
    from engine.features.featurestore import FeatureStore
    from engine.library.catalog import Catalog
    from engine.paths import home, library_dir
    from engine.state import LibraryState

    folder = library_dir(name)
    folder.mkdir(parents=True, exist_ok=True)
    ws = Workspace(LibraryState(name, Catalog(folder / "catalog.sqlite"), FeatureStore(home() / "features.sqlite"),
                                encoders or StandinEncoders(), folder / "thumbnails"))
    if models:
        for path in tiny_models().values():
            ws.models.register(path)
    return ws


def indexed_service(store: Path, *folders: Path, **options) -> Workspace:
    """A workspace (library named after ``store``) with ``folders`` added and indexed."""
    ws = open_workspace(Path(store).name, **options)
    for folder in folders:
        ws.library.add_root(folder)
    for _ in ws.library.index():
        pass
    return ws


def shown_window(qtbot, service: Workspace):
    """A main window over ``service``, shown; the caller shuts it down (``window.shutdown()``)."""
    from app.mainwindow import MainWindow
    from app.settings import GuiSettings

    win = MainWindow(GuiSettings(), service)
    qtbot.addWidget(win)
    win.show()
    return win


@pytest.fixture
def media_folder(tmp_path: Path) -> Path:
    return make_media_folder(tmp_path / "media")


@pytest.fixture
def service(tmp_path: Path, media_folder: Path) -> Iterator[Workspace]:
    """The real workspace over the stand-in with the media folder added and indexed."""
    ws = indexed_service(tmp_path / "gui", media_folder)
    yield ws
    ws.close()


@pytest.fixture
def window(qtbot, service: Workspace, calls) -> Iterator:
    """A main window over the indexed workspace (what it asks the workspace for logged in ``calls`` from its
    start), closed (and its workers drained) after the test."""
    win = shown_window(qtbot, service)
    yield win
    win.shutdown()


# -- looking at the workspace from a test ------------------------------------------------------------------------


def user_pairs(ws: Workspace) -> dict[int, tuple[str, int, int]]:
    """The user's accepted (+1) and rejected (-1) pairs in the catalog: ``{id: (query, media_id, label)}``."""
    return {p.id: (p.query, p.media_id, p.label) for p in ws.state.catalog.pairs(source="user")}


def media_ids(ws: Workspace) -> list[int]:
    """Every indexed item's id, in id order."""
    return sorted(int(m) for m in ws.state.catalog.media_ids())


def active_model(ws: Workspace) -> str:
    """The name of the library's active model (``zero-shot`` when none is)."""
    return next(m.name for m in ws.models.all() if m.active)


def by_path(ws: Workspace, path: Path | str) -> int:
    """The id of the indexed item at ``path``."""
    return ws.state.catalog.media_by_path(Path(path).resolve()).id


def by_name(ws: Workspace, name: str) -> int:
    """The id of the one indexed item whose file name starts with ``name``."""
    (found,) = [m for m in media_ids(ws) if ws.library.media(m).path.name.startswith(name)]
    return found


# the part methods the call log spies on
_SPIED = ("search.text", "search.example", "search.warm", "library.browse", "library.browse_count", "library.index",
          "annotations.add_caption", "annotations.export", "annotations.import_file", "annotations.suggest",
          "annotations.states", "annotations.suggestion_policy", "models.activate", "models.register",
          "models.evaluate", "models.training_set", "models.switch")


def replace_call(ws: Workspace, monkeypatch: pytest.MonkeyPatch, name: str, make) -> None:
    """Put ``make(real)`` in the place of the workspace's ``part.method`` ``name``."""
    part, method = name.split(".")
    owner = getattr(ws, part)
    monkeypatch.setattr(owner, method, make(getattr(owner, method)))


class CallLog(list):
    """What the window asked the workspace for, in order: ``(part.method, arguments by name)`` for each spied call."""

    def __init__(self, ws: Workspace, monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
        super().__init__()
        for name in names:
            part, method = name.split(".")
            signature = inspect.signature(getattr(type(getattr(ws, part)), method))
            replace_call(ws, monkeypatch, name, lambda real, name=name, sig=signature: self._recording(name, sig, real))

    def _recording(self, name: str, signature: inspect.Signature, real):
        @functools.wraps(real)  # its signature too: the app's workers look for a ``cancel`` parameter
        def call(*args, **kwargs):
            bound = signature.bind(None, *args, **kwargs)  # None: the part itself
            bound.apply_defaults()
            self.append((name, dict(list(bound.arguments.items())[1:])))
            return real(*args, **kwargs)
        return call

    def named(self, name: str) -> list[dict]:
        """The arguments of each call of ``name``, in order."""
        return [args for n, args in self if n == name]

    def has(self, method: str, /, **arguments) -> bool:
        """Whether ``method`` was called with these arguments (and any others)."""
        return any(all(args.get(k) == v for k, v in arguments.items()) for args in self.named(method))

    def last(self, *names: str) -> tuple[str, dict]:
        """The last call of any of ``names``."""
        return [(n, args) for n, args in self if n in names][-1]


@pytest.fixture
def calls(service: Workspace, monkeypatch: pytest.MonkeyPatch) -> CallLog:
    """What the window asks ``service`` for from now on (every part method of :data:`_SPIED`)."""
    return CallLog(service, monkeypatch, *_SPIED)
