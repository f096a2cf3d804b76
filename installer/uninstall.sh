#!/usr/bin/env bash
# Remove what installer/install.sh added: the virtual environment and the desktop entry.
# The user's libraries, annotations and models ($POLYSEEK_HOME or ~/.local/share/polyseek) are kept unless
# --purge is given.
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
rm -rf "$venv"
rm -f "${XDG_DATA_HOME:-$HOME/.local/share}/applications/polyseek.desktop"
if [ "$purge" = 1 ]; then
  rm -rf "${POLYSEEK_HOME:-${XDG_DATA_HOME:-$HOME/.local/share}/polyseek}"
  echo "removed Polyseek and all its data"
else
  echo "removed Polyseek; your libraries and models are kept in ${POLYSEEK_HOME:-${XDG_DATA_HOME:-$HOME/.local/share}/polyseek}"
fi
