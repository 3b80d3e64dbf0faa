"""The host workflows' contract: inputs, results, status, and the names of their messages.

Workflows on one host (docs/DOMAIN.md sections 1-2; workflow ids in `contracts.names`):

- `HostWorkflow` (`host/<id>`): the one owner of a host, long-running. Every operation on the
  host is asked of it by an update (`request_*`), so an instance assignment and a reprovision
  can never race: it refuses a request while another operation is in flight (naming it),
  refuses `assign_instance` during a disruptive operation, and holds a disruptive request on an
  assigned host until `approve` (or an auto-approval window). It runs each operation as a child
  workflow whose id is the business key (`reprovision/<id>`, ...).
- `HostOperationWorkflow` (`provision/<id>` or `reprovision/<id>`): flows 2-4 and 11 for all DPUs
  of a host or a subset: register or reprovision, release the hold, barrier until every DPU asks
  for the reboot, one host power cycle, remove the annotation, again if DPF asks (BF4), Ready.
- `HostRebootWorkflow` (`reboot/<id>/generation-<n>`): one reboot per boot generation, through
  the BMC, or by waiting for the `host_rebooted` signal (reboot method `manual`).
- `FirmwareWorkflow` (`firmware/<id>`): stage on every DPU's BMC, barrier, one power cycle, verify.
- `HostMonitorWorkflow` (`monitor/host-<id>`): flow 5, the host out of the pool while a Ready DPU
  is in `Node Effect`; continues-as-new.
- `HostRemovalWorkflow` (`remove/<id>`): flows 7-10 (its models: `contracts/models/removal.py`).

Operators answer a stuck operation with updates `retry`, `mark_rebooted`, `abort` (on the operation
workflow), and report a manual reboot with the signal `host_rebooted`.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Final, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

from contracts.models.control import OperatorRequest
from contracts.models.dpf import DPUProgress
from contracts.models.host_records import AutomationHold, EntityPredecessor, OperationRun, RunEnd
from contracts.models.inventory import HostVersions, VersionsScope
from contracts.models.monitor import (
    IN_POOL,
    OUT_OF_POOL,
    POOL_LABEL,
    POOL_REASON_ANNOTATION,
    DegradedDPU,
    HostMonitorInput,
    HostMonitorResult,
    HostMonitorStatus,
    MonitorMemory,
    MonitorPolicy,
    OwnerOperationInput,
    OwnerOperationResult,
    OwnerReprovisionInput,
    OwnerReprovisionResult,
    PoolChange,
    PoolStateResult,
    SetPoolStateInput,
    UnplannedReset,
)
from contracts.models.operation_policy import OperationPolicy, RebootMethod
from contracts.models.power_watch import PowerAtRest
from contracts.validation import (
    ApprovalWindow,
    DPUId,
    HostId,
    InstanceId,
    Reason,
    Requester,
)

# The pool's and monitor's models live in contracts/models/monitor.py, `DPUProgress` in dpf.py, the
# policy in operation_policy.py; callers that name them from here still may (only these are listed).
__all__ = [
    "AutomationHold",
    "OperationPolicy",
    "RebootMethod",
    "DPUProgress",
    "EntityPredecessor",
    "OperationRun",
    "RunEnd",
    "IN_POOL",
    "OUT_OF_POOL",
    "POOL_LABEL",
    "POOL_REASON_ANNOTATION",
    "DegradedDPU",
    "HostMonitorInput",
    "HostMonitorResult",
    "HostMonitorStatus",
    "MonitorMemory",
    "MonitorPolicy",
    "OwnerOperationInput",
    "OwnerOperationResult",
    "OwnerReprovisionInput",
    "OwnerReprovisionResult",
    "PoolChange",
    "PoolStateResult",
    "SetPoolStateInput",
    "UnplannedReset",
]

# -- message names (the Temporal UI and CLI show and send these) -----------------------------------
HOST_REBOOTED_SIGNAL: Final = "host_rebooted"
# The same name as an update: refused, naming what the operation waits for, when nothing awaits a
# reboot (the signal cannot answer; it stays handled for senders and workflows from before).
HOST_REBOOTED_UPDATE: Final = "host_rebooted"
MARK_REBOOTED_UPDATE: Final = "mark_rebooted"
APPROVE_UPDATE: Final = "approve"
RELEASE_AUTOMATION_UPDATE: Final = "release_automation"  # `host retry` of an idle host held back
WITHDRAW_UPDATE: Final = "withdraw"
ASSIGN_INSTANCE_UPDATE: Final = "assign_instance"
RELEASE_INSTANCE_UPDATE: Final = "release_instance"
MAINTENANCE_UPDATE: Final = "set_maintenance"
REQUEST_PROVISION_UPDATE: Final = "request_provision"
REQUEST_REPROVISION_UPDATE: Final = "request_reprovision"
REQUEST_FIRMWARE_UPDATE: Final = "request_firmware_update"
REQUEST_REBOOT_UPDATE: Final = "request_reboot"
REQUEST_REMOVAL_UPDATE: Final = "request_removal"
REQUEST_RESET_UPDATE: Final = "request_reset"
RESET_OPERATION: Final = "reset"
"""The `Operation` search attribute (and id prefix, `reset/<host>`) of a reset sequence."""

MANUAL_INTERVENTION_REQUIRED: Final = "manual-intervention-required"
"""The `Phase` of an operation that gave up on its own and waits for an operator's update."""


