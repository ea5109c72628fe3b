"""Images in the config and the verdict (issue 42 item 2): the matrix's vision blocks, the image keys, their flags,
their refusals through the real CLI, and the engine's own reading of the limits.

testkit/data/vllm-cpu-config-probe-vision.json is the JSON line `engine_plugins/appliance_probe.py config` printed in
the CPU engine (vLLM 0.32.0) for the tiny random-weight Qwen2.5-VL folder the appliance builds (config.json and the
real Qwen2.5-VL preprocessor_config.json), with `--limit-mm-per-prompt '{"image": 1, "video": 0}'
--mm-processor-kwargs '{"max_pixels": 200704}' --max-model-len 4096` and the CPU plan's other flags.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from appliance.compat.images import TEXT_MARGIN
from appliance.compat.matrix import MODELS_DIR, CompatibilityMatrix, load_matrix
from appliance.compat.validate import validate
from appliance.config.compose import compose_config
from appliance.engines.config_probe import Difference, compare
from appliance.errors import ConfigError
from appliance.plan import build_plan
from testkit.helpers import Cli
from testkit.paths import DATA

QWEN_VL = ("+model=qwen", "model.checkpoint=Qwen/Qwen2.5-VL-72B-Instruct", "mesh=t3k")
GEMMA3 = ("+model=gemma", "mesh=n150")
TEXT = ("+model=llama", "mesh=n300")
HELP = DATA / "vllm-cpu-api-server-help.txt"
RECORDED = json.loads((DATA / "vllm-cpu-config-probe-vision.json").read_text())


def test_every_vision_architecture_carries_its_image_facts_each_with_a_source(matrix: CompatibilityMatrix) -> None:
    vision = {(f.family, n): a.images for f in matrix.families.values() for n, a in f.architectures.items() if a.vision}
    assert {n for _, n in vision} >= {
        "Gemma3ForConditionalGeneration",
        "MllamaForConditionalGeneration",
        "Mistral3ForConditionalGeneration",
        "Qwen2_5_VLForConditionalGeneration",
        "Qwen3VLForConditionalGeneration",
    }
    for name, facts in vision.items():
        assert facts is not None, name
        assert facts.images_per_prompt.source and facts.largest_image.source and facts.tokens_per_image.source, name
    # Both sides of the Qwen2.5-VL contradiction are cited where its value is chosen.
    qwen = vision["qwen", "Qwen2_5_VLForConditionalGeneration"]
    assert qwen is not None and qwen.images_per_prompt.value == 1
    assert "999" in qwen.images_per_prompt.source and "offline_inference_tt.py" in qwen.images_per_prompt.source


def test_the_qwen_formula_gives_the_token_counts_the_tiny_vl_engine_measured(matrix: CompatibilityMatrix) -> None:
    """vLLM 0.32 CPU with the real Qwen2.5-VL processor: 56x56 -> 4 tokens, 224x224 -> 64, and a 1000x1000 image
    under max_pixels 200704 -> 256."""
    tokens = matrix.families["qwen"].architectures["Qwen2_5_VLForConditionalGeneration"].images
    assert tokens is not None
    formula = tokens.tokens_per_image
    assert (formula.at(56 * 56), formula.at(224 * 224), formula.at(min(1000 * 1000, 200704))) == (4, 64, 256)
    assert formula.at(tokens.largest_image.pixels) == 16384
    assert formula.pixels_for(256) == 200704


def _vision_true(text: str) -> str:
    """Qwen2.5-VL's block replaced by a bare `vision: true`."""
    start = text.index("    vision:\n", text.index("  Qwen2_5_VLForConditionalGeneration:"))
    return text[:start] + "    vision: true\n" + text[text.index("    accepts_optimizations", start) :]


def _two_formulas(text: str) -> str:
    return text.replace("        fixed: 256\n", "        fixed: 256\n        patch: 14\n", 1)


