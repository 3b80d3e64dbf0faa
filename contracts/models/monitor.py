"""The host's pool and its monitor (flow 5 of docs/DOMAIN.md section 2.8): the pool label, what
the monitor asks of the host's entity, and the monitor's input, memory, status and result.

`HostMonitorWorkflow` (`monitor/host-<id>`, workflows/monitor/) takes a host out of the pool while
a DPU's critical services are down and asks the host's entity for a reprovision past a deadline.
Its memory (`MonitorMemory`) is its continue-as-new state: the data shape here, its decisions in
`workflows/monitor/state.py`. (Also importable from `contracts.models.host`, where these lived.)
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from pydantic import BaseModel, ConfigDict, Field

from contracts.models.control import OperatorRequest
from contracts.models.dpf import DPUProgress
from contracts.validation import HoldBackAfterAbort, HostId, ReprovisionAfter, StepTimeout
from contracts.wording import iso_z


class _Frozen(BaseModel):
    # Unknown fields are ignored, never refused: a newer worker may add one to a payload that an
    # older worker (a mixed fleet, a rollback) reads back from history (metalflow/runtime/versioning.py).
    model_config = ConfigDict(frozen=True)


# -- pool state (flow 5) ---------------------------------------------------------------------------

RESUME_UPDATE: Final = "resume"  # the monitor's: an operator ends its hold-back after an abort
POOL_LABEL: Final = "metalflow.io/pool"
"""Label on the host's DPUNode, `in-pool` or `out-of-pool`: `kubectl get dpunode -l metalflow.io/pool`."""
POOL_REASON_ANNOTATION: Final = "metalflow.io/pool-reason"
IN_POOL: Final = "in-pool"
OUT_OF_POOL: Final = "out-of-pool"


class SetPoolStateInput(_Frozen):
    host_id: str = Field(min_length=1)
    namespace: str = "dpf-operator-system"
    state: str = Field(pattern=r"^(in-pool|out-of-pool)$")
    reason: str = ""


class PoolStateResult(_Frozen):
    node: str  # the DPUNode
    exists: bool  # False: no DPUNode (nothing to label)
    previous: str | None = None  # the label before (None: never set)
    state: str | None = None  # the label now
    changed: bool = False


class OwnerReprovisionInput(_Frozen):
    """What the monitor asks of the host's owner (`host/<id>`, update `request_reprovision`)."""

    host_id: str = Field(min_length=1)
    dpu_ids: tuple[str, ...]
    requested_by: str = Field(min_length=1)
    reason: str = ""
    # Told how the request ends (the entity's `host_finished` signal, as a campaign is): the
    # monitor's own id, so it learns of an operator's abort or withdrawal at once.
    notify_workflow_id: str | None = None


class OwnerReprovisionResult(_Frozen):
    # "accepted", "awaiting-approval", "refused", "gone" (DPF no longer has the DPUs), "no-owner",
    # "maintenance" (the host is in maintenance: nothing was asked)
    outcome: str
    workflow_id: str | None = None
    message: str = ""
    gone: tuple[str, ...] = ()  # "gone": the DPUs DPF no longer has (empty: every DPU asked for)


class OwnerWithdrawInput(_Frozen):
    """The monitor withdraws its own request awaiting approval (the entity's `withdraw` update)
    once its reason no longer holds: none of the DPUs it named is degraded any more."""

    host_id: str = Field(min_length=1)
    workflow_id: str = Field(min_length=1)  # the request's operation, as the entity answered it
    requested_by: str = Field(min_length=1)
    reason: str = ""


class OwnRequest(_Frozen):
    """The monitor's request the entity holds: awaiting approval, or started; until it ends."""

    workflow_id: str
    dpu_ids: tuple[str, ...]
    awaiting_approval: bool
    asked_at: datetime | None = None  # when the entity accepted it
    checked_at: datetime | None = None  # when the entity's record last said it still runs


class HoldBack(_Frozen):
    """An operator said no to the monitor's request (aborted it, or withdrew it): the monitor asks
    for no reprovision of the host until `until`, or until an operator resumes it."""

    since: datetime
    until: datetime
    why: str  # e.g. "reprovision/host-001 aborted by alice: debugging"


class OwnerOperationInput(_Frozen):
    """What the monitor asks of the host's owner before it calls a reset unplanned."""

    host_id: str = Field(min_length=1)
    since: datetime  # an operation running now, or ended at or after this, is metalflow's
    dpu_ids: tuple[str, ...] = ()  # the DPUs seen reset (shown in the UI; the answer is per host)


class OwnerOperationResult(_Frozen):
    """The entity's operation running, or ended since `since`; None: none (or no entity runs)."""

    workflow_id: str | None = None
    message: str = ""


# -- the monitor (flow 5) --------------------------------------------------------------------------


