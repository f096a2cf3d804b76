#!/usr/bin/env bash
# Remove what installer/install.sh added: the virtual environment and the desktop entry.
# The user's libraries, annotations and models ($POLYSEEK_HOME or ~/.local/share/polyseek) are kept unless
# --purge is given; --purge also removes Polyseek's cache, logs and settings folders (engine/paths.py).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$repo/.venv" purge=0
while [ $# -gt 0 ]; do
  case "$1" in
    --venv) venv=${2:?}; shift ;;
    --purge) purge=1 ;;
    *) echo "uninstall.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
data="${POLYSEEK_HOME:-${XDG_DATA_HOME:-$HOME/.local/share}/polyseek}"
folders=("$data")
if [ -x "$venv/bin/python" ]; then  # ask the app where it keeps things, before its environment goes
  mapfile -t folders < <("$venv/bin/python" -c \
    'from engine import paths; print("\n".join(map(str, (paths.home(), paths.cache_dir(), paths.log_dir(), paths.config_dir()))))' \
    2>/dev/null || echo "$data")
  data=${folders[0]:-$data}
fi
rm -rf "$venv"
rm -f "${XDG_DATA_HOME:-$HOME/.local/share}/applications/polyseek.desktop"
if [ "$purge" = 1 ]; then
  for folder in "${folders[@]}"; do rm -rf "$folder"; done
  echo "removed Polyseek and all its data (${folders[*]})"
else
  echo "removed Polyseek; your libraries and models are kept in $data"
fi
