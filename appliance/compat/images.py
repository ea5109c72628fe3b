"""Images in the verdict: how many a prompt may carry, how large, what one costs in context, what the plugin does.

The row's architecture says what its images cost (models/ `vision:` blocks, image_facts.py) and the plugin state
what it does with vision models (build/tt/plugin-states `vision:`); serving.max_images_per_prompt and
serving.max_image_pixels choose within them. A context too short for one image of the largest size would make
every such request fail at the API after boot, so it is refused here with the fix.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from appliance.compat.image_facts import Vision
from appliance.compat.matrix import Architecture, DeviceRow
from appliance.compat.states import PluginState
from appliance.config.schema import ApplianceConfig, EngineKind
from appliance.errors import Problem

__all__ = ["TEXT_MARGIN", "ImageLimits", "check_images", "image_limits", "image_lines"]

TEXT_MARGIN = 128
"""Tokens a one-image prompt needs besides the image: the chat template's own, a short question and room to answer.
Measured on vLLM 0.32 CPU with the Qwen2.5-VL chat template: a one-image "colour?" prompt costs 39 tokens besides
the image's (the default system message, role markers, the two vision delimiters); the rest is the answer's."""


@dataclass(frozen=True, slots=True)
class ImageLimits:
    """The image limits a launch serves with, and what the plugin state says of vision models."""

    images_per_prompt: int
    largest_pixels: int
    tokens_per_image: int
    """Tokens one image of `largest_pixels` costs."""
    processor_kwargs: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    """What --mm-processor-kwargs carries (the pixel cap, where the family's processor takes one)."""
    processor_cache_gb: float | None = None
    """--mm-processor-cache-gb where the TT serving specs set it (engine=tt only)."""
    plugin: tuple[str, ...] = ()
    """What the plugin state does with vision models, one sentence each."""
    sources: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def engine_limits(self) -> dict[str, int]:
        """--limit-mm-per-prompt's JSON: the image count, and video 0 (vLLM defaults an unset modality to 999)."""
        return {"image": self.images_per_prompt, "video": 0}

    def line(self) -> str:
        return (
            f"images: up to {self.images_per_prompt} per prompt, up to {self.largest_pixels} px "
            f"({self.tokens_per_image} tokens each); video refused"
        )


def image_limits(
    cfg: ApplianceConfig, arch: Architecture, engine: EngineKind, state: PluginState | None
) -> ImageLimits | None:
    """The limits a vision row serves with under `cfg` (None on a text row)."""
    vision = arch.images
    if vision is None:
        return None
    pixels = cfg.serving.max_image_pixels or vision.largest_image.pixels
    kwarg = vision.largest_image.kwarg
    cache = vision.tt_processor_cache if engine == "tt" else None
    return ImageLimits(
        images_per_prompt=cfg.serving.max_images_per_prompt or vision.images_per_prompt.value,
        largest_pixels=pixels,
        tokens_per_image=vision.tokens_per_image.at(pixels),
        processor_kwargs=MappingProxyType({kwarg: pixels} if kwarg else {}),
        processor_cache_gb=cache.gb if cache else None,
        plugin=_plugin_lines(arch, state),
        sources=MappingProxyType(_sources(vision)),
    )


def check_images(
    cfg: ApplianceConfig,
    arch: Architecture,
    row: DeviceRow,
    checkpoint: str,
    context: int,
    concurrency: int,
    state: PluginState | None,
) -> Iterator[Problem]:
    """Images asked of a text row; more or larger images than the row allows; a context one image cannot fit."""
    serving, vision = cfg.serving, arch.images
    if vision is None:
        yield from _text_row(serving.max_images_per_prompt, serving.max_image_pixels, checkpoint)
        return
    allowed = vision.images_per_prompt.value
    if serving.max_images_per_prompt is not None and serving.max_images_per_prompt > allowed:
        yield Problem(
            code="images-too-many",
            key="serving.max_images_per_prompt",
            message=f"{serving.max_images_per_prompt} images per prompt; {checkpoint} takes at most {allowed}",
            fix=f"Set serving.max_images_per_prompt={allowed}",
            change=(f"serving.max_images_per_prompt={allowed}",),
        )
    yield from _pixels(serving.max_image_pixels, vision, checkpoint)
    yield from _context(vision, serving.max_image_pixels, context, row.max_context, checkpoint)
    limit = state.vision.batch_limits.get(arch.tt_class) if state and state.vision else None
    if limit is not None and concurrency > limit:
        at = state.label if state else ""
        yield Problem(
            code="vision-batch-limit",
            key="serving.max_concurrency",
            message=f"{arch.tt_class}'s vision path batches at most {limit} sequences at {at}",
            fix=f"Set serving.max_concurrency={limit}",
            change=(f"serving.max_concurrency={limit}",),
        )


def image_lines(images: ImageLimits | None) -> tuple[str, ...]:
    """The verdict's image lines, as validate and plan print them (none for a text model)."""
    if images is None:
        return ()
    return (images.line(), *(f"the plugin, for images: {line}" for line in images.plugin))


def _text_row(images: int | None, pixels: int | None, checkpoint: str) -> Iterator[Problem]:
    keys = [k for k, v in (("serving.max_images_per_prompt", images), ("serving.max_image_pixels", pixels)) if v]
    if keys:
        yield Problem(
            code="images-on-text-model",
            key=keys[0],
            message=f"{checkpoint} is a text model: it takes no images",
            fix=f"Remove {' and '.join(keys)}, or choose a vision checkpoint",
            change=tuple(f"~{k}" for k in keys),
        )


def _pixels(pixels: int | None, vision: Vision, checkpoint: str) -> Iterator[Problem]:
    largest = vision.largest_image
    key = "serving.max_image_pixels"
    if pixels is not None and pixels > largest.pixels:
        yield Problem(
            code="image-too-large",
            key=key,
            message=f"{pixels} px is above the largest image {checkpoint}'s processor keeps, {largest.pixels} px",
            fix=f"Set {key}={largest.pixels}",
            change=(f"{key}={largest.pixels}",),
        )
    elif pixels is not None and pixels < largest.pixels and largest.kwarg is None:
        yield Problem(
            code="image-cap-unsupported",
            key=key,
            message=f"{checkpoint}'s processor takes no pixel cap: it resizes every image to at most "
            f"{largest.pixels} px itself",
            fix=f"Remove {key}",
            change=(f"~{key}",),
        )


def _context(vision: Vision, pixels: int | None, context: int, most: int, checkpoint: str) -> Iterator[Problem]:
    """One image of the largest size and the text margin must fit max_context; the fix stays within the row's
    validated context (`most`), else it shrinks the images."""
    cap = vision.largest_image
    # Without a pixel-cap kwarg the processor's own resize decides, whatever serving.max_image_pixels says.
    largest = min(pixels or cap.pixels, cap.pixels) if cap.kwarg else cap.pixels
    tokens = vision.tokens_per_image
    need = tokens.at(largest) + TEXT_MARGIN
    if context >= need:
        return
    smaller = tokens.pixels_for(context - TEXT_MARGIN) if cap.kwarg else None
    fixes = ([f"serving.max_context={need}"] if need <= most else []) + (
        [f"serving.max_image_pixels={smaller}"] if smaller else []
    )
    fix = (
        f"Set {' or '.join(fixes)}"
        if fixes
        else (f"No setting fits: the row validates at most {most} tokens and the processor takes no pixel cap")
    )
    yield Problem(
        code="context-too-short-for-image",
        key="serving.max_context",
        message=f"max_context={context} cannot hold one {largest} px image of {checkpoint} ({tokens.at(largest)} "
        f"tokens) and {TEXT_MARGIN} tokens of text: every image request would be refused",
        fix=fix,
        change=tuple(fixes[:1]),
    )


def _plugin_lines(arch: Architecture, state: PluginState | None) -> tuple[str, ...]:
    rules = state.vision if state else None
    if rules is None:
        return ()
    lines = [
        f"only {'/'.join(rules.modalities)} items: another modality crashes the engine core ({rules.refusal}); "
        "the plan's video limit of 0 has vLLM refuse one at the API with a 4xx",
        rules.prefill,
    ]
    if arch.mrope:
        lines.append(f"no lane data parallelism ({rules.lane_dp})")
    if (limit := rules.batch_limits.get(arch.tt_class)) is not None:
        lines.append(f"the vision path batches at most {limit} sequence(s)")
    return tuple(lines)


def _sources(vision: Vision) -> dict[str, str]:
    found = {
        "images_per_prompt": vision.images_per_prompt.source,
        "largest_image": vision.largest_image.source,
        "tokens_per_image": vision.tokens_per_image.source,
    }
    if vision.tt_processor_cache:
        found["tt_processor_cache"] = vision.tt_processor_cache.source
    return found
