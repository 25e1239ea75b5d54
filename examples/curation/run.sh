#!/usr/bin/env bash
# The curation pipeline end to end. Inputs: prompts.jsonl (rows with 'prompt', optional 'id',
# 'category') and human.jsonl (the human-annotated subset, e.g. triple-wise annotations).
set -euo pipefail
config=examples/curation/pipeline.yaml
mkdir -p work

# 1. a reward model trained on the human subset (for distant supervision)
cheems rank human.jsonl -o work/human-ranked.jsonl
cheems train --model base-rm --train work/human-ranked.jsonl --output work/human-rm

# 2. the judge-annotated subset
cheems curate sample prompts.jsonl --config "$config" -o work/sampled.jsonl
cheems curate filter work/sampled.jsonl --config "$config" -o work/filtered.jsonl
cheems curate judge work/filtered.jsonl --config "$config" -o work/judged.jsonl
cheems curate resolve work/judged.jsonl --config "$config" --rm work/human-rm -o work/resolved.jsonl
cheems curate debias work/resolved.jsonl --seed 0 -o work/debiased.jsonl

# 3. the final dataset, its statistics, and the annotators' biases
cheems curate merge --human human.jsonl --judge work/debiased.jsonl -o work/preference.jsonl
cheems stats work/preference.jsonl
cheems analyze bias human.jsonl work/judged.jsonl --plots work/bias
