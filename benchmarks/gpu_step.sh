# What the GPU scripts (gpu_rows.sh, gpu_round2.sh, gpu_round3.sh) share, sourced with their
# arguments: `source gpu_step.sh "$@"` sets $logs (the first argument, default benchmarks/logs,
# created), $py (python3 unless PYTHON says otherwise), $liger (--liger-kernels when liger-kernel
# imports), prints the card and the versions, and defines
# step NAME SECONDS COMMAND...: run one benchmark step under its own time limit, its output in
# $logs/NAME.log, and print its exit code, its time and the last lines that say something.
set -u
logs=${1:-benchmarks/logs}
mkdir -p "$logs"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
py=${PYTHON:-python3}
liger=()
$py -c "import liger_kernel" 2>/dev/null && liger=(--liger-kernels)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
$py - <<'PY'
import importlib
found = []
for name in ("torch", "transformers", "accelerate", "peft", "liger_kernel", "trl", "datasets", "pyarrow", "fastapi"):
    try:
        found.append(f"{name} {getattr(importlib.import_module(name), '__version__', '?')}")
    except Exception as e:  # a missing package is a line, not a stop
        found.append(f"{name} missing ({type(e).__name__})")
print(", ".join(found))
PY

step() {
    local name=$1 limit=$2
    shift 2
    echo "== $name"
    local t0=$SECONDS
    timeout "$limit" "$@" 2>&1 | grep -v "Writing model shards" >"$logs/$name.log"
    local rc=${PIPESTATUS[0]}
    echo "   rc $rc, $((SECONDS - t0)) s"
    grep -v "^\s*$\|Warning\|warn" "$logs/$name.log" | tail -n "${STEP_LINES:-8}" | cut -c1-400 | sed 's/^/   /'
    return $rc
}