class _Frozen(BaseModel):
    # Unknown fields are ignored, never refused: older workers read what newer ones wrote (versioning.py).
    model_config = ConfigDict(frozen=True)


class OperationAbortRequest(OperatorRequest):
    """The `abort` update of a host operation (provision, reprovision).

    `finish_installing` (a campaign's `abort --cancel-running`): refused (`OperationInstalling`)
    once the operation released the DPUs' hold: they install and will ask for a host reboot that
    only this operation gives, so it finishes its reboot round instead of leaving them waiting
    for one. An operator's own `host abort` stops it at any point."""

    finish_installing: bool = False


class ApproveRequest(OperatorRequest):
    """The `approve` update of a host's entity. On a host in maintenance the request awaiting
    approval starts only when it, or this approval, says `in_maintenance` (`metalflow approve
    --in-maintenance`: recorded with the operation and in its Event), as any request
    (workflows/host/maintenance_rules.py)."""

    in_maintenance: bool = False


class WithdrawRequest(OperatorRequest):
    """The `withdraw` update of a host's entity: drop the request awaiting approval, unstarted."""

    workflow_id: str = Field(min_length=1)  # the request's operation: never another one


# -- provisioning and reprovisioning --------------------------------------------------------------


class HostOperationKind(StrEnum):
    PROVISION = "provision"
    REPROVISION = "reprovision"


class HostOperationInput(_Frozen):
    host_id: HostId  # the same rule as the CLI's: a workflow started by hand is checked too
    kind: HostOperationKind
    dpu_ids: tuple[str, ...] | None = None  # None: every DPU of the host
    requested_by: str = Field(min_length=1)
    reason: str = ""
    boot_generation: int = Field(default=0, ge=0)  # reboots of this host so far (the entity's count)
    policy: OperationPolicy = OperationPolicy()
    # The host's power as its entity last read it at rest, no operation of ours since (None: none):
    # handed to this run's first reboot (`HostRebootInput.power_before`, `parts/reboot_rounds.py`).
    power_before: PowerAtRest | None = None
    site_check: tuple[str, ...] = ()  # the request's `site_check` (its status and start Event say it)


class HostOperationStatus(_Frozen):
    """The `status` query of an operation: what a person needs to see where it is."""

    host_id: str
    operation: str
    phase: str  # the workflow's own step, e.g. "waiting-for-reboot-request"; also the Phase attribute
    waiting_for: str  # in words: "every DPU to reach Rebooting (2 of 3)"
    dpus: tuple[DPUProgress, ...] = ()
    reboots_requested: int = 0  # reboot rounds DPF asked for
    power_cycles_issued: int = 0  # resets the BMC accepted, re-issued cycles included
    reboot_attempts: int = 0  # reboots started, those the BMC refused included
    boot_generation: int = 0  # reached: moves once per reboot that happened
    rebooting_to: int | None = None  # the generation of the reboot in flight
    manual_intervention_reason: str | None = None
    started_at: datetime
    # When DPF's deadline for the reboot it asked for passes (None: none pending or unknown).
    reboot_deadline_at: datetime | None = None
    unplanned_resets: tuple[str, ...] = ()  # resets metalflow did not make, seen meanwhile (newest last)
    site_check: tuple[str, ...] = ()  # the kept site check's words it started under (degraded)
    left: str = ""  # what an early end would leave now: a terminated run's entity reads it (replayed)