@pytest.mark.parametrize(
    ("edit", "key", "says"),
    [
        (_vision_true, "qwen.yaml:architectures.Qwen2_5_VLForConditionalGeneration.vision", "needs its block"),
        (_two_formulas, "gemma.yaml:architectures.Gemma3ForConditionalGeneration.vision", "exactly one of fixed"),
    ],
)
def test_a_vision_architecture_without_a_whole_block_fails_matrix_loading_in_one_line_naming_file_and_key(
    tmp_path: Path, edit: Callable[[str], str], key: str, says: str
) -> None:
    models = tmp_path / "models"
    shutil.copytree(MODELS_DIR, models)
    path = models / key.split(":")[0]
    path.write_text(edit(path.read_text()))
    with pytest.raises(ConfigError) as raised:
        load_matrix(models)
    (problem,) = raised.value.problems
    assert problem.key == key and says in problem.message and "\n" not in problem.render()


BAD = [
    (
        (*TEXT, "serving.max_images_per_prompt=2"),
        "images-on-text-model",
        "serving.max_images_per_prompt",
        ["~serving.max_images_per_prompt"],
    ),
    (
        (*QWEN_VL, "serving.max_images_per_prompt=3"),
        "images-too-many",
        "serving.max_images_per_prompt",
        ["serving.max_images_per_prompt=1"],
    ),
    (
        (*GEMMA3, "serving.max_images_per_prompt=11"),
        "images-too-many",
        "serving.max_images_per_prompt",
        ["serving.max_images_per_prompt=10"],
    ),
    (
        (*QWEN_VL, "serving.max_image_pixels=20000000"),
        "image-too-large",
        "serving.max_image_pixels",
        ["serving.max_image_pixels=12845056"],
    ),
    (
        (*QWEN_VL, "serving.max_context=2048"),
        "context-too-short-for-image",
        "serving.max_context",
        [f"serving.max_context={16384 + TEXT_MARGIN}"],
    ),
    (
        (*GEMMA3, "serving.max_image_pixels=50176"),
        "image-cap-unsupported",
        "serving.max_image_pixels",
        ["~serving.max_image_pixels"],
    ),
]


@pytest.mark.parametrize(("overrides", "code", "key", "change"), BAD, ids=[b[1] + "-" + b[0][0][8:] for b in BAD])
def test_each_bad_image_setting_is_one_line_exit_2_with_a_change(
    cli: Cli, overrides: tuple[str, ...], code: str, key: str, change: list[str]
) -> None:
    done = cli("validate", "--json", *overrides)
    assert done.returncode == 2
    (finding,) = [f for f in json.loads(done.stdout)["findings"] if f["code"] == code]
    assert finding["key"] == key and finding["change"] == change
    lines = [line for line in done.stderr.splitlines() if line.startswith(f"error[{code}]")]
    assert len(lines) == 1 and key in lines[0]


def test_a_context_too_short_names_the_smaller_image_that_fits_too(cli: Cli) -> None:
    done = cli("validate", *QWEN_VL, "serving.max_context=2048")
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("error[context-too-short-for-image]")]
    assert "(16384 tokens)" in line and f"serving.max_image_pixels={(2048 - TEXT_MARGIN) * 28 * 28}" in line


def test_validate_plan_and_serve_refuse_images_on_a_text_row_alike(cli: Cli, tmp_path: Path) -> None:
    lines = set()
    for command in ("validate", "plan", "serve"):
        done = cli(command, *TEXT, "serving.max_images_per_prompt=2", f"paths.state_dir={tmp_path}")
        assert done.returncode == 2, command
        lines |= {x for x in done.stderr.splitlines() if x.startswith("error[images-on-text-model]")}
    assert len(lines) == 1


def test_the_vision_plan_sets_the_limits_video_zero_and_the_pixel_cap(matrix: CompatibilityMatrix) -> None:
    plan = build_plan(validate(compose_config([*QWEN_VL, "serving.max_image_pixels=200704"]), matrix))
    argv = list(plan.argv)
    assert json.loads(argv[argv.index("--limit-mm-per-prompt") + 1]) == {"image": 1, "video": 0}
    assert json.loads(argv[argv.index("--mm-processor-kwargs") + 1]) == {"max_pixels": 200704}
    assert "--mm-processor-cache-gb" not in argv
    assert plan.images is not None and plan.images.tokens_per_image == 256
    assert plan.expected["limit_mm_per_prompt"] == {"image": 1, "video": 0}
    # Gemma 3 on TT: no pixel cap to pass (its processor resizes to 896x896), the TT specs' processor cache of 0.
    gemma = list(build_plan(validate(compose_config(list(GEMMA3)), matrix)).argv)
    assert json.loads(gemma[gemma.index("--limit-mm-per-prompt") + 1]) == {"image": 10, "video": 0}
    assert "--mm-processor-kwargs" not in gemma and gemma[gemma.index("--mm-processor-cache-gb") + 1] == "0"
    text = build_plan(validate(compose_config(list(TEXT)), matrix))
    assert not any(a.startswith(("--limit-mm", "--mm-")) for a in text.argv) and text.images is None
    assert "limit_mm_per_prompt" not in text.expected


