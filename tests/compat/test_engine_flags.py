"""The flag table (appliance/compat/engine_flags.py): the one source the plan writes from, validation refuses with,
the effective-capabilities reader reads back with and the docs reference is made from."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest

from appliance.compat.engine_flags import FLAGS, WRITTEN, PlannedFlags, command_args, flag_row, read_back
from appliance.compat.matrix import load_matrix
from appliance.compat.validate import validate
from appliance.config.compose import compose_config, group_options
from appliance.config.schema import ComposedConfig
from appliance.errors import ConfigError
from appliance.plan import LaunchPlan, build_plan
from docsgen.flags_reference import flags_page

MATRIX = load_matrix()
MODELS = set(group_options("model"))
# Every shipped config: each matrix row of a shipped model at its own defaults, and the CPU ones the quick start,
# the vision model and the phased scheduler run.
SHIPPED = (
    *(
        (f"+model={f.family}", f"mesh={d.mesh}", f"model.checkpoint={c.checkpoint}")
        for f, c, d in MATRIX.rows()
        if d.mesh != "cpu" and f.family in MODELS
    ),
)
CPU = (
    ("mesh=cpu", "engine=cpu"),
    ("mesh=cpu", "engine=cpu", "model=tiny_vl"),
    ("mesh=cpu", "engine=cpu", "engine.scheduler=phased"),
    ("mesh=cpu", "engine=cpu", "features.chunked_prefill=true"),
)
SHIPPED += CPU


def _planned(overrides: tuple[str, ...]) -> tuple[ComposedConfig, LaunchPlan] | None:
    composed = compose_config(list(overrides))
    try:
        return composed, build_plan(validate(composed, MATRIX))
    except ConfigError:
        return None  # a row that needs a fix at its defaults: its fixes are tests/test_fix_convergence.py's


def _written_groups(plan: LaunchPlan, extra: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The plan's own flags, each with its values, as it wrote them (argv: python -m module, own flags, extra_args)."""
    own = plan.argv[3 : len(plan.argv) - len(extra)]
    groups: list[list[str]] = []
    for token in own:
        if flag_row(token) is not None:
            groups.append([token])
        else:
            groups[-1].append(token)
    return [tuple(g) for g in groups]


def test_the_plan_writes_exactly_the_fields_of_planned_flags() -> None:
    assert [row.dest for row in WRITTEN] == [f.name for f in fields(PlannedFlags)]
    assert len({name for row in FLAGS for name in row.names}) == sum(len(row.names) for row in FLAGS)


@pytest.mark.parametrize("overrides", SHIPPED, ids=" ".join)
def test_every_shipped_config_refuses_extra_args_repeating_a_flag_its_plan_wrote(overrides: tuple[str, ...]) -> None:
    planned = _planned(overrides)
    if planned is None:
        pytest.skip("needs a fix at its defaults")
    composed, plan = planned
    cfg = composed.config
    base = cfg.engine.extra_args
    for group in _written_groups(plan, base):
        row = flag_row(group[0])
        assert row is not None
        spellings = [group] + ([(row.negative,), (row.flag,)] if row.negative else [])
        for repeat in spellings:
            extra = (*base, *repeat)
            again = replace(composed, config=replace(cfg, engine=replace(cfg.engine, extra_args=extra)))
            if row.extra_args == "folded":  # merged into the one the plan writes, never repeated
                assert build_plan(validate(again, MATRIX)).argv.count(row.flag) == 1
                continue
            with pytest.raises(ConfigError) as refused:
                build_plan(validate(again, MATRIX))
            lines = [p.render() for p in refused.value.problems if p.code == "flag-owned-by-config"]
            assert any(f"{repeat[0]} is set" in line and row.key in line for line in lines), (repeat, lines)


def test_every_cpu_config_and_most_rows_plan_at_their_defaults() -> None:
    assert all(_planned(o) is not None for o in CPU)
    assert sum(_planned(o) is not None for o in SHIPPED) >= len(SHIPPED) * 2 // 3


def test_an_argv_reads_back_to_what_the_plan_wrote() -> None:
    planned = PlannedFlags(
        model="/m",
        served_model_name="m",
        host="127.0.0.1",
        port=8000,
        max_model_len=4096,
        max_num_seqs=8,
        enable_prefix_caching=False,
        async_scheduling=True,
        shutdown_timeout=30,
        data_parallel_size=2,
        speculative_config={"method": "ngram", "num_speculative_tokens": 3},
        enable_chunked_prefill=False,
        max_num_batched_tokens=4096,
        limit_mm_per_prompt={"image": 2, "video": 0},
        mm_processor_cache_gb=0.5,
        allowed_media_domains=("images.example", "127.0.0.2"),
        allowed_local_media_path="/media",
    )
    argv = command_args(planned)
    assert argv[:2] == ["--model", "/m"] and "--no-enable-prefix-caching" in argv and "--mm-processor-cache-gb" in argv
    expected = {
        k: v for k, v in ((f.name, getattr(planned, f.name)) for f in fields(PlannedFlags)) if v not in (None, ())
    }
    assert read_back(["python", "-m", "vllm", *argv]) == expected


def test_the_last_of_a_repeated_flag_is_the_one_read_back_as_vllm_takes_it() -> None:
    assert read_back(["--max-num-batched-tokens", "512", "--max_num_batched_tokens=1024", "--dtype", "float32"]) == {
        "max_num_batched_tokens": 1024,
        "dtype": "float32",
    }


def test_the_docs_reference_lists_every_spelling_and_key() -> None:
    page = flags_page()
    for row in FLAGS:
        assert all(f"`{name}`" in page for name in row.names) and f"`{row.key}`" in page
