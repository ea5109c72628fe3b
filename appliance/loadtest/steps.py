"""A traffic step: open-loop arrivals stepped through rates with a mix of priority classes, and what each step and
class got back (admitted, shed with 429, 5xx, lost, TTFT of the admitted, goodput).

Arrivals are Poisson at each step's rate, like the load tester's open loop: a fixed interval would hide the bursts
that admission exists for. Each step is a process of its own from the step's start, so its count does not depend on
the step before. The class of a request is drawn from the weights on a seeded stream of its own, so the same plan
sends the same classes at the same times to the gateway and to plain HAProxy.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from appliance.config.schema import WorkloadConfig
from appliance.errors import ConfigError, Problem
from appliance.loadtest.generator import RequestTrace
from appliance.loadtest.stats import Distribution, distribution, goodput, ttft_distribution
from appliance.loadtest.workload import PlannedRequest, plan_requests

__all__ = ["Outcome", "StepPlan", "StepRow", "outcome", "plan_step_requests", "positive", "step_plan", "step_rows"]

Outcome = Literal["admitted", "shed", "server-error", "rejected", "lost"]


@dataclass(frozen=True, slots=True)
class StepPlan:
    multiples: tuple[float, ...]
    """Each step's rate as a multiple of `base_rate_per_s`, in order."""
    base_rate_per_s: float
    step_s: float
    """How long each step sends."""
    classes: tuple[tuple[str, float], ...] = ()
    """(priority class, share of requests); empty: no priority header is sent."""
    priority_header: str = "X-Priority"

    @property
    def duration_s(self) -> float:
        return len(self.multiples) * self.step_s

    def rate(self, step: int) -> float:
        return self.multiples[step] * self.base_rate_per_s


@dataclass(frozen=True, slots=True)
class StepRow:
    """What one step sent of one class (None: every class) and what came back."""

    step: int
    multiple: float
    priority: str | None
    offered_per_s: float
    """Requests sent per second of the step."""
    sent: int
    admitted: int
    """Answered 200 and streamed to the end."""
    shed: int
    """Answered 429."""
    server_errors: int
    """Answered 5xx."""
    rejected: int
    """Answered another 4xx (a request the server found invalid)."""
    lost: int
    """No complete answer: a timeout, a refused or broken connection, a broken stream, cancelled after the drain."""
    ttft: Distribution
    """Time to first token of the admitted."""
    shed_latency: Distribution
    """How long a 429 took to come back."""
    goodput_per_s: float
    """Requests per second of the step within the workload's SLOs (TTFT and inter-token)."""

    @property
    def admitted_share(self) -> float:
        return self.admitted / self.sent if self.sent else 0.0


def positive(flag: str, value: float) -> list[Problem]:
    """A problem naming `flag` when its value is not above zero."""
    if value > 0:
        return []
    return [
        Problem(code="bad-flag", key=flag, message=f"{value:g} is not above 0", fix=f"Give {flag} a positive number")
    ]


def step_plan(
    steps: str, step_s: float, base_rate_per_s: float, classes: str | None = None, priority_header: str = "X-Priority"
) -> StepPlan:
    """The plan of `--steps 0.5,1,2,3` (multiples of the base rate) and `--classes high=1,low=3` (weights);
    ConfigError naming each flag that is wrong."""
    problems = positive("--step-s", step_s) + positive("--rate", base_rate_per_s)
    multiples = _numbers("--steps", steps.split(","), problems)
    pairs = [item.partition("=") for item in classes.split(",")] if classes else []
    if any(not name or not sep for name, sep, _ in pairs) or len({name for name, _, _ in pairs}) < len(pairs):
        problems.append(_bad("--classes", classes or "", "NAME=WEIGHT pairs with distinct names, e.g. high=1,low=3"))
        pairs = []
    weights = _numbers("--classes", [weight for _, _, weight in pairs], problems)
    if problems:
        raise ConfigError(tuple(problems))
    total = sum(weights)
    shares = tuple((name, weight / total) for (name, _, _), weight in zip(pairs, weights, strict=True))
    return StepPlan(tuple(multiples), base_rate_per_s, step_s, shares, priority_header)


