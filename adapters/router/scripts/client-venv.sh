#!/usr/bin/env bash
# Creates the git-ignored virtualenv `.venv-clients/` with the official clients the router's
# contract test drives, pinned, from PyPI, and prints its python's path.
#
#   adapters/router/scripts/client-venv.sh     # → .venv-clients/bin/python
#
# Hugging Face's `text_generation` (TGI's client) and OpenAI's `openai`, at the versions the
# test was written against. Idempotent: a venv holding these pins is reused.
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
venv="$root/.venv-clients"
pins="text_generation==0.7.0 openai==3.57.0"
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/pins" 2>/dev/null)" = "$pins" ]; then
  echo "$venv/bin/python"
  exit 0
fi
rm -rf "$venv"
python3 -m venv "$venv" >&2
# shellcheck disable=SC2086
"$venv/bin/pip" install --quiet --disable-pip-version-check $pins >&2
echo "$pins" > "$venv/pins"
echo "$venv/bin/python"
