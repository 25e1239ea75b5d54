#!/usr/bin/env bash
# The GPU rows of the Performance table (docs/performance.md), in one go, on one CUDA device:
#   bash benchmarks/gpu_rows.sh [LOG_DIR]
# First the CUDA equivalence tests of the packed attention (tests/test_packing_cuda.py, scoring
# and mixed-precision training; CHEEMS_GPU_TESTS=all runs every one); the benchmarks then run
# with the default packed backend, or with flex attention if a variable-length backend failed
# its test. Each step has its own time limit and a failed step does not stop the next; every
# step's output goes to LOG_DIR (default: benchmarks/logs). Liger's kernels are used when
# liger-kernel imports.

source "$(dirname "$0")/gpu_step.sh" "$@"  # $logs, $py, $liger; step NAME SECONDS COMMAND...

selection=(-k "scores or autocast")
[[ ${CHEEMS_GPU_TESTS:-} == all ]] && selection=()
if ! step cuda-tests 100 $py -m pytest -q -x -p no:cacheprovider tests/test_packing_cuda.py "${selection[@]}"; then
    if grep -q "FAILED.*\(varlen\|flash\)" "$logs/cuda-tests.log"; then
        echo "   a variable-length backend failed: the benchmarks run with flex attention"
        export CHEEMS_PACKED_ATTENTION=flex
    fi
fi
work=$(mktemp -d)
step train-0.5b 240 $py benchmarks/bench_train.py --device cuda --shape qwen2.5-0.5b --prompts 500 --repeat-text 8 \
    --bf16 --micro-batch-size 256 --token-budget 16384 "${liger[@]}" --model-dir "$work/0.5b"
step score-0.5b 110 $py benchmarks/bench_scoring.py --device cuda --shape qwen2.5-0.5b --cheemsbench \
    --token-budget 32768 --batch-size 512 "${liger[@]}" --model-dir "$work/0.5b"
step train-7b 140 $py benchmarks/bench_train.py --device cuda --shape qwen2.5-7b --prompts 120 --repeat-text 8 \
    --bf16 --micro-batch-size 256 --token-budget 16384 --gradient-checkpointing --lora-r 16 --modes packed \
    "${liger[@]}" --model-dir "$work/7b"
step score-7b 110 $py benchmarks/bench_scoring.py --device cuda --shape qwen2.5-7b --prompts 500 --modes shared \
    --token-budget 32768 --batch-size 512 "${liger[@]}" --model-dir "$work/7b"
step objectives-0.5b 240 $py benchmarks/bench_objectives.py --device cuda --shape qwen2.5-0.5b --prompts 400 --chars 450 \
    --bf16 --micro-batch-size 64 --token-budget 16384 --steps 10 "${liger[@]}" --model-dir "$work/0.5b-lm"
step judge-0.5b 150 $py benchmarks/bench_local_judge.py --device cuda --shape qwen2.5-0.5b --pairs 2000 --chars 450 \
    --plain-pairs 200 --batch-size 256 --token-budget 32768 --model-dir "$work/0.5b-lm"
rm -rf "$work"
