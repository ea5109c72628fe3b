"""Drive a real vLLM scheduler step by step and print what every step scheduled, as JSON.

Runs in the CPU engine's interpreter (it imports vLLM): `python phased_steps.py MODEL_DIR CLASS...`,
each CLASS being phased, phased-async, upstream or upstream-async; prints one JSON object keyed by
CLASS (one interpreter for all of them, since importing vLLM is most of the cost). The model runner is replaced by
one sampled token per request that finished its prompt, which is all the scheduler reads back.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "engine_plugins"))
from appliance_phased.scheduler import AsyncPhasedScheduler, PhasedScheduler  # noqa: E402

BLOCK, SEATS, BLOCKS = 16, 4, 1000
# (arrival step, prompt tokens, output tokens): two long decodes, prompts arriving while they
# run, then more prompts than free seats, so admission has to wait for a decode to finish.
ARRIVALS = [(0, 40, 30), (0, 50, 30), (3, 300, 5), (6, 200, 5), (6, 120, 5), (12, 60, 8), (12, 60, 8), (12, 60, 8)]
CLASSES = {
    "phased": PhasedScheduler,
    "phased-async": AsyncPhasedScheduler,
    "upstream": Scheduler,
    "upstream-async": AsyncScheduler,
}


def make_scheduler(model: str, cls: type[Scheduler]) -> Scheduler:
    phased = issubclass(cls, (PhasedScheduler, AsyncPhasedScheduler))
    # The upstream control gets a small chunk budget, so its long prompts are split across steps.
    sched = SchedulerConfig(
        max_num_seqs=SEATS,
        max_num_batched_tokens=2048 if phased else 128,
        max_model_len=2048,
        enable_chunked_prefill=not phased,
        is_encoder_decoder=False,
        async_scheduling=issubclass(cls, AsyncScheduler),
    )
    cache = CacheConfig(block_size=BLOCK, enable_prefix_caching=False)
    cache.num_gpu_blocks = BLOCKS
    model_config = ModelConfig(model=model, max_model_len=2048)
    config = VllmConfig(scheduler_config=sched, model_config=model_config, cache_config=cache)
    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=1, dtype=torch.float32)
    kv = KVCacheConfig(num_blocks=BLOCKS, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)])
    return cls(
        vllm_config=config,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(config),
        block_size=BLOCK,
        log_stats=False,
    )


def step_once(sched: Scheduler, produced: dict[str, int]) -> dict[str, object]:
    """Schedule one step, record what it held, and feed back one token per finished prompt."""
    before = {rid: r.num_computed_tokens for rid, r in sched.requests.items()}
    waiting = len(sched.waiting)
    output: SchedulerOutput = sched.schedule()
    ids = list(output.num_scheduled_tokens)
    kinds = {rid: "prefill" if before.get(rid, 0) < sched.requests[rid].num_prompt_tokens else "decode" for rid in ids}
    sampled = [[9] if not sched.requests[rid].is_prefill_chunk else [] for rid in ids]
    for rid, tokens in zip(ids, sampled, strict=True):
        produced[rid] = produced.get(rid, 0) + len(tokens)
    index = {rid: k for k, rid in enumerate(ids)}
    runner = ModelRunnerOutput(req_ids=ids, req_id_to_index=index, sampled_token_ids=sampled)
    sched.update_from_output(output, runner)
    return {"waiting_before": waiting, "tokens": output.num_scheduled_tokens, "kinds": kinds}


def run(sched: Scheduler) -> dict[str, object]:
    steps: list[dict[str, object]] = []
    produced: dict[str, int] = {}
    for step in range(400):
        for i, (at, prompt, out) in enumerate(ARRIVALS):
            if at == step:
                params = SamplingParams(max_tokens=out, ignore_eos=True)
                sched.add_request(Request(f"r{i}", [7] * prompt, params, None, arrival_time=float(step)))
        if step > ARRIVALS[-1][0] and not sched.has_unfinished_requests():
            break
        steps.append({"step": step, **step_once(sched, produced)})
    return {
        "steps": steps,
        "produced": produced,
        "prompts": {f"r{i}": prompt for i, (_, prompt, _) in enumerate(ARRIVALS)},
        "wanted": {f"r{i}": out for i, (_, _, out) in enumerate(ARRIVALS)},
    }


if __name__ == "__main__":
    print(json.dumps({name: run(make_scheduler(sys.argv[1], CLASSES[name])) for name in sys.argv[2:]}))
