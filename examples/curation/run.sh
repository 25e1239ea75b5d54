#!/usr/bin/env bash
# The curation pipeline end to end (paper §4) on the bundled sample: the `human` subset plays the
# human-annotated data, the prompts of the `open` subset are answered by three chat models and
# compared by an LLM judge. Models and judge are the loopback chat server of
# examples/loopback_judge.py, started here, so the script runs offline as written; point
# pipeline.yaml at your own endpoints and prompts for real data.
# Usage: examples/curation/run.sh [OUT_DIR]   (EPOCHS=N trains the reward model longer; default 1)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${1:-curation-demo}"
EPOCHS="${EPOCHS:-1}"
mkdir -p "$OUT/work"
cd "$OUT"

cheems example-data -o .
human=annotations/human.jsonl
prompts=annotations/open.jsonl     # only its prompts are read: `curate sample` ignores the responses

# the loopback chat server, stopped when the script ends; pipeline.yaml pointed at its port
rm -f work/server.port
python3 "$HERE/../loopback_judge.py" --port-file work/server.port &
server=$!
trap 'kill "$server" 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -s work/server.port ] && break; sleep 0.1; done
[ -s work/server.port ] || { echo "the loopback chat server did not start" >&2; exit 1; }
sed "s#http://127.0.0.1:8000/v1#http://127.0.0.1:$(cat work/server.port)/v1#" "$HERE/pipeline.yaml" \
    > work/pipeline.yaml
config=work/pipeline.yaml

# 1. a reward model trained on the human subset (for distant supervision): a tiny one from scratch
cheems rank "$human" -o work/human-ranked.jsonl
cheems init-model --size tiny --tokenizer-from work/human-ranked.jsonl -o work/base-rm --seed 0
cheems train --model work/base-rm --train work/human-ranked.jsonl --output work/human-rm \
    --epochs "$EPOCHS" --learning-rate 1e-3 --gradient-accumulation 1 --seed 0

# 2. the judge-annotated subset
cheems curate sample "$prompts" --config "$config" -o work/sampled.jsonl --cache work/sample-cache.sqlite
cheems curate filter work/sampled.jsonl --config "$config" -o work/filtered.jsonl
cheems curate judge work/filtered.jsonl --config "$config" -o work/judged.jsonl --cache work/judge-cache.sqlite
cheems curate resolve work/judged.jsonl --config "$config" --rm work/human-rm -o work/resolved.jsonl
cheems curate debias work/resolved.jsonl --seed 0 -o work/debiased.jsonl

# 3. the final dataset, its statistics, and the annotators' biases
cheems curate merge --human "$human" --judge work/debiased.jsonl -o work/preference.jsonl
cheems stats work/preference.jsonl
cheems analyze bias "$human" work/judged.jsonl --plots work/bias --json work/bias.json
cheems report work/bias.json work/*.report.json work/human-rm/train_log.jsonl -o report.html
