"""The fleet campaign's contract (`CampaignWorkflow`, id `campaign/<name>`): input, limits, the
progress carried over continue-as-new, the status query, and the operator's updates.

A campaign drives many hosts to one target (a reprovision, a DPUDeployment's new BFB or flavor,
DPU firmware) through each host's entity `host/<id>`, in a canary batch then batches, under
limits, maintenance windows and a failure budget (workflows/campaign.py tells the runbook).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from contracts.models.control import OperatorRequest
from contracts.models.host import OperationPolicy
from contracts.validation import Reason, Requester

# -- message names -----------------------------------------------------------------------------------
HOST_FINISHED_SIGNAL: Final = "host_finished"
RETRY_FAILED_UPDATE: Final = "retry_failed"
SKIP_HOST_UPDATE: Final = "skip_host"
SET_LIMITS_UPDATE: Final = "set_limits"

FAILED_HOSTS_SHOWN: Final = 200  # failures listed by name in `status` (all are counted)


class _Frozen(BaseModel):
    # Unknown fields are ignored, never refused: a newer worker may add one (metalflow/runtime/versioning.py).
    model_config = ConfigDict(frozen=True)


class TargetKind(StrEnum):
    REPROVISION = "reprovision"
    BFB = "bfb"
    FLAVOR = "flavor"
    FIRMWARE = "firmware"


class CampaignTarget(_Frozen):
    """What every host is brought to."""

    kind: TargetKind
    value: str = ""  # the BFB, the flavor, or the firmware version; "" for a reprovision
    image_uri: str = ""  # firmware only
    deployment: str = ""  # bfb/flavor: the DPUDeployment pointed at `value` before the hosts

    @model_validator(mode="after")
    def _complete(self) -> CampaignTarget:
        if self.kind != TargetKind.REPROVISION and not self.value:
            raise ValueError(f"a {self.kind} target needs a value (the {self.kind} name or version)")
        if self.kind == TargetKind.FIRMWARE and not self.image_uri:
            raise ValueError("a firmware target needs the image URI")
        if self.kind in (TargetKind.BFB, TargetKind.FLAVOR) and not self.deployment:
            raise ValueError(f"a {self.kind} target needs the DPUDeployment to point at it")
        return self

    def describe(self) -> str:
        if self.kind == TargetKind.REPROVISION:
            return "reprovision"
        where = f" on DPUDeployment {self.deployment}" if self.deployment else ""
        return f"{self.kind} {self.value}{where}"


class HostSelection(_Frozen):
    """Which hosts: exactly one of `all`, `hosts`, `selector` (labels k=v,...) or `group`."""

    all: bool = False
    hosts: tuple[str, ...] = ()
    selector: dict[str, str] = Field(default_factory=dict)
    group: str = ""

    @model_validator(mode="after")
    def _exactly_one(self) -> HostSelection:
        given = [self.all, bool(self.hosts), bool(self.selector), bool(self.group)]
        if sum(given) != 1:
            raise ValueError("select hosts with exactly one of: all, hosts, selector, group")
        return self

    def describe(self) -> str:
        if self.all:
            return "all hosts"
        if self.hosts:
            return f"{len(self.hosts)} listed hosts"
        if self.group:
            return f"group {self.group}"
        return "selector " + ",".join(f"{k}={v}" for k, v in sorted(self.selector.items()))


class Limits(_Frozen):
    """Pacing; `set_limits` replaces them while the campaign runs (the next start obeys)."""

    batch_size: int = Field(default=10, ge=1)
    max_in_flight: int = Field(default=10, ge=1, le=1000)  # bounded fan-out, whatever the fleet
    max_per_group: int = Field(default=0, ge=0)  # 0: no limit per group (rack)
    max_per_bmc: int = Field(default=1, ge=0)  # per BMC endpoint; 0: no limit


class Window(_Frozen):
    """A maintenance window, UTC: `start`-`end` as minutes of the day on `days` (0 Monday).
    An `end` at or before `start` runs past midnight into the next day."""

    days: tuple[int, ...] = (0, 1, 2, 3, 4, 5, 6)
    start_minute: int = Field(ge=0, lt=1440)
    end_minute: int = Field(ge=0, lt=1440)

    @model_validator(mode="after")
    def _opens(self) -> Window:
        if not self.days or any(d < 0 or d > 6 for d in self.days):
            raise ValueError("a window needs days among 0 (Monday) .. 6 (Sunday)")
        if self.start_minute == self.end_minute:
            raise ValueError("a window that starts when it ends never opens")
        return self


class FailureBudget(_Frozen):
    """Halt when more than `max_failures` hosts, or more than `max_percent` % of those attempted,
    failed (counted since the last `resume` of a halt). None: that bound is off."""

    max_failures: int | None = Field(default=None, ge=0)
    max_percent: float | None = Field(default=None, ge=0, le=100)


AssignedPolicy = Literal["skip", "wait-for-approval"]


class CampaignPolicy(_Frozen):
    assigned: AssignedPolicy = "skip"  # hosts with an instance: skip, or wait for the approval
    busy_retry_seconds: float = Field(default=300.0, gt=0)  # a busy host is asked again after this
    sweep_seconds: float = Field(default=600.0, gt=0)  # re-read in-flight hosts' entities this often
    max_history_events: int = Field(default=4000, ge=20, le=9000)  # continue-as-new past this


class CampaignHost(_Frozen):
    """One selected host, with what the limits need."""

    host_id: str
    site: str = "default"
    group: str = ""
    bmc: str = ""  # the BMC endpoint (several hosts may share one)


class InFlight(_Frozen):
    host: CampaignHost
    workflow_id: str  # the operation the entity started (or holds for approval)
    started_at: datetime
    awaiting_approval: bool = False


class Deferred(_Frozen):
    host: CampaignHost
    retry_at: datetime
    reason: str


class Failure(_Frozen):
    host: CampaignHost
    reason: str


class Progress(_Frozen):
    """Everything the campaign knows, carried whole over continue-as-new: counts stay exact."""

    phase: str = "selecting"
    total: int = 0
    pending: tuple[CampaignHost, ...] = ()  # not started yet, in order (the canary first)
    in_flight: tuple[InFlight, ...] = ()
    deferred: tuple[Deferred, ...] = ()  # busy: asked again at `retry_at`
    done: int = 0  # succeeded, this campaign's operation
    already_at_target: int = 0  # counted done without being touched
    failed: tuple[Failure, ...] = ()
    skipped: tuple[Failure, ...] = ()  # host and why (assigned, skipped by an operator)
    # Operations `abort` with `cancel_running` cut: the operator's decision, not failures (the
    # budget does not count them). `abort_sent`: the operations (and approval requests) it was
    # sent to, counted when they end (one that completes anyway counts done).
    aborted: tuple[Failure, ...] = ()
    abort_sent: tuple[str, ...] = ()
    attempted: int = 0  # operations finished (succeeded or failed)
    budget_failed_base: int = 0  # failures/attempts before the last resume of a halt
    budget_attempted_base: int = 0
    canary_hosts: tuple[str, ...] = ()  # started as the canary
    canary_passed: bool = False
    batch: int = 0  # the current batch's number (0: the canary)
    batch_left: int = 0  # hosts of the current batch not yet started
    soak_until: datetime | None = None
    halted_reason: str | None = None
    paused_by: str | None = None
    aborting: str | None = None  # who asked; no new host starts
    cancel_running: bool = False  # the running operations are still to be aborted
    next_sweep: datetime | None = None
    # In flight, their operation waiting for an operator (seen by the last sweep); the budget
    # counts them unless a resume accepted them (`operator_accepted`).
    needs_operator: tuple[Failure, ...] = ()
    operator_accepted: tuple[str, ...] = ()
    deployment_pointed: bool = False
    runs: int = 1
    started_at: datetime | None = None
    limits: Limits = Limits()


class CampaignInput(_Frozen):
    name: str = Field(min_length=1)
    target: CampaignTarget
    selection: HostSelection
    canary: int = Field(default=1, ge=0)
    limits: Limits = Limits()
    soak_seconds: float = Field(default=0.0, ge=0)
    windows: tuple[Window, ...] = ()  # none: always open
    budget: FailureBudget = FailureBudget(max_failures=0)
    policy: CampaignPolicy = CampaignPolicy()
    requested_by: Requester
    reason: Reason = ""
    host_policy: OperationPolicy | None = None  # reprovisions: None is each host's own policy
    progress: Progress | None = None  # None on the first run


class CampaignStatus(_Frozen):
    """The `status` query."""

    name: str
    target: str
    phase: str
    total: int
    done: int
    already_at_target: int
    in_flight: tuple[str, ...]
    awaiting_approval: tuple[str, ...]
    failed: int
    failures: tuple[Failure, ...]  # the newest FAILED_HOSTS_SHOWN
    skipped: int
    skipped_hosts: tuple[Failure, ...]
    deferred: tuple[str, ...]
    remaining: int  # not finished: pending + deferred + in flight
    batch: int
    canary_passed: bool
    window_open: bool
    next_window: datetime | None
    soak_until: datetime | None
    budget: str  # in words, e.g. "1 of 2 failures allowed (since start)"
    halted_reason: str | None
    paused_by: str | None
    aborting: str | None
    limits: Limits
    runs: int
    needs_operator: tuple[Failure, ...] = ()  # in flight, their operation waits for an operator
    aborted: int = 0  # operations cut by `abort` with `cancel_running` (not failures)
    aborted_hosts: tuple[Failure, ...] = ()  # the newest FAILED_HOSTS_SHOWN of them


class CampaignResult(_Frozen):
    name: str
    outcome: str  # completed, aborted
    total: int
    done: int
    already_at_target: int
    failed: tuple[Failure, ...]
    skipped: tuple[Failure, ...]
    runs: int
    finished_at: datetime
    aborted: tuple[Failure, ...] = ()  # operations cut by `abort` with `cancel_running`

    @property
    def all_succeeded(self) -> bool:
        return (
            not self.failed
            and not self.skipped
            and not self.aborted
            and self.done + self.already_at_target == self.total
        )


# -- the operator's messages ---------------------------------------------------------------------------


class AbortRequest(OperatorRequest):
    cancel_running: bool = False  # True: abort the running host operations too


class SkipRequest(OperatorRequest):
    host_id: str = Field(min_length=1)


class LimitsRequest(OperatorRequest):
    limits: Limits


class HostFinished(_Frozen):
    """The `host_finished` signal: the host's entity saw this campaign's operation end."""

    host_id: str
    workflow_id: str
    outcome: str  # "completed", "failed: ...", "aborted", "expired: ..."


# -- activities -------------------------------------------------------------------------------------


class SelectHostsInput(_Frozen):
    selection: HostSelection


class SelectHostsResult(_Frozen):
    hosts: tuple[CampaignHost, ...]
    assigned: tuple[str, ...] = ()  # hosts with an instance assigned (the inventory's view)


class CheckHostsInput(_Frozen):
    target: CampaignTarget
    host_ids: tuple[str, ...]


class CheckHostsResult(_Frozen):
    at_target: tuple[str, ...]


class HostRequestInput(_Frozen):
    host_id: str
    site: str = "default"
    target: CampaignTarget
    campaign: str  # the `Campaign` search attribute of the operation
    campaign_workflow_id: str  # notified when the operation ends
    requested_by: str
    reason: str = ""
    refuse_if_assigned: bool = True
    host_policy: OperationPolicy | None = None


class HostRequestsInput(_Frozen):
    requests: tuple[HostRequestInput, ...]


class HostRequestOutcome(_Frozen):
    host_id: str
    # not-asked / unanswered: the campaign aborted while the request was out (its abort cancels the ask)
    outcome: Literal["started", "awaiting-approval", "busy", "assigned", "refused", "not-asked", "unanswered"]
    workflow_id: str = ""
    message: str = ""


class HostRequestsResult(_Frozen):
    outcomes: tuple[HostRequestOutcome, ...]


class SweepInput(_Frozen):
    in_flight: tuple[InFlight, ...]


class SweepResult(_Frozen):
    finished: tuple[HostFinished, ...]
    needs_operator: tuple[Failure, ...] = ()  # still running, waiting for an operator: why


class AbortHostsInput(_Frozen):
    workflow_ids: tuple[str, ...]
    requested_by: str
    reason: str = ""
    # Requests still awaiting approval: withdrawn from their hosts' entities (nothing left pending;
    # one approved meanwhile is aborted like the running ones).
    withdraw: tuple[InFlight, ...] = ()