class OperationEnd(_Frozen):
    """What the entity reads of an operation's result, whichever its workflow (each result is
    one): the boot generation it reached (None: none, e.g. a removal's), and `aborted`, "aborted by
    <who>: <why>..." with what it did and left when an operator aborted the run, which then
    completed (Phase `aborted`); "" for a run that ended as planned."""

    boot_generation: int | None = None
    aborted: str = ""
    # A power change nobody here made that the operation's own reads found (a reboot's: the host
    # Off before it began, or On by another actor during its power-down), in words; "" none.
    # The entity shows it (`HostStatus.unplanned_power`, its memo).
    unplanned_power: str = ""
    # The host's LastResetTime as its last reboot read it at its end (`HostRebootResult`'s; an
    # operation's: its last reboot child's), None: not known. The entity's baseline at rest keeps
    # it, so a reset by hand right after our run is told at the next reading.
    last_reset_time: datetime | None = None
    deletes_sent: bool = False  # a removal aborted after its first delete (its DPUs count as removed)
    cancelled: str = ""  # cancelled in Temporal yet completed (a reboot's cancel sent On), in words


class HostOperationResult(OperationEnd):
    host_id: str
    operation: str
    dpu_ids: tuple[str, ...]
    reboots: int  # host reboots this operation caused
    boot_generation: int  # the host's generation after the operation
    started_at: datetime
    finished_at: datetime


# -- reboot ----------------------------------------------------------------------------------------


class HostRebootInput(_Frozen):
    host_id: HostId  # the same rule as the CLI's: a workflow started by hand is checked too
    boot_generation: int = Field(ge=1)  # the generation this reboot brings the host to
    requested_by: str = Field(min_length=1)
    reason: str = ""
    force_off: bool = False  # ForceOff then On even where a gentler cycle exists (re-issues)
    # A warm reset (ForceRestart) where the BMC can prove it (LastResetTime), else a cold power cycle;
    # a host operation asks for it when DPF's reboot method is lesser than PowerCycle (DOMAIN.md 2.5).
    warm: bool = False
    # When the reboot became owed, if earlier than this workflow's start (when DPF asked): a host
    # reset since then (its LastResetTime) is taken as this reboot, never a second one.
    owed_since: datetime | None = None
    policy: OperationPolicy = OperationPolicy()
    # True: a BMC that cannot reboot the host fails it (`BMCRebootFailed`) for the caller to escalate.
    escalate_bmc_failure: bool = False
    # The host's power as its entity last read it at rest, no operation of ours since (None: no
    # such reading): the reboot's first read that differs was someone else's doing, said once.
    power_before: PowerAtRest | None = None
    # True: the caller (`parts/reboot_rounds.py`) takes the signal `its_reboot_now` (its power-down wait).
    tell_parent: bool = False
    site_check: tuple[str, ...] = ()  # the request's `site_check` (its status and start Event say it)


class HostRebootResult(OperationEnd):
    host_id: str
    boot_generation: int  # reached: its own, or the one before when aborted before the cycle
    method: str  # "bmc:<power cycle method>" or "manual" ("" when aborted before any reboot)
    reset_types: tuple[str, ...] = ()
    confirmed_by: str | None = None  # who sent host_rebooted / mark_rebooted, for manual reboots
    finished_at: datetime
    # The BMC showed a reset after the reboot became owed (e.g. someone else's): it served; nothing sent.
    already_done: bool = False
    # An operator's reboot of a host whose DPUs waited in DPF's Rebooting for it: what telling DPF
    # did ("DPF told node-HOST was rebooted (removed)", or why not); "" when DPF waited for nothing.
    dpf_told: str = ""


# -- firmware --------------------------------------------------------------------------------------


class FirmwareInput(_Frozen):
    host_id: HostId  # the same rule as the CLI's: a workflow started by hand is checked too
    target_version: str = Field(min_length=1)
    image_uri: str = Field(min_length=1)
    dpu_ids: tuple[str, ...] | None = None
    requested_by: str = Field(min_length=1)
    reason: str = ""  # the request's (`--reason`): recorded as every operation's
    boot_generation: int = Field(default=0, ge=0)
    policy: OperationPolicy = OperationPolicy()
    # The host's power as its entity last read it at rest, no operation of ours since (None: none):
    # handed to this run's first reboot (`HostRebootInput.power_before`, `parts/reboot_rounds.py`).
    power_before: PowerAtRest | None = None
    site_check: tuple[str, ...] = ()  # the request's `site_check` (its status and start Event say it)


