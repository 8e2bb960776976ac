#!/bin/bash
# One MaskBench sitting (BENCHMARKS.md): grammask (default, without shared masks, with
# extra properties allowed), llguidance and XGrammar one after the other on the first
# LIMIT files of each dev split, single thread. Needs `pip install xgrammar llguidance`
# and a release build (`cargo build --release -p grammask`).
set -u
cd "$(dirname "$0")/.."
T=../shared/data/tokenizers/llama3_1
LIMIT=${LIMIT:-500}
for S in Github_easy Github_medium Glaiveai2K Kubernetes; do
  D=../shared/data/jsonschemabench/dev/$S
  echo "== $S grammask $(date -u +%H:%M:%S)"
  RAYON_NUM_THREADS=1 ./target/release/grammask maskbench --tokenizer $T --limit "$LIMIT" "$D" 2>/dev/null | tail -1
  echo "== $S grammask-noshared $(date -u +%H:%M:%S)"
  RAYON_NUM_THREADS=1 ./target/release/grammask maskbench --tokenizer $T --limit "$LIMIT" --no-shared-masks "$D" 2>/dev/null | tail -1
  echo "== $S grammask-extras $(date -u +%H:%M:%S)"
  RAYON_NUM_THREADS=1 ./target/release/grammask maskbench --tokenizer $T --limit "$LIMIT" --allow-extra-properties "$D" 2>/dev/null | tail -1
  echo "== $S llguidance $(date -u +%H:%M:%S)"
  python3 benches/peers/maskbench.py --engine llguidance --quiet --limit "$LIMIT" "$D" 2>/dev/null | tail -1
  echo "== $S xgrammar $(date -u +%H:%M:%S)"
  python3 benches/peers/maskbench.py --engine xgrammar --quiet --limit "$LIMIT" "$D" 2>/dev/null | tail -1
done
echo "== done $(date -u +%H:%M:%S)"
