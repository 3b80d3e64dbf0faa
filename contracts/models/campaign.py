"""The fleet campaign's contract (`CampaignWorkflow`, id `campaign/<name>`): input, the status
query, the result, the operator's updates and the activities' messages.

A campaign drives many hosts to one target (a reprovision, a DPUDeployment's new BFB or flavor,
DPU firmware) through each host's entity `host/<id>`, in a canary batch then batches, under
limits, maintenance windows and a failure budget (workflows/campaign/workflow.py tells the runbook).
Its target and the target kinds are in contracts/models/campaign_target.py; what it knows, carried
over continue-as-new, in contracts/models/campaign_progress.py; what it reads before it decides
(deployments, claims), in contracts/models/campaign_facts.py (all re-exported here, the
contract's one front door for callers).
"""

from __future__ import annotations

from datetime import datetime
from typing import Final, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, model_validator

from contracts.models.campaign_facts import CLAIM_UPDATE as CLAIM_UPDATE
from contracts.models.campaign_facts import HELD_QUERY as HELD_QUERY
from contracts.models.campaign_facts import HOST_MARK as HOST_MARK
from contracts.models.campaign_facts import RECORD_UPDATE as RECORD_UPDATE
from contracts.models.campaign_facts import RELEASE_UPDATE as RELEASE_UPDATE
from contracts.models.campaign_facts import ClaimAnswer as ClaimAnswer
from contracts.models.campaign_facts import ClaimInput as ClaimInput
from contracts.models.campaign_facts import ClaimRequest as ClaimRequest
from contracts.models.campaign_facts import ClaimResult as ClaimResult
from contracts.models.campaign_facts import ClaimsInput as ClaimsInput
from contracts.models.campaign_facts import ClaimsStatus as ClaimsStatus
from contracts.models.campaign_facts import DeploymentFacts as DeploymentFacts
from contracts.models.campaign_facts import DeploymentHeld as DeploymentHeld
from contracts.models.campaign_facts import DeploymentRecord as DeploymentRecord
from contracts.models.campaign_facts import DeploymentsInput as DeploymentsInput
from contracts.models.campaign_facts import DeploymentsRead as DeploymentsRead
from contracts.models.campaign_facts import HostGroup as HostGroup
from contracts.models.campaign_facts import RecordInput as RecordInput
from contracts.models.campaign_facts import RecordRequest as RecordRequest
from contracts.models.campaign_facts import ReleaseAnswer as ReleaseAnswer
from contracts.models.campaign_facts import ReleaseInput as ReleaseInput
from contracts.models.campaign_facts import ReleaseRequest as ReleaseRequest
from contracts.models.campaign_facts import degraded_words as degraded_words
from contracts.models.campaign_progress import REASON_CHARS as REASON_CHARS
from contracts.models.campaign_progress import RECENT_HOSTS as RECENT_HOSTS
from contracts.models.campaign_progress import CampaignHost as CampaignHost
from contracts.models.campaign_progress import CampaignProgress as CampaignProgress
from contracts.models.campaign_progress import Deferred as Deferred
from contracts.models.campaign_progress import DeploymentChange as DeploymentChange
from contracts.models.campaign_progress import Failure as Failure
from contracts.models.campaign_progress import HostFinished as HostFinished
from contracts.models.campaign_progress import HostState as HostState
from contracts.models.campaign_progress import InFlight as InFlight
from contracts.models.campaign_progress import Limits as Limits
from contracts.models.campaign_progress import Roster as Roster
from contracts.models.campaign_progress import short as short
from contracts.models.campaign_target import KINDS as KINDS
from contracts.models.campaign_target import CampaignTarget as CampaignTarget
from contracts.models.campaign_target import KindSpec as KindSpec
from contracts.models.campaign_target import RequestedOperation
from contracts.models.campaign_target import TargetKind as TargetKind
from contracts.models.control import OperatorRequest
from contracts.models.host import OperationPolicy
from contracts.validation import Reason, Requester
from contracts.wording import plural

# -- message names -----------------------------------------------------------------------------------
HOST_FINISHED_SIGNAL: Final = "host_finished"
RETRY_FAILED_UPDATE: Final = "retry_failed"
SKIP_HOST_UPDATE: Final = "skip_host"
SET_LIMITS_UPDATE: Final = "set_limits"
SITE_BLOCKED_UPDATE: Final = "site_blocked"  # a newer `metalflow site check` blocks hosts not started

