"""Workflow phase changes handed to the worker, outside replay: the feed of metalflow's
Kubernetes Events and of its stalled-wait gauge.

Workflows call `workflow_phase_entered` (from `workflows.kernel.enter_phase`, so every phase change of
every workflow) and `wait_started`/`wait_ended` (from `kernel.Runbook.wait` with a timeout). They
do nothing unless the process installed a sink (`install`): the worker runtime does
(`metalflow.runtime.events`), a replayer or a test worker without one pays a dict lookup.

Why a sink and not an activity: an activity per phase change would add three history events and
a task round trip to every phase of every operation. Like `contracts.metrics` (the SDK's meter),
this costs no history event and no RPC in the workflow: a phase change is one function call that
queues a small record for a background task of the worker (`metalflow.runtime.events.Emitter`),
which writes the Kubernetes Event. The call never raises and never blocks: a full queue drops.

Guarantees of the feed:
- **Not on replay**: `workflow.unsafe.is_replaying()` is checked, so a worker that replays a
  history (after a crash, a cache eviction) does not report its phases again.
- **At most once per workflow task attempt, best effort**: a workflow task that failed or timed
  out after its code ran (the deadlock detector, a task timeout on an overloaded worker) runs
  again for real and reports again; the emitter drops such a repeat when it sees the same run,
  phase and history length twice (`PhaseChange.key`), which holds on one worker. A worker that
  dies between the workflow task and the Event write loses that Event (the queue is in memory).
- **Waits** (`wait_started`/`wait_ended`) are state, not events: they are recorded on replay too
  (with the workflow's own clock, so a replayed wait keeps its true start), and forgotten when the
  wait ends or after twice its timeout.

Cost per phase change in the workflow: one attribute read of `workflow.info()` and one
thread-safe hand-off; nothing in history.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from temporalio import workflow

from contracts import names

CAMPAIGN_STARTED = "campaign-started"
"""What a campaign reports (`workflows.kernel.report`) as it starts selecting in its first run:
no phase of its own (the run starts in `selecting`), the feed's `CampaignStarted`."""


@dataclass(frozen=True)
class PhaseChange:
    """One workflow entered a phase (what the emitter turns into a Kubernetes Event, or not)."""

    workflow_id: str
    run_id: str
    workflow_type: str
    phase: str
    details: str
    at: datetime  # the workflow's clock (the workflow task's start)
    history_length: int
    host_id: str | None = None
    operation: str | None = None
    campaign: str | None = None
    parent_workflow_id: str | None = None

    @property
    def key(self) -> tuple[str, str, int]:
        """The same phase change seen twice (a retried workflow task) has the same key."""
        return (self.run_id, self.phase, self.history_length)


@dataclass(frozen=True)
class Wait:
    """A workflow waiting in `phase` since `since` (its clock) for at most `timeout_seconds`."""

    workflow_id: str
    workflow_type: str
    phase: str
    since: datetime
    timeout_seconds: float
    host_id: str | None
    operation: str | None


Sink = Callable[[PhaseChange], None]

_sink: Sink | None = None
_waits: dict[str, Wait] = {}
_waits_lock = threading.Lock()
WAITS_KEPT = 10_000  # one per waiting workflow on this worker; beyond it new waits are not tracked


def install(sink: Sink | None) -> None:
    """Route phase changes to `sink` (None: stop). One per process: the worker's emitter."""
    global _sink
    _sink = sink


def _attributes() -> tuple[str | None, str | None, str | None]:
    attributes = workflow.info().typed_search_attributes
    return attributes.get(names.HOST_ID), attributes.get(names.OPERATION), attributes.get(names.CAMPAIGN)


def workflow_phase_entered(phase: str, details: str) -> None:
    """A workflow entered `phase` (details: the current details). Never raises, never blocks."""
    sink = _sink
    if sink is None or not workflow.in_workflow() or workflow.unsafe.is_replaying():
        return
    try:
        info = workflow.info()
        host_id, operation, campaign = _attributes()
        sink(
            PhaseChange(
                workflow_id=info.workflow_id,
                run_id=info.run_id,
                workflow_type=info.workflow_type,
                phase=phase,
                details=details,
                at=workflow.now(),
                history_length=info.get_current_history_length(),
                host_id=host_id,
                operation=operation,
                campaign=campaign,
                parent_workflow_id=info.parent.workflow_id if info.parent else None,
            )
        )
    except Exception:  # noqa: BLE001 - reporting must never fail a workflow task
        return


def wait_started(phase: str, timeout_seconds: float | None) -> str | None:
    """A bounded wait began in `phase`; returns the token for `wait_ended` (None: not tracked)."""
    if timeout_seconds is None or _sink is None or not workflow.in_workflow():
        return None
    try:
        info = workflow.info()
        host_id, operation, _ = _attributes()
        wait = Wait(
            info.workflow_id, info.workflow_type, phase, workflow.now(), timeout_seconds, host_id, operation
        )
        with _waits_lock:
            if len(_waits) >= WAITS_KEPT and info.workflow_id not in _waits:
                return None
            _waits[info.workflow_id] = wait
        return info.workflow_id
    except Exception:  # noqa: BLE001
        return None


def wait_ended(token: str | None) -> None:
    """The wait `token` ended (its condition held, it timed out, or it was cancelled)."""
    if token is None:
        return
    with _waits_lock:
        _waits.pop(token, None)


def waits(now: datetime) -> list[Wait]:
    """The waits tracked now, forgetting those past twice their timeout (their workflow moved on
    on another worker, or was evicted mid-wait without ending it here)."""
    with _waits_lock:
        stale = [
            key
            for key, wait in _waits.items()
            if now - wait.since > timedelta(seconds=2 * wait.timeout_seconds)
        ]
        for key in stale:
            del _waits[key]
        return list(_waits.values())
