"""Scheduler constraints against the site's declared request mix (the `workload` group).

The TT scheduler never mixes prefill and decode in one step and always prefers prefill; its
async decode pipeline drains whenever a batch holds structured output, penalties or logprobs,
and one such request moves a whole batch to host sampling (tenstorrent/vllm-tt-plugin@e3fc849:
src/vllm_tt_plugin/scheduler.py TTScheduler, model_runner.py check_perform_device_sampling, docs/SCHEDULING.md).
A backend can pass every other check and still miss a workload's latency targets because of
this, so the check turns the mix into predicted effects. Request features are assumed to be
drawn independently, as the load tester draws them.
"""

from __future__ import annotations

from dataclasses import dataclass

from appliance.compat.validate import ValidatedConfig
from appliance.preflight.results import CheckResult, CheckStatus, check

__all__ = ["DRAIN_WARN", "INTERRUPT_WARN", "LONG_PROMPT", "scheduler_check"]

INTERRUPT_WARN = 0.10
"""Warn when at least this share of decode steps is interrupted by a prefill."""
DRAIN_WARN = 0.25
"""Warn when at least this share of decode batches drains the pipeline or samples on the host."""
LONG_PROMPT = 1024
"""Prompts this long make a whole-prompt prefill step a visible decode stall."""


@dataclass(frozen=True, slots=True)
class _Mix:
    batch: int
    """Requests in one decode batch of one rank or lane."""
    batch_label: str
    structured: float
    logprobs: float
    penalties: float


def scheduler_check(validated: ValidatedConfig) -> CheckResult:
    """Predicted effects of the engine's scheduler on the configured workload."""
    cfg, work = validated.config, validated.config.workload
    phased = validated.engine == "tt" or cfg.engine.scheduler == "phased"
    mix = _mix(validated)
    effects = _context(validated) + (_phases(validated, mix) if phased else [])
    notes = [_describe(validated, phased)]
    if validated.engine == "tt":
        tt_effects, tt_notes = _tt_pipeline(validated, mix)
        effects += tt_effects
        notes += tt_notes
    status: CheckStatus = "warn" if effects else "pass"
    summary = (
        f"{len(effects)} predicted effect(s) on workload={work.name}"
        if effects
        else (f"workload={work.name} fits the {'phase-exclusive' if phased else 'mixed-batch'} scheduler")
    )
    return check(
        "pilot.scheduler",
        "Scheduler constraints",
        status,
        summary,
        "Record the mix in the pilot plan and replay it with the load tester; reduce the shares above, "
        "or accept the predicted latency",
        workload=work.name,
        batch=mix.batch_label,
        effects=effects,
        scheduler=notes,
        shares={"structured_output": mix.structured, "logprobs": mix.logprobs, "penalties": mix.penalties},
    )


