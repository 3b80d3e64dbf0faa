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


class EntityPredecessor(_Frozen):
    """The last closed run of a host's entity (`read_entity_predecessor`), read by a new entity at
    its start: how it closed and its memo's `names.CARRIED_MEMO` entry (None: no closed run, or it
    carried nothing)."""

    run_id: str = ""
    status: str = ""  # e.g. TERMINATED
    closed_at: datetime | None = None
    carried: dict[str, Any] | None = None
