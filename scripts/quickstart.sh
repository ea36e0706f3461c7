#!/usr/bin/env bash
# README command 1: set everything up, then run the demo on the embedded default
# (SmolLM2 on the CPU vLLM engine where there is no GPU): a window where there is a
# display, the terminal otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh smollm2
printf '\n== running the demo\n'
exec .venv/bin/workstation demo "$@"
