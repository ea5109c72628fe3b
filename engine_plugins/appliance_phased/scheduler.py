"""Phase-exclusive scheduling for any vLLM platform: the vllm-tt-plugin TTScheduler contract.

Every step is prefill-only or decode-only, never mixed. When a prompt is waiting, running
decodes sit out the step (prefill is preferred); if no prompt can be admitted, the step decodes
instead of idling. Chunked prefill must be off (the plan passes --no-enable-chunked-prefill and
a token budget of at least max_model_len), so a prompt is prefilled in one step.
Source: tenstorrent/vllm-tt-plugin@e3fc849: src/vllm_tt_plugin/scheduler.py (TTScheduler.schedule,
_schedule_prefill_only, _schedule_decode_only) and docs/SCHEDULING.md ("Local scheduler policy").

Selected with `engine.scheduler=phased`; the plan passes `--scheduler-cls` with one of the
two classes below (the async one when features.async_decode is on).
"""

from __future__ import annotations

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request

__all__ = ["AsyncPhasedScheduler", "PhasedScheduler"]


class _PhaseExclusive(Scheduler):
    """Wraps the upstream `schedule()` in two passes that each see only one phase."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        if self.scheduler_config.enable_chunked_prefill:
            raise ValueError(
                "phase-exclusive scheduling needs chunked prefill off: pass --no-enable-chunked-prefill "
                "(engine.scheduler=phased does)"
            )
        if self.connector is not None or self.ec_connector is not None:
            raise ValueError("phase-exclusive scheduling does not support KV or encoder-cache connectors")

    def schedule(self, throttle_prefills: bool = False) -> SchedulerOutput:
        decodes = [r for r in self.running if not r.is_prefill_chunk]
        if not self._prefill_pending():
            return super().schedule(throttle_prefills)
        previous_ids = set(self.prev_step_scheduled_req_ids)
        prefill = self._pass(decodes, self.max_num_active_reqs - len(decodes), throttle_prefills)
        if prefill.total_num_scheduled_tokens > 0 or not decodes:
            return prefill
        # No prompt fits (no seat or no KV room): decode rather than idle, as TTScheduler does.
        self.prev_step_scheduled_req_ids = previous_ids
        return _carry_over(prefill, self._pass([], 0, throttle_prefills))

    def _prefill_pending(self) -> bool:
        return bool(self.waiting) or bool(self.kv_holding_waiting) or any(r.is_prefill_chunk for r in self.running)

    def _pass(self, hidden: list[Request], admit: int, throttle: bool) -> SchedulerOutput:
        """One upstream pass with `hidden` running requests out of sight and at most `admit` seats.

        Hiding the decodes keeps them out of a prefill step; an admission cap of 0 keeps waiting
        prompts out of a decode step (preempted requests still go back to the waiting queue).
        """
        cap = self.max_num_active_reqs
        hidden_ids = {id(r) for r in hidden}
        self.running = [r for r in self.running if id(r) not in hidden_ids]
        self.max_num_active_reqs = admit
        try:
            return super().schedule(throttle)
        finally:
            self.running = hidden + self.running
            self.max_num_active_reqs = cap


def _carry_over(empty: SchedulerOutput, step: SchedulerOutput) -> SchedulerOutput:
    """Keep the bookkeeping an empty pass collected (finished, preempted, freed) in the real step."""
    step.finished_req_ids |= empty.finished_req_ids
    step.preempted_req_ids = (empty.preempted_req_ids or set()) | (step.preempted_req_ids or set()) or None
    step.free_encoder_mm_hashes = [*empty.free_encoder_mm_hashes, *step.free_encoder_mm_hashes]
    if empty.new_block_ids_to_zero:
        step.new_block_ids_to_zero = [*empty.new_block_ids_to_zero, *(step.new_block_ids_to_zero or [])]
    if empty.kv_cache_block_copies:
        step.kv_cache_block_copies = [*empty.kv_cache_block_copies, *(step.kv_cache_block_copies or [])]
    return step


class PhasedScheduler(_PhaseExclusive):
    """Phase-exclusive steps over vLLM's synchronous scheduler."""


class AsyncPhasedScheduler(_PhaseExclusive, AsyncScheduler):
    """Phase-exclusive steps over vLLM's async scheduler (features.async_decode=true)."""
