"""The DPF contract of metalflow: exact names from docs/DOMAIN.md section 2, and the frozen inputs,
results and signal payloads of the DPF activities and the site's DPF watch.

Host workflows name hosts and DPUs by id (`HostRef`, `DPURef`); the object names are derived
here, once: DPUNode `node-<host>`, DPUDevice `device-<dpu>`, DPU `node-<host>-device-<dpu>`,
DPUNodeMaintenance `<dpunode>-hold`.

The site watch signals each workflow registered for a host (`DPFWaiter`) with
`DPF_STATE_CHANGED_SIGNAL` and a `HostDPFState`; `read_host_dpf_state` and the join
(`join_site_dpf_watch`) return the same model, so a workflow handles the first read and every
later change with one code path.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from contracts.models.inventory import DPF_NAMESPACE, HostInventory
from contracts.models.site_watch_timing import (  # re-exported: the watch's timing, its own module
    SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS as SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS,
)
from contracts.models.site_watch_timing import SITE_WATCH_PROBE_SECONDS as SITE_WATCH_PROBE_SECONDS
from contracts.models.site_watch_timing import SITE_WATCH_RETRY_MAX_SECONDS as SITE_WATCH_RETRY_MAX_SECONDS
from contracts.models.site_watch_timing import (
    site_watch_idle_actions_per_day as site_watch_idle_actions_per_day,
)
from contracts.models.site_watch_timing import site_watch_idle_beat_seconds as site_watch_idle_beat_seconds
from contracts.models.site_watch_timing import site_watch_takeover_seconds as site_watch_takeover_seconds

DPF_STATE_CHANGED_SIGNAL: Final = "dpf_state_changed"
"""Signal the site watch sends (payload `HostDPFState`) to a host's waiters on every change that
matters."""

# The site watch workflow's messages (declared in `contracts.workflow_api.SiteDPFWatchWorkflow`).
DPF_WAITER_SIGNAL: Final = "dpf_waiter"
"""A workflow run starts (or, `gone`, stops) waiting on a host: payload `DPFWaiter`."""
NEXT_WAITERS_UPDATE: Final = "next_waiters"  # the watch activity's long poll: `WaiterPoll` -> `WaiterNews`
WORKER_STARTED_SIGNAL: Final = "dpf_watch_worker_started"  # no payload: `SITE_WATCH_PROBE_SECONDS`
EPOCH_SIGNAL: Final = "dpf_watch_epoch"  # the activity saw the API server restart: the new epoch (int)
EPOCH_QUERY: Final = "epoch"
WAITERS_QUERY: Final = "waiters"
EPOCH_MEMO: Final = "epoch"  # the memo key of the site watch's epoch (a join reads it with a describe)

PROVISIONING_GROUP: Final = "provisioning.dpu.nvidia.com"
SVC_GROUP: Final = "svc.dpu.nvidia.com"
DPF_VERSION: Final = "v1alpha1"

HOLD_ANNOTATION: Final = "provisioning.dpu.nvidia.com/wait-for-external-nodeeffect"
REBOOT_REQUIRED_ANNOTATION: Final = "provisioning.dpu.nvidia.com/dpunode-external-reboot-required"
DPU_PROTECTION_FINALIZER: Final = "provisioning.dpu.nvidia.com/dpu-protection"
DPUNODE_NAME_LABEL: Final = "provisioning.dpu.nvidia.com/dpunode-name"
"""Label DPF puts on every DPU it creates: the DPUNode it belongs to (the watcher selects on it)."""

# What metalflow writes on the objects it registers (documented in drivers/inventory.py).
GROUP_LABEL: Final = "metalflow.io/dpu-group"
HOST_ID_LABEL: Final = "metalflow.io/host-id"
DPU_ID_ANNOTATION: Final = "metalflow.io/dpu-id"
DPU_MODEL_ANNOTATION: Final = "metalflow.io/dpu-model"
SITE_ANNOTATION: Final = "metalflow.io/site"
BMC_ANNOTATION: Final = "metalflow.io/bmc"
INSTANCE_ANNOTATION: Final = "metalflow.io/instance"
GROUPS_ANNOTATION: Final = "metalflow.io/groups"
HOST_LABELS_ANNOTATION: Final = "metalflow.io/host-labels"

REBOOT_ACK_ANNOTATION: Final = "metalflow.io/reboot-acknowledged"
"""Written by `mark_dpu_node_rebooted` in the same conditional write that removes the reboot
annotation: the token of the acknowledgement, so a retried call that lands after DPF asked again
finds its token and leaves DPF's new request alone."""