class FirmwareResult(OperationEnd):
    host_id: str
    target_version: str
    staged: tuple[str, ...]  # DPUs this run staged the image on
    already_running: tuple[str, ...]  # DPUs that ran the target before
    reboots: int
    boot_generation: int
    finished_at: datetime


# -- the host entity -------------------------------------------------------------------------------


class AssignInstanceRequest(_Frozen):
    instance: InstanceId
    requested_by: Requester


class OperationRequest(_Frozen):
    """`request_provision`, `request_reprovision`, `request_reboot`, `request_removal`."""

    requested_by: Requester
    reason: Reason = ""
    dpu_ids: tuple[DPUId, ...] | None = None
    force: bool = False  # removal only: remove finalizers after the delete
    policy: OperationPolicy | None = None  # None: the host's policy
    # Set by a campaign (workflows/campaign/workflow.py): the operation is tagged `Campaign=<campaign>`, the
    # entity signals `host_finished` to `campaign_workflow_id` when it ends, and refuses (instead
    # of holding for approval) when the host is assigned and `refuse_if_assigned`. The monitor
    # sets `campaign_workflow_id` (its own id) too, to be told how its request ended.
    campaign: str | None = None
    campaign_workflow_id: str | None = None
    refuse_if_assigned: bool = False
    # The asker's own id of this request, recorded with the operation (`OperationRecord.request_id`):
    # a campaign recognises its earlier ask by it (activities/campaign.py).
    request_id: str | None = None
    # An operator's `--in-maintenance`: run it although the host is in maintenance (recorded with
    # the operation). The monitor and campaigns never set it.
    in_maintenance: bool = False
    # The kept `metalflow site check`'s words for this operation (degraded, or a check grown old):
    # the operation says them in its status, its start Event and the UI (issue 36 deliver 4).
    site_check: tuple[str, ...] = ()


class ResetTarget(StrEnum):
    """What a reset sequence resets (`metalflow host reset`)."""

    DPU = "dpu"  # the named DPUs (`dpu_ids`)
    ALL_DPUS = "all-dpus"  # every DPU of the host
    HOST = "host"  # the host only (a power cycle, the next boot generation)
    BOTH = "both"  # the host and every DPU (Arm and NIC): host off, DPUs reset, host on, DPUs up


class ResetRequest(_Frozen):
    """The entity's `request_reset`: one reset sequence (workflows/host_reset/workflow.py)."""

    requested_by: Requester
    reason: Reason = ""
    target: ResetTarget
    dpu_ids: tuple[DPUId, ...] | None = None  # target `dpu`: which (required); otherwise ignored
    # DPU targets: True resets Arm and NIC (PowerCycle, with the host off around it); False the
    # Arm cores only (ForceRestart; also what recovers a Paused DPU). `both` is always full.
    full: bool = False
    campaign: str | None = None  # as in OperationRequest
    campaign_workflow_id: str | None = None
    refuse_if_assigned: bool = False
    request_id: str | None = None  # as in OperationRequest
    in_maintenance: bool = False  # as in OperationRequest
    # Target `host`: its reboot's policy (`--power-down-wait`); None: the host's (120 s between
    # Off and On on a BMC without PowerCycle).
    policy: OperationPolicy | None = None
    site_check: tuple[str, ...] = ()  # as in OperationRequest


class HostResetInput(_Frozen):
    host_id: HostId
    target: ResetTarget
    dpu_ids: tuple[str, ...] = ()  # resolved by the workflow for `all-dpus`/`both`
    full: bool = False
    left_out: dict[str, str] = Field(default_factory=dict)  # removed DPUs (host/dpf_removed.py)
    requested_by: str = Field(min_length=1)
    reason: str = ""
    boot_generation: int = Field(default=0, ge=0)  # the host's reboots so far (a `host` target)
    policy: OperationPolicy = OperationPolicy()
    dpu_boot_timeout_seconds: float = Field(default=600.0, gt=0, le=7200)  # DPU Arm back to its OS
    # The host's power as its entity last read it at rest, no operation of ours since (None: none):
    # handed to its `--host` reboot (`HostRebootInput.power_before`, `parts/reboot_rounds.py`).
    power_before: PowerAtRest | None = None
    site_check: tuple[str, ...] = ()  # the request's `site_check` (its status and start Event say it)


