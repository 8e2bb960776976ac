#!/bin/bash
# One MaskBench sitting (BENCHMARKS.md): grammask (default, without shared masks, with
# extra properties allowed), llguidance and XGrammar one after the other on every file of
# each dev split (`LIMIT=N` for the first N of each), single thread. Needs
# `pip install xgrammar llguidance transformers` and a release build
# (`cargo build --release -p grammask`). Keep the machine otherwise idle.
set -u
cd "$(dirname "$0")/.."
T=../shared/data/tokenizers/llama3_1
LIM=()
if [ -n "${LIMIT:-}" ]; then LIM=(--limit "$LIMIT"); fi
for S in ${SPLITS:-Github_easy Github_medium Glaiveai2K Kubernetes}; do
  D=../shared/data/jsonschemabench/dev/$S
  echo "== $S grammask $(date -u +%H:%M:%S)"
  RAYON_NUM_THREADS=1 ./target/release/grammask maskbench --tokenizer $T "${LIM[@]}" "$D" 2>/dev/null | tail -1
  echo "== $S grammask-noshared $(date -u +%H:%M:%S)"
  RAYON_NUM_THREADS=1 ./target/release/grammask maskbench --tokenizer $T "${LIM[@]}" --no-shared-masks "$D" 2>/dev/null | tail -1
  echo "== $S grammask-extras $(date -u +%H:%M:%S)"
  RAYON_NUM_THREADS=1 ./target/release/grammask maskbench --tokenizer $T "${LIM[@]}" --allow-extra-properties "$D" 2>/dev/null | tail -1
  echo "== $S llguidance $(date -u +%H:%M:%S)"
  python3 benches/peers/maskbench.py --engine llguidance --quiet "${LIM[@]}" "$D" 2>/dev/null | tail -1
  echo "== $S xgrammar $(date -u +%H:%M:%S)"
  python3 benches/peers/maskbench.py --engine xgrammar --quiet "${LIM[@]}" "$D" 2>/dev/null | tail -1
done
echo "== done $(date -u +%H:%M:%S)"
