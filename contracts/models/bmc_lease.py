"""Inputs, signals and state of the fleet-wide BMC lease (`workflows/bmc_lease/workflow.py`).

No secret and no URL crosses Temporal here beyond what the host workflow already carries: the
lease workflow is named by a hash of the BMC's origin (`names.bmc_lease_workflow_id`), and its
signals carry only workflow ids, run ids and request ids.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from contracts.models.inventory import BMCAccess, HostInventory, HostLookup

BMC_LEASE_ACQUIRE_SIGNAL = "acquire"
BMC_LEASE_ACQUIRE_UPDATE = "acquire_now"  # `acquire` that answers whether the slot is granted now
BMC_LEASE_RELEASE_SIGNAL = "release"
BMC_LEASE_GRANTED_SIGNAL = "bmc_lease_granted"
BMC_LEASE_STATUS_QUERY = "status"


class _Frozen(BaseModel):
    # Unknown fields are ignored: a newer worker may add one (metalflow/runtime/versioning.py).
    model_config = ConfigDict(frozen=True)


class LeaseHolder(_Frozen):
    """One request for a slot: the workflow run that asks, and the request's own id."""

    workflow_id: str
    run_id: str
    request_id: str


class LeaseRequest(_Frozen):
    """Signal `acquire`: queue `holder` for a slot; `limit` and `reclaim_check_seconds` are the
    requesting worker's settings (the latest request's apply)."""

    holder: LeaseHolder
    limit: int = Field(ge=1)
    reclaim_check_seconds: float = Field(default=30.0, gt=0)


class LeaseRelease(_Frozen):
    """Signal `release`: the slot (or the place in the queue) of `request_id` is given back."""

    request_id: str


class LeaseGrant(_Frozen):
    """Signal `bmc_lease_granted` to the holder: `request_id` holds a slot of `lease_workflow_id`."""

    lease_workflow_id: str
    request_id: str


class BMCLeaseState(BaseModel):
    """The lease workflow's input, and what it carries over continue-as-new.

    Mutable, unlike the messages: the lease's own state (`workflows/bmc_lease/state.py`,
    `LeaseBook`) derives from it and changes it as it grants. Unknown fields are ignored."""

    limit: int = Field(default=1, ge=1)
    holders: tuple[LeaseHolder, ...] = ()
    waiting: tuple[LeaseHolder, ...] = ()
    released: tuple[str, ...] = ()  # recent request ids, so a late duplicate `acquire` is ignored
    reclaim_check_seconds: float = Field(default=30.0, gt=0)
    reclaimed: int = 0  # slots taken back from holders that closed without releasing, all runs


class BMCLeaseStatus(_Frozen):
    """Query `status`: who holds the BMC's slots and who waits."""

    limit: int
    holders: tuple[LeaseHolder, ...]
    waiting: tuple[LeaseHolder, ...]
    granted: int  # grants in this run
    reclaimed: int


class RequestLeaseInput(_Frozen):
    """Activity `request_bmc_lease`: queue `holder` at the lease of `bmc`'s endpoint."""

    bmc: BMCAccess
    holder: LeaseHolder


class RequestLeaseResult(_Frozen):
    lease_workflow_id: str  # "" when `exclusive`
    limit: int
    # True: the slot is this run's already (update `acquire_now`, a free slot); False: queued,
    # the grant comes as the signal `bmc_lease_granted` (always False from `request_bmc_lease`).
    granted: bool = False
    # True: the BMC serves this host only and no lease workflow was asked (`lease_host_bmc`):
    # the host's own lock serialises its reboots; nothing to release.
    exclusive: bool = False


class LeaseAnswer(_Frozen):
    """Update `acquire_now`: whether the request holds a slot now (else it is queued)."""

    granted: bool


class LeaseHostBMCInput(_Frozen):
    """Activity `lease_host_bmc`: resolve `lookup`'s host, then queue `holder` at its BMC's lease
    (a BMC that serves only this host: no lease, once the host's reboot of `boot_generation` - 1
    has ended)."""

    lookup: HostLookup
    holder: LeaseHolder
    # The calling reboot's (a reset's host off and on: the host's next, as a reboot would);
    # None: always the lease.
    boot_generation: int | None = None


class LeaseHostBMCResult(_Frozen):
    inventory: HostInventory
    lease: RequestLeaseResult


class WorkflowRunRef(_Frozen):
    workflow_id: str
    run_id: str


class WorkflowRunRefs(_Frozen):
    """Activity `find_closed_workflow_runs`: its input (runs to look at) and result (the closed ones)."""

    runs: tuple[WorkflowRunRef, ...] = ()


class RebootRunInput(_Frozen):
    """Activity `describe_reboot_run`: the reboot id of one generation of a host."""

    host_id: str
    boot_generation: int = Field(ge=1)
    # An operation's own run to describe instead (its last Phase: an entity reading a reboot or
    # reset cut by hand); "" the reboot id of `boot_generation`.
    workflow_id: str = ""
    # That run, cut by hand: also read what it says it did and left (`RebootRunSeen.said`; one
    # query, which a worker answers by replaying the closed run).
    words: bool = False


class RebootRunSeen(_Frozen):
    """How the run holding a reboot id stands (`workflows.parts.boot_generation.RunEnd`'s
    values; `absent`: no run holds it any more), the generation a completed one reached, its
    last Phase (its `Phase` search attribute; "" none) and, for a failed one, its failure's
    message (`said`: e.g. `BMCRebootFailed`'s, which says when the host is OFF by its hand). An
    operation's own run cut by hand, asked for its `words`: `said` is what it says it did and left
    (cancelled: its final Phase details, `contracts.run_words`; terminated: its `status` query's
    `left`, for an operation that answers one); "" not said or not read."""

    end: str
    boot_generation: int | None = None
    phase: str = ""
    said: str = ""
