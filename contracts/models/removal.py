"""The removal workflow's contract (`HostRemovalWorkflow`, `remove/<id>`: flows 7-10 of
docs/DOMAIN.md): what it is asked, and what it removed."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from contracts.models.host import OperationEnd, OperationPolicy
from contracts.validation import ForceAfter, HostId


class _Frozen(BaseModel):
    # Unknown fields are ignored, never refused (as contracts/models/host.py's).
    model_config = ConfigDict(frozen=True)


class HostRemovalInput(_Frozen):
    host_id: HostId  # the same rule as the CLI's: a workflow started by hand is checked too
    dpu_ids: tuple[str, ...] | None = None  # None: the whole DPUNode (flow 8/10); else these DPUs (7/9)
    force: bool = False  # remove finalizers when DPF does not finish within `force_after_seconds`
    force_after_seconds: ForceAfter = 300.0
    requested_by: str = Field(min_length=1)
    reason: str = ""
    policy: OperationPolicy = OperationPolicy()  # phase_timeout_seconds bounds the wait for "gone"


class RemovedObject(_Frozen):
    kind: str
    name: str
    outcome: str  # deleted, finalizers removed, gone, deleting


class HostRemovalResult(OperationEnd):
    host_id: str
    removed: tuple[str, ...]  # "DPUNode/node-h1", "DPUDevice/device-d1", "DPU/...": gone at the end
    actions: tuple[RemovedObject, ...]  # every change this run made, in order
    forced: bool  # finalizers had to be removed
    started_at: datetime
    finished_at: datetime
