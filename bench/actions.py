"""Temporal Cloud billable Actions, counted from workflow histories by the documented rules, and
the activity heartbeats that reached the server, read from the server's own metrics.

The rules (Temporal Cloud, "Temporal Cloud Actions", https://docs.temporal.io/cloud/actions,
source docs/evaluate/temporal-cloud/actions.mdx of temporalio/documentation), as applied here to
the events of one history:

- `WorkflowExecutionStarted` without a parent: 1 ("Workflow started": a client start, a
  continue-as-new; a de-duplicated start writes no event);
- `StartChildWorkflowExecutionInitiated`: 2 ("Start Child Workflow and Child Workflow
  Execution"); the child's own start is not counted again;
- `ActivityTaskStarted`: its `attempt` ("Activity started or retried": every attempt; the
  history keeps the last attempt's number);
- `TimerStarted`: 1 (also the implicit timer of a `wait_condition` with a timeout);
- `UpsertWorkflowSearchAttributes`: 1 per command however many attributes, none when it only
  sets `TemporalChangeVersion`; attributes given at a workflow's start are free;
- `WorkflowExecutionSignaled` sent by a client or an activity, and
  `SignalExternalWorkflowExecutionInitiated` (sent by a workflow, counted at its sender): 1;
- `WorkflowExecutionUpdateAccepted`: 1 ("Update received by Worker", update-with-start too,
  beside its start); rejected updates write no event (none in the benchmarks);
- `MarkerRecorded` of local activities: 1 per workflow task (none in metalflow);
- `WorkflowExecutionOptionsUpdated`: 1.

Not in histories: queries (none in the benchmarks), rejected updates (none), and heartbeats:
"A Heartbeat call from Activity code counts as an Action only if it reaches the Temporal
Server". `heartbeats_reached` reads how many `RecordActivityTaskHeartbeat(ById)` requests the
server's frontend served (`service_requests`, the dev server's Prometheus endpoint): exactly
the heartbeats that reached it, after the SDK's throttle.

A signal-with-start counts 1 in all (the rule) where this counts its start and its signal: 2. No
workflow of a host's reprovision is started that way (the site watch's registrations are, but
the site watch is counted apart, as a per-site cost).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import httpx
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

CHANGE_VERSION = "TemporalChangeVersion"
_LOCAL_ACTIVITY_MARKER = "core_local_activity"
_HEARTBEAT_OPERATIONS = ("RecordActivityTaskHeartbeat", "RecordActivityTaskHeartbeatById")


def actions_of(events: Iterable[HistoryEvent], since: datetime | None = None) -> dict[str, int]:
    """Billable Actions of one history's events (those at or after `since`), by kind."""
    counts: dict[str, int] = {}

    def add(kind: str, n: int = 1) -> None:
        counts[kind] = counts.get(kind, 0) + n

    local_tasks: set[int] = set()
    for event in events:
        if since is not None and event.event_time.ToDatetime().astimezone() < since:
            continue
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            if not event.workflow_execution_started_event_attributes.parent_workflow_execution.workflow_id:
                add("workflow_started")
        elif kind == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            add("child_workflow", 2)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            add("activity_attempts", max(1, event.activity_task_started_event_attributes.attempt))
        elif kind == EventType.EVENT_TYPE_TIMER_STARTED:
            add("timer")
        elif kind == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
            if set(fields) - {CHANGE_VERSION}:
                add("search_attribute_upsert")
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            if not event.workflow_execution_signaled_event_attributes.external_workflow_execution.workflow_id:
                add("signal")
        elif kind == EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
            add("signal")
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            add("update")
        elif kind == EventType.EVENT_TYPE_MARKER_RECORDED:
            attributes = event.marker_recorded_event_attributes
            if attributes.marker_name == _LOCAL_ACTIVITY_MARKER:
                local_tasks.add(attributes.workflow_task_completed_event_id)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_OPTIONS_UPDATED:
            add("options_updated")
    if local_tasks:
        add("local_activities", len(local_tasks))
    return counts


def events_since(events: Iterable[HistoryEvent], since: datetime | None = None) -> int:
    return sum(1 for e in events if since is None or e.event_time.ToDatetime().astimezone() >= since)


def merge(into: dict[str, float], counts: dict[str, Any], weight: float = 1.0) -> None:
    for kind, n in counts.items():
        into[kind] = into.get(kind, 0.0) + n * weight


_SAMPLE = re.compile(r"^service_requests\{(?P<labels>[^}]*)\}\s+(?P<value>[0-9.eE+-]+)$")


def heartbeats_reached(metrics_url: str) -> int:
    """Heartbeat requests the server's frontend has served since it started (all namespaces)."""
    text = httpx.get(metrics_url, timeout=30).text
    total = 0.0
    for line in text.splitlines():
        found = _SAMPLE.match(line)
        if found is None or 'service_name="frontend"' not in found["labels"]:
            continue
        if any(f'operation="{op}"' in found["labels"] for op in _HEARTBEAT_OPERATIONS):
            total += float(found["value"])
    return int(total)


DAY_SECONDS = 86_400


def idle_watch_actions_per_day(
    heartbeats: int, watches: int, history_actions: float, seconds: float
) -> float | None:
    """Billable Actions a day of one site's idle DPF watch (issue 37 Deliver 3's figure, goal <=
    2,000), from `seconds` of a stack doing nothing else: the heartbeats that reached the server
    in that time, shared evenly among the `watches` running (the benchmark runs one per task
    queue, metalflow's and the ideal's, the same code), plus the Actions of one watch's own
    history in that time (`history_actions`: its timers, activity attempts, continue-as-new).
    None when nothing was measured (no time, no watch)."""
    if seconds <= 0 or watches <= 0:
        return None
    return round((heartbeats / watches + history_actions) * DAY_SECONDS / seconds)
