"""The price table's counts (bench/README.md, "What each guarantee costs"): `bench_fleet.summarise`
gives, per workflow type, the Actions by kind and the history events by type, as means over the
one-round hosts only, from the histories it read (`HostCost`)."""

from __future__ import annotations

import sys
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from bench_fleet import HostCost, event_type_counts, summarise  # noqa: E402


def cost(host: str, rounds: int, upserts: float) -> HostCost:
    return HostCost(
        host, 10.0, {"search_attribute_upsert": upserts}, rounds, {"HostOperationWorkflow": 10.0},
        {"HostOperationWorkflow": {"search_attribute_upsert": upserts}},
        {"HostOperationWorkflow": {"UPSERT_WORKFLOW_SEARCH_ATTRIBUTES": upserts}},
    )  # fmt: skip


def test_per_workflow_means_over_the_one_round_hosts() -> None:
    figures = summarise([cost("a", 1, 6), cost("b", 1, 7), cost("c", 2, 20)], heartbeats=0)
    assert figures["actions_by_workflow"] == {"HostOperationWorkflow": {"search_attribute_upsert": 6.5}}
    assert figures["event_types_by_workflow"] == {
        "HostOperationWorkflow": {"UPSERT_WORKFLOW_SEARCH_ATTRIBUTES": 6.5}
    }


def test_events_are_counted_by_type() -> None:
    timer = HistoryEvent(event_type=EventType.EVENT_TYPE_TIMER_STARTED)
    signal = HistoryEvent(event_type=EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED)
    assert event_type_counts([timer, signal, timer]) == {"TIMER_STARTED": 2, "WORKFLOW_EXECUTION_SIGNALED": 1}