HOSTS_QUERY: Final = "hosts"  # every host's outcome, page by page
DEFERRAL_QUERY: Final = "deferral"  # a host the campaign put off: when it asks again and why (or none)
HOSTS_PAGE_MAX: Final = 1000  # hosts per page of the `hosts` query


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
            return f"{plural(len(self.hosts), 'listed host')}"
        if self.group:
            return f"group {self.group}"
        return "selector " + ",".join(f"{k}={v}" for k, v in sorted(self.selector.items()))


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
    # What the last run knew (None on the first run): the state object itself, as this shape.
    progress: CampaignProgress | None = None
    # Hosts the kept `metalflow site check` blocks this kind's operation on, and why (the CLI
    # reads them at `plan` and `start`): the admission leaves them out (workflows/campaign/admission.py).
    site_blocked: tuple[HostGroup, ...] = ()
    # Hosts it degrades the operation on (`HOST_MARK` in each reason): they run, and each one's request
    # carries the words (`degraded_words`), as `metalflow host` has it say them.
    site_degraded: tuple[HostGroup, ...] = ()

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
    aborting: str | None  # who asked the abort (while aborting and once aborted)
    limits: Limits
    runs: int
    needs_operator: tuple[Failure, ...] = ()  # in flight, their operation waits for an operator
    aborted: int = 0  # operations cut by `abort` with `cancel_running` (not failures)
    aborted_hosts: tuple[Failure, ...] = ()  # the newest RECENT_HOSTS of them
    verifying: int = 0
    changes: tuple[DeploymentChange, ...] = ()  # what it changed outside its hosts
    # Put off (busy, or their entity silent): how many, and the first RECENT_HOSTS with when they
    # are asked again and why.
    deferred_count: int = 0
    deferred_hosts: tuple[Deferred, ...] = ()
    # What it waits for now (`CampaignState.liveness`): `in-flight`, `can-start`, `timer` (with its
    # time and reason), `operator` (a pause, a halt, a host waiting for one), or `ended`.
    waiting_on: str = ""
    waiting_for: str = ""
    stopped_reason: str | None = None  # it stops (or stopped) on its own: why (e.g. no canary host can run)
    # Asked to abort, but their DPUs were installing: each finishes its reboot round (why).
    finishing: tuple[Failure, ...] = ()
    abort_reason: str = ""  # the abort's reason, as its operator gave it (with `aborting`)
    # Set by the CLI for a run that did not end by itself: "failed: ...", "cancelled", "terminated: ...".
    ended: str = ""

    def as_ended(self, how: str) -> CampaignStatus:
        """The last status of a run that did not end by itself (`how`: `<id> was terminated:
        <reason>`, `<id> failed: <why>`, ...), as ended: its phase how it ended, waiting for
        nothing (its last query still read its in-flight hosts, which it no longer follows)."""
        words = how.split(":")[0]
        ends = ("aborted by", "terminated", "cancelled", "timed out", "failed")
        phase = next((p.split()[0] for p in ends if p in words), "ended")
        return self.model_copy(
            update={"ended": how, "phase": phase, "waiting_on": "ended", "waiting_for": how}
        )


