#!/usr/bin/env bash
# Set up everything the app needs on a fresh Linux machine (idempotent):
# system libraries Qt needs, the sandbox of agents' commands (bubblewrap), the app's
# virtual environment (.venv), the managed vLLM engine environment and the embedded
# model(s). Usage: scripts/setup.sh [--dev] [MODEL...]
set -euo pipefail
cd "$(dirname "$0")/.."

dev=0
models=()
for arg in "$@"; do
  case "$arg" in
    --dev) dev=1 ;;
    *) models+=("$arg") ;;
  esac
done
[ ${#models[@]} -gt 0 ] || models=(smollm2)

step() { printf '\n== %s\n' "$*"; }

# Root, or password-less sudo, for system packages; empty when neither.
as_root=()
if [ "$(id -u)" = 0 ]; then as_root=(env)
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then as_root=(sudo -n)
fi
apt_install() {  # apt_install PKG...: installs where it can, else says the command to run
  if [ ${#as_root[@]} -gt 0 ] && command -v apt-get >/dev/null; then
    "${as_root[@]}" apt-get update -qq
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
  else
    echo "cannot install system packages here (not root, no password-less sudo); run: sudo apt-get install $*" >&2
    return 1
  fi
}

# Qt (even offscreen) needs a few shared libraries and a font.
need_libs=()
for lib in libEGL.so.1 libGL.so.1 libxkbcommon.so.0 libfontconfig.so.1 libdbus-1.so.3 libglib-2.0.so.0; do
  ldconfig -p 2>/dev/null | grep -q "$lib" || need_libs+=("$lib")
done
if [ ${#need_libs[@]} -gt 0 ] || ! fc-list 2>/dev/null | grep -qi dejavu; then
  step "installing system libraries for Qt (${need_libs[*]:-fonts})"
  apt_install libegl1 libgl1 libxkbcommon0 libfontconfig1 libdbus-1-3 libglib2.0-0 fonts-dejavu-core || true
fi

# The sandbox of agents' commands: installed where this can (root, sudo -n), else it stops
# with the command to run; without it the app runs no command by itself.
scripts/install_sandbox.sh

# Tests also validate the desktop entry.
if [ "$dev" = 1 ]; then
  missing_tools=()
  command -v desktop-file-validate >/dev/null || missing_tools+=(desktop-file-utils)
  command -v appstreamcli >/dev/null || missing_tools+=(appstream)
  if [ ${#missing_tools[@]} -gt 0 ] && [ ${#as_root[@]} -gt 0 ]; then
    step "installing test tools: ${missing_tools[*]}"
    apt_install "${missing_tools[@]}" || true
  fi
fi

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
"$PY" -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is required"'

if [ ! -x .venv/bin/python ]; then
  step "creating the app environment (.venv)"
  "$PY" -m venv .venv
fi
step "installing workstation into .venv"
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null
if [ "$dev" = 1 ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
else
  .venv/bin/python -m pip install -q --disable-pip-version-check -e .
fi

# The desktop's Qt platform plugin (X11's xcb needs libxcb-icccm4, -keysyms1, -cursor0 …):
# the app's own check names what the plugin lacks (ui/qt_platform.py), installed here where
# it can be; without them the window cannot open on a desktop (offscreen still works).
for platform in xcb; do
  qt_missing=$(.venv/bin/python -m workstation.ui.qt_platform --packages "$platform") || qt_missing=""
  if [ -n "$qt_missing" ]; then
    step "installing the libraries of Qt's $platform platform plugin: $qt_missing"
    # shellcheck disable=SC2086 - one package per word
    apt_install $qt_missing || echo "the window needs them on an X11 desktop (\`workstation doctor\` checks)" >&2
  fi
done

step "setting up the vLLM engine environment"
.venv/bin/workstation engine setup

step "preparing model(s): ${models[*]}"
.venv/bin/workstation model prepare "${models[@]}"
