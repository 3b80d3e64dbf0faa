"""The fleet campaign's contract (`CampaignWorkflow`, id `campaign/<name>`): input, limits, the
progress carried over continue-as-new, the status query, and the operator's updates. Its target
and the target kinds are in contracts/models/campaign_target.py (re-exported here).

A campaign drives many hosts to one target (a reprovision, a DPUDeployment's new BFB or flavor,
DPU firmware) through each host's entity `host/<id>`, in a canary batch then batches, under
limits, maintenance windows and a failure budget (workflows/campaign/workflow.py tells the runbook).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Final, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, model_validator

from contracts.models.campaign_target import KINDS as KINDS
from contracts.models.campaign_target import CampaignTarget as CampaignTarget
from contracts.models.campaign_target import KindSpec as KindSpec
from contracts.models.campaign_target import TargetKind as TargetKind
from contracts.models.control import OperatorRequest
from contracts.models.host import OperationPolicy
from contracts.validation import Reason, Requester

# -- message names -----------------------------------------------------------------------------------
HOST_FINISHED_SIGNAL: Final = "host_finished"
RETRY_FAILED_UPDATE: Final = "retry_failed"
SKIP_HOST_UPDATE: Final = "skip_host"
SET_LIMITS_UPDATE: Final = "set_limits"

HOSTS_QUERY: Final = "hosts"  # every host's outcome, page by page

RECENT_HOSTS: Final = 100
"""Hosts named (with their reason) per outcome in the state, `status` and the result: the newest
of the failed, the skipped and the aborted. Every host is counted, and every host's outcome can
be read page by page (`hosts`)."""
REASON_CHARS: Final = 300  # a reason kept in the state is cut to this many characters
HOSTS_PAGE_MAX: Final = 1000  # hosts per page of the `hosts` query


def short(reason: str) -> str:
    """A reason cut to REASON_CHARS, so the state's size per named host is bounded."""
    return reason if len(reason) <= REASON_CHARS else reason[: REASON_CHARS - 1] + "\u2026"


class _Frozen(BaseModel):
    # Unknown fields are ignored, never refused: a newer worker may add one (metalflow/runtime/versioning.py).
    model_config = ConfigDict(frozen=True)


class HostSelection(_Frozen):
    """Which hosts: exactly one of `all`, `hosts`, `selector` (labels k=v,...) or `group`."""

    all: bool = False
    hosts: tuple[str, ...] = ()
    selector: dict[str, str] = Field(default_factory=dict)
    group: str = ""
    # Set when a run continues as new: the selection was made (the roster carries its hosts), so a
    # long host list is not carried twice; `describe` still says what was selected.
    described: str = ""

    @classmethod
    def made(cls, selection: HostSelection) -> HostSelection:
        """The selection as a continued run carries it (its hosts are in the roster)."""
        if len(selection.hosts) <= 10:
            return selection
        return cls(all=True, described=selection.describe())

    @model_validator(mode="after")
    def _exactly_one(self) -> HostSelection:
        given = [self.all, bool(self.hosts), bool(self.selector), bool(self.group)]
        if sum(given) != 1:
            raise ValueError("select hosts with exactly one of: all, hosts, selector, group")
        return self

    def describe(self) -> str:
        if self.described:
            return self.described
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
    """A maintenance window in the IANA time zone `tz` (default UTC): `start`-`end` as minutes of
    the local day on `days` (0 Monday). An `end` at or before `start` runs past midnight into the
    next day. Local wall-clock times: on a DST change day a window opens and closes at the local
    times it names (a time the change skips opens at the first minute after the gap)."""

    days: tuple[int, ...] = (0, 1, 2, 3, 4, 5, 6)
    start_minute: int = Field(ge=0, lt=1440)
    end_minute: int = Field(ge=0, lt=1440)
    tz: str = "UTC"

    @model_validator(mode="after")
    def _opens(self) -> Window:
        if not self.days or any(d < 0 or d > 6 for d in self.days):
            raise ValueError("a window needs days among 0 (Monday) .. 6 (Sunday)")
        if self.start_minute == self.end_minute:
            raise ValueError("a window that starts when it ends never opens")
        zone(self.tz)
        return self

    def length_minutes(self) -> int:
        return (self.end_minute - self.start_minute) % 1440 or 1440


