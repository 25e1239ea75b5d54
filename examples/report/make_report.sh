#!/usr/bin/env bash
# The report of docs/reports.md, from the bundled sample only: two baselines and a tiny reward model trained
# on the `human` subset are evaluated on the `open` subset, compared pairwise, and their best-of-n
# curves drawn with the human ranking as gold; then one HTML page (and Markdown) of it all.
# Usage: examples/report/make_report.sh [OUT_DIR]   (about a minute on a laptop CPU; EPOCHS=N trains the
# reward model N epochs instead of 3)
set -euo pipefail
OUT="${1:-report-demo}"
EPOCHS="${EPOCHS:-3}"
mkdir -p "$OUT"
cd "$OUT"

cheems example-data -o .
cheems rank annotations/human.jsonl -o train.jsonl
cheems rank annotations/open.jsonl -o bench.jsonl

# a tiny reward model from scratch, trained on the human subset
cheems init-model --size tiny --tokenizer-from train.jsonl -o tiny-rm --seed 0
cheems train --model tiny-rm --train train.jsonl --eval bench.jsonl --output trained \
    --epochs "$EPOCHS" --learning-rate 1e-3 --gradient-accumulation 1 --seed 0
cheems score bench.jsonl --model trained -o tiny-rm.jsonl

# the three scorers on the open subset
cheems eval bench.jsonl --scorer length --json length.json
cheems eval bench.jsonl --scorer random --seed 0 --json random.json
cheems eval bench.jsonl --scores tiny-rm.jsonl --json tiny-rm.json
cheems compare length.json tiny-rm.json --json length-vs-tiny-rm.json
cheems compare random.json tiny-rm.json --json random-vs-tiny-rm.json

# best-of-n with the human ranking as the gold quality (rank 0 = best -> gold 0, rank 1 -> -1, ...)
python3 - <<'PY'
import json
with open("bench.jsonl", encoding="utf-8") as f, open("gold.jsonl", "w", encoding="utf-8") as g:
    for line in f:
        row = json.loads(line)
        for rid, level in row["rank"].items():
            g.write(json.dumps({"prompt_id": row["id"], "response_id": rid, "score": -level}) + "\n")
PY
cheems score bench.jsonl --scorer length -o length.jsonl
cheems bon bench.jsonl --scores length.jsonl --gold gold.jsonl -n 1,2,3,4,5 --name length --json bon-length.json
cheems bon bench.jsonl --scores tiny-rm.jsonl --gold gold.jsonl -n 1,2,3,4,5 --name tiny-rm --json bon-tiny-rm.json

cheems report length.json random.json tiny-rm.json length-vs-tiny-rm.json random-vs-tiny-rm.json \
    bon-length.json bon-tiny-rm.json trained/train_log.jsonl -o report.html --markdown report.md
