"""The ONNX graphs of the models the shipped starter searches beside it, exported at install time.

The starter's PVSE companion and that one's PCME ship as float16 weights only (``resources/models/starter/companion``
and ``pcme``, see :mod:`engine.search.starter`): their graphs would add 15 MB to the install that ``polyseek
prepare`` can write in seconds. :func:`prepare_starter_graphs` exports each from its weights (a warm start's loader:
float16 into float32 parameters, the branches that learnt nothing built afresh), with the ``trained_on`` counts its
``starter.json`` records, and without the encoders of those branches, into
:func:`engine.search.starter.prepared_graphs`; the engine copies them into the installed starter.

The starter's own fine-tuned MiniLM layers (a starter built with ``--text-layers``) ship as weights too: their graph
(the stock MiniLM with those layers, 90 MB) is exported the same way into the folder :data:`TEXT_FOLDER` names.

A model that cannot be exported leaves a ``FAILED`` note there instead (a companion: the starter then searches alone;
the starter's text encoder: zero-shot ranking stays; the note says why); ``polyseek prepare --force`` tries again.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from engine.progress import Progress
from engine.search.starter import (
    FAILED_NOTE,
    TEXT_FOLDER,
    folders_to_prepare,
    graphs_settled,
    prepared_graphs,
    shipped_starter,
    starter_enabled,
)
from trainer.checkpoint import load_model
from trainer.exporting import export_folder
from trainer.methods.export import drop_untrained_encoders
from trainer.textencoder import export_text, finetuned_text, load_text_encoder

log = logging.getLogger(__name__)


def prepare_starter_graphs(assets: Path | None = None, progress: Callable[[Progress], None] | None = None,
                           shipped: Path | None = None) -> list[Path]:
    """Export the graphs the companions of the starter ``shipped`` (default: the one this installation offers)
    lack into the assets folder ``assets`` (default: the engine's; nothing when they are there); returns the
    folders written."""
    if shipped is None:
        shipped = shipped_starter() if starter_enabled() else None
    if shipped is None:
        return []
    todo = [f for f in folders_to_prepare(shipped) if not graphs_settled(prepared_graphs(shipped, f, assets))]
    written = []
    for done, folder in enumerate(todo):
        if progress is not None:
            progress(Progress(done, len(todo), "preparing the starter's own models"))
        dest = prepared_graphs(shipped, folder, assets)
        try:
            if folder == TEXT_FOLDER:
                export_starter_text(shipped, dest)
            else:
                export_companion(shipped / folder, dest)
        except Exception as exc:  # noqa: BLE001 - the starter searches alone; the note says why
            log.exception("could not export the graphs of %s", shipped / folder)
            dest.mkdir(parents=True, exist_ok=True)
            (dest / FAILED_NOTE).write_text(f"{type(exc).__name__}: {exc}\n", encoding="utf-8")
        written.append(dest)
    return written


def export_companion(model_dir: Path, dest: Path) -> dict:
    """``model_dir``'s graphs exported into ``dest`` (replaced whole), as its ``starter.json`` says it was trained;
    returns the manifest."""
    record = json.loads((model_dir / "starter.json").read_text(encoding="utf-8"))

    def write(staging: Path) -> dict:
        export_folder(model_dir, load_model(model_dir), staging, trained_on=record.get("trained_on"))
        return drop_untrained_encoders(staging)

    return _replace_folder(dest, write)


def export_starter_text(shipped: Path, dest: Path) -> dict:
    """The starter's fine-tuned text encoder (stock MiniLM with its own last layers) exported into ``dest`` (replaced
    whole): its graph and ``manifest.json``, the manifest entry the starter's own manifest holds."""
    found = finetuned_text(shipped)
    if found is None:
        raise FileNotFoundError(f"{shipped}: its manifest names a text encoder, its weights name none")

    def write(staging: Path) -> dict:
        staging.mkdir()
        entry = export_text(load_text_encoder(found[2], found[1]), found[0], staging)
        (staging / "manifest.json").write_text(json.dumps(entry, indent=2) + "\n", encoding="utf-8")
        return entry

    return _replace_folder(dest, write)


def _replace_folder(dest: Path, write: Callable[[Path], dict]) -> dict:
    """``write(staging)`` into a staging folder beside ``dest``, which then replaces ``dest`` whole (an interrupted
    export leaves the old folder or none, never half of one); returns what ``write`` returned."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{dest.name}.", dir=dest.parent) as tmp:
        staging = Path(tmp) / "out"
        result = write(staging)
        staging.chmod(0o755)  # made by mkdtemp (0700); an assets folder may be shared by several users
        if dest.exists():
            shutil.rmtree(dest)
        staging.rename(dest)
    return result
