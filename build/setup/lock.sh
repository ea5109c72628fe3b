#!/usr/bin/env bash
# Regenerate build/setup/requirements.lock (the set-up tools: uv and rich), every file hash-locked.
# Usage: build/setup/lock.sh     (needs pip-tools, from the appliance's dev extra)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"
CUSTOM_COMPILE_COMMAND="build/setup/lock.sh" "${PIP_COMPILE:-$repo/.venv/bin/pip-compile}" --quiet --generate-hashes \
    --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links --output-file requirements.lock requirements.txt
