"""Where Polyseek keeps its files.

Everything lives under one home folder, ``$POLYSEEK_HOME`` or the XDG data folder
(``~/.local/share/polyseek``). Prepared pretrained assets (ONNX backbone, text encoder, vocabularies)
live in ``<home>/assets`` unless ``$POLYSEEK_ASSETS`` points elsewhere, so tests and benchmarks can
share one prepared copy while isolating everything else.
"""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """The root folder for libraries, models, caches, settings and logs."""
    env = os.environ.get("POLYSEEK_HOME")
    if env:
        return Path(env).expanduser().resolve()
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(xdg) / "polyseek"


def assets_dir() -> Path:
    """Prepared pretrained assets (see ``engine.prepare``)."""
    env = os.environ.get("POLYSEEK_ASSETS")
    return Path(env).expanduser().resolve() if env else home() / "assets"


def libraries_dir() -> Path:
    return home() / "libraries"


def library_dir(name: str) -> Path:
    """The folder of one named library (catalog, feature store, thumbnails, vector indexes)."""
    if not name or any(c in name for c in "/\\\0") or name in {".", ".."}:
        raise ValueError(f"library name {name!r} is not a plain folder name")
    return libraries_dir() / name


def models_dir() -> Path:
    return home() / "models"


def settings_path() -> Path:
    return home() / "settings.json"


def log_dir() -> Path:
    return home() / "logs"
