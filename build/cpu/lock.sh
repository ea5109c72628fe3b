#!/usr/bin/env bash
# Regenerate build/cpu/requirements.lock: requirements.txt (what the engine venv holds) plus
# transient.txt (what install.sh installs and then removes), every file hash-locked.
#
# Usage: build/cpu/lock.sh     (needs uv: the appliance venv's, or UV=...)
# `uv pip compile --generate-hashes` hashes every file PyPI has for each pinned version (from the index's
# metadata, without downloading them: seconds, where pip-compile took minutes), so the lock installs on any
# x86_64 CPython 3.11 host; torch 2.13.0+cpu is not on PyPI and is hashed from /opt/wheels.
# A package some dependency asks for with extras is pinned twice, `uvicorn==…` and `uvicorn[standard]==…`
# with the same hashes: pip resolves `uvicorn[standard]` and `uvicorn` as two requirements, and under
# --require-hashes either one left unpinned is refused as soon as PyPI has a newer release (uvicorn
# 0.55.0 broke the engine install so). The compiler writes some with extras only; the step after it adds
# the plain one.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"
"${UV:-$repo/.venv/bin/uv}" pip compile --quiet --generate-hashes --no-strip-extras --python-version 3.11 \
    --find-links /opt/wheels --custom-compile-command build/cpu/lock.sh \
    --output-file requirements.lock requirements.txt transient.txt
python3 - requirements.lock <<'PY'
import re
import sys

lock = sys.argv[1]
with open(lock) as f:
    text = f.read()
entry = re.compile(r"^([A-Za-z0-9_.-]+)\[[\w,.-]+\](==\S+ \\\n(?:    --hash=sha256:[0-9a-f]{64} \\\n)*    --hash=sha256:[0-9a-f]{64}\n)", re.M)
plain = set(re.findall(r"^([A-Za-z0-9_.-]+)==", text, re.M))  # uv already writes some both ways
with open(lock, "w") as f:
    f.write(entry.sub(lambda m: m[0] if m[1] in plain else m[1] + m[2] + m[0], text))
PY
