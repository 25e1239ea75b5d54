#!/usr/bin/env bash
# The CPU version of the paper's study grid, from the bundled sample only: 2 datasets x 2 data
# sizes x 2 model sizes (tiny and small models built from scratch), each cell trained and
# evaluated on the open subset; then the tables and the report with Fig. 6 and Fig. 7.
# Usage: examples/experiments/run.sh [OUT_DIR]   (under a minute on a laptop CPU; EPOCHS=N trains each cell
# N epochs instead of the grid's 2)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
OUT="${1:-study-demo}"
mkdir -p "$OUT"
cd "$OUT"

cheems example-data -o .
cheems rank annotations/human.jsonl -o human.jsonl
cheems rank annotations/open.jsonl -o open.jsonl
cheems init-model --size tiny --tokenizer-from human.jsonl -o tiny-rm --seed 0
cheems init-model --size small --tokenizer-from human.jsonl -o small-rm --seed 0
sed "s/epochs: 2,/epochs: ${EPOCHS:-2},/" "$HERE/study.yaml" > study.yaml

cheems experiment run study.yaml -o study      # rerun it after an interruption: finished cells are kept
cheems experiment status study
cheems experiment table study
cheems report study -o report.html --markdown report.md