def _numbers(flag: str, texts: Sequence[str], problems: list[Problem]) -> list[float]:
    """Each text as a number above zero; one problem naming `flag` for the first that is not."""
    try:
        numbers = [float(text) for text in texts]
    except ValueError:
        numbers = []
    if len(numbers) < len(texts) or any(not n > 0 for n in numbers):  # `not >` catches NaN too
        problems.append(_bad(flag, ",".join(texts), "numbers above 0, comma-separated"))
    return numbers


def _bad(flag: str, value: str, wanted: str) -> Problem:
    return Problem(code="bad-flag", key=flag, message=f"{value!r} is not {wanted}", fix=f"Correct {flag}")


def plan_step_requests(workload: WorkloadConfig, plan: StepPlan) -> tuple[PlannedRequest, ...]:
    """Every request of the step run, in send order: the workload's lengths and features, the plan's arrivals and
    classes."""
    arrival = random.Random(f"{workload.seed}:step-arrival")
    times: list[float] = []
    for step in range(len(plan.multiples)):
        at, end = step * plan.step_s, (step + 1) * plan.step_s
        while (at := at + arrival.expovariate(plan.rate(step))) < end:
            times.append(at)
    drawn = plan_requests(replace(workload, arrival="concurrency"), len(times))
    names, shares = zip(*plan.classes, strict=True) if plan.classes else ((None,), (1.0,))
    chooser = random.Random(f"{workload.seed}:step-class")
    return tuple(
        replace(p, at_s=at, priority=chooser.choices(names, shares)[0]) for p, at in zip(drawn, times, strict=True)
    )


def outcome(trace: RequestTrace) -> Outcome:
    """What a request got: the step report's columns."""
    error = trace.error
    if error is None:
        return "admitted"
    if error == "http-429":
        return "shed"
    if error.startswith("http-5"):
        return "server-error"
    return "rejected" if error.startswith("http-") else "lost"


def step_rows(
    traces: Sequence[RequestTrace], plan: StepPlan, slo_ttft_ms: float, slo_itl_ms: float
) -> tuple[StepRow, ...]:
    """Per step, one row for every class together and, with classes, one per class."""
    last = len(plan.multiples) - 1
    by_step: list[list[RequestTrace]] = [[] for _ in plan.multiples]
    for t in traces:
        by_step[min(last, int((t.planned_s or 0.0) // plan.step_s))].append(t)
    rows = []
    for step, sample in enumerate(by_step):
        for name in (None, *(n for n, _ in plan.classes)):
            cell = [t for t in sample if name is None or t.priority == name]
            rows.append(_row(step, plan, name, cell, slo_ttft_ms, slo_itl_ms))
    return tuple(rows)


def _row(
    step: int, plan: StepPlan, name: str | None, cell: list[RequestTrace], slo_ttft_ms: float, slo_itl_ms: float
) -> StepRow:
    kinds = [outcome(t) for t in cell]
    return StepRow(
        step=step,
        multiple=plan.multiples[step],
        priority=name,
        offered_per_s=len(cell) / plan.step_s,
        sent=len(cell),
        admitted=kinds.count("admitted"),
        shed=kinds.count("shed"),
        server_errors=kinds.count("server-error"),
        rejected=kinds.count("rejected"),
        lost=kinds.count("lost"),
        ttft=ttft_distribution([t for t in cell if t.ok]),
        shed_latency=distribution([t.done_s - t.sent_s for t, kind in zip(cell, kinds, strict=True) if kind == "shed"]),
        goodput_per_s=goodput(cell, slo_ttft_ms, slo_itl_ms, plan.step_s).rate_per_s,
    )
