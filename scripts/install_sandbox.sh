#!/usr/bin/env bash
# Install and check the sandbox of agents' commands (bubblewrap). Called by setup.sh, so by
# both README commands and CI; idempotent. Without it the app never runs a command by
# itself: it asks a person for each one, and runs that nobody watches refuse them.
#
# Installs the Debian package `bubblewrap` when it can (as root, or with `sudo -n`);
# otherwise it stops (status 1) with the exact command to run. Then it runs bubblewrap once
# with the flags agents' commands get, and stops with the reason if that fails.
# Skipped when the sandbox is turned off (WORKSTATION_SANDBOX__MODE=off, or "mode": "off"
# in the "sandbox" section of the settings file): the user's explicit choice.
# WORKSTATION_SANDBOX__BWRAP (or "bwrap" in that section) names another bwrap program.
set -euo pipefail

say() { printf '%s\n' "$*" >&2; }

# what the settings file says (the environment wins, as in the app)
data_dir=${WORKSTATION_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/workstation}
from_file() {
  local file="$data_dir/settings.json"
  [ -f "$file" ] || return 0
  python3 - "$file" "$1" <<'EOF' 2>/dev/null || true
import json, sys
try:
    value = json.load(open(sys.argv[1])).get("sandbox", {}).get(sys.argv[2])
except (OSError, ValueError, AttributeError):
    value = None
print(value or "")
EOF
}
mode=${WORKSTATION_SANDBOX__MODE:-$(from_file mode)}
bwrap=${WORKSTATION_SANDBOX__BWRAP:-$(from_file bwrap)}
if [ "$mode" = off ]; then
  say "command sandbox: off in settings (your choice): agents' commands run unconfined"
  exit 0
fi

install_hint() {
  if command -v apt-get >/dev/null; then echo "sudo apt-get install -y bubblewrap"
  elif command -v dnf >/dev/null; then echo "sudo dnf install -y bubblewrap"
  elif command -v zypper >/dev/null; then echo "sudo zypper install -y bubblewrap"
  elif command -v pacman >/dev/null; then echo "sudo pacman -S --noconfirm bubblewrap"
  else echo "install the 'bubblewrap' package with your system's package manager"
  fi
}

if [ -z "$bwrap" ] && ! command -v bwrap >/dev/null; then
  as_root=()
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then as_root=(sudo -n); else as_root=(none); fi
  fi
  if [ "${as_root[*]-}" = none ] || ! command -v apt-get >/dev/null; then
    say "bubblewrap, the sandbox of agents' commands, is not installed, and this script cannot install it"
    say "(it needs root or password-less sudo, and apt-get). Run:"
    say ""
    say "    $(install_hint)"
    say ""
    say "then run this command again. (To run agents' commands unconfined instead — they could then"
    say "read and write whatever your user can — set WORKSTATION_SANDBOX__MODE=off.)"
    exit 1
  fi
  printf '\n== installing the command sandbox (bubblewrap)\n'
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null
fi

program=${bwrap:-$(command -v bwrap || true)}
if [ -z "$program" ] || [ ! -x "$program" ]; then
  say "bubblewrap is not usable: ${program:-bwrap} is not an executable program"
  say "(the settings name it: sandbox.bwrap / WORKSTATION_SANDBOX__BWRAP). Fix that, or run: $(install_hint)"
  exit 1
fi
# the flags every command gets (workstation/agent/sandbox.py), on a trivial command
if ! out=$("$program" --die-with-parent --new-session --unshare-all --cap-drop ALL \
      --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp -- /bin/sh -c 'exit 0' 2>&1); then
  say "bubblewrap ($program) is installed but refused to run: ${out:-no message}"
  say "It needs unprivileged user namespaces: allow them (Debian: sudo sysctl -w kernel.unprivileged_userns_clone=1;"
  say "Ubuntu 24.04+: sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or an AppArmor profile for bwrap),"
  say "then run this command again."
  exit 1
fi
echo "command sandbox: bubblewrap ($program) works"