# DPU phases (values contain spaces); any other value is "in progress" (docs/DOMAIN.md 2.2).
PHASE_NODE_EFFECT: Final = "Node Effect"
PHASE_REBOOTING: Final = "Rebooting"
PHASE_READY: Final = "Ready"
PHASE_ERROR: Final = "Error"
PHASE_DELETING: Final = "Deleting"
# The phases DPF moves a DPU through once it leaves Node Effect, its critical services back, on its
# way to Ready (v26 adds Service Readiness): the monitor's reason no longer holds there (issue 40:
# 1 s each in the demo's DPF, an approval sent 1-2 s after the recovery reprovisioned a healthy DPU).
PAST_NODE_EFFECT: Final = ("DPU Cluster Config", "Service Readiness", "Node Effect Removal")

# DPF v26 reboot methods, most disruptive first (DPF `GetRebootMethodPriority`; DOMAIN.md 2.5).
REBOOT_METHOD_PRIORITY: Final = (
    "PowerCycle", "SystemLevelReset", "SystemReboot", "FirmwareReset", "DPUWarmReboot", "NoAction", "Unknown",
)  # fmt: skip
WAITING_FOR_MANUAL_REBOOT: Final = "WaitingForManualPowerCycleOrReboot"
"""`rebootStatus.reason` once DPF is ready to count the annotation's removal (its Step 2)."""


class _Frozen(BaseModel):
    # Unknown fields are ignored, never refused: a newer worker may add one to a payload that an
    # older worker (a mixed fleet, a rollback) reads back from history (metalflow/runtime/versioning.py).
    model_config = ConfigDict(frozen=True)


class HostRef(_Frozen):
    """One host's DPF objects."""

    host_id: str
    namespace: str = DPF_NAMESPACE

    @classmethod
    def of(cls, inventory: HostInventory) -> HostRef:
        return cls(host_id=inventory.host_id, namespace=inventory.namespace)

    def node_name(self) -> str:
        return f"node-{self.host_id}"

    def hold_name(self) -> str:
        return f"{self.node_name()}-hold"

    def dpu_name(self, dpu_id: str) -> str:
        return f"{self.node_name()}-device-{dpu_id}"


class DPURef(_Frozen):
    """One DPU of a host; `uid` pins the DPU object an operation means (see `ReprovisionInput`)."""

    host_id: str
    dpu_id: str
    namespace: str = DPF_NAMESPACE

    def host(self) -> HostRef:
        return HostRef(host_id=self.host_id, namespace=self.namespace)

    def dpu_name(self) -> str:
        return self.host().dpu_name(self.dpu_id)

    def device_name(self) -> str:
        return f"device-{self.dpu_id}"


# -- state --------------------------------------------------------------------------------------


class Condition(_Frozen):
    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition: str = ""  # lastTransitionTime as written (RFC 3339), "" when absent


class RebootStatus(_Frozen):
    """DPF v26 `DPU.status.rebootStatus` (absent before: None)."""

    phase: str = ""  # WaitForShutdown, Pending, Succeeded, Failed, Unknown
    method: str = ""
    reason: str = ""
    message: str = ""

    @property
    def ready_for_host_reboot(self) -> bool:
        """DPF counts a removal of the annotation only from here (its Step 2, DOMAIN.md 2.5)."""
        return self.phase == "Pending" and self.reason == WAITING_FOR_MANUAL_REBOOT


def method_rank(method: str | None) -> int:
    """The priority of a reboot method (0: PowerCycle); unknown values rank as Unknown."""
    if method in REBOOT_METHOD_PRIORITY:
        return REBOOT_METHOD_PRIORITY.index(method)
    return len(REBOOT_METHOD_PRIORITY) - 1


