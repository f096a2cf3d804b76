"""The GUI's own settings: window state and a few preferences, in one INI file under ``engine.paths.config_dir()``.

One typed wrapper over :class:`QSettings` so widgets never spell keys themselves. The file carries a schema
version; :data:`_MIGRATIONS` lifts older files (napari's settings do the same). QSettings writes the file
through a temporary file and a rename, so a crash never leaves it half written. Tests isolate it by pointing
``POLYSEEK_HOME`` at a temporary folder.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QByteArray, QSettings

from engine import paths

SCHEMA_VERSION = 1
MIN_THUMBNAIL, MAX_THUMBNAIL = 96, 320
DEVICES = ("auto", "cpu", "cuda")  # the trainer's --device: auto takes the GPU when there is one
FILE_NAME = "gui.ini"

# _MIGRATIONS[v] takes a settings file from version v to v + 1.
_MIGRATIONS: dict[int, Callable[[QSettings], None]] = {}


def settings_file() -> Path:
    """Where the GUI settings live (the platform's settings folder, or the Polyseek home when set)."""
    return paths.settings_file(FILE_NAME)


class GuiSettings:
    """Typed access to the GUI settings file."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or settings_file()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._qs = QSettings(str(self.path), QSettings.Format.IniFormat)
        self._migrate()

    def _migrate(self) -> None:
        version = int(self._qs.value("schema_version", 0) or 0)
        if version == 0 and not self._qs.allKeys():
            version = SCHEMA_VERSION  # a new file starts at the current layout
        while version < SCHEMA_VERSION:
            if version in _MIGRATIONS:
                _MIGRATIONS[version](self._qs)
            version += 1
        self._qs.setValue("schema_version", SCHEMA_VERSION)

    def _bytes(self, key: str) -> QByteArray | None:
        value = self._qs.value(key)
        return value if isinstance(value, QByteArray) and not value.isEmpty() else None

    def _str(self, key: str, default: str) -> str:
        value = self._qs.value(key, default)
        return str(value) if value is not None else default

    def _int(self, key: str, default: int) -> int:
        try:
            return int(self._qs.value(key, default))
        except (TypeError, ValueError):
            return default

    # --- window
    @property
    def geometry(self) -> QByteArray | None:
        return self._bytes("window/geometry")

    @geometry.setter
    def geometry(self, value: QByteArray) -> None:
        self._qs.setValue("window/geometry", value)

    @property
    def geometry_scale(self) -> float | None:
        """The device pixel ratio the geometry was saved at (None: not said, an older file)."""
        try:
            value = self._qs.value("window/scale")
            return float(value) if value is not None else None
        except (TypeError, ValueError):
            return None

    @geometry_scale.setter
    def geometry_scale(self, value: float) -> None:
        self._qs.setValue("window/scale", float(value))

    @property
    def window_state(self) -> QByteArray | None:
        return self._bytes("window/state")

    @window_state.setter
    def window_state(self, value: QByteArray) -> None:
        self._qs.setValue("window/state", value)

    def splitter_state(self, name: str) -> QByteArray | None:
        return self._bytes(f"window/splitter_{name}")

    def set_splitter_state(self, name: str, value: QByteArray) -> None:
        self._qs.setValue(f"window/splitter_{name}", value)

    # --- preferences
    @property
    def library(self) -> str:
        """The library the window opens."""
        return self._str("library/name", "default")

    @library.setter
    def library(self, name: str) -> None:
        self._qs.setValue("library/name", name)

    @property
    def demo_offered(self) -> bool:
        """Whether the first-start demo library was already set up once."""
        return self._int("library/demo_offered", 0) == 1

    @demo_offered.setter
    def demo_offered(self, value: bool) -> None:
        self._qs.setValue("library/demo_offered", 1 if value else 0)

    @property
    def browse_sort(self) -> str:
        """The order the library is listed in without a query (``Library.browse``'s ``sort``), as last chosen;
        the browse bar shows its default for a value it does not offer."""
        return self._str("browse/sort", "newest")

    @browse_sort.setter
    def browse_sort(self, value: str) -> None:
        self._qs.setValue("browse/sort", str(value))

    @property
    def page_size(self) -> int:
        """How many results one search page asks for (more load as the grid scrolls)."""
        return max(1, self._int("search/page_size", 60))

    @page_size.setter
    def page_size(self, value: int) -> None:
        self._qs.setValue("search/page_size", max(1, int(value)))

    @property
    def thumbnail_size(self) -> int:
        """The edge of a result's picture in the grid, in pixels (Preferences)."""
        return min(MAX_THUMBNAIL, max(MIN_THUMBNAIL, self._int("results/thumbnail_size", 160)))

    @thumbnail_size.setter
    def thumbnail_size(self, value: int) -> None:
        self._qs.setValue("results/thumbnail_size", int(value))

    @property
    def cutoff_percent(self) -> int:
        """The relevance cutoff slider's value: p(match) >= value / 100 (0 = off)."""
        return min(100, max(0, self._int("search/cutoff_percent", 0)))

    @cutoff_percent.setter
    def cutoff_percent(self, value: int) -> None:
        self._qs.setValue("search/cutoff_percent", int(value))

    @property
    def training_device(self) -> str:
        """Where the trainer runs (its ``--device``): ``auto``, ``cpu`` or ``cuda`` (Preferences)."""
        value = self._str("training/device", "auto")
        return value if value in DEVICES else "auto"

    @training_device.setter
    def training_device(self, value: str) -> None:
        if value not in DEVICES:
            raise ValueError(f"training device must be one of {DEVICES}, not {value!r}")
        self._qs.setValue("training/device", value)

    @property
    def trainer_command(self) -> list[str]:
        """The command that starts the trainer; its ``train`` arguments are appended."""
        value = self._qs.value("training/command")
        if isinstance(value, list) and value:
            return [str(part) for part in value]
        if isinstance(value, str) and value:
            return [value]
        from engine.terms import TRAINER_PROGRAM

        return list(TRAINER_PROGRAM)

    @trainer_command.setter
    def trainer_command(self, command: list[str]) -> None:
        self._qs.setValue("training/command", list(command))

    @property
    def last_data_folder(self) -> str:
        return self._str("training/data_folder", "")

    @last_data_folder.setter
    def last_data_folder(self, folder: str) -> None:
        self._qs.setValue("training/data_folder", folder)

    def sync(self) -> None:
        """Write pending changes to disk now."""
        self._qs.sync()
