#!/usr/bin/env bash
# README command 2: set everything up (with test tools, both models and the tiny LoRA adapter) and run the
# whole test suite. `.ci/run` calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
scripts/setup.sh --dev smollm2 tiny tiny-lora

export QT_QPA_PLATFORM=offscreen
printf '\n== layering contracts (import-linter)\n'
.venv/bin/lint-imports

printf '\n== test suite\n'
# which host ran it: the engine tests' time depends on the cores and on AVX-512 (ENGINE.md)
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), avx512f: $(grep -qw avx512f /proc/cpuinfo && echo yes || echo no)"
set +e
.venv/bin/python -m pytest "$@"
rc=$?
set -e
[ "$rc" != 5 ] || echo "pytest collected no tests: that is a failure, not a pass" >&2
echo "suite duration: $(( $(date +%s) - started )) s (setup included)"
exit "$rc"
