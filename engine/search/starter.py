"""The starter model: a trained model shipped in ``resources/models/starter/``, so search is good before the
user writes a single caption.

A new library is given it once: :func:`offer_starter` copies the shipped folder into the models folder (where
retrains read it with ``--init-from``), registers it as :data:`STARTER_NAME` and activates it when no model is
active. A library that already has it registered keeps it (its retrains started from it, and a user who switched to
zero-shot ranking stays there); when a later release ships other weights, those are registered beside it under
their installed folder's name (``starter-<digest>``), listed but not activated: the user moves to them.
``POLYSEEK_STARTER=off`` turns the offer off (the test suite does, to test zero-shot ranking).

How it was made and how to rebuild it: ``tools/build_starter.py`` and its ``starter.json``.

The models searched beside it (its PVSE companion and that one's PCME, :mod:`engine.search.companion`) ship as
float16 weights without their ONNX graphs: ``polyseek prepare`` (the trainer process, with the other pretrained
assets) exports them into :func:`prepared_graphs`, and the installed copy takes them from there (:func:`_top_up`).
Until then the starter searches alone. A starter whose last MiniLM layers learnt with it (``--text-layers``) ships
those layers' weights, and its manifest names a text graph it lacks (:func:`lacks_text_graph`): ``polyseek
prepare`` exports it too (:data:`TEXT_FOLDER`), and the starter is offered once its installed copy has it (its
queries cannot be encoded without it).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from engine import paths
from engine.features.backbone import AssetsMissing
from engine.files import atomic_write_bytes
from engine.library.catalog import Catalog

log = logging.getLogger(__name__)

STARTER_NAME = "starter"
RECORD_FILE = "starter.json"


def shipped_starter() -> Path | None:
    """The starter model folder that ships with the app, or None when this installation has none."""
    folder = paths.shipped_starter_dir()
    return folder if (folder / "onnx" / "manifest.json").is_file() else None


def starter_enabled() -> bool:
    return os.environ.get("POLYSEEK_STARTER", "on").strip().lower() not in ("off", "0", "no", "false")


GRAPHS_DIR = "starter-graphs"  # in the assets folder: the companions' graphs ``polyseek prepare`` exported
FAILED_NOTE = "FAILED"  # left there instead when a companion could not be exported (trainer/startergraphs.py)

TEXT_FOLDER = "text-encoder"  # beside the companions' prepared graphs: the starter's own fine-tuned text encoder

# shipped after a starter with the same weights was installed (a folder before the file that names it)
ADDED_LATER = ("caption_words.json", "companion", "companion/model.safetensors", "pcme", "companion/companion.json",
               "companion.json")


def installed_name(shipped: Path) -> str:
    """The installed copy's folder name: the starter's name and the digest of its weights and of the weights of the
    models searched beside it (a release whose companion learnt anew is a new starter too: an installed copy's
    companion, which libraries embedded their items with, is never replaced)."""
    files = [shipped / "model.safetensors"]
    files += [shipped / folder / "model.safetensors" for folder in companion_folders(shipped)]
    versions = tuple((f, f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.is_file())
    return _installed_name(versions)


@functools.lru_cache(maxsize=4)
def _installed_name(versions: tuple[tuple[Path, int, int], ...]) -> str:
    """Digest of the weights, once per set of file versions and process (every library open asks); the starter's
    own weights alone give the digest earlier releases named their copies with."""
    digest = hashlib.blake2b(versions[0][0].read_bytes(), digest_size=6)
    for path, _, _ in versions[1:]:
        digest.update(hashlib.blake2b(path.read_bytes(), digest_size=16).digest())
    return f"{STARTER_NAME}-{digest.hexdigest()}"


def installed_starter(shipped: Path) -> Path:
    """The shipped folder copied once into the models folder, under a name carrying its weights' digest
    (a new release's starter lands beside the old one, never over a model a library uses)."""
    dest = paths.models_dir() / installed_name(shipped)
    if not (dest / "onnx" / "manifest.json").is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        _copy_folder(shipped, dest)
    _top_up(shipped, dest)
    return dest


def _copy_folder(source: Path, dest: Path) -> None:
    """``source`` copied to ``dest`` whole or not at all (a staging folder beside it, renamed); a half copy left at
    ``dest`` by an interrupted start is replaced."""
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        shutil.copytree(source, staging, dirs_exist_ok=True)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _top_up(shipped: Path, installed: Path) -> bool:
    """Files a later release ships beside the same weights (:data:`ADDED_LATER`), and the companions' graphs once
    ``polyseek prepare`` has exported them, added to an installed copy of the starter; nothing there is replaced.
    Best effort: a read-only models folder keeps the copy as it is. Returns whether anything was added."""
    sources = [(shipped / name, installed / name) for name in ADDED_LATER]
    added = False
    for folder in graphs_to_prepare(shipped):
        graphs = prepared_graphs(shipped, folder)
        if (graphs / "manifest.json").is_file():  # not a note saying why they could not be exported
            sources.append((graphs, installed / folder / "onnx"))
    text = text_graph(shipped)
    if text is not None and not text.is_file():  # shipped as weights: its graph is prepare's
        sources.append((prepared_graphs(shipped, TEXT_FOLDER) / text.name, installed / "onnx" / text.name))
    for source, dest in sources:
        try:
            if source.is_file() and not dest.is_file():
                atomic_write_bytes(dest, source.read_bytes())
                added = True
            elif source.is_dir() and not dest.exists():
                _copy_folder(source, dest)
                added = True
        except OSError as exc:
            log.warning("could not add %s to %s (%s)", source.name, installed, exc)
    return added


def companion_folders(shipped: Path) -> list[str]:
    """The folders (relative to ``shipped``) of the models searched beside the starter: the companion it names,
    then that one's own."""
    from engine.search.companion import read_companion

    root, folders, model = shipped.resolve(), [], shipped
    for _ in range(2):  # LibraryState opens one level of companions beside the active model's own
        spec = read_companion(model)
        if spec is None or not spec.folder.is_relative_to(root) or spec.folder == root:
            break
        folders.append(spec.folder.relative_to(root).as_posix())
        model = spec.folder
    return folders


def graphs_to_prepare(shipped: Path) -> list[str]:
    """:func:`companion_folders` that ship without their ONNX graphs."""
    return [f for f in companion_folders(shipped) if not (shipped / f / "onnx" / "manifest.json").is_file()]


def prepared_graphs(shipped: Path, folder: str, assets: Path | None = None) -> Path:
    """Where ``polyseek prepare`` exports the graphs of the starter's companion ``folder`` (per starter weights), in
    ``assets`` (default: the assets folder the engine reads)."""
    return (assets or paths.assets_dir()) / GRAPHS_DIR / installed_name(shipped) / folder


def text_graph(folder: Path) -> Path | None:
    """The fine-tuned text encoder's graph a model folder's manifest names (``text_model``), or None when the model
    reads the stock MiniLM's features."""
    try:
        manifest = json.loads((folder / "onnx" / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    entry = manifest.get("text_model") if isinstance(manifest, dict) else None
    return folder / "onnx" / str(entry["file"]) if isinstance(entry, dict) and entry.get("file") else None


def lacks_text_graph(folder: Path) -> bool:
    """Whether a model folder's manifest names a text graph the folder does not hold: the shipped starter, whose
    fine-tuned MiniLM layers ship as weights (``polyseek prepare`` exports their graph), and an installed copy before
    that (its queries cannot be encoded)."""
    graph = text_graph(folder)
    return graph is not None and not graph.is_file()


def folders_to_prepare(shipped: Path) -> list[str]:
    """What ``polyseek prepare`` exports for the shipped starter: :func:`graphs_to_prepare`, then
    :data:`TEXT_FOLDER` when the starter's own MiniLM graph is not shipped."""
    return graphs_to_prepare(shipped) + ([TEXT_FOLDER] if lacks_text_graph(shipped) else [])


def starter_graphs_ready() -> bool:
    """Whether every graph the shipped starter and its companions need is prepared, or could not be and a note says
    why (True without a starter to offer)."""
    shipped = shipped_starter() if starter_enabled() else None
    if shipped is None:
        return True
    return all(graphs_settled(prepared_graphs(shipped, f)) for f in folders_to_prepare(shipped))


def graphs_settled(folder: Path) -> bool:
    """Whether a companion's prepared ``folder`` holds its graphs, or a note saying why it could not."""
    return (folder / "manifest.json").is_file() or (folder / FAILED_NOTE).is_file()


def offer_starter(catalog: Catalog, register: Callable[[Path, str], str],
                  activate: Callable[[str], None], topped_up: Callable[[], None] = lambda: None) -> str | None:
    """Register (``register(folder, name)``, the service's, which checks the model against the backbone) and,
    when nothing is active, activate the starter model in a library that never had it; returns its registered
    name, or None when there is none to offer. A starter that does not fit this installation's pretrained assets
    (another backbone) is skipped with a log line, never an error. ``topped_up`` is called when files were added
    to the library's installed starter (what was opened from it is stale)."""
    if not starter_enabled():
        return None
    shipped = shipped_starter()
    registered = next((m for m in catalog.models() if m.name == STARTER_NAME), None)
    if registered is not None:
        folder = Path(registered.path)
        if shipped is None:
            return STARTER_NAME
        if ((_copied_from(folder, shipped) or folder.name == installed_name(shipped))  # the same weights
                and _top_up(shipped, folder)):
            topped_up()  # e.g. its companions' graphs, prepared since the library opened it
        else:
            _list_newer(catalog, shipped, register)
        return STARTER_NAME
    if shipped is None:
        return None
    try:
        folder = installed_starter(shipped)
        if lacks_text_graph(folder):  # the first start's prepare exports it, then offers the starter again
            raise AssetsMissing(f"{folder}: its text encoder's graph is not prepared yet (`polyseek prepare`)")
        name = register(folder, STARTER_NAME)
    except AssetsMissing:  # a first start prepares them, then offers the starter again: not worth a warning
        log.info("the starter model waits for the pretrained assets")
        return None
    except Exception as exc:  # noqa: BLE001 - the app must open without it: zero-shot ranking is the fallback
        log.warning("the starter model could not be used (%s); zero-shot ranking stays", exc)
        return None
    if catalog.active_model() is None:
        activate(name)
    return name


def _copied_from(installed: Path, shipped: Path) -> bool:
    """True when ``installed`` holds a copy of ``shipped``'s weights as :func:`installed_starter` made it (same size
    and modification time: the copy keeps it), so a library's open need not hash 14 MB to know."""
    try:
        a, b = (installed / "model.safetensors").stat(), (shipped / "model.safetensors").stat()
    except OSError:
        return False
    return (a.st_size, a.st_mtime_ns) == (b.st_size, b.st_mtime_ns)


def _list_newer(catalog: Catalog, shipped: Path, register: Callable[[Path, str], str]) -> None:
    """A release's starter with other weights than the library's own: installed and registered under its folder's
    name, not activated (once; nothing happens when it is already listed or cannot be used here)."""
    name = installed_name(shipped)
    folder = (paths.models_dir() / name).resolve()
    if any(m.name == name or Path(m.path).resolve() == folder for m in catalog.models()):  # listed (or renamed)
        return
    try:
        folder = installed_starter(shipped)
        if lacks_text_graph(folder):
            raise AssetsMissing(f"{folder}: its text encoder's graph is not prepared yet")
        register(folder, name)
    except AssetsMissing:
        return
    except Exception as exc:  # noqa: BLE001 - the library keeps its own starter
        log.warning("the newer starter model could not be listed (%s)", exc)
        return
    log.info("a newer starter model is listed as %s (the library's active model is unchanged)", name)


def starter_record(folder: Path) -> dict:
    """The recipe record a starter folder carries (``starter.json``)."""
    return json.loads((Path(folder) / RECORD_FILE).read_text(encoding="utf-8"))
