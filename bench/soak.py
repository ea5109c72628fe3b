"""Soak: the `mixed` workload against a real `appliance serve` for a long run, with the console's poller
(tui.poll.Poller, as `appliance console` polls) and `appliance status` attached, watching the appliance's memory
and file descriptors.

Halfway through (`--restart-at`), the engine is restarted once through the control API (`--no-restart` skips it).
Prints, and writes to `--out` (soak.txt as printed, soak.json, and the load test's report.json): the appliance
process's RSS and open fds every 10 polls, their growth, the console polls and status calls (and how many failed),
the restart's downtime, and the requests by outcome before, during and after the restart (with no balancer in
front, requests sent while the engine restarts are refused: `tests/deploy/test_gateway.py` is the zero-error case).
Targets, checked at the end (exit 1 naming each one missed): RSS and fds flat (growth within RSS_GROWTH_MIB and
FD_GROWTH), no request failed outside the restart window, every poll and status call answered, the engine ready
again after its restart. tests/bench/test_soak.py runs `soak` for a minute on the engine tier's restartable appliance.
Run from the repository root: `make soak` (10 minutes of the embedded default, smollm2), or its short form
`make soak SOAK_ARGS="--duration 60"`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from appliance.config.compose import compose_config
from appliance.control.client import ControlClient, Target
from appliance.errors import ApplianceError
from appliance.loadtest.generator import RunWindow
from appliance.loadtest.report import LoadReport, report_json
from appliance.loadtest.run import LoadTarget, run_loadtest
from testkit.appliance_process import running_appliance
from tui.poll import Poller

POLL_S = 1.0
"""The console's default refresh (`appliance console --refresh`)."""
DETAIL_EVERY = 3
"""Host facts and checks on every 3rd poll, as the console's dashboard asks for them (tui/app.py)."""
STATUS_EVERY = 10
"""`appliance status` and a sample of the appliance's RSS and fds every 10th poll."""
RSS_GROWTH_MIB = 16.0
FD_GROWTH = 2
"""How far the appliance may grow from its first sample to its last: session 5's 10 minutes, restart included,
grew 3.7 MiB and 0 fds; a leak per request or per poll grows past both within minutes."""
RESTART_LIMIT_S = 600.0
"""How long past the send window the soak waits for a restarted engine (`engine.ready_timeout_s`'s default)."""
MAX_REQUESTS = 100_000
"""No cap of its own: the workload's arrival rate and the duration set the count."""
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Sample:
    """The appliance process at one moment, `at_s` seconds into the soak."""

    at_s: float
    rss_mib: float
    fds: int


@dataclass(frozen=True, slots=True)
class Restart:
    requested: float
    """Wall-clock time (epoch seconds) the restart was asked for."""
    ready: float | None
    """When a poll first saw the engine ready again; None when it was not within RESTART_LIMIT_S."""

    def window(self, sent: float) -> str:
        """Where a request sent at `sent` (epoch seconds) falls: before, during or after the restart."""
        if sent < self.requested:
            return "before"
        return "during" if self.ready is None or sent <= self.ready else "after"


