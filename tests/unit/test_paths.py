"""Where files go: everything under POLYSEEK_HOME when it is set, else the platform's folders (platformdirs)."""

from __future__ import annotations

from pathlib import Path

import platformdirs.macos
import pytest

from engine import paths


def test_polyseek_home_holds_everything(polyseek_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POLYSEEK_ASSETS")
    assert paths.home() == polyseek_home.resolve()
    assert paths.cache_dir() == polyseek_home / "cache"
    assert paths.log_dir() == polyseek_home / "logs"
    assert paths.config_dir() == polyseek_home
    assert paths.assets_dir() == polyseek_home / "assets"
    assert paths.library_dir("demo") == polyseek_home / "libraries" / "demo"


@pytest.fixture
def platform_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("POLYSEEK_HOME")
    monkeypatch.delenv("POLYSEEK_ASSETS")
    for name in ("XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


@pytest.mark.skipif(not platformdirs.PlatformDirs.__module__.endswith("unix"), reason="the Linux/BSD layout")
def test_linux_layout_keeps_the_old_data_folder(platform_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert paths.home() == platform_home / ".local" / "share" / "polyseek"  # where libraries always lived
    assert paths.assets_dir() == paths.home() / "assets"
    assert paths.cache_dir() == platform_home / ".cache" / "polyseek"
    assert paths.log_dir() == platform_home / ".local" / "state" / "polyseek" / "log"
    assert paths.config_dir() == platform_home / ".config" / "polyseek"
    monkeypatch.setenv("XDG_DATA_HOME", str(platform_home / "data"))
    assert paths.home() == platform_home / "data" / "polyseek"


def test_macos_layout(platform_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths, "_platform", lambda: platformdirs.macos.MacOS(paths.APP_NAME, appauthor=False))
    support = platform_home / "Library" / "Application Support" / "polyseek"
    assert paths.home() == support and paths.config_dir() == support
    assert paths.cache_dir() == platform_home / "Library" / "Caches" / "polyseek"
    assert paths.log_dir() == platform_home / "Library" / "Logs" / "polyseek"


def test_settings_written_by_an_older_version_are_kept(platform_home: Path) -> None:
    assert paths.settings_file("gui.ini") == paths.config_dir() / "gui.ini"
    legacy = paths.home() / "gui.ini"
    legacy.parent.mkdir(parents=True)
    legacy.write_text("[General]\n")
    assert paths.settings_file("gui.ini") == legacy  # only the old one exists: use it
    (paths.config_dir() / "gui.ini").parent.mkdir(parents=True)
    (paths.config_dir() / "gui.ini").write_text("[General]\n")
    assert paths.settings_file("gui.ini") == paths.config_dir() / "gui.ini"

