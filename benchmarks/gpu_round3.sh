#!/usr/bin/env bash
# The GPU figures still open after the second throughput round, in one go, on one CUDA device
# (about 13 minutes on an H100 or H200):
#   bash benchmarks/gpu_round3.sh [LOG_DIR]
# The packed-attention CUDA tests first (scoring, and mixed-precision training with and without
# shared prompt prefixes), then on a Qwen2.5-0.5B-shaped model with random weights: training
# (packed rows sharing each prompt's prefix, the default; the same with --compile), scoring with
# and without --compile (shared prefixes against a plain transformers loop) and with --compile
# --fixed-shapes (rows padded to a few lengths, compiled for static shapes), and last 7B LoRA
# training with gradient checkpointing. Each step has its own time limit and a failed step does
# not stop the next; every step's output goes to LOG_DIR (default: benchmarks/logs).
source "$(dirname "$0")/gpu_step.sh" "$@"  # $logs, $py, $liger; step NAME SECONDS COMMAND...

work=$(mktemp -d)
model="$work/0.5b"
STEP_LINES=6 step cuda-tests 60 $py -m pytest -q -x -p no:cacheprovider tests/test_packing_cuda.py -k "scores or autocast"
step train-0.5b 80 $py benchmarks/bench_train.py --device cuda --shape qwen2.5-0.5b --prompts 300 --repeat-text 8 \
    --bf16 --micro-batch-size 256 --token-budget 16384 --modes packed "${liger[@]}" --model-dir "$model"
step train-0.5b-whole 80 $py benchmarks/bench_train.py --device cuda --shape qwen2.5-0.5b --prompts 300 --repeat-text 8 \
    --bf16 --micro-batch-size 256 --token-budget 16384 --modes packed --no-share-prefix "${liger[@]}" --model-dir "$model"
step train-0.5b-compile 150 $py benchmarks/bench_train.py --device cuda --shape qwen2.5-0.5b --prompts 300 \
    --repeat-text 8 --bf16 --micro-batch-size 256 --token-budget 16384 --modes packed --compile --model-dir "$model"
STEP_LINES=10 step score-0.5b 70 $py benchmarks/bench_scoring.py --device cuda --shape qwen2.5-0.5b --prompts 1200 \
    --token-budget 32768 --batch-size 512 --modes shared,transformers "${liger[@]}" --model-dir "$model"
STEP_LINES=10 step score-0.5b-compile 120 $py benchmarks/bench_scoring.py --device cuda --shape qwen2.5-0.5b \
    --prompts 1200 --token-budget 32768 --batch-size 512 --modes shared --compile --model-dir "$model"
STEP_LINES=10 step score-0.5b-compile-fixed 120 $py benchmarks/bench_scoring.py --device cuda --shape qwen2.5-0.5b \
    --prompts 1200 --token-budget 32768 --batch-size 512 --modes shared --compile --fixed-shapes --model-dir "$model"
step train-7b-lora 150 $py benchmarks/bench_train.py --device cuda --shape qwen2.5-7b --prompts 150 --repeat-text 8 \
    --bf16 --micro-batch-size 256 --token-budget 16384 --gradient-checkpointing --lora-r 16 --modes packed \
    "${liger[@]}"
rm -rf "$work"