@dataclass(frozen=True, slots=True)
class SoakReport:
    model: str
    offered_per_s: float
    duration_s: float
    """The send window."""
    started: float
    """Wall-clock start of the send window (epoch seconds)."""
    samples: tuple[Sample, ...]
    polls: int
    polls_failed: int
    statuses: int
    statuses_failed: int
    restart: Restart | None
    outcomes: Mapping[str, Mapping[str, int]]
    """Requests by window ("before", "during", "after" the restart, or "run" without one), then by outcome ("ok" or
    the load test's error kind: connect, http-503, ...)."""
    completed_per_s: float

    def lost_outside_restart(self) -> int:
        return sum(
            n
            for window, kinds in self.outcomes.items()
            if window != "during"
            for kind, n in kinds.items()
            if kind != "ok"
        )

    def problems(self) -> tuple[str, ...]:
        """The targets missed, one line each; empty when the soak met them all."""
        first, last = self.samples[0], self.samples[-1]
        rss, fds, lost = last.rss_mib - first.rss_mib, last.fds - first.fds, self.lost_outside_restart()
        missed = (
            (rss > RSS_GROWTH_MIB, f"the appliance's RSS grew {rss:.1f} MiB (bound {RSS_GROWTH_MIB:.0f} MiB)"),
            (fds > FD_GROWTH, f"the appliance's open fds grew by {fds} (bound {FD_GROWTH})"),
            (lost > 0, f"{lost} requests failed outside the restart window"),
            (self.polls_failed > 0, f"{self.polls_failed} of {self.polls} console polls failed"),
            (self.statuses_failed > 0, f"{self.statuses_failed} of {self.statuses} status calls failed"),
            (
                self.restart is not None and self.restart.ready is None,
                f"the engine was not ready again after its restart within {RESTART_LIMIT_S:.0f} s",
            ),
        )
        return tuple(line for miss, line in missed if miss)

    def lines(self) -> list[str]:
        """The figures, as printed and written to soak.txt."""
        head = f"soak: {self.model}, workload mixed at {self.offered_per_s:g} req/s for {self.duration_s:.0f} s"
        samples = [f"  t={s.at_s:5.0f} s  RSS {s.rss_mib:6.1f} MiB  fds {s.fds}" for s in self.samples]
        first, last = self.samples[0], self.samples[-1]
        growth = (
            f"growth first->last: RSS {last.rss_mib - first.rss_mib:+.1f} MiB (max "
            f"{max(s.rss_mib for s in self.samples):.1f} MiB), fds {last.fds - first.fds:+d}"
        )
        calls = (
            f"console polls {self.polls} ({self.polls_failed} failed), status calls {self.statuses} "
            f"({self.statuses_failed} failed)"
        )
        outcomes = [
            f"  {w:<7} " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) for w, kinds in self.outcomes.items()
        ]
        problems = self.problems()
        verdict = "targets met" if not problems else "targets missed: " + "; ".join(problems)
        return [
            head,
            f"appliance process (every {STATUS_EVERY} polls, and at the end):",
            *samples,
            growth,
            calls,
            self._restart_line(),
            f"requests by outcome ({self.completed_per_s:.2f} req/s completed):",
            *outcomes,
            verdict,
        ]

    def _restart_line(self) -> str:
        if self.restart is None:
            return "restart: none"
        at = self.restart.requested - self.started
        if self.restart.ready is None:
            return f"restart: requested at {at:.0f} s, not ready again"
        down = self.restart.ready - self.restart.requested
        return f"restart: requested at {at:.0f} s, the engine ready again {down:.1f} s later"


class _Watcher:
    """The console's poller and `appliance status` on one appliance, its RSS and fds sampled, its engine restarted
    once `restart_at` seconds in."""

    def __init__(self, target: Target, pid: int, restart_at: float | None) -> None:
        self.target, self.process, self.restart_at = target, psutil.Process(pid), restart_at
        self.client = ControlClient([target])
        self.poller = Poller(self.client)
        self.started = time.time()
        """Wall-clock start: the watcher is made when the load's clock starts."""
        self.samples: list[Sample] = []
        self.polls = self.polls_failed = self.statuses = self.statuses_failed = 0
        self.requested: float | None = None
        self.went_down = False
        self.ready: float | None = None

    async def run(self, duration_s: float) -> None:
        """Poll for `duration_s`, and past it while the restarted engine is not ready yet (RESTART_LIMIT_S)."""
        start = time.monotonic()
        try:
            while (at := time.monotonic() - start) < duration_s or self._restarting(at - duration_s):
                await self._poll(at)
                await asyncio.sleep(POLL_S)
            self._sample(time.monotonic() - start)
        finally:
            await self.client.aclose()

    def _restarting(self, overtime_s: float) -> bool:
        return self.requested is not None and self.ready is None and overtime_s < RESTART_LIMIT_S

    async def _poll(self, at: float) -> None:
        polled = await self.poller.poll(self.target.name, detail=self.polls % DETAIL_EVERY == 0)
        self.polls += 1
        self.polls_failed += polled.error is not None
        ready = polled.state is not None and polled.state.state == "ready"
        if self.restart_at is not None and self.requested is None and at >= self.restart_at:
            self.requested = time.time()
            await self.client.act(self.target.name, "restart")
        elif self.requested is not None and self.ready is None:
            self.went_down = self.went_down or not ready
            if self.went_down and ready:
                self.ready = time.time()
        if self.polls % STATUS_EVERY == 0:
            self.statuses += 1
            self.statuses_failed += not await self._status()
            self._sample(at)

    async def _status(self) -> bool:
        """`appliance status --json` as an operator runs it; True when it answered."""
        env = os.environ | {"APPLIANCE_TOKEN": self.target.token}
        argv = (sys.executable, "-m", "appliance.cli", "status", "--url", self.target.url, "--json")
        quiet = asyncio.subprocess.DEVNULL
        child = await asyncio.create_subprocess_exec(*argv, env=env, stdout=quiet, stderr=quiet)
        return await child.wait() == 0

    def _sample(self, at: float) -> None:
        with self.process.oneshot():
            self.samples.append(Sample(at, self.process.memory_info().rss / MIB, self.process.num_fds()))

    def report(self, load: LoadReport, duration_s: float) -> SoakReport:
        restart = None if self.requested is None else Restart(self.requested, self.ready)
        return SoakReport(
            load.run.model,
            load.workload.rate_per_s,
            duration_s,
            self.started,
            tuple(self.samples),
            self.polls,
            self.polls_failed,
            self.statuses,
            self.statuses_failed,
            restart,
            outcomes(load, restart),
            load.request_throughput,
        )