def test_every_image_flag_the_plan_emits_is_one_the_recorded_vllm_serve_help_lists(matrix: CompatibilityMatrix) -> None:
    """testkit/data/vllm-cpu-api-server-help.txt is `--help=all` of the CPU engine's vLLM 0.32.0 serve parser."""
    listed = set(re.findall(r"--[a-z][a-z0-9-]+", HELP.read_text()))
    for overrides in (QWEN_VL, GEMMA3):
        emitted = {a for a in build_plan(validate(compose_config(list(overrides)), matrix)).argv if a.startswith("--")}
        assert {"--limit-mm-per-prompt"} <= emitted and {a for a in emitted if "mm" in a} <= listed


def test_plan_and_validate_print_the_same_image_verdict(cli: Cli) -> None:
    plan, checked = cli("plan", *QWEN_VL), cli("validate", *QWEN_VL)
    assert plan.returncode == 0 and checked.returncode == 0
    planned = [
        x.removeprefix("# ") for x in plan.stdout.splitlines() if x.startswith(("# images", "# the plugin, for im"))
    ]
    said = [x for x in checked.stdout.splitlines() if x.startswith(("images", "the plugin, for images"))]
    assert planned == said
    assert said[0] == "images: up to 1 per prompt, up to 12845056 px (16384 tokens each); video refused"
    assert any("Only images are supported for now" in x for x in said)
    assert any("lane-DP does not support" in x for x in said)  # mrope: no lane data parallelism
    images = json.loads(cli("plan", "--json", *QWEN_VL).stdout)["images"]
    assert (images["images_per_prompt"], images["tokens_per_image"]) == (1, 16384)
    assert "tokens_per_image" in images["sources"]


def test_the_engines_recorded_reading_matches_the_vision_plan_and_names_a_difference(
    matrix: CompatibilityMatrix,
) -> None:
    plan = build_plan(validate(compose_config([*QWEN_VL, "serving.max_image_pixels=200704"]), matrix))
    keys = ("limit_mm_per_prompt", "mm_processor_kwargs")
    assert compare({k: plan.expected[k] for k in keys}, RECORDED["effective"]) == ()
    two = build_plan(validate(compose_config([*QWEN_VL, "serving.max_image_pixels=50176"]), matrix))
    assert compare({k: two.expected[k] for k in keys}, RECORDED["effective"]) == (
        Difference("mm_processor_kwargs", {"max_pixels": 50176}, {"max_pixels": 200704}),
    )


def test_a_vision_class_the_state_batches_one_at_a_time_is_refused_above_one(tmp_path: Path) -> None:
    """Qwen 3.6's vision path batches one sequence (tt-inference-server); the matrix serves it as text today, so a
    copy of models/ declares it vision to exercise the state's rule."""
    models = tmp_path / "models"
    shutil.copytree(MODELS_DIR, models)
    qwen = models / "qwen.yaml"
    start = qwen.read_text().index("  Qwen3_5ForConditionalGeneration:")
    head, tail = qwen.read_text()[:start], qwen.read_text()[start:]
    block = (
        "    vision:\n      images_per_prompt: {value: 1, source: test}\n"
        "      largest_image: {pixels: 16777216, kwarg: max_pixels, source: test}\n"
        "      tokens_per_image: {patch: 32, source: test}\n"
    )
    qwen.write_text(head + tail.replace("    vision: false\n", block, 1))
    composed = compose_config(["+model=qwen", "model.checkpoint=Qwen/Qwen3.6-27B", "mesh=p300x2"])
    with pytest.raises(ConfigError) as raised:
        validate(composed, load_matrix(models))
    (problem,) = [p for p in raised.value.problems if p.code == "vision-batch-limit"]
    assert problem.change == ("serving.max_concurrency=1",)
