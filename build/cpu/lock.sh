#!/usr/bin/env bash
# Regenerate build/cpu/requirements.lock: requirements.txt (what the engine venv holds) plus
# transient.txt (what install.sh installs and then removes), every file hash-locked.
#
# Usage: build/cpu/lock.sh     (needs pip-tools, from the appliance's dev extra)
# Hashes cover every file PyPI has for each pinned version, so the lock installs on any x86_64
# CPython 3.11 host; torch 2.13.0+cpu is not on PyPI and is hashed from /opt/wheels.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"
CUSTOM_COMPILE_COMMAND="build/cpu/lock.sh" "${PIP_COMPILE:-$repo/.venv/bin/pip-compile}" --quiet --generate-hashes --allow-unsafe --strip-extras \
    --find-links /opt/wheels --no-emit-find-links --no-emit-index-url \
    --output-file requirements.lock requirements.txt transient.txt
