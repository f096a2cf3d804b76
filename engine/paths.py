"""Where Polyseek keeps its files.

With ``$POLYSEEK_HOME`` set (tests, benchmarks, a portable install) everything lives under that one folder:
``libraries/``, ``models/``, ``assets/``, ``features.sqlite``, ``cache/``, ``logs/`` and the settings files.

Without it, each kind of file goes where the platform keeps it (``platformdirs``, app name "polyseek"):

- data (the home: libraries, models, assets): Linux ``$XDG_DATA_HOME/polyseek`` (``~/.local/share/polyseek``),
  macOS ``~/Library/Application Support/polyseek``, Windows ``%LOCALAPPDATA%\\polyseek``;
- cache: ``~/.cache/polyseek``, ``~/Library/Caches/polyseek``, ``%LOCALAPPDATA%\\polyseek\\Cache``;
- logs: ``~/.local/state/polyseek/log``, ``~/Library/Logs/polyseek``, ``%LOCALAPPDATA%\\polyseek\\Logs``;
- settings: ``~/.config/polyseek``, ``~/Library/Application Support/polyseek``, ``%LOCALAPPDATA%\\polyseek``.

The data folder is the one Polyseek always used on Linux, so existing libraries and models stay where they
are; a settings file written there by an older version keeps being used (:func:`settings_file`). Prepared
pretrained assets live in ``<home>/assets`` unless ``$POLYSEEK_ASSETS`` points elsewhere, so tests and
benchmarks can share one prepared copy while isolating everything else.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "polyseek"


def _override() -> Path | None:
    env = os.environ.get("POLYSEEK_HOME")
    return Path(env).expanduser().resolve() if env else None


def _platform() -> platformdirs.PlatformDirs:
    return platformdirs.PlatformDirs(APP_NAME, appauthor=False)


def home() -> Path:
    """The root folder for libraries, models, the feature store and the prepared assets."""
    return _override() or _platform().user_data_path


def cache_dir() -> Path:
    """Files that can be rebuilt at any time (pasted query pictures, text-feature caches)."""
    override = _override()
    return override / "cache" if override else _platform().user_cache_path


def log_dir() -> Path:
    """Rotating logs of the app, the trainer and the first-use preparation."""
    override = _override()
    return override / "logs" if override else _platform().user_log_path


def config_dir() -> Path:
    """Settings the user chose (window state, preferences)."""
    return _override() or _platform().user_config_path


def settings_file(name: str) -> Path:
    """The settings file ``name`` in :func:`config_dir`, or where an older version wrote it (in :func:`home`)
    when only that one exists, so an upgrade keeps the user's settings."""
    current = config_dir() / name
    legacy = home() / name
    return legacy if not current.exists() and legacy.exists() else current


def assets_dir() -> Path:
    """Prepared pretrained assets (see ``trainer.prepare``; prepared on first use by ``engine.features.assets``)."""
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


def shipped_starter_dir() -> Path:
    """Where this installation's starter model ships (``resources/models/starter``; it may be absent)."""
    import resources

    return Path(resources.__file__).resolve().parent / "models" / "starter"