def zone(name: str) -> ZoneInfo:
    """The IANA time zone `name` (e.g. Europe/Berlin), or a ValueError naming it."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"unknown time zone {name!r}: give an IANA name such as UTC or Europe/Berlin"
        ) from None


class FailureBudget(_Frozen):
    """Halt when more than `max_failures` hosts failed, or more than `max_percent` % of the hosts
    selected (rounded down: 10% of 100 hosts allows 10 failures, halts at the 11th; 10% of 5 hosts
    allows none). Failures are counted since the start, or the last `resume` of a halt or
    `retry_failed`; a host waiting for an operator counts as failed while it waits. None: that
    bound is off."""

    max_failures: int | None = Field(default=None, ge=0)
    max_percent: float | None = Field(default=None, ge=0, le=100)

    def allowed(self, selected: int) -> int | None:
        """Failures allowed for `selected` hosts (None: no bound)."""
        bounds = []
        if self.max_failures is not None:
            bounds.append(self.max_failures)
        if self.max_percent is not None:
            bounds.append(int(selected * self.max_percent // 100))
        return min(bounds) if bounds else None


AssignedPolicy = Literal["skip", "wait-for-approval"]


class CampaignPolicy(_Frozen):
    assigned: AssignedPolicy = "skip"  # hosts with an instance: skip, or wait for the approval
    busy_retry_seconds: float = Field(default=300.0, gt=0)  # a busy host is asked again after this
    sweep_seconds: float = Field(default=600.0, gt=0)  # re-read in-flight hosts' entities this often
    max_history_events: int = Field(default=4000, ge=20, le=9000)  # continue-as-new past this
    # What the campaign changed outside its hosts (a DPUDeployment's BFB or flavor) is put back when
    # it is aborted, cancelled or its canary fails; True keeps it.
    keep_changes: bool = False


class CampaignHost(_Frozen):
    """One selected host, with what the limits need."""

    host_id: str
    site: str = "default"
    group: str = ""
    bmc: str = ""  # a key of its BMC endpoint (several hosts may share one): equal keys, one BMC


class Roster(_Frozen):
    """Every selected host, in order, column by column (about 30 bytes a host in a payload): the
    id, the index of its site and group in `sites` and `groups`, and its BMC key."""

    ids: tuple[str, ...] = ()
    sites: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    site_of: tuple[int, ...] = ()
    group_of: tuple[int, ...] = ()
    bmc_of: tuple[str, ...] = ()

    @classmethod
    def of(cls, hosts: Sequence[CampaignHost]) -> Roster:
        sites = list(dict.fromkeys(h.site for h in hosts))
        groups = list(dict.fromkeys(h.group for h in hosts))
        site_index = {s: i for i, s in enumerate(sites)}
        group_index = {g: i for i, g in enumerate(groups)}
        return cls(
            ids=tuple(h.host_id for h in hosts),
            sites=tuple(sites),
            groups=tuple(groups),
            site_of=tuple(site_index[h.site] for h in hosts),
            group_of=tuple(group_index[h.group] for h in hosts),
            bmc_of=tuple(h.bmc for h in hosts),
        )

    def host(self, index: int) -> CampaignHost:
        return CampaignHost(
            host_id=self.ids[index],
            site=self.sites[self.site_of[index]],
            group=self.groups[self.group_of[index]],
            bmc=self.bmc_of[index],
        )

    def __len__(self) -> int:
        return len(self.ids)


class InFlight(_Frozen):
    host: CampaignHost
    workflow_id: str  # the operation the entity started (or holds for approval)
    started_at: datetime
    awaiting_approval: bool = False


class Deferred(_Frozen):
    host_id: str
    retry_at: datetime
    reason: str


class Failure(_Frozen):
    """A host and why (failed, skipped, aborted, waiting for an operator)."""

    host_id: str
    reason: str


class DeploymentChange(_Frozen):
    """A change the campaign made outside its hosts: a DPUDeployment's `spec.dpus.<field>`."""

    deployment: str
    field: str  # the target kind's `deployment_field` (contracts/models/campaign_target.py)
    previous: str
    value: str
    role: Literal["canary", "fleet"]  # the canary's own deployment, or the fleet's
    pointed_at: datetime | None = None  # None: not pointed (yet, or again after a restore)
    restored_at: datetime | None = None  # put back to `previous`
    note: str = ""  # e.g. "kept: keep_changes"

    def describe(self) -> str:
        state = "planned"
        if self.restored_at is not None:
            state = f"restored {self.restored_at:%Y-%m-%d %H:%M:%S}"
        elif self.pointed_at is not None:
            state = f"pointed {self.pointed_at:%Y-%m-%d %H:%M:%S}"
        note = f" ({self.note})" if self.note else ""
        return (
            f"{self.role} DPUDeployment {self.deployment} {self.field} "
            f"{self.previous or '-'} -> {self.value}: {state}{note}"
        )


class HostState:
    """One character per host in `Progress.states` (and the `hosts` query's outcome)."""

    PENDING: Final = "p"
    REQUEUED: Final = "q"  # pending, before every `p` (retried)
    DEFERRED: Final = "w"  # busy: asked again at its `retry_at`
    IN_FLIGHT: Final = "r"
    VERIFYING: Final = "v"  # its operation completed; read back before it counts done
    DONE: Final = "d"
    AT_TARGET: Final = "t"  # already at the target: never touched
    FAILED: Final = "f"
    SKIPPED: Final = "s"
    ABORTED: Final = "a"
    WORDS: Final = {
        "p": "pending", "q": "pending", "w": "deferred", "r": "in-flight", "v": "verifying",
        "d": "done", "t": "at-target", "f": "failed", "s": "skipped", "a": "aborted",
    }  # fmt: skip


