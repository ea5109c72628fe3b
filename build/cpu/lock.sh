#!/usr/bin/env bash
# Regenerate build/cpu/requirements.lock: requirements.txt (what the engine venv holds) plus
# transient.txt (what install.sh installs and then removes), every file hash-locked.
#
# Usage: build/cpu/lock.sh     (needs pip-tools, from the appliance's dev extra)
# Hashes cover every file PyPI has for each pinned version, so the lock installs on any x86_64
# CPython 3.11 host; torch 2.13.0+cpu is not on PyPI and is hashed from /opt/wheels.
# A package some dependency asks for with extras is pinned twice, `uvicorn==…` and `uvicorn[standard]==…`
# with the same hashes: pip resolves `uvicorn[standard]` and `uvicorn` as two requirements, and under
# --require-hashes either one left unpinned is refused as soon as PyPI has a newer release (uvicorn
# 0.55.0 broke the engine install so). pip-compile writes one of the two forms; the step after it adds
# the plain one.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"
CUSTOM_COMPILE_COMMAND="build/cpu/lock.sh" "${PIP_COMPILE:-$repo/.venv/bin/pip-compile}" --quiet --generate-hashes --allow-unsafe --no-strip-extras \
    --find-links /opt/wheels --no-emit-find-links --no-emit-index-url \
    --output-file requirements.lock requirements.txt transient.txt
python3 - requirements.lock <<'PY'
import re
import sys

lock = sys.argv[1]
with open(lock) as f:
    text = f.read()
entry = re.compile(r"^([A-Za-z0-9_.-]+)\[[\w,.-]+\](==\S+ \\\n(?:    --hash=sha256:[0-9a-f]{64} \\\n)*    --hash=sha256:[0-9a-f]{64}\n)", re.M)
with open(lock, "w") as f:
    f.write(entry.sub(lambda m: m[1] + m[2] + m[0], text))
PY
