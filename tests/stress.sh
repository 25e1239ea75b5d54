#!/usr/bin/env bash
# `make stress`: the whole suite ROUNDS times in a row (3 by default), each in another random order
# (pytest-random-order, one seed per round, printed so that a failing order can be replayed with
# --random-order-seed=SEED), with one busy process per core beside it the whole time, so that tests
# which lean on the machine's speed, on a lucky order or on a quiet CPU show up here rather than
# on a user's machine. Prints one line per round and a summary; exits 1 when any round failed.
# Usage: tests/stress.sh PYTHON [ROUNDS]
set -u
python=${1:?usage: tests/stress.sh PYTHON [ROUNDS]}
rounds=${2:-3}
cores=$(nproc 2>/dev/null || echo 2)
logs=$(mktemp -d "${TMPDIR:-/tmp}/cheems-stress.XXXXXX")

# Each hog spins until its parent (this script) is gone, so that no hog outlives a killed run,
# even one killed with SIGKILL; the suite runs in the background and is waited for, so that a
# SIGTERM or Ctrl-C stops it and the hogs at once instead of after the round.
hogs=()
suite=""
stop_all() {
    [ -z "$suite" ] || kill -TERM "$suite" 2>/dev/null
    [ ${#hogs[@]} -eq 0 ] || kill "${hogs[@]}" 2>/dev/null
    wait 2>/dev/null
}
trap stop_all EXIT
trap 'exit 130' INT TERM
for _ in $(seq "$cores"); do
    "$python" -c "import os
parent = os.getppid()
while os.getppid() == parent:
    pass" &
    hogs+=($!)
done
echo "make stress: $rounds rounds of the suite in random order, with $cores busy processes beside it; logs in $logs"

failed=0
for round in $(seq "$rounds"); do
    seed=$(( (RANDOM << 15) | RANDOM ))
    log="$logs/round-$round.log"
    start=$SECONDS
    env -u PYTHONDONTWRITEBYTECODE "$python" -m pytest -q -n auto --maxprocesses 4 --dist worksteal \
        -p random_order --random-order-bucket=global --random-order-seed="$seed" >"$log" 2>&1 &
    suite=$!
    wait "$suite"
    rc=$?
    suite=""
    summary=$(grep -E '^(=+ )?[0-9]+ (passed|failed)|^=+ .*(passed|failed|error)' "$log" | tail -n 1 | tr -d '=')
    echo "round $round (seed $seed): exit $rc in $((SECONDS - start)) s:${summary:- no summary, see $log}"
    if [ "$rc" -ne 0 ]; then
        failed=$((failed + 1))
        grep -E '^(FAILED|ERROR) ' "$log" | sed 's/^/    /'
        [ "$rc" -eq 5 ] && echo "    pytest collected no tests"
    fi
done
if [ "$failed" -ne 0 ]; then
    echo "make stress: $failed of $rounds rounds failed (logs in $logs)" >&2
    exit 1
fi
echo "make stress: all $rounds rounds passed"