class MonitorPolicy(_Frozen):
    reprovision_after_seconds: ReprovisionAfter = 1800.0  # a DPU in Node Effect this long
    auto_reprovision: bool = True  # False: only take the host out of the pool
    # DPF changes handled before continue-as-new (the read that starts a run is not one)
    events_per_run: int = Field(default=500, ge=1)
    # The final look after an abort: how long its read and label write may retry (a Kubernetes
    # outage) before the monitor stops anyway, saying the label was left as last written.
    kube_call_timeout_seconds: StepTimeout = 900.0
    # An operator's abort (or withdrawal) of the monitor's request is sovereign: no new request
    # for the host this long after it (`metalflow host monitor HOST --resume` ends it sooner).
    hold_back_seconds: HoldBackAfterAbort = 3600.0


class DegradedDPU(_Frozen):
    """A DPU that fell from `Ready` to `Node Effect` (its critical services are down)."""

    dpu_id: str
    uid: str  # the DPU object; another uid is a recreated (reprovisioned) DPU
    since: datetime
    reprovision_asked_at: datetime | None = None
    reprovision_outcome: str | None = None  # the owner's answer, e.g. "accepted: reprovision/host-h1"


class PoolChange(_Frozen):
    at: datetime
    state: str
    reason: str


class UnplannedReset(_Frozen):
    """A reset of a DPU at rest that no operation of metalflow explains (the monitor's record)."""

    at: datetime  # when the monitor saw it
    dpu_id: str
    change: str  # `dpf_barrier.unplanned_change`, with the agent's start time, e.g. "restarted (...)"

    def line(self) -> str:
        """One line for the memo and the CLI, e.g. "2026-01-01T00:00:00Z: DPU d0 restarted ..."."""
        return f"{iso_z(self.at)}: DPU {self.dpu_id} {self.change} (not by metalflow)"


class MonitorMemory(BaseModel):
    """What a monitor knows: the data of its state (workflows/monitor/state.py decides on it),
    carried whole by continue-as-new (`HostMonitorInput.memory`). Mutable: the run updates it."""

    pool_state: str = IN_POOL
    last_phases: dict[str, str] = Field(default_factory=dict)  # dpu_id -> phase last seen
    last_uids: dict[str, str] = Field(default_factory=dict)  # dpu_id -> uid last seen
    since: dict[str, datetime] = Field(default_factory=dict)  # dpu_id -> when it entered that phase
    degraded: list[DegradedDPU] = Field(default_factory=list)  # in the order they fell
    history: list[PoolChange] = Field(default_factory=list)  # newest last, bounded
    events_seen: int = 0  # over all runs
    runs: int = 1  # this run's number (continue-as-new increments it)
    reprovisions_requested: int = 0
    # The owner's answers to the monitor's requests, newest last, bounded.
    requests: list[str] = Field(default_factory=list)
    started_at: datetime | None = None
    # An `abort` accepted while the previous run was handing over: the next run stops at once.
    stop: OperatorRequest | None = None
    last_started: dict[str, str] = Field(default_factory=dict)  # dpu_id -> agent start time last seen
    unplanned: list[UnplannedReset] = Field(default_factory=list)  # newest last, bounded
    unplanned_total: int = 0  # over all runs
    looked_at: datetime | None = None  # when the last DPF state was handled
    asked: OwnRequest | None = None  # the monitor's request the entity holds (None: none)
    hold_back: HoldBack | None = None  # an operator said no: no request until it ends
    last_ended: str = ""  # how its last request ended, as recorded (told twice: recorded once)


class HostMonitorInput(_Frozen):
    host_id: HostId  # the same rule as the CLI's: a workflow started by hand is checked too
    namespace: str = "dpf-operator-system"
    site: str = "default"
    requested_by: str = "metalflow"
    policy: MonitorPolicy = MonitorPolicy()
    memory: MonitorMemory | None = None  # None on the first run


class HostMonitorStatus(_Frozen):
    """The `status` query of a `HostMonitorWorkflow`."""

    host_id: str
    pool_state: str
    phase: str
    waiting_for: str
    dpus: tuple[DPUProgress, ...] = ()
    degraded: tuple[DegradedDPU, ...] = ()
    history: tuple[PoolChange, ...] = ()
    events_seen: int = 0
    runs: int = 1
    reprovisions_requested: int = 0
    requests: tuple[str, ...] = ()  # e.g. "mon-003-dpu-1: accepted: reprovision/host-mon-003"
    started_at: datetime
    unplanned_resets: tuple[UnplannedReset, ...] = ()  # newest last, bounded (the memo's too)
    unplanned_total: int = 0  # recorded over all runs
    hold_back: HoldBack | None = None  # an operator said no: no reprovision asked until it ends
    own_request: OwnRequest | None = None  # the monitor's request the entity holds now (None: none)


class HostMonitorResult(_Frozen):
    """Returned when the monitor is stopped (`abort` update)."""

    host_id: str
    pool_state: str  # as the world says when it stopped (as last written when the final look failed)
    events_seen: int
    runs: int
    stopped_by: str
    finished_at: datetime
    final_look_failed: str | None = None  # why the label could not be confirmed (a Kubernetes outage)