class DPUState(_Frozen):
    name: str
    uid: str
    dpu_id: str | None = None  # from the DPUDevice name, when it is one of ours
    phase: str = ""  # "" before DPF set one
    conditions: tuple[Condition, ...] = ()
    deleting: bool = False
    bfb: str = ""
    # DPF v26 (absent before: None/""): docs/DOMAIN.md section 2.3.
    previous_phase: str = ""
    reboot_status: RebootStatus | None = None
    agent_reboot_method: str | None = None  # status.agentStatus.rebootMethod
    reboot_sequence_count: int | None = None  # status.agentStatus.rebootSequenceCount
    agent_started_at: str = ""  # status.agentStatus.lastStartupTime: moves when the DPU (its agent) restarts
    outdated_reason: str | None = None  # status.outdated.reason (v26.7+)

    def condition(self, ctype: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == ctype), None)

    @property
    def ready_for_host_reboot(self) -> bool:
        """DPF counts a removal of the reboot annotation for this DPU (its Step 2, DOMAIN.md 2.5).

        Read from what the object carries, not from a version: where DPF writes `rebootStatus`
        (the newest v26 types) its stamp `Pending`/`WaitingForManualPowerCycleOrReboot`; where the
        DPU has none (v26.4.0-rc.3, the build NICo pins, whose CRDs have no `rebootStatus`; and
        v25.10) the condition `Rebooted=False` with that reason, which the DPUNode controller's
        condition-based `proccessExternalReboot` writes on every `Rebooting` DPU with the
        annotation, and again on one that lacks it, setting the annotation anew (DPF
        `dpunode_controller.go`, stored version index id 57373909603; DPF's own guide waits for
        "condition Rebooted is false with WaitingForManualPowerCycleOrReboot reason";
        simulators/dpf/BEHAVIOUR.md R7)."""
        if self.reboot_status is not None:
            return self.reboot_status.ready_for_host_reboot
        rebooted = self.condition("Rebooted")
        return (
            rebooted is not None
            and rebooted.status == "False"
            and rebooted.reason == WAITING_FOR_MANUAL_REBOOT
        )

    @property
    def reboot_method(self) -> str | None:
        """The reboot this DPU asks for: `rebootStatus.method`, else the agent's report."""
        if self.reboot_status is not None and self.reboot_status.method:
            return self.reboot_status.method
        return self.agent_reboot_method

    def error_reason(self) -> tuple[str, str] | None:
        """(condition type, reason) of DPF's failed condition for an `Error` (not `Ready`'s own,
        which only repeats it): e.g. ("BFBTransferred", "FailToInstall"); None when none says."""
        for cond in self.conditions:
            if cond.type != "Ready" and cond.status == "False" and cond.reason:
                if cond.type in ("BFBTransferred", "OSInstalled", "Rebooted", "NodeEffectRemoved"):
                    return cond.type, cond.reason
        ready = self.condition("Ready")
        return ("Ready", ready.reason) if ready is not None and ready.status == "False" else None

    @property
    def ready(self) -> bool:
        ready = self.condition("Ready")
        return self.phase == PHASE_READY and ready is not None and ready.status == "True"

    @property
    def failed(self) -> bool:
        return self.phase == PHASE_ERROR

    def failure_message(self) -> str:
        """DPF's own words for an `Error` (the message of a False condition, `Ready` first)."""
        ordered = sorted(self.conditions, key=lambda c: c.type != "Ready")
        for cond in ordered:
            if cond.status != "True" and cond.message:
                return cond.message
        return "no condition message"


class DPUNodeState(_Frozen):
    name: str
    uid: str
    reboot_required: str | None = None  # the annotation's value; None when absent
    conditions: tuple[Condition, ...] = ()
    deleting: bool = False
    reboot_method: str | None = None  # DPF v26 status.rebootMethod (or the condition's message)
    reboot_acknowledged: str | None = None  # REBOOT_ACK_ANNOTATION: the last acknowledgement's token

    @property
    def reboot_requested_at(self) -> str:
        """When DPF asked for the reboot now pending (`DPUNodeRebootInProgress` turned True);
        "" when unknown or none is pending."""
        cond = self.condition("DPUNodeRebootInProgress")
        if self.reboot_required is None or cond is None or cond.status != "True":
            return ""
        return cond.last_transition

    @property
    def waiting_for_reboot(self) -> bool:
        """DPF asks for an external reboot (it checks the annotation's presence)."""
        return self.reboot_required is not None

    def condition(self, ctype: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == ctype), None)


class HoldState(_Frozen):
    """The `<dpunode>-hold` DPUNodeMaintenance."""

    name: str
    hold: str | None = None  # the hold annotation's value; DPF waits while it is "true"
    conditions: tuple[Condition, ...] = ()

    @property
    def holding(self) -> bool:
        return self.hold == "true"


class DPFVersion(_Frozen):
    """How new a state is, so a read and the site watch's signals can be ordered: per kind, the
    resourceVersion up to which the state holds every change of that kind (a list's version, or
    the last event the watch applied), and the watch's `epoch` (raised when the API server's
    resourceVersions went backwards: it restarted on another store, so older epochs lose)."""

    epoch: int = 0
    dpus: int = 0
    node: int = 0
    hold: int = 0


