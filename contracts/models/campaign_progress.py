"""The shape of what a campaign knows, carried whole over continue-as-new (`CampaignProgress`),
and the pieces it is made of: the roster of selected hosts, the hosts in flight and put off, the
named outcomes, the changes made outside its hosts.

Data only. The campaign's state object (`workflows/campaign/state.py`, `CampaignState`) derives
from `CampaignProgress` and adds the decisions, and a run continues as new with that object as
its input's `progress`: pydantic serialises it as this shape. Mutable where the run changes it
(the progress itself); each piece is frozen.

Size: about 31 bytes per selected host (`roster` and `states`), plus the hosts in flight (at
most `max_in_flight`, ~270 bytes each), put off or re-queued by `retry_failed`, and 3 x
RECENT_HOSTS named hosts: the continue-as-new input stays under 1 MB at 10,000 hosts
(tests/fast/test_campaign_bound.py; figures in bench/README.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from contracts.models.control import OperatorRequest
from contracts.wording import iso_z

RECENT_HOSTS: Final = 100
"""Hosts named (with their reason) per outcome in the state, `status` and the result: the newest
of the failed, the skipped and the aborted. Every host is counted, and every host's outcome can
be read page by page (`hosts`)."""
REASON_CHARS: Final = 300  # a reason kept in the state is cut to this many characters


def short(reason: str) -> str:
    """A reason cut to REASON_CHARS, so the state's size per named host is bounded."""
    return reason if len(reason) <= REASON_CHARS else reason[: REASON_CHARS - 1] + "\u2026"


class _Frozen(BaseModel):
    # Unknown fields are ignored, never refused: a newer worker may add one (metalflow/runtime/versioning.py).
    model_config = ConfigDict(frozen=True)


class Limits(_Frozen):
    """Pacing; `set_limits` replaces them while the campaign runs (the next start obeys)."""

    batch_size: int = Field(default=10, ge=1)
    max_in_flight: int = Field(default=10, ge=1, le=1000)  # bounded fan-out, whatever the fleet
    max_per_group: int = Field(default=0, ge=0)  # 0: no limit per group (rack)
    max_per_bmc: int = Field(default=1, ge=0)  # per BMC endpoint; 0: no limit


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
    # When the campaign asks again; None once it ended (aborted, stopped): left deferred, no retry.
    retry_at: datetime | None
    reason: str

    def when(self) -> str:
        """`until <ISO 8601 Z>`, or `left with no retry` once its campaign ended."""
        return "left with no retry" if self.retry_at is None else f"until {iso_z(self.retry_at)}"


class Failure(_Frozen):
    """A host and why (failed, skipped, aborted, waiting for an operator)."""

    host_id: str
    reason: str


class HostFinished(_Frozen):
    """The `host_finished` signal: the host's entity saw this campaign's operation end."""

    host_id: str
    workflow_id: str
    outcome: str  # "completed", "failed: ...", "aborted", "expired: ..."


NOT_RESTORED: Final = "not restored"
NOT_POINTED: Final = "not pointed"


class DeploymentChange(_Frozen):
    """A change the campaign made outside its hosts: a DPUDeployment's `spec.dpus.<field>`."""

    deployment: str
    field: str  # the target kind's `deployment_field` (contracts/models/campaign_target.py)
    previous: str
    value: str
    # The canary's own deployment, the fleet's, or one a campaign that no longer runs left pointed
    # (taken over from the claims registry: put back before any host starts).
    role: Literal["canary", "fleet", "leftover"]
    pointed_at: datetime | None = None  # None: not pointed (yet, or again after a restore)
    restored_at: datetime | None = None  # put back to `previous`
    note: str = ""  # e.g. "kept: keep_changes"

    def restore_write(self, current: str) -> str | None:
        """What putting this change back writes, the deployment reading `current`: compare and
        set, `previous` only where it still holds the value the campaign set. None: nothing is
        written (never made, put back since, or changed since by someone else: left as it is)."""
        return self.previous if current == self.value and current != self.previous else None

    def point_write(self, current: str) -> str | None:
        """What pointing this change writes, the deployment reading `current`: compare and set
        too, `value` only where it still holds the `previous` the change recorded. None: nothing
        is written (already at `value`, or changed since by someone else: left as it is)."""
        return self.value if current == self.previous and current != self.value else None

    def pointed_over(self, current: str, now: datetime) -> DeploymentChange:
        """This change once pointed, the deployment having read `current` (`point_write`): pointed
        where it read `previous` or `value`; else not pointed, its note saying what it holds."""
        if current in (self.previous, self.value):
            note = "" if self.note.startswith((NOT_RESTORED, NOT_POINTED)) else self.note
            return self.model_copy(update={"pointed_at": now, "restored_at": None, "note": note})
        why = f"{NOT_POINTED}: changed since by someone else (now {current or '-'})"
        return self.model_copy(update={"pointed_at": None, "restored_at": None, "note": why})

    @property
    def point_refused(self) -> bool:
        """Its last point found a value someone else set (`pointed_over`): not pointed."""
        return self.note.startswith(NOT_POINTED)

    def restored(self, current: str, now: datetime) -> DeploymentChange:
        """This change once put back, the deployment having read `current` (`restore_write`);
        a value left as it is says why in its note."""
        why = ""
        if current not in (self.value, self.previous):
            why = f"{NOT_RESTORED}: changed since by someone else (now {current or '-'})"
        elif current == self.previous and self.previous != self.value:
            why = f"{NOT_RESTORED}: reads {current or '-'} already (never made, or put back since)"
        note = "; ".join(n for n in (why, self.note) if n) if why else self.note
        return self.model_copy(update={"restored_at": now, "note": note})

    @property
    def left_as_found(self) -> bool:
        """Put back by leaving it as it was (`restored`): not written."""
        return self.note.startswith(NOT_RESTORED)

    def describe(self) -> str:
        state = "planned"
        if (self.restored_at is not None and self.left_as_found) or self.point_refused:
            state = self.note
        elif self.restored_at is not None:
            state = f"restored {iso_z(self.restored_at)}"
        elif self.pointed_at is not None:
            state = f"pointed {iso_z(self.pointed_at)}"
        note = f" ({self.note})" if self.note and not (self.left_as_found or self.point_refused) else ""
        if self.role == "leftover":  # put back to `previous`: restoring is the change
            done = f"restored {iso_z(self.restored_at)}" if self.restored_at else "to restore"
            done = self.note if self.left_as_found else done
            return (
                f"leftover DPUDeployment {self.deployment} {self.field} {self.value} -> "
                f"{self.previous or '-'} (left by a campaign that no longer runs): {done}{note}"
            )
        return (
            f"{self.role} DPUDeployment {self.deployment} {self.field} "
            f"{self.previous or '-'} -> {self.value}: {state}{note}"
        )


