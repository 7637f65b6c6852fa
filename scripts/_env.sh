# Shared by scripts/demo and scripts/test: a virtualenv in .venv with ilmek installed.
# Sourced, not run. Uses python3.11+ from PATH (override with PYTHON=...).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "ilmek needs Python 3.11 or newer; set PYTHON=/path/to/python3.11" >&2
  exit 1
fi
venv="$repo/.venv"
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
ensure_installed() {
  # $1: the extras to install, e.g. "" or "[test,lint]". Reinstalls only when the
  # metadata (pyproject.toml) or this script (how it installs) changed since.
  local stamp="$venv/.ilmek-installed$1"
  if [ ! -f "$stamp" ] || [ "$repo/pyproject.toml" -nt "$stamp" ] || [ "$repo/scripts/_env.sh" -nt "$stamp" ]; then
    echo "installing ilmek$1 into $venv (once)..." >&2
    # pip's own chatter goes to a log, shown only if the install fails.
    if ! { "$venv/bin/python" -m pip install --upgrade pip &&
           # Editable: a plain path entry to this folder (see [tool.setuptools] in
           # pyproject.toml), so edits need no reinstall and mypy sees ilmek's types.
           "$venv/bin/python" -m pip install -e "$repo$1"; } >"$venv/pip.log" 2>&1; then
      cat "$venv/pip.log" >&2
      echo "installing ilmek$1 failed; the log above is also in $venv/pip.log" >&2
      exit 1
    fi
    touch "$stamp"
  fi
}
