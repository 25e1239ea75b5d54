#!/usr/bin/env bash
# The GPU figures of the second throughput round, in one go, on one CUDA device (about 10 minutes
# on an H100 or H200):
#   bash benchmarks/gpu_round2.sh [LOG_DIR]
# The packed-attention CUDA tests first (scoring and mixed-precision training), then, on a
# Qwen2.5-0.5B-shaped model with random weights: training MFU (packed, Liger's kernels when
# liger-kernel imports), scoring MFU with prefix sharing against a plain transformers loop, the
# reward server under 16 clients against --max-batch 1, a 64k-token budget and
# --token-budget auto through `cheems train`, and cheems against TRL's RewardTrainer (needs
# `pip install trl`). Each step has its own time limit and a failed step does not stop the next;
# every step's output goes to LOG_DIR (default: benchmarks/logs).
source "$(dirname "$0")/gpu_step.sh" "$@"  # $logs, $py, $liger; step NAME SECONDS COMMAND...

work=$(mktemp -d)
model="$work/0.5b"
STEP_LINES=6 step cuda-tests 45 $py -m pytest -q -x -p no:cacheprovider tests/test_packing_cuda.py -k "scores or autocast"
step train-0.5b 80 $py benchmarks/bench_train.py --device cuda --shape qwen2.5-0.5b --prompts 300 --repeat-text 8 \
    --bf16 --micro-batch-size 256 --token-budget 16384 --modes packed "${liger[@]}" --model-dir "$model"
step train-0.5b-64k 70 $py benchmarks/bench_train.py --device cuda --shape qwen2.5-0.5b --prompts 300 --repeat-text 8 \
    --bf16 --micro-batch-size 1024 --token-budget 65536 --modes packed "${liger[@]}" --model-dir "$model"
STEP_LINES=10 step score-0.5b 70 $py benchmarks/bench_scoring.py --device cuda --shape qwen2.5-0.5b --prompts 1200 \
    --token-budget 32768 --batch-size 512 --modes packed,shared,transformers "${liger[@]}" --model-dir "$model"
STEP_LINES=6 step serve-0.5b 100 $py benchmarks/bench_serve.py --device cuda --shape qwen2.5-0.5b --requests 400 --max-seconds 30 \
    --model-dir "$model"
STEP_LINES=6 step memory-0.5b 90 $py benchmarks/bench_memory.py --device cuda --shape qwen2.5-0.5b --bf16 --prompts 40 \
    "${liger[@]}" --model-dir "$model"
STEP_LINES=12 step vs-trl-0.5b 160 $py benchmarks/bench_vs_trl.py --device cuda --shape qwen2.5-0.5b --bf16 --prompts 60 \
    --runs cheems,trl-tuned,trl-defaults --model-dir "$model"
rm -rf "$work"
