"""Every wire document read field by field from an internal type (`documents.validate`, `extra="ignore"`) has the
internal type's fields, and only those its docstring says stay inside: a field added on one side must be added to
the other (or named here as kept inside), not vanish from the API and the console without a word."""

from __future__ import annotations

import dataclasses

import pytest

from appliance.control.documents import (
    BootDocument,
    CheckDocument,
    DevicesDocument,
    FaultDocument,
    SchedulerDocument,
    SummaryDocument,
    TensorCacheDocument,
    UsageDocument,
    WeightsDocument,
)
from appliance.host.discovery import HostFacts
from appliance.observe.host_usage import HostUsage
from appliance.observe.metrics_window import LoadSummary
from appliance.observe.scheduler_log import SchedulerView
from appliance.plan import WeightsPlan
from appliance.preflight.results import CheckResult
from appliance.runtime.boot_record import BootProgress
from appliance.runtime.faults import Fault
from appliance.runtime.tensor_cache import CacheState

PAIRS: list[tuple[type, type, set[str]]] = [
    # document, the internal type it is read from, the internal fields it leaves inside (and why)
    (BootDocument, BootProgress, set()),
    (FaultDocument, Fault, set()),
    (CheckDocument, CheckResult, set()),
    (UsageDocument, HostUsage, set()),
    (SummaryDocument, LoadSummary, set()),
    (SchedulerDocument, SchedulerView, set()),
    (TensorCacheDocument, CacheState, set()),
    # where a fetch reads and how: host-side settings, not the state of what is served
    (WeightsDocument, WeightsPlan, {"store", "locks_dir", "source", "token_env", "token_file", "jobs"}),
    # the raw sensor readings are the boards' own document (GET /boards)
    (DevicesDocument, HostFacts, {"readings"}),
]


def names(kind: type) -> set[str]:
    return {f.name for f in dataclasses.fields(kind)}


@pytest.mark.parametrize(("document", "internal", "inside"), PAIRS, ids=lambda p: getattr(p, "__name__", ""))
def test_a_wire_document_carries_every_field_of_the_type_it_is_read_from(
    document: type, internal: type, inside: set[str]
) -> None:
    assert names(document) - names(internal) == set(), "fields the document has and its source lacks"
    assert names(internal) - names(document) == inside, "fields the source has and the document drops"