class HostResetResult(OperationEnd):
    host_id: str
    target: str
    resets: tuple[str, ...]  # what was done, in order, e.g. "host-001-dpu-0: PowerCycle"
    boot_generation: int
    finished_at: datetime


class HostResetStatus(_Frozen):
    """The `status` query of a reset: where it is (its phase and what it waits for, as every
    operation's status says) and what it did so far."""

    host_id: str
    operation: str = RESET_OPERATION
    target: str
    phase: str  # the workflow's own step, e.g. "waiting-for-dpu-os"; also the Phase attribute
    waiting_for: str  # in words: its current details, e.g. "host-001-dpu-0 back to its OS"
    resets: tuple[str, ...] = ()  # what was done so far, in order
    boot_generation: int
    started_at: datetime
    site_check: tuple[str, ...] = ()  # the kept site check's words it started under (degraded)


class FirmwareRequest(_Frozen):
    requested_by: Requester
    target_version: str = Field(min_length=1)
    image_uri: str = Field(min_length=1)
    dpu_ids: tuple[DPUId, ...] | None = None
    reason: Reason = ""  # this and the rest: as in OperationRequest
    campaign: str | None = None
    campaign_workflow_id: str | None = None
    refuse_if_assigned: bool = False
    request_id: str | None = None
    in_maintenance: bool = False
    site_check: tuple[str, ...] = ()


class OperationAccepted(_Frozen):
    """The answer to a `request_*` update."""

    workflow_id: str  # the operation's workflow (already started, or started on approval)
    awaiting_approval: bool = False
    message: str


class OperationRecord(_Frozen):
    operation: str
    workflow_id: str
    requested_by: str
    outcome: str  # "running", "awaiting-approval", "completed", "failed: ...", "aborted"
    started_at: datetime | None = None
    finished_at: datetime | None = None
    requested_at: datetime | None = None
    reason: str = ""
    approved_by: str | None = None  # who approved it (or "auto-approval window ..."); None: not needed
    request_id: str | None = None  # the request's own id (`OperationRequest.request_id`), when it had one
    in_maintenance: str = ""  # asked with `--in-maintenance`: that maintenance in words ("" none)


class Maintenance(_Frozen):
    """A host in maintenance (`metalflow host maintenance HOST on`): who set it, why, since when.
    While it lasts nothing disruptive starts by itself (workflows/host/state.py)."""

    by: str
    reason: str
    since: datetime


class MaintenanceRequest(_Frozen):
    """The entity's `set_maintenance`: on (with a reason) or off."""

    on: bool
    requested_by: Requester
    reason: Reason = ""


class AwaitingRequest(_Frozen):
    """What the request awaiting approval acts on, as `host status` shows it: what `metalflow
    approve` judges by the kept site check again (the components the operation touches)."""

    operation: str
    dpu_ids: tuple[str, ...] | None = None  # None: every DPU of the host
    target: str = ""  # a reset's `ResetTarget` ("" another operation)
    full: bool = False  # a DPU reset: Arm and NIC
    manual_reboot: bool = False  # its policy says a person reboots (`--manual-reboot`)


class HostStatus(_Frozen):
    """The `status` query of a host's entity workflow."""

    host_id: str
    instance: str | None
    boot_generation: int
    current: OperationRecord | None  # running or awaiting approval
    recent: tuple[OperationRecord, ...] = ()  # newest last, a bounded number
    phase: str = "idle"  # the entity's `Phase`: idle, running <operation>, awaiting-approval
    site: str = "default"
    auto_approved_until: datetime | None = None  # disruptive requests start at once until then
    # While `current` awaits approval: when it expires unless approved (None: nothing awaits it).
    approval_expires_at: datetime | None = None
    maintenance: Maintenance | None = None  # None: not in maintenance
    # The last power change metalflow did not cause ("" none): seen at rest by the power watch, or
    # by an operation's own reads (a reboot that found the host Off, or turned On by another actor).
    unplanned_power: str = ""
    # The run whose outcome said it left the host OFF, no run having powered it on since ("" none).
    left_off_by: str = ""
    maybe_off_after: str = ""  # the run whose end's power read was not answered: the host may be OFF
    power_read_at: datetime | None = None  # when the power watch reads the host next (None: no watch)
    automation_held_back: AutomationHold | None = None  # an operator said no to an automation
    taken_over: str = ""  # what this entity took over from a run that ended by hand ("" nothing)
    # A new entity still reading what its predecessor left (`takeover.py`): requests wait until then.
    taking_over: bool = False
    awaiting: AwaitingRequest | None = None  # the request awaiting approval (None: none awaits)
    site_check: tuple[str, ...] = ()  # `current`'s request's site check words (a reboot has no status)


