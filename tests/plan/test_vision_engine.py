"""The embedded vision model served by the real CPU engine through `appliance serve model=tiny_vl`
(`vision_appliance`): images in OpenAI chat requests become the prompt tokens the checkpoint's own processor
predicts (the plan's pixel cap applied), and bad images (undecodable, over vLLM's pixel limit, one too many) get the
engine's 4xx while the engine goes on serving.

The model's weights are random (no registry package carries a vision model's weights: models/tiny_vl.yaml), so
its answers are not judged; its processor and chat template are Qwen2.5-VL's real ones, recorded in
build/models/tiny_vl.yaml, and the prediction is made by transformers' Qwen2_5_VLProcessor in the engine's
interpreter (testkit/engine_side/processor_tokens.py), not by a formula of this test's.
"""

from __future__ import annotations

import base64
import json
import struct
import subprocess
import zlib
from typing import Any

import httpx
from PIL import Image

from appliance.config.schema import WorkloadConfig
from appliance.data_urls import ImageFormat, data_url
from appliance.plan import LaunchPlan
from appliance.quality.evalset import VISION_EVAL_SET
from appliance.rollout.gates import EvalMode, GateSettings, eval_mode, judge, measure
from testkit.appliance_process import MODEL, Served
from testkit.helpers import cpu_plan
from testkit.media_hosts import image_host
from testkit.paths import ENGINE_SIDE

VISION_MODEL = "appliance/tiny-qwen2.5-vl"
PREDICT = ENGINE_SIDE / "processor_tokens.py"


def image_url(width: int, height: int, colour: tuple[int, int, int] = (200, 30, 30), fmt: ImageFormat = "png") -> str:
    return data_url(Image.new("RGB", (width, height), colour), fmt)