class HostDPFState(_Frozen):
    """Everything of one host's DPF state a workflow decides on (the watcher's signal payload)."""

    host_id: str
    node: DPUNodeState | None = None
    dpus: tuple[DPUState, ...] = ()  # sorted by name
    hold: HoldState | None = None
    sequence: int = 0  # increases with every signal of one watcher (orders signals)
    as_of: DPFVersion | None = None  # set by the site watch and its join; None: unordered

    def dpu(self, dpu_id: str) -> DPUState | None:
        return next((d for d in self.dpus if d.dpu_id == dpu_id), None)

    def content(self) -> HostDPFState:
        """The state without its sequence number and version: two states with equal content are
        one state."""
        return self.model_copy(update={"sequence": 0, "as_of": None})


class DPUProgress(_Frozen):
    """One DPU's DPF phase as a workflow last saw it, and since when (an operation's and the
    monitor's `status`)."""

    dpu_id: str
    phase: str  # DPF's phase, as last seen ("" before DPF set one)
    since: datetime  # when it entered that phase, as the workflow saw it
    error_reprovisions: int = 0
    # The last Error the operation reprovisioned it for, in words ("" when none): an Error a
    # reprovision cured passes in a moment, and a follower polling the status would miss it.
    last_error: str = ""


# -- site set-up ----------------------------------------------------------------------------------


class BFBSpec(_Frozen):
    name: str = "bf-bundle-2-9-0"
    url: str = "http://bfb.local/bf-bundle-2.9.0-90_24.10_ubuntu-22.04_prod.bfb"
    file_name: str | None = None


class FlavorSpec(_Frozen):
    name: str = "carbide-dpu-flavor"
    spec: dict[str, Any] = Field(
        default_factory=lambda: {"dpuMode": "dpu", "grub": {"kernelParameters": ["console=hvc0"]}}
    )


class ServiceSpec(_Frozen):
    """One DPU service of a group: a DPUServiceTemplate and a DPUServiceConfiguration."""

    name: str = "dts"  # the service's key in the DPUDeployment (at most 28 characters)
    repo_url: str = "oci://nvcr.io/nvidia/doca"
    chart: str = "doca-telemetry"
    version: str = "1.0.0"
    values: dict[str, Any] = Field(default_factory=dict)
    apply_node_effect: bool = False  # a critical service: its updates apply the node effect
    # `security.privileged` of its DPUServiceTemplate, always written: DPF (26.x, privileged pod
    # enforcement) rejects a DPUCluster-targeted DPUService without it, and an unset value takes
    # a default DPF says will change from allow to deny (simulators/dpf/BEHAVIOUR.md O4). True
    # only for a chart whose containers need `securityContext.privileged: true`.
    privileged: bool = False


class GroupSpec(_Frozen):
    """One DPU group: one DPUDeployment (named after the group, at most 20 characters)."""

    name: str
    services: tuple[ServiceSpec, ...] = (ServiceSpec(),)


class SiteSetupInput(_Frozen):
    groups: tuple[GroupSpec, ...]
    bfb: BFBSpec = BFBSpec()
    flavor: FlavorSpec = FlavorSpec()
    namespace: str = DPF_NAMESPACE


class ObjectOutcome(_Frozen):
    """What an idempotent write found: `created`/`updated`, `unchanged`, or `differs` (left alone)."""

    kind: str
    name: str
    outcome: str
    detail: str = ""


class ObjectsResult(_Frozen):
    objects: tuple[ObjectOutcome, ...] = ()

    def changed(self) -> bool:
        return any(o.outcome in ("created", "updated", "deleted", "finalizers removed") for o in self.objects)


class RegisterHostInput(_Frozen):
    inventory: HostInventory
    group: str | None = None  # default: the host's first group


class ChangeResult(_Frozen):
    """Whether the call changed the object (False: the world already was as asked)."""

    name: str
    changed: bool
    detail: str = ""


class MarkRebootedInput(HostRef):
    """`mark_dpu_node_rebooted`: remove the reboot annotation, once per `token`.

    The removal and the token (`REBOOT_ACK_ANNOTATION`) are one write, conditional on the
    resourceVersion read, or without a read on the node still showing `asked` (the annotation's value)
    and `token_before` (the token there), as the workflow saw them when DPF asked. A retry that finds
    its token does nothing, whatever the annotation says now: a later annotation is DPF's next request,
    served by the next acknowledgement. A host workflow makes one token per acknowledgement (its id, the
    boot generation, a count). An empty token (a payload from before tokens) removes unconditionally."""

    token: str = ""
    asked: str | None = None
    token_before: str | None = None


