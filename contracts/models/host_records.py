"""What a host's entity keeps beyond one run's process (issue 40): an operator's hold on automation
(workflows/host/automation_hold.py) and what a new entity reads of its predecessor
(workflows/host/takeover_rules.py). Split from contracts/models/host.py (its size)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict


class _Frozen(BaseModel):
    # Unknown fields are ignored, never refused: older workers read what newer ones wrote (versioning.py).
    model_config = ConfigDict(frozen=True)


class AutomationHold(_Frozen):
    """An operator's no to an automation: the monitor's request `after` (asked by `asked_by`) was
    aborted or withdrawn by `by` (`reason`), at `since`. Until an operator ends it (`host retry`,
    or an operator's own request) the entity refuses every automatic request
    (workflows/host/automation_hold.py). Kept by the entity, so it outlives the monitor."""

    by: str
    reason: str
    since: datetime
    after: str  # the aborted request's workflow id
    asked_by: str  # the automation that asked it


class RunEnd(_Frozen):
    """How a run of one of the host's operations ended, as Temporal keeps it (its close event):
    read for a run a new entity adopted (`await_operation_end`) or found closed unrecorded
    (`read_entity_predecessor`). The entity says it in its words (`takeover_rules.outcome_of_run`)."""

    status: str  # COMPLETED, FAILED, TERMINATED, CANCELED, TIMED_OUT, ... (`WorkflowExecutionStatus`)
    closed_at: datetime | None = None
    aborted: str = ""  # completed: an operator's abort (its result's `aborted`)
    boot_generation: int | None = None  # what it reported: its result, or its failure's details
    unplanned_power: str = ""
    deletes_sent: bool = False
    last_reset_time: datetime | None = None
    failure_type: str = ""  # failed: its ApplicationError's type ("" none)
    failure_message: str = ""
    failure: str = ""  # failed: the cause in words (`contracts.errors.cause_in_words`)
    last_phase: str = ""  # its last `Phase` (a run terminated by hand in manual-intervention-required)


class OperationRun(_Frozen):
    """A run of one of the host's operations (a child of `host/<id>`), found by a new entity:
    running (`end` None: the entity adopts it) or closed after its predecessor's last recorded end."""

    workflow_id: str
    run_id: str = ""
    operation: str = ""  # its `Operation` search attribute
    requested_by: str = ""  # from its input ("" unread)
    reason: str = ""
    started_at: datetime | None = None
    end: RunEnd | None = None


class EntityPredecessor(_Frozen):
    """The last closed run of a host's entity (`read_entity_predecessor`), read by a new entity at
    its start: how it closed and its memo's `names.CARRIED_MEMO` entry (None: no closed run, or it
    carried nothing); the host's operations still running (`running`: the new entity adopts them)
    and those that closed after the predecessor recorded its last end (`ended`, oldest first)."""

    run_id: str = ""
    status: str = ""  # e.g. TERMINATED
    closed_at: datetime | None = None
    carried: dict[str, Any] | None = None
    running: tuple[OperationRun, ...] = ()
    ended: tuple[OperationRun, ...] = ()
