#!/usr/bin/env bash
# On the GPU test machine, in the repository root of the device call (README.md beside this).
#
#   benchmarks/gpu/remote.sh stash            keep the part(s) this call carried (.gpu-payload/p*/)
#   benchmarks/gpu/remote.sh setup            all parts there: check, unpack, prepare the model
#   benchmarks/gpu/remote.sh suite ARGS...    run benchmarks/gpu/suite.py in that environment
#
# Everything lands under $WS_GPU (default /tmp/ws-gpu), which survives between calls while the
# machine stays up: site/ (vLLM and the app's needs), bin/bwrap, data/ (the app's data dir).
set -euo pipefail
WS_GPU=${WS_GPU:-/tmp/ws-gpu}
REPO=$(pwd)
mkdir -p "$WS_GPU/parts"

environment() {
  export PYTHONPATH="$WS_GPU/site:$REPO" PATH="$WS_GPU/bin:$PATH" PYTHONUNBUFFERED=1
  if ! command -v git >/dev/null && [ -x "$WS_GPU/git/bin/git" ]; then
    export PATH="$WS_GPU/git/bin:$PATH" GIT_EXEC_PATH="$WS_GPU/git/git-core"
  fi
  export WORKSTATION_DATA_DIR="$WS_GPU/data" WORKSTATION_ENGINE__PYTHON="$(command -v python3)"
  # no FlashInfer is carried: vLLM's sampler must not reach for it (the engine gets the user's
  # VLLM_* variables, so this is set as a user would set it)
  export VLLM_USE_FLASHINFER_SAMPLER=0
}

case "${1:-}" in
  stash)
    found=0
    for f in .gpu-payload/p*/part-*; do
      [ -f "$f" ] || continue
      cp "$f" "$WS_GPU/parts/"; found=$((found + 1))
    done
    [ -f .gpu-payload/plan.json ] && cp .gpu-payload/plan.json "$WS_GPU/plan.json"
    echo "stashed $found part(s); now there: $(ls "$WS_GPU/parts" | tr '\n' ' ')"
    ;;
  setup)
    t0=$(date +%s)
    python3 - "$WS_GPU" <<'PY'
import hashlib, json, pathlib, sys
ws = pathlib.Path(sys.argv[1]); plan = json.loads((ws / "plan.json").read_text())
missing = [p["name"] for p in plan["parts"] if not (ws / "parts" / p["name"]).is_file()]
if missing:
    sys.exit(f"parts missing: {missing} (carry each .gpu-payload/pN with `remote.sh stash` first)")
digest = hashlib.sha256()
with open(ws / "bundle.tar", "wb") as out:
    for p in plan["parts"]:
        data = (ws / "parts" / p["name"]).read_bytes()
        if len(data) != p["bytes"]:
            sys.exit(f"{p['name']} has {len(data)} bytes, the plan says {p['bytes']}")
        digest.update(data); out.write(data)
if digest.hexdigest() != plan["bundle_sha256"]:
    sys.exit("the reassembled bundle does not match the plan's checksum")
print(f"bundle of {plan['bundle_bytes'] / 2**20:.0f} MiB checks out")
PY
    cd "$WS_GPU" && tar xf bundle.tar && rm -f bundle.tar && tar xJf site.tar.xz && rm -f site.tar.xz
    mkdir -p bin data/cache/gguf && mv -f bwrap bin/ 2>/dev/null || true
    [ -f git.tar.xz ] && tar xJf git.tar.xz && rm -f git.tar.xz
    mv -f ./*.gguf data/cache/gguf/
    cd "$REPO"
    environment
    python3 -c "import vllm, torch; print('vLLM', vllm.__version__, 'torch', torch.__version__, torch.cuda.get_device_name(0))"
    python3 -c "import vllm.entrypoints.openai.api_server" 2>&1 | tail -3
    # the app's own modules, before anything needs them: a dependency the payload lacks stops here
    python3 -c "import workstation.services, workstation.agent.loop, workstation.tuning.screening" \
      || { echo "the app does not import here: a dependency is missing from the payload (payload.py)" >&2; exit 1; }
    if "$WS_GPU/bin/bwrap" --ro-bind / / --dev /dev --proc /proc true 2>/dev/null; then echo "bubblewrap runs"; else echo "bubblewrap does not run here"; fi
    echo "git: $(command -v git) $(git --version 2>&1)"
    python3 -m workstation model prepare smollm2
    echo "setup took $(( $(date +%s) - t0 )) s"
    ;;
  suite)
    shift
    environment
    exec python3 benchmarks/gpu/suite.py "$@"
    ;;
  *)
    echo "usage: $0 stash|setup|suite [ARGS]" >&2; exit 2 ;;
esac
