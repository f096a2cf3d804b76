"""Whether Qt's X11 ("xcb") platform plugin can load here, checked before Qt tries (issue #44).

On a bare Debian or Ubuntu the X11 libraries Qt's xcb plugin links to are not all installed (libxcb-cursor0,
libxcb-icccm4 and libxcb-keysyms1 usually are not), and Qt then aborts with "Could not load the Qt platform plugin
'xcb'" and a list of plugins, which tells a user nothing about what to install. :func:`missing_xcb_packages`
asks the dynamic loader for the plugin's libraries (it loads each, as Qt will a moment later; only one it cannot
load is looked for further, in the ``ldconfig`` cache and ``LD_LIBRARY_PATH``), and :func:`startup_problem` says
in words what is missing and the one command that installs it. No Qt here: this runs before Qt is loaded, and
the installer runs it too (``python -m app.platformcheck --packages``).
"""

from __future__ import annotations

import argparse
import ctypes.util
import functools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping

# The libraries Qt 6's xcb plugin (libqxcb.so and libQt6XcbQpa.so) loads that are not Qt's own, by the name
# find_library takes, with the Debian / Ubuntu package that ships each. Listed from `ldd` of PySide6 6.x's plugin.
XCB_LIBRARIES: tuple[tuple[str, str], ...] = (
    ("xcb-cursor", "libxcb-cursor0"), ("xcb-icccm", "libxcb-icccm4"), ("xcb-keysyms", "libxcb-keysyms1"),
    ("xcb-image", "libxcb-image0"), ("xcb-render-util", "libxcb-render-util0"), ("xcb-util", "libxcb-util1"),
    ("xcb-randr", "libxcb-randr0"), ("xcb-shape", "libxcb-shape0"), ("xcb-shm", "libxcb-shm0"),
    ("xcb-sync", "libxcb-sync1"), ("xcb-xfixes", "libxcb-xfixes0"), ("xcb-xkb", "libxcb-xkb1"),
    ("xcb-render", "libxcb-render0"), ("xcb", "libxcb1"), ("X11-xcb", "libx11-xcb1"), ("X11", "libx11-6"),
    ("xkbcommon", "libxkbcommon0"), ("xkbcommon-x11", "libxkbcommon-x11-0"), ("fontconfig", "libfontconfig1"),
    ("EGL", "libegl1"), ("GL", "libgl1"),
)
EXIT_MISSING_LIBRARIES = 3  # the exit status of `polyseek` when the window cannot open for want of them

Lookup = Callable[[str], str | None]


@functools.cache
def _ldconfig_names() -> frozenset[str]:
    """The library file names the loader's cache knows (one ``ldconfig -p``; empty where there is none)."""
    for ldconfig in ("/sbin/ldconfig", "/usr/sbin/ldconfig", shutil.which("ldconfig")):
        if ldconfig and os.path.exists(ldconfig):
            try:
                listing = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=10,
                                         env={**os.environ, "LC_ALL": "C"}).stdout
            except (OSError, subprocess.SubprocessError):
                continue
            return frozenset(re.findall(r"^\s+(\S+)\s+\(", listing, re.MULTILINE))
    return frozenset()


# Each library's soname, by Debian's naming rule for library packages (the package is the soname with its major
# version: libxcb-icccm4 ships libxcb-icccm.so.4, libx11-6 libX11.so.6).
_SONAMES = {name: f"lib{name}.so.{package[len(package.rstrip('0123456789')):]}" for name, package in XCB_LIBRARIES}


def find_library(name: str) -> str | None:
    """``lib<name>.so.N`` as the dynamic loader finds it. The loader is asked first (``dlopen`` of its soname: no
    subprocess at each start, and what it loads Qt loads a moment later anyway); only a library it cannot load is
    looked for in its cache, read once (``ctypes.util.find_library`` would run ``ldconfig -p`` once per library),
    else by ``ctypes.util.find_library`` (which also looks in ``LD_LIBRARY_PATH``)."""
    soname = _SONAMES.get(name)
    if soname is not None:
        try:
            ctypes.CDLL(soname)
            return soname
        except OSError:
            pass
    prefix = f"lib{name}.so"
    found = next((n for n in _ldconfig_names() if n == prefix or n.startswith(prefix + ".")), None)
    return found or ctypes.util.find_library(name)


def xcb_platform_expected(env: Mapping[str, str] | None = None, platform: str | None = None) -> bool:
    """Whether Qt will pick its xcb plugin: on Linux with an X display and no ``QT_QPA_PLATFORM`` chosen (a
    Wayland session without X, ``offscreen`` or another platform does not need the X11 libraries)."""
    env = os.environ if env is None else env
    platform = sys.platform if platform is None else platform
    if not platform.startswith("linux") or env.get("QT_QPA_PLATFORM"):
        return False
    if env.get("WAYLAND_DISPLAY") and env.get("XDG_SESSION_TYPE") == "wayland":
        return False  # Qt 6 takes its Wayland plugin there
    return bool(env.get("DISPLAY"))


def missing_xcb_packages(find: Lookup | None = None) -> list[tuple[str, str]]:
    """``(library, package)`` of each library of :data:`XCB_LIBRARIES` the system does not have (``find``: how
    a library is looked up, :func:`find_library` by default)."""
    find = find or find_library
    return [(f"lib{name}.so", package) for name, package in XCB_LIBRARIES if not find(name)]


def install_command(packages: list[str], root: bool | None = None) -> str:
    """The one command that installs ``packages`` (``sudo`` unless running as root)."""
    root = (os.geteuid() == 0) if root is None and hasattr(os, "geteuid") else bool(root)
    return f"{'' if root else 'sudo '}apt-get install -y {' '.join(packages)}"


def startup_problem(env: Mapping[str, str] | None = None, find: Lookup | None = None,
                    platform: str | None = None) -> str | None:
    """What keeps the window from opening, in words, with the command that fixes it; None when nothing does
    (or when Qt will not use its xcb plugin)."""
    if not xcb_platform_expected(env, platform):
        return None
    missing = missing_xcb_packages(find)
    if not missing:
        return None
    packages = list(dict.fromkeys(package for _, package in missing))
    libraries = ", ".join(library for library, _ in missing)
    how = (f"Install them with:\n\n    {install_command(packages)}\n\n" if shutil.which("apt-get") else
           f"Install them with your system's package manager (on Debian or Ubuntu: "
           f"{install_command(packages)}).\n\n")
    return (f"Polyseek cannot open its window: the X11 libraries Qt needs to show it are missing "
            f"({libraries}).\n{how}"
            "Then start polyseek again. (QT_QPA_PLATFORM=wayland or offscreen picks another display.)")


def main(argv: list[str] | None = None) -> int:
    """``python -m app.platformcheck [--packages]``: exit 0 when the xcb plugin's libraries are all there; else
    exit 1 and print what is missing (``--packages``: only the Debian package names, one line)."""
    parser = argparse.ArgumentParser(prog="python -m app.platformcheck",
                                     description="Check the X11 libraries Qt's xcb platform plugin needs.")
    parser.add_argument("--packages", action="store_true", help="print only the missing Debian packages")
    args = parser.parse_args(argv)
    missing = missing_xcb_packages()
    if args.packages:
        if missing:
            print(" ".join(dict.fromkeys(package for _, package in missing)))
    elif missing:
        print("missing: " + ", ".join(f"{library} ({package})" for library, package in missing))
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
