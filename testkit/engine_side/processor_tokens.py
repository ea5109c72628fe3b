"""What a vision checkpoint's own processor predicts a chat request costs, in prompt tokens, as JSON.

Runs in the CPU engine's interpreter (transformers and the family's processor live there):
`python processor_tokens.py MODEL_DIR PROCESSOR_KWARGS_JSON < requests.json`, where requests.json is a list of
OpenAI chat `messages` lists whose image parts are base64 `data:` URLs. Prints one token count per request: the
checkpoint's chat template rendered, then its processor run on the decoded images, as the engine does.
"""

from __future__ import annotations

import base64
import io
import json
import sys
from typing import Any

from PIL import Image
from transformers import AutoProcessor


def images_of(messages: list[dict[str, Any]]) -> list[Image.Image]:
    urls = [
        part["image_url"]["url"]
        for m in messages
        if isinstance(m["content"], list)
        for part in m["content"]
        if part["type"] == "image_url"
    ]
    return [Image.open(io.BytesIO(base64.b64decode(url.partition(",")[2]))).convert("RGB") for url in urls]


def main() -> None:
    processor = AutoProcessor.from_pretrained(sys.argv[1], **json.loads(sys.argv[2]))
    counts = []
    for messages in json.load(sys.stdin):
        images = images_of(messages) or None  # first: the chat template rewrites the image parts it renders
        text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        counts.append(len(processor(text=[text], images=images)["input_ids"][0]))
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
