# step NAME SECONDS COMMAND...: run one benchmark step under its own time limit, its output in
# $logs/NAME.log, and print its exit code, its time and the last lines that say something.
# Sourced by the GPU scripts (gpu_rows.sh, gpu_round2.sh), which set $logs.
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