class Progress(_Frozen):
    """Everything the campaign knows, carried whole over continue-as-new: counts stay exact.

    Size: about 31 bytes per selected host (`roster` and `states`), plus at most
    `max_in_flight` x ~250 bytes in flight and 3 x RECENT_HOSTS named hosts (~400 bytes each):
    under 900 KB for 10,000 hosts and 1,000 in flight (`tests/test_campaign_bound.py`,
    bench/bench_campaign.py)."""

    phase: str = "selecting"
    roster: Roster = Roster()
    states: str = ""  # one HostState character per roster host
    in_flight: tuple[InFlight, ...] = ()
    deferred: tuple[Deferred, ...] = ()  # busy: asked again at `retry_at`
    verifying: tuple[str, ...] = ()  # completed, to be read back
    done: int = 0  # succeeded, this campaign's operation (read back at the target)
    already_at_target: int = 0  # counted done without being touched
    failed: int = 0  # hosts failed now (a retried or skipped one leaves this count)
    skipped: int = 0
    aborted: int = 0
    # Monotonic: every failure and every finished attempt ever (a skip or retry never subtracts).
    failures_total: int = 0
    attempts_total: int = 0
    budget_failures_base: int = 0  # failures_total at the last resume of a halt (or retry_failed)
    recent_failed: tuple[Failure, ...] = ()  # the newest RECENT_HOSTS of each
    recent_skipped: tuple[Failure, ...] = ()
    recent_aborted: tuple[Failure, ...] = ()
    abort_sent: tuple[str, ...] = ()  # operations (and requests) an abort was sent to
    canary_hosts: tuple[str, ...] = ()  # started as the canary
    canary_done: int = 0
    canary_failed: int = 0
    canary_passed: bool = False
    batch: int = 0  # the current batch's number (0: the canary)
    batch_left: int = 0  # hosts of the current batch not yet started
    soak_until: datetime | None = None
    halted_reason: str | None = None
    paused_by: str | None = None
    aborting: str | None = None  # who asked; no new host starts
    cancel_running: bool = False  # the running operations are still to be aborted
    keep_changes: bool = False  # the abort keeps the campaign's changes outside its hosts
    next_sweep: datetime | None = None
    # In flight, their operation waiting for an operator (seen by the last sweep); the budget
    # counts them unless a resume accepted them (`operator_accepted`).
    needs_operator: tuple[Failure, ...] = ()
    operator_accepted: tuple[str, ...] = ()
    changes: tuple[DeploymentChange, ...] = ()
    claimed: bool = False  # the hosts are claimed in the campaign registry
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

    @model_validator(mode="after")
    def _canary_path(self) -> CampaignInput:
        target = self.target
        if target.points_deployment and self.canary > 0 and not target.canary_deployment:
            raise ValueError(
                f"a {target.kind} campaign's canary runs on a DPUDeployment of its own, pointed before "
                f"{target.deployment}: give the canary deployment (--canary-deployment), "
                "or no canary (--canary 0)"
            )
        return self


class CampaignStatus(_Frozen):
    """The `status` query: counts, and the newest RECENT_HOSTS hosts of each outcome by name."""

    name: str
    target: str
    phase: str
    total: int
    done: int
    already_at_target: int
    in_flight: tuple[str, ...]
    awaiting_approval: tuple[str, ...]
    failed: int
    failures: tuple[Failure, ...]  # the newest RECENT_HOSTS
    skipped: int
    skipped_hosts: tuple[Failure, ...]
    deferred: tuple[str, ...]  # the first RECENT_HOSTS
    remaining: int  # not finished: pending + deferred + in flight + verifying
    batch: int
    canary_passed: bool
    window_open: bool
    next_window: datetime | None
    soak_until: datetime | None
    budget: str  # in words, e.g. "1 failed since the start; halts past 2 (of 40 hosts)"
    halted_reason: str | None
    paused_by: str | None
    aborting: str | None
    limits: Limits
    runs: int
    needs_operator: tuple[Failure, ...] = ()  # in flight, their operation waits for an operator
    aborted: int = 0  # operations cut by `abort` with `cancel_running` (not failures)
    aborted_hosts: tuple[Failure, ...] = ()  # the newest RECENT_HOSTS of them
    verifying: int = 0
    changes: tuple[DeploymentChange, ...] = ()  # what it changed outside its hosts