class HostState:
    """One character per host in `CampaignProgress.states` (and the `hosts` query's outcome)."""

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


class CampaignProgress(BaseModel):
    """Everything a campaign knows: where each host is, the counts, the batch and the canary,
    pacing, halt, pause and abort, its changes outside its hosts. Carried whole over
    continue-as-new, so counts stay exact across runs."""

    # Mutable: the run changes it in place. Unknown fields are ignored (a newer worker may add one).
    model_config = ConfigDict(frozen=False)

    phase: str = "selecting"
    # Who asks each host, uniquely: `<campaign workflow id>@<its first run id>` (the request ids).
    asker: str = ""
    roster: Roster = Roster()
    states: str = ""  # one HostState character per roster host
    in_flight: dict[str, InFlight] = Field(default_factory=dict)  # by host id
    deferred: dict[str, Deferred] = Field(default_factory=dict)  # busy: asked again at `retry_at`
    verifying: list[str] = Field(default_factory=list)  # completed, to be read back
    heard: list[HostFinished] = Field(default_factory=list)  # signalled, not yet counted
    retried: dict[str, int] = Field(default_factory=dict)  # host -> times `retry_failed` re-queued it
    done: int = 0  # succeeded, this campaign's operation (read back at the target)
    already_at_target: int = 0  # counted done without being touched
    failed: int = 0  # hosts failed now (a retried or skipped one leaves this count)
    skipped: int = 0
    aborted: int = 0
    # Monotonic: every failure and every finished attempt ever (a skip or retry never subtracts).
    failures_total: int = 0
    attempts_total: int = 0
    budget_failures_base: int = 0  # failures_total at the last resume of a halt (or retry_failed)
    recent_failed: list[Failure] = Field(default_factory=list)  # the newest RECENT_HOSTS of each
    recent_skipped: list[Failure] = Field(default_factory=list)
    recent_aborted: list[Failure] = Field(default_factory=list)
    abort_sent: list[str] = Field(default_factory=list)  # operations (and requests) an abort was sent to
    canary_hosts: list[str] = Field(default_factory=list)  # started as the canary
    canary_done: int = 0
    canary_failed: int = 0
    canary_passed: bool = False
    batch: int = 0  # the current batch's number (0: the canary)
    batch_left: int = 0  # hosts of the current batch not yet started
    soak_until: datetime | None = None
    halted_reason: str | None = None
    paused_by: OperatorRequest | None = None
    abort_request: OperatorRequest | None = None  # no new host starts
    cancel_running: bool = False  # the running operations are still to be aborted
    keep_changes: bool = False  # the abort keeps the campaign's changes outside its hosts
    next_sweep: datetime | None = None
    # In flight, their operation waiting for an operator (seen by the last sweep); the budget
    # counts them unless a resume accepted them (`operator_accepted`).
    needs_operator: dict[str, Failure] = Field(default_factory=dict)
    operator_accepted: list[str] = Field(default_factory=list)
    changes: list[DeploymentChange] = Field(default_factory=list)
    # A BFB or flavor campaign's canary: the hosts of its canary DPUDeployment it runs (in order).
    canary_pool: list[str] = Field(default_factory=list)
    # It stops on its own (e.g. no canary host can run): why; it ends once nothing is in flight.
    stopped_reason: str | None = None
    # Asked to abort (`cancel_running`) but past the point of no return (their DPUs install):
    # host -> why; each finishes its reboot round and counts as it ends.
    finishing: dict[str, str] = Field(default_factory=dict)
    # What an aborted operation said stopping leaves its host in: host -> words (its `aborted` reason).
    abort_left: dict[str, str] = Field(default_factory=dict)
    claimed: bool = False  # the hosts are claimed in the campaign registry
    # One character per roster host, "1" once its claim was released while the campaign ran on
    # (it ended here: done, at the target, skipped, aborted); shorter: the rest not released.
    released: str = ""
    runs: int = 1
    started_at: datetime | None = None
    limits: Limits = Limits()
