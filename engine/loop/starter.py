"""The starter model: a trained model shipped in ``resources/models/starter/``, so search is good before the
user writes a single caption.

A new library is given it once: :func:`offer_starter` copies the shipped folder into the models folder (where
retrains read it with ``--init-from``), registers it as :data:`STARTER_NAME` and activates it when no model is
active. A library that already has it registered is left alone, so a user who switched to zero-shot ranking
stays there. ``POLYSEEK_STARTER=off`` turns the offer off (the test suite does, to test zero-shot ranking).

How it was made and how to rebuild it: ``tools/build_starter.py`` and its ``starter.json``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from engine import paths

if TYPE_CHECKING:
    from engine.loop.service_api import LoopService

log = logging.getLogger(__name__)

STARTER_NAME = "starter"
RECORD_FILE = "starter.json"


def shipped_starter() -> Path | None:
    """The starter model folder that ships with the app, or None when this installation has none."""
    import resources

    folder = Path(resources.__file__).resolve().parent / "models" / "starter"
    return folder if (folder / "onnx" / "manifest.json").is_file() else None


def starter_enabled() -> bool:
    return os.environ.get("POLYSEEK_STARTER", "on").strip().lower() not in ("off", "0", "no", "false")


def installed_starter(shipped: Path) -> Path:
    """The shipped folder copied once into the models folder, under a name carrying its weights' digest
    (a new release's starter lands beside the old one, never over a model a library uses)."""
    digest = hashlib.blake2b((shipped / "model.safetensors").read_bytes(), digest_size=6).hexdigest()
    dest = paths.models_dir() / f"{STARTER_NAME}-{digest}"
    if not (dest / "onnx" / "manifest.json").is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
        try:
            shutil.copytree(shipped, staging, dirs_exist_ok=True)
            if dest.exists():  # half a copy from an interrupted start: replace it
                shutil.rmtree(dest)
            os.replace(staging, dest)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return dest


def offer_starter(service: LoopService) -> str | None:
    """Register and (when nothing is active) activate the starter model in a library that never had it;
    returns its registered name, or None when there is none to offer. A starter that does not fit this
    installation's pretrained assets (another backbone) is skipped with a log line, never an error."""
    if not starter_enabled():
        return None
    if any(m.name == STARTER_NAME for m in service.catalog.models()):
        return STARTER_NAME
    shipped = shipped_starter()
    if shipped is None:
        return None
    try:
        folder = installed_starter(shipped)
        name = service.register_model(folder, STARTER_NAME)
    except Exception as exc:  # noqa: BLE001 - the app must open without it: zero-shot ranking is the fallback
        log.warning("the starter model could not be used (%s); zero-shot ranking stays", exc)
        return None
    if service.catalog.active_model() is None:
        service.set_active_model(name)
    return name


def starter_record(folder: Path) -> dict:
    """The recipe record a starter folder carries (``starter.json``)."""
    return json.loads((Path(folder) / RECORD_FILE).read_text(encoding="utf-8"))