class CampaignResult(_Frozen):
    """How a campaign ended: counts, the newest RECENT_HOSTS named per outcome, its changes."""

    name: str
    outcome: str  # completed, aborted, stopped (`stopped_reason` says why)
    total: int
    done: int
    already_at_target: int
    failed: int
    skipped: int
    runs: int
    finished_at: datetime
    aborted: int = 0  # operations cut by `abort` with `cancel_running`
    deferred: int = 0  # put off (their entity busy) when it was aborted or stopped: never asked again
    failures: tuple[Failure, ...] = ()
    skipped_hosts: tuple[Failure, ...] = ()
    aborted_hosts: tuple[Failure, ...] = ()
    changes: tuple[DeploymentChange, ...] = ()
    stopped_reason: str | None = None

    @property
    def all_succeeded(self) -> bool:
        return (
            not self.failed
            and not self.skipped
            and not self.aborted
            and self.done + self.already_at_target == self.total
            and self.outcome == "completed"
        )

    @property
    def nothing_failed(self) -> bool:
        """Completed with no host failed or aborted: each host succeeded, was at the target, or was
        skipped by the campaign's rules or a person's word (left out: in maintenance, automation
        held back, an instance assigned, claimed by another campaign; `campaign skip`). A skip is
        the rule working, not a failure: `campaign start --wait` exits 0 (a campaign every host of
        which was skipped did nothing, and says so: `campaign_render.skipped_words`)."""
        return (
            not self.failed
            and not self.aborted
            and self.done + self.already_at_target + self.skipped == self.total
            and self.outcome == "completed"
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


class SiteBlocks(_Frozen):
    """The hosts a kept site check blocks one per-host operation on (`campaign_blocks`)."""

    request: RequestedOperation
    manual_reboot: bool = False  # judged without the host BMC (a person reboots the host)
    groups: tuple[HostGroup, ...] = ()


class SiteBlockedRequest(OperatorRequest):
    """`site_blocked`: what a newer `metalflow site check` blocks, for every per-host operation
    a campaign asks (one payload for every running campaign: each takes its own, `groups_for`)."""

    blocks: tuple[SiteBlocks, ...]

    def groups_for(self, request: str, *, manual_reboot: bool) -> tuple[HostGroup, ...]:
        return next(
            (b.groups for b in self.blocks if b.request == request and b.manual_reboot == manual_reboot), ()
        )


# -- activities -------------------------------------------------------------------------------------


class SelectHostsInput(_Frozen):
    selection: HostSelection
    target: CampaignTarget | None = None  # None: no target checks (no DPF objects, rules)
    skip_assigned: bool = False  # leave out the hosts the inventory shows an instance on


class SelectHostsResult(_Frozen):
    """The hosts a selection names (a roster), and what the read found about them; whether each
    runs is the admission's decision (workflows/campaign/admission.py)."""

    roster: Roster
    no_dpf: tuple[str, ...] = ()  # hosts DPF does not know (no DPUNode); read for kinds that reprovision
    # hosts DPF knows but lacks DPUs of (removed, never provisioned), each with them: `dpf_presence`
    not_in_dpf: dict[str, tuple[str, ...]] = {}
    assigned: tuple[str, ...] = ()  # hosts the inventory shows an instance on (read when skipping them)
    rule_breaks: tuple[str, ...] = ()  # the site's compatibility rules a DPU breaks, in words
    # hosts in maintenance (`metalflow host maintenance`), as visibility shows their entities:
    # host -> (who set it, since when); workflows/campaign/admission.py `in_maintenance` says it
    maintenance: dict[str, tuple[str, datetime | None]] = {}
    # hosts an operator held automation back on (`AutomationHeldBack`: an abort of the monitor's
    # request), as their entities' memos carry it: host -> (who, why, since when);
    # workflows/campaign/admission.py `held_back` says it
    held_back: dict[str, tuple[str, str, datetime | None]] = {}


class CheckHostsInput(_Frozen):
    target: CampaignTarget
    host_ids: tuple[str, ...]
    # judged as once the campaign's deployment is pointed at the target (`campaign plan` and
    # `start`, which read before it is; drivers/campaign.py `dpu_reading`)
    as_pointed: bool = False


class Reading(_Frozen):
    host_id: str
    read: str  # what a host not at the target runs, in words (e.g. "dpu-0 bfb bf-bundle-3-0-0")


class CheckHostsResult(_Frozen):
    at_target: tuple[str, ...]
    readings: tuple[Reading, ...] = ()  # of the hosts not at target


class PointInput(_Frozen):
    change: DeploymentChange
    restore: bool = False  # True: put `previous` back


class HostRequestInput(_Frozen):
    host_id: str
    site: str = "default"
    target: CampaignTarget
    campaign: str  # the `Campaign` search attribute of the operation
    campaign_workflow_id: str  # notified when the operation ends
    # This campaign's ask of this host, the same on every attempt of the activity, after a
    # continue-as-new and when a host put off is asked again; new for a `retry_failed` re-ask
    # (`CampaignState.request_id`). The entity records it with the operation: how an attempt
    # recognises the campaign's own earlier ask (`requested_by` is for people).
    request_id: str = Field(min_length=1)
    requested_by: str
    reason: str = ""
    refuse_if_assigned: bool = True
    host_policy: OperationPolicy | None = None
    site_check: tuple[str, ...] = ()  # the kept site check's words on it (degraded): its request's


class HostRequestsInput(_Frozen):
    requests: tuple[HostRequestInput, ...]


class HostRequestOutcome(_Frozen):
    host_id: str
    # not-asked / unanswered: the campaign aborted while the request was out (its abort cancels the ask)
    # maintenance: the host is in maintenance (`metalflow host maintenance`): skipped, naming it
    # held-back: an operator said no to automation on the host (`AutomationHeldBack`): skipped, naming it
    outcome: Literal[
        "started",
        "awaiting-approval",
        "busy",
        "assigned",
        "maintenance",
        "held-back",
        "refused",
        "not-asked",
        "unanswered",
    ]
    workflow_id: str = ""
    message: str = ""


class HostRequestsResult(_Frozen):
    outcomes: tuple[HostRequestOutcome, ...]

    @classmethod
    def none_asked(cls, requests: HostRequestsInput) -> HostRequestsResult:
        """A round cancelled before its activity ran: no host was asked."""
        return cls(
            outcomes=tuple(
                HostRequestOutcome(host_id=r.host_id, outcome="not-asked") for r in requests.requests
            )
        )


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
    # Sent with each abort (`OperationAbortRequest.finish_installing`): an operation whose DPUs
    # already install refuses it and finishes its reboot round (no DPU left owed a reboot).
    finish_installing: bool = True


class AbortAnswer(_Frozen):
    """How one operation took the campaign's abort: `aborted` (with what stopping leaves, in its
    words), `finishing` (refused: its DPUs install; it finishes its reboot round), or `ended`."""

    host_id: str
    workflow_id: str
    answer: Literal["aborted", "finishing", "ended"]
    words: str = ""


class AbortHostsResult(_Frozen):
    answers: tuple[AbortAnswer, ...] = ()
