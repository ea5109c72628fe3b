"""Benchmark: fetching and verifying a pinned checkpoint (appliance/weights/) against curl and sha256sum, side by
side in one run, and what the weights check adds to a warm boot.

1. fetch: `appliance.weights.fetch.fetch` (what `appliance fetch` runs) from a loopback nginx mirror in the hub's
   layout (testkit/weights_mirror.py) vs `curl -s -o FILE URL` per file, same files, same server, same concurrency
   (jobs=1 and --jobs). fetch hashes while it streams and fsyncs each file before its rename; "curl+fsync" adds
   that fsync to curl's side, for a like-for-like row. Files: the embedded SmolLM2 folder (built once by its
   recipe) and a synthetic random set of --size-mb in 8 files. Target: fetch/curl >= 0.9.
2. hashing: appliance.weights.hashing (what `appliance fetch --verify` uses) vs `sha256sum` on the same files,
   serial (jobs=1, one sha256sum over every file) and parallel (--jobs files at once). Target: >= 0.9.
   `openssl dgst -sha256` runs beside them: the fastest command-line hasher (sha256sum may lack SHA extensions).
3. boot: the quick check a boot runs for a pinned smollm2 config after a fetch (`verified(plan.weights,
   full=False)`), --repeats times; `appliance check`'s host.weights line; `fetch --verify` (full=True) once per
   round; and what the embedded default (`appliance serve`, no overrides) runs instead. Target: <= 1 s.
Figures are medians of --rounds rounds; each round runs the contenders back to back, in a rotating order, so
drift on a shared host hits them alike. Loopback only; the temporary folder and nginx go at the end.
Run from the repository root: `PYTHONPATH=. .venv/bin/python bench/weights.py` (about 3 min on 2 cores).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.compat.matrix import load_matrix
from appliance.compat.validate import ValidatedConfig, validate
from appliance.config.compose import compose_config
from appliance.host.discovery import discover_host
from appliance.plan import LaunchPlan, build_plan
from appliance.preflight.checks import host_checks
from appliance.preflight.results import HostCheckInput
from appliance.preflight.weights_check import verified
from appliance.serve import RECIPES
from appliance.weights.fetch import fetch
from appliance.weights.hashing import sha256_files
from appliance.weights.lock import Lock, write_lock
from appliance.weights.source import HttpSource
from testkit.helpers import free_ports
from testkit.weights_mirror import Mirror, hub_tree, running_nginx

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
SYNTHETIC = "bench/synthetic-weights"
SHARDS = 8
MB = 1e6
CPU = ("mesh=cpu", "engine=cpu")
CONTENDERS = ("fetch", "curl", "curl+fsync")
HASHERS = ("appliance", "sha256sum", "openssl")


def revision_of(name: str) -> str:
    """A stand-in commit id for a file set (the folder is built here, not the hub's commit)."""
    return hashlib.sha1(f"bench/weights.py {name}".encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class FileSet:
    name: str
    checkpoint: str
    folder: Path
    paths: tuple[str, ...]

    @property
    def revision(self) -> str:
        return revision_of(self.checkpoint)

    @property
    def files(self) -> list[Path]:
        return [self.folder / p for p in self.paths]

    @property
    def size(self) -> int:
        return sum(f.stat().st_size for f in self.files)


@dataclass(frozen=True, slots=True)
class Boot:
    quick_s: tuple[float, ...]
    full_s: tuple[float, ...]
    checks_s: tuple[float, ...]
    recipe_s: tuple[float, ...]
    pinned_line: str
    embedded_line: str
    files: int
    size: int


def timed(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def embedded_plan() -> tuple[ValidatedConfig, LaunchPlan]:
    validated = validate(compose_config(list(CPU)), load_matrix())
    return validated, build_plan(validated)


def recipe_command(out: Path) -> list[str]:
    """The embedded default's recipe, as `appliance serve` runs it on every start (appliance/serve.py)."""
    _, plan = embedded_plan()
    if plan.generate is None:
        raise SystemExit("the embedded default names no recipe: this bench expects the smollm2 default")
    return [plan.python, str(RECIPES[plan.generate]), "--out", str(out)]


def smollm2(work: Path) -> FileSet:
    """The embedded checkpoint folder, built once by its recipe (an intact one is only hashed)."""
    folder = work / "smollm2"
    built = subprocess.run(recipe_command(folder), capture_output=True, text=True)
    if built.returncode != 0:
        raise SystemExit(f"building SmolLM2 failed: {(built.stderr or built.stdout).strip()[-400:]}")
    paths = tuple(sorted(p.name for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")))
    return FileSet("smollm2", SMOLLM2, folder, paths)


def synthetic(work: Path, size_mb: int) -> FileSet:
    """`size_mb` of random bytes in SHARDS files (kept ones of the right size are reused)."""
    folder, shard = work / "synthetic", size_mb * 10**6 // SHARDS
    paths = tuple(f"model-{i + 1:05d}-of-{SHARDS:05d}.safetensors" for i in range(SHARDS))
    folder.mkdir(parents=True, exist_ok=True)
    for target in (folder / p for p in paths):
        if target.is_file() and target.stat().st_size == shard:
            continue
        with target.open("wb") as out:
            for start in range(0, shard, 8 << 20):
                out.write(os.urandom(min(8 << 20, shard - start)))
    return FileSet(f"synthetic {size_mb} MB", SYNTHETIC, folder, paths)


def publish(root: Path, files: FileSet) -> None:
    """The file set in the hub's layout under `root` (hard links, no copies) and its tree listing."""
    folder = root / files.checkpoint / "resolve" / files.revision
    entries: list[dict[str, Any]] = []
    for path in files.paths:
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(files.folder / path, target)
        except OSError:
            shutil.copyfile(files.folder / path, target)
        entries += [e for e in hub_tree({path: target.read_bytes()}) if e["type"] == "file"]
    tree = root / "api" / "models" / files.checkpoint / "tree" / files.revision
    tree.parent.mkdir(parents=True, exist_ok=True)
    tree.write_text(json.dumps(entries))


def fetch_s(url: str, files: FileSet, lock: Lock | None, jobs: int, store: Path) -> tuple[float, Lock]:
    """One fetch into an empty store (removed after, off the clock): its seconds and its lock."""
    started = time.perf_counter()
    done = fetch(HttpSource(url), files.checkpoint, files.revision, store, lock, jobs=jobs)
    elapsed = time.perf_counter() - started
    shutil.rmtree(store)
    return elapsed, done.lock


def curl_s(url: str, files: FileSet, jobs: int, out: Path, *, sync: bool) -> float:
    """`curl -s -o FILE URL` per file, `jobs` at once (each file then fsynced where `sync`)."""
    source = HttpSource(url)
    for path in files.paths:
        (out / path).parent.mkdir(parents=True, exist_ok=True)

    def one(path: str) -> None:
        address = source.url(files.checkpoint, files.revision, path)
        subprocess.run(["curl", "-s", "-f", "-o", str(out / path), address], check=True)
        if sync:
            descriptor = os.open(out / path, os.O_RDONLY)
            try:
                os.fsync(descriptor)
            finally:
                os.close(descriptor)

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(one, files.paths))
    elapsed = time.perf_counter() - started
    shutil.rmtree(out)
    return elapsed


def fetch_rounds(url: str, files: FileSet, jobs: int, rounds: int, scratch: Path) -> dict[str, float]:
    """Median seconds of each contender; a first fetch (off the clock) records the lock the timed ones use."""
    _, lock = fetch_s(url, files, None, jobs, scratch / "store")
    runs: dict[str, Callable[[], float]] = {
        "fetch": lambda: fetch_s(url, files, lock, jobs, scratch / "store")[0],
        "curl": lambda: curl_s(url, files, jobs, scratch / "curl", sync=False),
        "curl+fsync": lambda: curl_s(url, files, jobs, scratch / "curl", sync=True),
    }
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for round_ in range(rounds):
        order = CONTENDERS[round_ % 3 :] + CONTENDERS[: round_ % 3]
        for name in order:
            seconds[name].append(runs[name]())
        line = ", ".join(f"{n} {seconds[n][-1]:.2f} s" for n in CONTENDERS)
        print(f"  fetch round {round_ + 1}/{rounds}, {files.name}, jobs={jobs}: {line}", flush=True)
    return {name: statistics.median(values) for name, values in seconds.items()}


def hash_tool(command: Sequence[str], paths: Sequence[Path], jobs: int) -> None:
    """`command` over every file in one process (jobs=1), else one process per file, `jobs` at once."""
    if jobs == 1:
        subprocess.run([*command, *map(str, paths)], stdout=subprocess.DEVNULL, check=True)
        return
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(lambda p: subprocess.run([*command, str(p)], stdout=subprocess.DEVNULL, check=True), paths))


def hash_rounds(files: FileSet, jobs: int, rounds: int) -> dict[str, float]:
    """Median seconds of appliance.weights.hashing, sha256sum and openssl on the same (page-cached) files."""
    paths = files.files
    runs: dict[str, Callable[[], object]] = {
        "appliance": lambda: sha256_files(paths, jobs),
        "sha256sum": lambda: hash_tool(["sha256sum"], paths, jobs),
        "openssl": lambda: hash_tool(["openssl", "dgst", "-sha256"], paths, jobs),
    }
    seconds: dict[str, list[float]] = {name: [] for name in HASHERS}
    for round_ in range(rounds):
        for name in HASHERS[round_ % 3 :] + HASHERS[: round_ % 3]:
            seconds[name].append(timed(runs[name]))
    return {name: statistics.median(values) for name, values in seconds.items()}


def pinned(url: str, cache: Path) -> tuple[ValidatedConfig, LaunchPlan]:
    """The smollm2 family pinned to a hub checkpoint and revision, fetched from the mirror into `cache`."""
    overrides = [
        *CPU,
        "model=smollm2",
        f"model.checkpoint={SMOLLM2}",
        f"model.revision={revision_of(SMOLLM2)}",
        f"site.weights.mirror={url}",
        f"paths.cache_dir={cache}",
    ]
    validated = validate(compose_config(overrides), load_matrix())
    return validated, build_plan(validated)


def weights_line(validated: ValidatedConfig, plan: LaunchPlan) -> tuple[str, float]:
    """The host.weights line as `appliance check` prints it, and the seconds all the host checks took."""
    given = HostCheckInput(validated, plan, discover_host())
    started = time.perf_counter()
    results = host_checks(given)
    elapsed = time.perf_counter() - started
    result = next(r for r in results if r.id == "host.weights")
    return f"{result.status:<8}{result.title}: {result.summary}", elapsed


def boot(url: str, work: Path, smol: FileSet, rounds: int, repeats: int) -> Boot:
    """What a warm boot's weights check costs, pinned (after a fetch) and for the embedded default."""
    validated, plan = pinned(url, work / "cache")
    weights = plan.weights
    if weights is None:
        raise SystemExit("the pinned smollm2 config has no weights plan: is model.revision honoured?")
    done = fetch(
        HttpSource(weights.source), weights.checkpoint, weights.revision, Path(weights.store), None, jobs=weights.jobs
    )
    write_lock(Path(weights.lock_file), done.lock)
    quick = tuple(timed(lambda: verified(weights, full=False)) for _ in range(repeats))
    full = tuple(timed(lambda: verified(weights, full=True)) for _ in range(rounds))
    checks = [weights_line(validated, plan) for _ in range(rounds)]
    embedded_line, _ = weights_line(*embedded_plan())
    recipe = tuple(
        timed(lambda: subprocess.run(recipe_command(smol.folder), capture_output=True, check=True))
        for _ in range(rounds)
    )
    return Boot(
        quick,
        full,
        tuple(s for _, s in checks),
        recipe,
        checks[0][0],
        embedded_line,
        len(done.lock.files),
        sum(f.size for f in done.lock.files),
    )


def report_fetch(rows: list[tuple[FileSet, int, dict[str, float]]]) -> None:
    print("\n1. fetch vs curl from the loopback nginx mirror (median; MB/s = decimal MB over wall seconds)")
    print(
        f"{'files':<22}{'jobs':>5}" + "".join(f"{n:>18}" for n in CONTENDERS) + f"{'fetch/curl':>12}"
        f"{'fetch/(curl+fsync)':>20}"
    )
    for files, jobs, seconds in rows:
        cells = "".join(f"{f'{files.size / MB / seconds[n]:.0f} MB/s {seconds[n]:.2f} s':>18}" for n in CONTENDERS)
        ratio, synced = seconds["curl"] / seconds["fetch"], seconds["curl+fsync"] / seconds["fetch"]
        print(f"{files.name:<22}{jobs:>5}{cells}{ratio:>12.2f}{synced:>20.2f}")
    print("fetch/curl is the throughput ratio (target >= 0.9); fetch also hashes every byte and fsyncs each file.")


def report_hashing(rows: list[tuple[FileSet, int, dict[str, float]]]) -> None:
    print("\n2. hashing: appliance.weights.hashing (`fetch --verify`) vs sha256sum, page-cached files (median)")
    print(
        f"{'files':<22}{'form':<18}" + "".join(f"{n:>18}" for n in HASHERS) + f"{'vs sha256sum':>14}{'vs openssl':>12}"
    )
    for files, jobs, seconds in rows:
        form = "serial" if jobs == 1 else f"parallel, {jobs} jobs"
        cells = "".join(f"{f'{files.size / MB / seconds[n]:.0f} MB/s {seconds[n]:.2f} s':>18}" for n in HASHERS)
        ratios = (
            f"{seconds['sha256sum'] / seconds['appliance']:>14.2f}{seconds['openssl'] / seconds['appliance']:>12.2f}"
        )
        print(f"{files.name:<22}{form:<18}{cells}{ratios}")
    print(
        "ratios are appliance throughput / the tool's (target vs sha256sum >= 0.9). sha256sum is coreutils' own C"
        " code unless built with OpenSSL; hashlib is OpenSSL's, as `openssl dgst`: the stricter yardstick."
    )


def report_boot(result: Boot, repeats: int) -> None:
    quick_ms = sorted(s * 1000 for s in result.quick_s)
    full, checks_ms = statistics.median(result.full_s), statistics.median(result.checks_s) * 1000
    print(
        f"\n3. warm boot, pinned: model=smollm2 model.checkpoint={SMOLLM2} model.revision={revision_of(SMOLLM2)} "
        f"site.weights.mirror=<loopback> ({result.files} files, {result.size / MB:.1f} MB)"
    )
    print(
        f"quick check a boot runs, verified(plan.weights, full=False), {repeats} runs: median "
        f"{statistics.median(quick_ms):.2f} ms, min {quick_ms[0]:.2f} ms, max {quick_ms[-1]:.2f} ms "
        "(target <= 1000 ms)"
    )
    print(
        f"host checks with it (serve's blocking subset, `appliance check`'s host part): median {checks_ms:.1f} ms; "
        f"host.weights line:\n  {result.pinned_line}"
    )
    print(
        f"`appliance fetch --verify` (full=True, every byte re-hashed): median {full:.2f} s, "
        f"{result.size / MB / full:.0f} MB/s; no boot runs it"
    )
    print(
        "embedded default (`appliance serve`, no overrides): plan.weights is None, so no weights-lock check runs "
        f"(appliance.weights is not used); host.weights line:\n  {result.embedded_line}"
    )
    recipe = statistics.median(result.recipe_s)
    print(
        "  but its recipe (build/models/convert_smollm2.py) re-hashes the whole converted folder against its "
        f"converted_sha256 on every start, beside the engine's import: median {recipe:.2f} s, its process included"
    )


@contextmanager
def workspace(keep: Path | None) -> Iterator[Path]:
    """`keep` (left in place: the built checkpoint and synthetic set are reused next run), else a temp folder."""
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        for scratch in ("mirror", "nginx", "scratch", "cache"):
            shutil.rmtree(keep / scratch, ignore_errors=True)
        yield keep.resolve()
        return
    with tempfile.TemporaryDirectory(prefix="bench-weights-") as tmp:
        yield Path(tmp)


def load() -> str:
    return ", ".join(f"{n:.2f}" for n in os.getloadavg())


def measure(args: argparse.Namespace, work: Path) -> None:
    """Build the file sets, serve them, measure, report; each phase's wall time at the end."""
    jobs, marks = sorted({1, args.jobs}), [("start", time.monotonic())]
    sets = [smollm2(work)] + ([synthetic(work, args.size_mb)] if args.size_mb > 0 else [])
    for files in sets:
        publish(work / "mirror", files)
    sizes = "; ".join(f"{f.name}: {len(f.paths)} files, {f.size / MB:.1f} MB" for f in sets)
    print(f"files: {sizes}; rounds {args.rounds}, jobs {' and '.join(map(str, jobs))}, in {work}", flush=True)
    marks.append(("set-up", time.monotonic()))
    with running_nginx(work / "nginx", Mirror(work / "mirror", work / "mirror", {}), free_ports(1)[0]) as nginx:
        fetched = [(f, j, fetch_rounds(nginx.url, f, j, args.rounds, work / "scratch")) for f in sets for j in jobs]
        marks.append(("fetch", time.monotonic()))
        hashed = [(f, j, hash_rounds(f, j, args.rounds)) for f in sets for j in jobs]
        marks.append(("hashing", time.monotonic()))
        booted = boot(nginx.url, work, sets[0], args.rounds, args.repeats)
        marks.append(("boot", time.monotonic()))
    report_fetch(fetched)
    report_hashing(hashed)
    report_boot(booted, args.repeats)
    phases = ", ".join(f"{name} {end - begin:.0f} s" for (_, begin), (name, end) in zip(marks, marks[1:], strict=False))
    print(f"\nphases: {phases}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="rounds per figure; medians are printed (default 3)")
    parser.add_argument("--size-mb", type=int, default=1024, help="synthetic random set in MB, 0 for none (1024)")
    parser.add_argument(
        "--jobs",
        type=int,
        default=4,
        help="concurrency of the parallel rows (default 4, as site.weights.jobs); jobs=1 rows always run",
    )
    parser.add_argument("--repeats", type=int, default=200, help="runs of the boot's quick check (default 200)")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="work in DIR and keep it (reuses its builds)")
    args = parser.parse_args()
    if missing := [tool for tool in ("curl", "sha256sum", "openssl") if shutil.which(tool) is None]:
        raise SystemExit(f"{', '.join(missing)} missing from PATH: this bench runs them beside the appliance")
    started, load_before, cores = time.monotonic(), load(), len(os.sched_getaffinity(0))
    print(f"{os.cpu_count()} cores ({cores} usable); load average (1, 5, 15 min) at start {load_before}", flush=True)
    with workspace(args.keep) as work:
        measure(args, work)
    print(
        f"load average (1, 5, 15 min) at start {load_before}, at end {load()}; {cores} usable cores; "
        f"the run took {time.monotonic() - started:.0f} s"
    )


if __name__ == "__main__":
    main()
