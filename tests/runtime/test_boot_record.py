"""Boot records: phase durations per config and host, the ETA of the next boot, and the slow-boot alert."""

from __future__ import annotations

import json
from pathlib import Path

from appliance.runtime.boot_record import BootClock
from appliance.runtime.lifecycle import EngineEvent
from appliance.runtime.lifecycle import EngineState as S
from appliance.runtime.tensor_cache import CacheState, cache_state


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def boot(clock: BootClock, now: Clock, *steps: tuple[S, float]) -> None:
    previous = S.VALIDATING
    for state, after in steps:
        now.now += after
        clock.on_event(EngineEvent(now.now, previous, state, "test"))
        previous = state


def test_a_ready_boot_is_recorded_with_its_phases_and_gives_the_next_boot_an_eta(tmp_path: Path) -> None:
    now, path = Clock(), tmp_path / "boot-records.json"
    first = BootClock(path, "abc123@host", clock=now)
    assert first.progress() is None
    boot(first, now, (S.STARTING, 0), (S.LOADING, 2), (S.WARMING, 30), (S.READY, 8))
    record = json.loads(path.read_text())["abc123@host"][0]
    assert record["total_s"] == 40 and record["phases"] == {"starting": 2, "loading": 30, "warming": 8}
    second = BootClock(path, "abc123@host", clock=now)
    boot(second, now, (S.STARTING, 100), (S.LOADING, 2))
    now.now += 8
    progress = second.progress()
    assert progress is not None and progress.phase == "loading" and progress.elapsed_s == 10
    assert progress.expected_s == 40 and progress.eta_s == 30 and progress.fraction == 0.25 and not progress.slow


def test_a_boot_far_slower_than_its_record_is_flagged(tmp_path: Path) -> None:
    now, path = Clock(), tmp_path / "boot-records.json"
    clock = BootClock(path, "k", clock=now)
    boot(clock, now, (S.STARTING, 0), (S.READY, 20))
    boot(clock, now, (S.STARTING, 5), (S.LOADING, 1))
    now.now += 60
    progress = clock.progress()
    assert progress is not None and progress.slow and progress.eta_s == 0


def test_failed_boots_and_other_configs_leave_the_record_alone(tmp_path: Path) -> None:
    now, path = Clock(), tmp_path / "boot-records.json"
    clock = BootClock(path, "k", clock=now)
    boot(clock, now, (S.STARTING, 0), (S.FAILED, 3))
    assert not path.exists() and clock.progress() is None
    boot(clock, now, (S.STARTING, 0), (S.READY, 4))
    other = BootClock(path, "other@host", clock=now)
    boot(other, now, (S.STARTING, 0))
    progress = other.progress()
    assert progress is not None and progress.expected_s is None and progress.eta_s is None


def test_only_the_last_five_boots_count(tmp_path: Path) -> None:
    now, path = Clock(), tmp_path / "boot-records.json"
    clock = BootClock(path, "k", clock=now)
    for seconds in (100, 1, 2, 3, 4, 5):
        boot(clock, now, (S.STARTING, 0), (S.READY, seconds))
    assert [r["total_s"] for r in json.loads(path.read_text())["k"]] == [1, 2, 3, 4, 5]


def test_a_damaged_record_file_is_replaced_by_the_next_boot(tmp_path: Path) -> None:
    now, path = Clock(), tmp_path / "boot-records.json"
    path.write_text("{not json")
    clock = BootClock(path, "k", clock=now)
    boot(clock, now, (S.STARTING, 0), (S.READY, 7))
    assert json.loads(path.read_text())["k"][0]["total_s"] == 7


def test_the_first_ready_boot_after_a_cold_tensor_cache_marks_it_built_and_only_then_is_there_an_eta(
    tmp_path: Path,
) -> None:
    """A TT plan's tensor cache (plan.tensor_cache): the boot that builds it has no ETA from warm boots' record (a
    cold cache takes up to the whole budget), a failed one leaves it unbuilt, the first ready one marks it."""
    now, path, cache = Clock(), tmp_path / "boot-records.json", tmp_path / "tt" / "key"
    boot(BootClock(path, "k", clock=now), now, (S.STARTING, 0), (S.READY, 20))  # a record from before the key moved
    clock = BootClock(path, "k", tensor_cache=str(cache), clock=now)
    boot(clock, now, (S.STARTING, 5), (S.LOADING, 1), (S.FAILED, 300))
    assert cache_state(str(cache)) == CacheState(str(cache), built=False)
    boot(clock, now, (S.STARTING, 5), (S.LOADING, 1))
    cold = clock.progress()
    assert cold is not None and cold.tensor_cache_built is False and cold.eta_s is None and not cold.slow
    boot(clock, now, (S.WARMING, 3000), (S.READY, 100))
    built = cache_state(str(cache))
    assert built.built and built.boot_s == 3101 and built.built_at == now.now
    boot(clock, now, (S.STARTING, 5), (S.LOADING, 1))
    warm = clock.progress()
    assert warm is not None and warm.tensor_cache_built is True and warm.expected_s is not None
