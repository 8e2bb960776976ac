#!/usr/bin/env bash
# Creates the git-ignored virtualenv `.venv-xgrammar/` with XGrammar 0.2.8 for the
# conformance report's third oracle (`grammask-conformance report --xgrammar
# .venv-xgrammar/bin/python`), pinned, from PyPI, and prints its python's path.
#
#   benches/peers/xgrammar-venv.sh     # → .venv-xgrammar/bin/python
#
# XGrammar's wheel requires torch, transformers and triton; the oracle uses only its
# compiler and matcher (C++), so the wheel is installed without its requirements and
# with the few it imports (no torch: `benches/peers/torch_shim` stands in for its import,
# see `xgrammar_oracle.py`). llguidance 1.9.1 goes in beside it, for the MaskBench
# sittings' peer rows (`.venv-xgrammar/bin/python benches/peers/maskbench.py --engine
# llguidance`). About 300 MB. Idempotent: a venv holding these pins is reused.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
venv="$root/.venv-xgrammar"
pins="xgrammar==0.2.8 apache-tvm-ffi==0.1.15.post2 pydantic==2.14.4 numpy==2.4.6 transformers==4.57.6 llguidance==1.9.1"
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/pins" 2>/dev/null)" = "$pins" ]; then
  echo "$venv/bin/python"
  exit 0
fi
rm -rf "$venv"
python3 -m venv "$venv" >&2
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps xgrammar==0.2.8 >&2
# shellcheck disable=SC2086
"$venv/bin/pip" install --quiet --disable-pip-version-check ${pins#xgrammar==0.2.8 } >&2
echo "$pins" > "$venv/pins"
echo "$venv/bin/python"
