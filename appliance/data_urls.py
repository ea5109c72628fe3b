"""An image as the `url` of an OpenAI `image_url` content part: PNG or JPEG bytes, base64, in a `data:` URL.

One encoder for every image the appliance sends: the load test's random pictures and the evaluation sets'.
"""

from __future__ import annotations

import base64
import io
from typing import Literal

from PIL import Image

__all__ = ["ImageFormat", "data_url", "encode"]

ImageFormat = Literal["png", "jpeg"]
_JPEG_QUALITY = 90


def encode(image: Image.Image, fmt: ImageFormat) -> bytes:
    """The image's file bytes (JPEG at quality 90)."""
    out = io.BytesIO()
    if fmt == "jpeg":
        image.save(out, format="JPEG", quality=_JPEG_QUALITY)
    else:
        image.save(out, format="PNG")
    return out.getvalue()


def data_url(image: Image.Image, fmt: ImageFormat) -> str:
    """The image as a base64 `data:` URL."""
    return f"data:image/{fmt};base64,{base64.b64encode(encode(image, fmt)).decode()}"
