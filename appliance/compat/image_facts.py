"""What models/ records of a vision architecture's images: how many a prompt may carry, the largest, their token cost.

Each value carries the source it was read from; `Architecture.vision` holds one `Vision` for a vision architecture
(models/<family>.yaml `vision:` block) and `False` for a text one.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import isqrt
from typing import TYPE_CHECKING, Annotated

from appliance.config.bounds import Bound
from appliance.config.schema import Count

if TYPE_CHECKING:  # pydantic is imported where a schema is built: cached data is read back without it
    from pydantic import ConfigDict

__all__ = ["ImageTokens", "ImagesPerPrompt", "LargestImage", "ProcessorCache", "Vision"]

_FORBID: ConfigDict = {"extra": "forbid"}


@dataclass(frozen=True, slots=True)
class ImagesPerPrompt:
    """The most images one prompt may carry on this architecture."""

    __pydantic_config__ = _FORBID

    value: Count
    source: str


@dataclass(frozen=True, slots=True)
class LargestImage:
    """The largest image the processor keeps, in pixels, and the processor kwarg that lowers that cap."""

    __pydantic_config__ = _FORBID

    pixels: Count
    source: str
    kwarg: str | None = None
    """The `--mm-processor-kwargs` key that caps an image's pixels (Qwen-VL: max_pixels); None when the processor
    takes none (its own resize decides: serving.max_image_pixels can only stay at the largest)."""


@dataclass(frozen=True, slots=True)
class ImageTokens:
    """The encoder's tokens per image: a fixed count, or one per `patch`x`patch` pixels (plus `row_tokens` per row)."""

    __pydantic_config__ = _FORBID

    source: str
    fixed: Count | None = None
    patch: Count | None = None
    """Pixels on a side of the square one token stands for (the vision patch x the spatial merge)."""
    row_tokens: Annotated[int, Bound(ge=0)] = 0
    """Extra tokens per row of patches (Pixtral's [IMG_BREAK]/[IMG_END])."""

    def at(self, pixels: int) -> int:
        """Tokens one image of `pixels` costs at most (the processor resizes to multiples of `patch`, keeping the
        pixel count within the cap, so a square image has the most rows)."""
        if self.fixed is not None:
            return self.fixed
        patch = self.patch or 1
        return pixels // (patch * patch) + self.row_tokens * (isqrt(pixels) // patch)

    def pixels_for(self, tokens: int) -> int | None:
        """The largest pixel cap whose images cost at most `tokens` (None: a fixed count, no cap helps)."""
        if self.fixed is not None or tokens < 1:
            return None
        patch = self.patch or 1
        pixels = tokens * patch * patch
        while pixels > patch * patch and self.at(pixels) > tokens:
            pixels -= patch * patch
        return pixels if self.at(pixels) <= tokens else None


@dataclass(frozen=True, slots=True)
class ProcessorCache:
    """The multimodal processor cache size the TT serving specs set (vLLM --mm-processor-cache-gb)."""

    __pydantic_config__ = _FORBID

    gb: Annotated[float, Bound(ge=0)]
    source: str


@dataclass(frozen=True, slots=True)
class Vision:
    """A vision architecture's image facts, each with its source."""

    __pydantic_config__ = _FORBID

    images_per_prompt: ImagesPerPrompt
    largest_image: LargestImage
    tokens_per_image: ImageTokens
    tt_processor_cache: ProcessorCache | None = None
    """What the TT serving specs set for the processor cache (planned on engine=tt only)."""

    def problems(self) -> list[str]:
        """Inconsistencies a YAML schema cannot express: exactly one token formula."""
        tokens = self.tokens_per_image
        if (tokens.fixed is None) == (tokens.patch is None):
            return ["tokens_per_image needs exactly one of fixed (N tokens) or patch (one token per patch² pixels)"]
        return []