class CampaignResult(_Frozen):
    """How a campaign ended: counts, the newest RECENT_HOSTS named per outcome, its changes."""

    name: str
    outcome: str  # completed, aborted
    total: int
    done: int
    already_at_target: int
    failed: int
    skipped: int
    runs: int
    finished_at: datetime
    aborted: int = 0  # operations cut by `abort` with `cancel_running`
    failures: tuple[Failure, ...] = ()
    skipped_hosts: tuple[Failure, ...] = ()
    aborted_hosts: tuple[Failure, ...] = ()
    changes: tuple[DeploymentChange, ...] = ()

    @property
    def all_succeeded(self) -> bool:
        return (
            not self.failed
            and not self.skipped
            and not self.aborted
            and self.done + self.already_at_target == self.total
        )


class HostsQuery(_Frozen):
    """A page of the `hosts` query: `limit` hosts from `offset`, optionally of one outcome."""

    offset: int = Field(default=0, ge=0)
    limit: int = Field(default=HOSTS_PAGE_MAX, ge=1, le=HOSTS_PAGE_MAX)
    outcome: str | None = None  # one of HostState.WORDS' values


class HostOutcome(_Frozen):
    host_id: str
    outcome: str  # pending, deferred, in-flight, verifying, done, at-target, failed, skipped, aborted
    workflow_id: str = ""  # its operation (`reprovision/<id>`, `firmware/<id>`) once asked
    reason: str = ""  # kept for the newest RECENT_HOSTS of each outcome, and hosts in flight


class HostsPage(_Frozen):
    hosts: tuple[HostOutcome, ...]
    next_offset: int | None  # None: the last page
    total: int  # hosts matching the filter


# -- the operator's messages ---------------------------------------------------------------------------


class AbortRequest(OperatorRequest):
    cancel_running: bool = False  # True: abort the running host operations too
    keep_changes: bool = False  # True: leave the DPUDeployments as the campaign pointed them


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
    target: CampaignTarget | None = None  # None: no target checks (no DPF objects, rules)
    skip_assigned: bool = False  # leave out the hosts the inventory shows an instance on


class HostGroup(_Frozen):
    """Hosts that share one reason (compact: ids only, ~15 bytes a host)."""

    reason: str
    host_ids: tuple[str, ...]


class SelectHostsResult(_Frozen):
    """The hosts to run (a roster), and those left out at selection, grouped by why."""

    roster: Roster
    left_out: tuple[HostGroup, ...] = ()


class CheckHostsInput(_Frozen):
    target: CampaignTarget
    host_ids: tuple[str, ...]


class Reading(_Frozen):
    host_id: str
    read: str  # what a host not at the target runs, in words (e.g. "dpu-0 bfb bf-bundle-3-0-0")


class CheckHostsResult(_Frozen):
    at_target: tuple[str, ...]
    readings: tuple[Reading, ...] = ()  # of the hosts not at target


class DeploymentsInput(_Frozen):
    """What a BFB or flavor campaign will point, checked before anything changes."""

    target: CampaignTarget
    host_ids: tuple[str, ...]  # the campaign's hosts (the roster)


class DeploymentsResult(_Frozen):
    changes: tuple[DeploymentChange, ...]  # with `previous` read, nothing pointed yet
    canary_hosts: tuple[str, ...] = ()  # the roster's hosts the canary deployment covers


class PointInput(_Frozen):
    change: DeploymentChange
    restore: bool = False  # True: put `previous` back


class ClaimInput(_Frozen):
    campaign_workflow_id: str
    host_ids: tuple[str, ...]


class ClaimResult(_Frozen):
    """Hosts another running campaign holds, grouped by it (`reason` names it)."""

    held: tuple[HostGroup, ...] = ()


class ReleaseInput(_Frozen):
    campaign_workflow_id: str


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


# -- the claims registry (workflows/campaign_claims/workflow.py) ----------------------------------------
CLAIM_UPDATE: Final = "claim"
RELEASE_UPDATE: Final = "release"
HELD_QUERY: Final = "held"


class ClaimRequest(_Frozen):
    """Claim `host_ids` for `campaign` (a workflow id); `take_from`: holders known to have ended."""

    campaign: str
    host_ids: tuple[str, ...]
    take_from: tuple[str, ...] = ()


class ClaimAnswer(_Frozen):
    """The hosts held by another campaign, by holder; every other host is now `campaign`'s."""

    held: dict[str, tuple[str, ...]] = Field(default_factory=dict)


class ReleaseRequest(_Frozen):
    campaign: str


class ReleaseAnswer(_Frozen):
    released: int


class ClaimsInput(_Frozen):
    """The registry's state, carried over continue-as-new: holder -> hosts."""

    holders: dict[str, tuple[str, ...]] = Field(default_factory=dict)


class ClaimsStatus(_Frozen):
    holders: dict[str, int]  # holder -> hosts held