def outcomes(load: LoadReport, restart: Restart | None) -> dict[str, dict[str, int]]:
    """The load test's requests by window of the restart (by when each was sent), then by outcome."""
    counts: dict[str, Counter[str]] = {}
    for trace in load.traces:
        window = "run" if restart is None else restart.window(load.run.started_at + trace.sent_s)
        counts.setdefault(window, Counter())[trace.error or "ok"] += 1
    return {window: dict(kinds) for window, kinds in counts.items()}


async def soak(
    target: Target,
    pid: int,
    engine_url: str,
    *,
    duration_s: float,
    restart_at: float | None,
    overrides: Sequence[str] = (),
) -> tuple[SoakReport, LoadReport]:
    """`workload=mixed` (and `overrides`, e.g. its rate or `serving.api_key_env`) at `engine_url` for `duration_s`,
    while the console's poller watches `target`, whose process is `pid`, and restarts its engine at `restart_at`."""
    config = compose_config(["workload=mixed", *overrides]).config
    load_target = LoadTarget(engine_url, "soak", config.serving.api_key_env)
    watching: list[tuple[_Watcher, asyncio.Task[None]]] = []

    async def watch() -> None:  # when the load's clock starts, after its prompts are built and warmed up
        watcher = _Watcher(target, pid, restart_at)
        watching.append((watcher, asyncio.create_task(watcher.run(duration_s))))

    load = await run_loadtest(config.workload, load_target, RunWindow(duration_s, MAX_REQUESTS), ready=watch)
    watcher, watched = watching[0]
    await watched  # a restart may outlast the send window
    return watcher.report(load, duration_s), load


def write(report: SoakReport, load: LoadReport, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "soak.txt").write_text("\n".join(report.lines()) + "\n")
    (out / "soak.json").write_text(json.dumps(asdict(report), indent=2) + "\n")
    (out / "report.json").write_text(json.dumps(report_json(load)) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=600.0, help="send window in seconds (default 600)")
    parser.add_argument("--restart-at", type=float, help="seconds in to restart the engine (default: halfway)")
    parser.add_argument("--no-restart", action="store_true", help="no engine restart")
    parser.add_argument("--model", default="smollm2", help="the model group option to serve (default smollm2)")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(time.strftime(".cache/soak-%Y%m%d-%H%M%S")),
        help="report directory (default .cache/soak-<time>)",
    )
    parser.add_argument("overrides", nargs="*", help="overrides for the load, e.g. workload.rate_per_s=1")
    args = parser.parse_args()
    restart_at = None if args.no_restart else args.duration / 2 if args.restart_at is None else args.restart_at
    with tempfile.TemporaryDirectory() as tmp, running_appliance(Path(tmp), model=args.model) as served:
        target = Target("soak", served.control_url, served.token)
        run = soak(
            target,
            served.proc.pid,
            served.engine_url,
            duration_s=args.duration,
            restart_at=restart_at,
            overrides=args.overrides,
        )
        try:
            report, load = asyncio.run(run)
        except ApplianceError as error:  # the restart refused, the engine port unreachable: one line, as the CLI
            raise SystemExit(f"soak: {error}") from None
    write(report, load, args.out)
    print("\n".join(report.lines()))
    print(f"written to {args.out}/")
    return 1 if report.problems() else 0


if __name__ == "__main__":
    sys.exit(main())
