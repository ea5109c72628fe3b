"""Evaluation sets (`build/eval/*.yaml`): questions with their expected answers, and the grading.

A reply is correct when one of the accepted answers appears in it as a whole word or number,
ignoring case: "The capital of France is Paris." passes for Paris, "240" or "2.4" does not pass
for 24. The set measures whether a model knows, not how it phrases the answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import ConfigDict, Field, TypeAdapter

from appliance.data_files import load_data_file
from appliance.resources import build_dir

__all__ = ["DEFAULT_EVAL_SET", "VISION_EVAL_SET", "EvalImage", "EvalItem", "EvalSet", "is_correct", "load_eval_set"]

DEFAULT_EVAL_SET = build_dir() / "eval" / "basic.yaml"
VISION_EVAL_SET = build_dir() / "eval" / "vision.yaml"
"""The set a vision appliance's gates ask by default: questions about generated images."""
_FORBID = ConfigDict(extra="forbid")


@dataclass(frozen=True, slots=True)
class EvalImage:
    """A generated image sent with the question: a solid rectangle of one colour, as a PNG `data:` URL."""

    __pydantic_config__ = _FORBID

    width: Annotated[int, Field(ge=1, le=4096)]
    height: Annotated[int, Field(ge=1, le=4096)]
    colour: tuple[
        Annotated[int, Field(ge=0, le=255)], Annotated[int, Field(ge=0, le=255)], Annotated[int, Field(ge=0, le=255)]
    ]
    """Red, green and blue, 0-255."""


@dataclass(frozen=True, slots=True)
class EvalItem:
    __pydantic_config__ = _FORBID

    question: str
    answers: Annotated[tuple[str, ...], Field(min_length=1)]
    """Accepted answers; a reply holding any of them as a whole word or number is correct."""
    image: EvalImage | None = None
    """An image the question is about (the chat message then holds the text and the image)."""


@dataclass(frozen=True, slots=True)
class EvalSet:
    __pydantic_config__ = _FORBID

    name: str
    description: str
    max_tokens: Annotated[int, Field(gt=0)]
    """Reply length limit: enough for a sentence, so a rambling model is cut off early."""
    items: Annotated[tuple[EvalItem, ...], Field(min_length=1)]


_ADAPTER: TypeAdapter[EvalSet] = TypeAdapter(EvalSet)


def load_eval_set(path: Path = DEFAULT_EVAL_SET) -> EvalSet:
    """Parse an evaluation set; `eval-set-missing` / `eval-set-invalid` name the file otherwise."""
    return load_data_file(path, _ADAPTER, "eval-set", "evaluation set")


def is_correct(reply: str, answers: tuple[str, ...]) -> bool:
    """Whether `reply` holds one of `answers` as a whole word or number (case-insensitive)."""
    text = reply.casefold()
    # Not inside a longer word or number: no letter, digit or decimal point may touch it.
    return any(re.search(rf"(?<![\w.]){re.escape(a.casefold())}(?!\w|\.\d)", text) for a in answers)