class ReprovisionInput(_Frozen):
    """Delete the DPU object with this `uid` so DPF recreates it; a DPU with another uid is the
    recreated one, so a retry or replay does nothing (the operation happens once)."""

    dpu: DPURef
    uid: str


class DeploymentBFBInput(_Frozen):
    deployment: str
    bfb: str
    namespace: str = DPF_NAMESPACE


class DeploymentFlavorInput(_Frozen):
    deployment: str
    flavor: str
    namespace: str = DPF_NAMESPACE


class DeleteDPUInput(_Frozen):
    dpu: DPURef
    force: bool = False


class DeleteNodeInput(_Frozen):
    host: HostRef
    force: bool = False


class DevicesGoneInput(_Frozen):
    """Wait until these DPUs' DPUDevices are gone, or `deadline` (retries keep the deadline)."""

    dpus: tuple[DPURef, ...]
    deadline: datetime
    poll_seconds: float = Field(default=1.0, gt=0)


# -- the site watch (one per site: activities/site_watch/, workflows/site_watch/workflow.py) -----------


class SiteWatchCheckpoint(_Frozen):
    """Heartbeat details of the site watch: per stream, the resourceVersion up to which every
    change has been signalled, the epoch (see `DPFVersion`), and `waiters_seq`, the registry's
    sequence number up to which every registration has had its first (welcome) signal."""

    resource_versions: dict[str, int] = Field(default_factory=dict)
    epoch: int = 0
    relists: int = 0
    restarts: int = 0
    waiters_seq: int = 0


class DPFWaiter(_Frozen):
    """One entry of the site watch's registry: a workflow run waiting on one host's DPF objects.

    The site watch signals by `workflow_id` (the run now current); `run_id` only tells a stale
    entry from a newer run of the same id, so removing a closed run never removes its successor.
    """

    host_id: str
    workflow_id: str
    run_id: str
    seq: int = 0  # the registry's sequence number when added (set by the site watch workflow)
    gone: bool = False  # in a `dpf_waiter` signal: remove this entry (its run has closed)


class WaiterPoll(_Frozen):
    """The watch activity asks for the registrations after `after` (-1: the whole registry) and
    reports its latest durable checkpoint (the workflow carries it into its next run), the latest
    `WaiterNews.ping` it got (`pong`; None: a build without pings) and whether it replaces an attempt."""

    after: int = -1
    checkpoint: SiteWatchCheckpoint | None = None
    pong: int | None = None
    taking_over: bool = False


class WaiterNews(_Frozen):
    """Answer to a `WaiterPoll`: `waiters` is the whole registry (`full`) or the entries added
    after the poll's `after`, in order; `seq` is the registry's sequence number now. `handover`:
    the workflow continues as new: poll once more with the latest checkpoint, then stop polling."""

    seq: int
    full: bool = False
    waiters: tuple[DPFWaiter, ...] = ()
    handover: bool = False
    ping: int = 0  # the workflow's pings so far: the next poll carries it back (`WaiterPoll.pong`)


class SiteWatchInput(_Frozen):
    """The site watch of one DPF namespace (workflow `dpf-watch/...` and its activity)."""

    namespace: str = DPF_NAMESPACE
    heartbeat_timeout_seconds: float = Field(default=SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS, ge=3, le=3600)
    """The watch activity's heartbeat timeout: the server gives a dead worker's watch to another
    this long after its last heartbeat; an idle watch heartbeats every third of it
    (`site_watch_idle_actions_per_day`, `site_watch_takeover_seconds`). Tests shorten it
    (`METALFLOW_SITE_WATCH_TAKEOVER_SECONDS`)."""
    # Per stream, resourceVersions read before the watch workflow was created: every workflow's
    # own read is at least as new, so the watch signals only what changed since (empty: every
    # registered host).
    start_from: dict[str, int] = Field(default_factory=dict)
    history_events_per_run: int = Field(default=10_000, ge=100)
    """The workflow continues as new past this many history events (or when Temporal suggests)."""
    # Carried by continue-as-new (the activity's input leaves `waiters` empty: it polls for them).
    epoch: int = 0
    waiters: tuple[DPFWaiter, ...] = ()
    waiters_seq: int = 0
    resume_from: SiteWatchCheckpoint | None = None  # the previous run's last reported checkpoint
    taking_over: bool = False  # replacing an attempt taken for dead: resume from its heartbeat


class JoinSiteWatchInput(_Frozen):
    """A workflow starts waiting on `host`: register it with the site's watch (started if need
    be), read the host's state."""

    host: HostRef