EntityRequestBody: TypeAlias = OperationRequest | FirmwareRequest | ResetRequest
"""The payload of an operation request (`contracts.host_requests`: each row names its model)."""


class PendingOperation(BaseModel):
    """The entity's one operation, running or awaiting approval (its child's handle is the run's)."""

    record: OperationRecord
    request: EntityRequestBody
    approved: bool = False  # no approval needed, or given: starting or started
    # A run this entity adopted (its predecessor's child, running when it started): its run id.
    # Followed by `await_operation_end`, not as a child (workflows/host/takeover.py). "" own child.
    adopted_run: str = ""


class HostEntityMemory(BaseModel):
    """What a host's entity knows: the data of its state (workflows/host/state.py decides on it),
    carried whole by continue-as-new (`HostWorkflowInput.state`). Mutable: the run updates it."""

    instance: str | None = None
    boot_generation: int = Field(default=0, ge=0)  # reboots of this host so far
    recent: list[OperationRecord] = Field(default_factory=list)  # ended operations, newest last, bounded
    auto_approved_until: datetime | None = None  # an approval's window, for `instance` only
    shown_phase: str | None = None  # the Phase last shown (None: none yet)
    phase_since: datetime | None = None  # since when (search attribute PhaseSince)
    current: PendingOperation | None = None  # None while idle (the only time it continues as new)
    versions_due: str | None = None  # after what the host's versions are to be read next
    versions_scope: VersionsScope | None = None  # what that read reads (None: everything)
    versions: HostVersions | None = None  # what the entity knows the host runs (None: not read yet)
    # What this entity's completed removals took out of DPF, until a provision brings it back:
    # DPU id -> the removal's workflow id ("" for the whole DPU node). A reprovision of it is refused.
    removed_from_dpf: dict[str, str] = Field(default_factory=dict)
    maintenance: Maintenance | None = None  # `metalflow host maintenance`: None while not in it
    power: PowerAtRest | None = None  # read at rest every `power_watch_seconds` (None: never read)
    # The run whose outcome said it left the host OFF, until a run's outcome says the host is on or a
    # run reached a boot generation ("" none): a run that never touched the host's power clears nothing.
    left_off_by: str = ""
    # The run whose end's power read was not answered ("may be OFF"), until the power watch reads
    # the host at rest: Off marks it OFF by that run (`left_off_by`), anything read clears it.
    maybe_off_after: str = ""
    maybe_off_unanswered: int = Field(default=0, ge=0)  # its re-reads unanswered since (`next_reading`)
    power_read_at: datetime | None = None  # when the power watch reads the host next (None: no watch)
    automation_held_back: AutomationHold | None = None  # an operator said no to an automation
    taken_over: str = ""  # what this entity took over from its predecessor ended by hand ("" none)


class HostWorkflowInput(_Frozen):
    host_id: HostId
    site: str = "default"
    instance: str | None = None  # a new entity's (a continued run's is in `state`)
    boot_generation: int = Field(default=0, ge=0)  # a new entity's (a continued run's is in `state`)
    auto_approval_window_seconds: ApprovalWindow = 0.0  # 0: every approval is explicit
    policy: OperationPolicy = OperationPolicy()
    max_history_events: int = Field(default=10_000, ge=20)  # continue-as-new past this (when idle)
    power_watch_seconds: float = Field(default=0.0, ge=0)  # read its power at rest this often (0: never)
    power_doubt_seconds: float = Field(default=60.0, gt=0)  # "may be OFF": read again (`next_reading`)
    state: HostEntityMemory | None = None  # None: a new entity; else the previous run's, carried over