def png_header(width: int, height: int) -> str:
    """A PNG whose header claims `width`x`height` (signature, IHDR and an empty IEND: no pixel data)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b"")
    return f"data:image/png;base64,{base64.b64encode(png).decode()}"


def messages(*urls: str, text: str = "What colour is the square?") -> list[dict[str, Any]]:
    parts = [{"type": "text", "text": text}, *({"type": "image_url", "image_url": {"url": u}} for u in urls)]
    return [{"role": "user", "content": parts}]


def chat(served: Served, msgs: list[dict[str, Any]], model: str = VISION_MODEL) -> httpx.Response:
    body = {"model": model, "messages": msgs, "max_tokens": 4, "temperature": 0}
    return httpx.post(f"{served.engine_url}/v1/chat/completions", json=body, timeout=300.0)


def vision_plan(served: Served) -> LaunchPlan:
    port = served.engine_url.rsplit(":", 1)[1]
    return cpu_plan(served.cache.parent, f"paths.cache_dir={served.cache}", f"serving.port={port}", model="tiny_vl")


def predicted_tokens(plan: LaunchPlan, requests: list[list[dict[str, Any]]]) -> list[int]:
    """The checkpoint's processor's count for each request, with the processor options the engine was given."""
    argv = plan.argv
    kwargs = argv[argv.index("--mm-processor-kwargs") + 1] if "--mm-processor-kwargs" in argv else "{}"
    done = subprocess.run(
        [plan.python, str(PREDICT), plan.model_path, kwargs],
        input=json.dumps(requests),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return list(json.loads(done.stdout))


def test_images_of_different_sizes_cost_the_tokens_the_processor_predicts(vision_appliance: Served) -> None:
    sizes = [(56, 56), (224, 224), (448, 308), (308, 448), (640, 480)]
    requests = [messages(image_url(w, h)) for w, h in sizes]
    requests.append(messages(image_url(56, 56), image_url(112, 112, (20, 20, 220), "jpeg")))  # two, PNG and JPEG
    got = []
    for request in requests:
        reply = chat(vision_appliance, request)
        assert reply.status_code == 200, reply.text
        got.append(reply.json()["usage"]["prompt_tokens"])
    assert got == predicted_tokens(vision_plan(vision_appliance), requests)
    assert len(set(got[:2])) == 2 and got[2] == got[3]  # size matters, orientation does not (same patch count)


def test_a_bad_image_gets_the_engines_4xx_and_the_engine_goes_on(
    vision_appliance: Served, shared_appliance: Served
) -> None:
    undecodable = chat(vision_appliance, messages("data:image/png;base64,AAAA"))
    assert undecodable.status_code == 400 and "image" in undecodable.json()["error"]["message"].lower()
    # 20000x20000 px in its header (its pixel data a stub: nothing is decoded before the size is judged).
    oversized = chat(vision_appliance, messages(png_header(20000, 20000)))
    assert oversized.status_code == 400 and "exceed the maximum" in oversized.json()["error"]["message"], oversized.text
    three = chat(vision_appliance, messages(*[image_url(56, 56)] * 3))  # serving.max_images_per_prompt: 2 (the row's)
    assert three.status_code == 400 and "At most 2 image(s)" in three.json()["error"]["message"], three.text
    to_text_model = chat(shared_appliance, messages(image_url(56, 56)), model=MODEL)
    assert 400 <= to_text_model.status_code < 500, to_text_model.text
    assert chat(vision_appliance, messages(image_url(56, 56))).status_code == 200
    assert chat(shared_appliance, messages(), model=MODEL).status_code == 200  # text: no image part
    assert vision_appliance.state().state == shared_appliance.state().state == "ready"


def test_an_image_url_from_a_listed_host_is_fetched_through_the_gate(vision_appliance: Served) -> None:
    with image_host("127.0.0.2") as listed:
        answer = chat(vision_appliance, messages(listed.url("/red.png")))
    assert answer.status_code == 200, answer.text
    assert listed.connections == ["/red.png"]


def test_image_urls_reach_nothing_the_site_has_not_listed(vision_appliance: Served) -> None:
    """Issue 54: a listener on loopback sees no connection from the engine for a URL to it, to the control API, from
    a listed host's redirect or through a listed name that resolves to loopback; each refusal is a 4xx that names no
    address, a local file is one too, and the engine serves on."""
    with image_host("127.0.0.1") as inside, image_host("127.0.0.2") as listed:
        refusals = {
            "unlisted": inside.url("/red.png"),
            "control API": f"{vision_appliance.control_url}/v1/state",
            "redirect": listed.url(f"/redirect?to={inside.url('/red.png')}"),
            "name resolving to loopback": inside.url("/red.png", host="localhost"),
            "local file": "file:///etc/passwd",
            "other scheme": f"ftp://127.0.0.2:{listed.port}/red.png",
        }
        answers = {what: chat(vision_appliance, messages(url)) for what, url in refusals.items()}
        assert inside.connections == []
        assert listed.connections == [f"/redirect?to={inside.url('/red.png')}"]  # fetched, not followed
    for what, answer in answers.items():
        assert 400 <= answer.status_code < 500, f"{what}: {answer.status_code} {answer.text}"
        assert "root:" not in answer.text
    assert "127.0.0.1" not in answers["name resolving to loopback"].json()["error"]["message"].replace(
        refusals["name resolving to loopback"], ""
    )  # only the client's own URL is echoed
    assert chat(vision_appliance, messages(image_url(56, 56))).status_code == 200
    assert vision_appliance.state().state == "ready"


async def test_the_upgrade_gates_eval_on_a_vision_appliance_checks_the_serving_path(vision_appliance: Served) -> None:
    """The gates' own measure and judge on the vision appliance: the vision set (images) by default, answered in
    full but not graded, since the weights are random; the verdict says so."""
    plan = vision_plan(vision_appliance)
    assert plan.images is not None and plan.random_weights
    settings = GateSettings(skip=("workload",))
    mode = eval_mode(plan, plan, settings)
    assert mode == EvalMode(VISION_EVAL_SET, graded=False)
    figures = await measure(plan, WorkloadConfig(name="unused: workload skipped"), settings, mode)
    assert figures == {"accuracy": 1.0}
    (gate,) = judge({"accuracy": 1.0}, figures, settings, mode)
    assert gate.passed and "serving path only" in gate.detail and "random" in gate.detail