def _mix(v: ValidatedConfig) -> _Mix:
    work = v.config.workload
    per_rank = max(1, v.max_concurrency // max(v.data_parallel, 1))
    if work.arrival == "concurrency":
        batch = max(1, min(work.concurrency, v.max_concurrency) // max(v.data_parallel, 1))
        label = f"{batch} (closed loop of {work.concurrency}, per rank)"
    else:
        # Little's law at the SLO latency: requests in flight = arrival rate x time each one takes.
        in_flight = work.rate_per_s * (work.slo_ttft_ms + work.output_tokens.mean * work.slo_itl_ms) / 1000
        batch = min(per_rank, max(1, round(in_flight / max(v.data_parallel, 1))))
        label = f"{batch} (Poisson at {work.rate_per_s:g}/s for the SLO latency, per rank, at most {per_rank})"
    return _Mix(batch, label, work.structured_output_share, work.logprobs_share, work.penalties_share)


def _describe(v: ValidatedConfig, phased: bool) -> str:
    if not phased:
        return "upstream vLLM scheduler: prefill and decode share a step (chunked prefill)"
    chunked = v.chunked_prefill is True and v.engine == "tt"
    return "phase-exclusive: each step is prefill-only or decode-only, prefill preferred; " + (
        "chunked prefill on" if chunked else "a whole prompt is one prefill step (no chunked prefill)"
    )


def _context(v: ValidatedConfig) -> list[str]:
    work = v.config.workload
    longest = work.prompt_tokens.max + work.output_tokens.max
    if longest <= v.max_context:
        return []
    return [f"requests up to {longest} tokens exceed serving.max_context={v.max_context}: vLLM rejects them (HTTP 400)"]


def _phases(v: ValidatedConfig, mix: _Mix) -> list[str]:
    work, effects = v.config.workload, []
    if work.arrival == "concurrency":
        per_step = mix.batch / max(work.output_tokens.mean, 1)
        if per_step >= INTERRUPT_WARN:
            effects.append(
                f"about {min(per_step, 1.0):.0%} of decode steps give way to a prefill ({mix.batch} streams of "
                f"~{work.output_tokens.mean} tokens): every running stream pauses for each new prompt"
            )
    elif work.rate_per_s > 0:
        effects.append(
            f"{work.rate_per_s:g} arrivals/s, each a prefill step that pauses every running decode "
            "(prefill is always preferred, so inter-token latency rises with the arrival rate)"
        )
    if work.prompt_tokens.mean >= LONG_PROMPT and not (v.chunked_prefill is True and v.engine == "tt"):
        effects.append(
            f"long prompts (mean {work.prompt_tokens.mean}, max {work.prompt_tokens.max} tokens) prefill in one "
            "step each, stalling all decodes for its whole duration"
        )
    return effects


def _tt_pipeline(v: ValidatedConfig, mix: _Mix) -> tuple[list[str], list[str]]:
    """Async-decode drains and host-sampling fallbacks that the mix triggers on TT: (effects, notes)."""
    effects: list[str] = []
    notes: list[str] = []
    device_sampling = "sample_on_device_mode" in v.tt_options
    if v.config.features.async_decode:
        _async_decode(v, mix, device_sampling, effects, notes)
    else:
        notes.append("async decode off: each decode step waits for its readback")
    if device_sampling:
        share = _batch_share(1 - (1 - mix.structured) * (1 - mix.logprobs), mix.batch)
        (effects if share >= DRAIN_WARN else notes).append(
            f"{share:.0%} of decode batches fall back to host sampling (structured output or top logprobs in the batch)"
        )
    else:
        notes.append("sampling runs on the host for every step (no tt.sample_on_device_mode)")
    if mix.structured > 0:
        notes.append("structured output is compact JSON only (the plugin disables any-whitespace)")
    return effects, notes


def _declares(v: ValidatedConfig, key: str) -> bool:
    return v.capabilities is not None and bool(v.capabilities.value(key))


def _async_decode(v: ValidatedConfig, mix: _Mix, device_sampling: bool, effects: list[str], notes: list[str]) -> None:
    missing = [
        reason
        for reason, absent in (
            ("the model does not declare async_decode", not _declares(v, "supports_async_decode")),
            ("sampling is not on the device", not device_sampling),
            ("tt.trace_mode is none", v.tt_options.get("trace_mode") == "none"),
        )
        if absent
    ]
    if missing:
        effects.append(f"async decode is on but overlaps nothing: {'; '.join(missing)}")
        return
    drain = 1 - (1 - mix.structured) * (1 - mix.logprobs) * (1 - mix.penalties)
    share = _batch_share(drain, mix.batch)
    (effects if share >= DRAIN_WARN else notes).append(
        f"{share:.0%} of decode batches drain the async pipeline ({drain:.0%} of requests carry "
        "structured output, logprobs or penalties; one per batch drains it)"
    )


def _batch_share(per_request: float, batch: int) -> float:
    """Chance that a batch of `batch` requests holds at least one with the feature."""
    return 1 - (1 - per_request) ** batch
