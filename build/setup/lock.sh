#!/usr/bin/env bash
# Regenerate build/setup/requirements.lock (the set-up tools: uv and rich), every file hash-locked.
# Usage: build/setup/lock.sh     (needs uv: the appliance venv's, or UV=...)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"
"${UV:-$repo/.venv/bin/uv}" pip compile --quiet --generate-hashes --custom-compile-command build/setup/lock.sh \
    --output-file requirements.lock requirements.txt
