"""What the appliance adds to the cpu engine's interpreter start (installed into site-packages with a .pth line).

torchvision. vLLM 0.32 serves vision models through transformers 5.19's image processors, which import
torchvision. PyPI has only CUDA builds of torchvision 0.28.0 (the release made for torch 2.13): its C++ operators
link libtorch_cuda and do not load against the CPU torch, and torchvision handles that (`extension._has_ops()` is
then False, and every operator is refused when called) except in `_meta_registrations`, whose fake kernels for `nms`
and `qnms` are registered unguarded and fail with "operator torchvision::nms does not exist". Defining those two
schemas first, only when the operators did not load, lets torchvision import; the image processors use its tensor
transforms, not its operators, so nothing that runs is changed. An engine with a working torchvision skips this.

Pillow's decompression-bomb guard. vLLM checks an image's size against VLLM_MAX_IMAGE_PIXELS right after
`Image.open` has read its header, and refuses a larger one with a 400; but `Image.open` itself raises Pillow's
DecompressionBombError first for an image over twice `Image.MAX_IMAGE_PIXELS` (178,956,970 px), which vLLM answers
with a 500. With Pillow's own limit off (`MAX_IMAGE_PIXELS = None`, its documented setting), vLLM's check is the one
that applies, before anything is decoded: an oversized image is the client's error, never the server's.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

_TRIGGER = "torchvision._meta_registrations"
_UNGUARDED = ("nms", "qnms")
_libraries: list[Any] = []  # torch forgets a library's definitions when the Library object is collected


class _DefineBeforeMetaRegistrations:
    """A meta path finder that acts once, when torchvision imports the module with the unguarded registrations."""

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name != _TRIGGER:
            return None
        sys.meta_path.remove(self)
        import torch
        import torchvision.extension

        if not torchvision.extension._has_ops():
            library = torch.library.Library("torchvision", "FRAGMENT")
            for op in _UNGUARDED:
                if not _defined(op):  # a second install() (two .pth lines) must not define them twice
                    library.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            _libraries.append(library)
        return None  # the regular finders import the module itself


def _defined(op: str) -> bool:
    import torch

    try:
        getattr(torch.ops.torchvision, op)
    except (AttributeError, RuntimeError):
        return False
    return True


def install() -> None:
    from PIL import Image

    Image.MAX_IMAGE_PIXELS = None
    sys.meta_path.insert(0, _DefineBeforeMetaRegistrations())
