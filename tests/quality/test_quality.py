"""The evaluation set and its grading, without an engine (the served run is in test_smollm2.py).

The replies graded below were recorded from SmolLM2-135M-Instruct on the CPU engine (greedy,
chat template, 40 tokens), so the grader is checked on what a small model really writes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from appliance.errors import ConfigError
from appliance.quality.evalset import VISION_EVAL_SET, is_correct, load_eval_set
from testkit.helpers import free_port

RECORDED = [
    ("The capital of France is Paris.", ("Paris",), True),
    ("Il Coriobella, Italy.", ("Rome",), False),
    ("The Mona Lisa is attributed to Leonardo da Vinci, but it's also believed to be", ("Leonardo", "da Vinci"), True),
    ("15 + 27 = 32\n\nThis is a classic example of a mathematical identity", ("42",), False),
    ("10 - 3 is 1.", ("7", "seven"), False),
    ("A day is a day of the week, and a day is made up of hours. So, a day is made up of 24 hours.", ("24",), True),
    ("The king of the jungle is the jaguar.", ("lion",), False),
    ("The answer is 4.", ("4", "four"), True),
]


@pytest.mark.parametrize(("reply", "answers", "correct"), RECORDED)
def test_recorded_replies_are_graded_by_whole_words(reply: str, answers: tuple[str, ...], correct: bool) -> None:
    assert is_correct(reply, answers) is correct


@pytest.mark.parametrize("reply", ["It is 240.", "About 2.4 of them.", "24.5 hours", "x24"])
def test_a_number_inside_a_longer_number_does_not_count(reply: str) -> None:
    assert not is_correct(reply, ("24",))


def test_the_shipped_set_has_25_distinct_questions_with_answers() -> None:
    evalset = load_eval_set()
    questions = [item.question for item in evalset.items]
    assert len(questions) == len(set(questions)) == 25
    assert all(item.answers and all(a.strip() for a in item.answers) for item in evalset.items)


def test_the_vision_set_asks_about_an_image_of_a_different_size_each_time() -> None:
    items = load_eval_set(VISION_EVAL_SET).items
    assert all(item.image is not None for item in items)
    assert len({(i.image.width, i.image.height) for i in items if i.image}) == len(items) == 8


def test_an_image_colour_out_of_range_is_refused_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "name: bad\ndescription: x\nmax_tokens: 8\nitems:\n  - {question: 'Colour?', answers: [red], "
        "image: {width: 8, height: 8, colour: [300, 0, 0]}}\n"
    )
    with pytest.raises(ConfigError, match=r"eval-set-invalid") as caught:
        load_eval_set(path)
    assert f"{path}:items.0.image.colour.0" in [p.key for p in caught.value.problems]


def test_a_malformed_set_is_refused_naming_the_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\ndescription: x\nmax_tokens: 8\nitems:\n  - {question: 'Why?', answers: []}\n")
    with pytest.raises(ConfigError, match=r"eval-set-invalid.*bad\.yaml") as caught:
        load_eval_set(path)
    keys = [problem.key for problem in caught.value.problems]
    assert all(key.startswith(f"{path}:items") for key in keys) and f"{path}:items.0.answers" in keys, keys


def test_eval_against_nothing_is_one_line_and_exit_4() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "appliance.cli", "eval", "--url", f"http://127.0.0.1:{free_port()}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 4
    assert done.stderr.startswith("error: cannot reach http://127.0.0.1:") and done.stderr.count("\n") == 1


def test_an_accuracy_floor_outside_0_to_1_is_a_config_error() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "appliance.cli", "eval", "--min-accuracy", "72"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stderr.startswith("error[bad-option] --min-accuracy: 72.0 is not a share")
