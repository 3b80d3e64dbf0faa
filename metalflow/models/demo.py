"""Models of the foundation demo workflow (`workflows.demo.DemoWorkflow`)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class _Frozen(BaseModel):
    # Unknown fields are ignored, never refused: a newer worker may add one to a payload that an
    # older worker (a mixed fleet, a rollback) reads back from history (metalflow/versioning.py).
    model_config = ConfigDict(frozen=True)


class DemoPhase(StrEnum):
    """Where a demo run is; also the value of its ``Phase`` search attribute."""

    INSPECTING_WORKER = "InspectingWorker"
    AWAITING_APPROVAL = "AwaitingApproval"
    COMPLETED = "Completed"


class DemoInput(_Frozen):
    """Start a demo run."""

    requested_by: str = Field(min_length=1, description="Who started the run (shown in its status)")
    approval_timeout_seconds: float = Field(default=300.0, gt=0)


class WorkerFacts(_Frozen):
    """What the activity observed about the worker process that ran it."""

    hostname: str
    pid: int
    python_version: str
    temporalio_version: str
    activity_attempt: int
    observed_at: datetime


class DemoApproval(_Frozen):
    """The ``approve`` signal: an operator lets the run finish."""

    approved_by: str = Field(min_length=1)
    note: str = ""


class DemoStatus(_Frozen):
    """The answer of the ``status`` query."""

    phase: DemoPhase
    requested_by: str
    worker: WorkerFacts | None = None
    approved_by: str | None = None


class DemoResult(_Frozen):
    """What a completed demo run returns."""

    requested_by: str
    worker: WorkerFacts
    approval: DemoApproval
    started_at: datetime
    completed_at: datetime
    phases: list[DemoPhase]
