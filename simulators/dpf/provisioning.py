"""The DPU state machine: phases on timers, the hold and external-reboot handshakes, the power
checks, and the injectable faults.

Level-triggered: every event only names a DPU (or a DPUNode); what to do is decided from the
object as the store holds it now, so stale or repeated watch events are harmless.

Choices where DPF's behaviour is not pinned down by the sources (documented for metalflow):
- The `<dpunode>-hold` DPUNodeMaintenance is created with the hold annotation "true" when the
  first DPU of the node reaches `Node Effect`; each DPU adds itself to `spec.requestor`. A DPU
  leaves the requestors in `Node Effect Removal` (or when deleted); the last one out deletes the
  maintenance. So a reprovisioned DPU finds no maintenance and a new one is created "true":
  reprovisioning is held again. The annotation is read as DPF's `reconcileHold` reads it
  (`hold_verdict`, DOMAIN.md 2.4): a Go `ParseBool` false value releases, a true value holds, a
  missing one is set back to "true" (the hold re-armed), anything else holds with
  `NodeEffectApplied=False`, reason `Error`; once the hold is applied nothing re-arms it.
- External reboot: the annotation is set when the first DPU of the node reaches `Rebooting`;
  every DPU of the node in `Rebooting` until the annotation is removed is served by that one
  reboot. Only removal completes it (a value of "false" does not: DPF checks presence). A DPU
  reaching `Rebooting` after the removal starts a new round.
- Removal without a host power cycle since the annotation was set is recorded as a violation
  and the DPUs continue anyway: DPF trusts its client.
- BF4 DPUs ask for a second reboot: after the first they go `Checking Host Reboot Required ->
  Rebooting` and the annotation is set again.

With `version="26"` the DPU follows DPF v26 instead (simulators/dpf/BEHAVIOUR.md has every
behaviour with its source): the v26 phases, the DPU agent's reported reboot methods and
`rebootSequenceCount` (`DPU Config -> Rebooting -> DPU Config` until it reports NoAction),
`rebootStatus` (WaitForShutdown for a SystemLevelReset, Pending, then Pending /
WaitingForManualPowerCycleOrReboot one reconcile after the annotation: only then does a removal
count, an earlier one re-arms it), the aggregated method on the DPUNode, the 2-hour join deadline,
the agent's `agentStatus.lastStartupTime` and the controller's copy of it, `agentLastStartupTime`
(in `DPU Config` only). With `version="26.4-rc.3"` (NICo's pin) the same without `rebootStatus`:
DPF's stamp is the `Rebooted` condition (BEHAVIOUR.md R7).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from simulators import violations as kinds
from simulators.dpf.client import Client
from simulators.dpf.model import (
    CHECKING_REBOOT,
    CLUSTER_CONFIG,
    CONFIG_FW,
    DELETING,
    DPU_CONFIG,
    DPU_FINALIZER,
    DPU_ONLY_METHODS,
    ERROR,
    HOLD_ANNOTATION,
    HOST_NETWORK,
    HOST_TRUSTED,
    INITIALIZE_INTERFACE,
    INITIALIZING,
    INSTALL_PHASES,
    MAINTENANCE_FINALIZER,
    MAX_REBOOT_SEQUENCE_COUNT,
    NEXT_PHASE,
    NEXT_PHASE_V26,
    NODE_EFFECT,
    NODE_EFFECT_REMOVAL,
    OS_INSTALLING,
    PENDING,
    PREPARE_BFB,
    READY,
    REBOOT_ANNOTATION,
    REBOOT_METHOD_PRIORITY,
    REBOOT_SYNC_DEFER,
    REBOOTING,
    SERVICE_READINESS,
    UPDATE_FIRMWARE,
    UPDATE_PHASES,
    WAITING_FOR_MANUAL,
    ZERO_TRUST,
    Object,
    annotations_of,
    condition,
    deleting,
    dpu_id_of_device,
    hold_name,
    host_of_node,
    is_true,
    now_rfc3339,
    phase,
    set_condition,
    set_dpu_conditions,
)
from simulators.dpf.objects import hold_maintenance
from simulators.dpf.timers import Timers
from simulators.events import DPUReset, Event, PowerCycled, PowerTransition
from simulators.timings import Timings
from simulators.violations import Violations

log = logging.getLogger(__name__)


@dataclass
class RebootRound:
    """One external reboot asked of a host, serving every DPU of its node in `Rebooting`."""

    requested_at: datetime
    power_cycles_before: int
    dpus: set[str] = field(default_factory=set)
    cold: bool = False  # v26: a cold reset (not ForceRestart/GracefulRestart) since it was asked


WARM_RESETS = frozenset({"ForceRestart", "GracefulRestart"})
# The DPU agent's reboot method reports after each `DPU Config` (v26), by model, then NoAction:
# one host reboot for a BF3, two for a BF4 (as the v25.10 simulation's BF4 second round).
AGENT_METHODS = {"BF3": ("PowerCycle",), "BF4": ("PowerCycle", "SystemLevelReset")}
# The agent's two ways of finding the reboot method (DPF agent `reboot.go` c=75d3fab2, BEHAVIOUR.md
# R4): `device-query` (MFT >= 4.36.0-95: mlxfwreset per device; the agent sets its condition
# `RebootMethodDiscovery=True`, so DPF comes back to `DPU Config` after the host reboot) or
# `boot-id` (older MFT: the first report is SystemLevelReset, no condition, and DPF goes on
# after the reboot without asking the agent again).
DEVICE_QUERY, BOOT_ID = "device-query", "boot-id"
REBOOT_DISCOVERIES = (DEVICE_QUERY, BOOT_ID)
BOOT_ID_METHODS = ("SystemLevelReset",)  # `getRebootMethodBootID`: not booted yet -> SystemLevelReset
DISCOVERY_CONDITION = "RebootMethodDiscovery"  # cutil.AgentCondRebootMethodDiscovery
# Phases in which the DPU agent runs (v26): a reset of the DPU restarts it.
AGENT_PHASES = frozenset(
    {DPU_CONFIG, REBOOTING, CLUSTER_CONFIG, HOST_NETWORK, NODE_EFFECT_REMOVAL, SERVICE_READINESS, READY}
)
ARM_OFF_MESSAGE = "DPU Arm reported powered off; releasing host reboot"  # redfish `rebooting.go` (R2)
LIMIT_REASON = "RebootSequenceLimitExceeded"  # our name: where DPF surfaces the agent's error is not pinned
SEQUENCE_LIMIT_MESSAGE = (
    "rebootSequenceCount limit exceeded ({count} >= {limit}) without an intervening NoAction "
    "RebootMethod; refusing further host reboot"
)


def _stamp_condition(o: Object) -> bool:
    """rc.3 Step 2 (BEHAVIOUR.md R7): a `Rebooting` DPU without a `Rebooted` condition gets
    `Rebooted=False`/`WaitingForManualPowerCycleOrReboot`."""
    if phase(o) != REBOOTING or condition(o, "Rebooted") is not None:
        return False
    return set_condition(o.setdefault("status", {}), "Rebooted", False, WAITING_FOR_MANUAL, "")


def later_than(previous: str) -> str:
    """Now (RFC 3339, seconds), or one second after `previous` where that is not earlier: a
    restarted agent's time is always newer than its last one (a real restart follows a boot of
    minutes; DPF compares the times for equality, `dpu_config.go` l.56). Ours: the simulator moves
    in less than a second."""
    now = now_rfc3339()
    if not previous or now > previous:
        return now
    try:
        then = datetime.strptime(previous, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return now
    return (then + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _stale_report(obj: Object) -> bool:
    """DPF's freshness test in `DPU Config` (`dpu_config.go` c=62099c8b l.56): the agent's start
    time equals the copy DPF took with its last report, so the report is from before the reboot."""
    status = obj.get("status") or {}
    copied = status.get("agentLastStartupTime")
    return bool(copied) and agent_status(obj).get("lastStartupTime") == copied


def _waiting_for_fresh_report(o: Object) -> bool:
    """The condition DPF sets while it waits for a fresh report (`dpu_config.go` l.57-59)."""
    message = (
        "the RebootMethod in AgentStatus is from the previous reboot, waiting for the DPU agent to "
        "report the reboot method for the current reboot"
    )
    return set_condition(
        o.setdefault("status", {}), "DPUConfig", False, "WaitingForFreshRebootMethod", message
    )


def _arm_hold(m: Object) -> bool:
    """DPF writes the missing hold annotation back as "true" (`reconcileHold`)."""
    annotations = m["metadata"].setdefault("annotations", {})
    if annotations.get(HOLD_ANNOTATION) is not None:
        return False
    annotations[HOLD_ANNOTATION] = "true"
    return True


# Go's strconv.ParseBool, which DPF's `reconcileHold` applies to the hold annotation.
_GO_TRUE, _GO_FALSE = ("1", "t", "T", "TRUE", "true", "True"), ("0", "f", "F", "FALSE", "false", "False")


def hold_verdict(value: str | None) -> str:
    """What DPF does with a not yet applied hold whose annotation reads `value` (None: absent).

    DPF `internal/provisioning/controllers/dpunodemaintenance/dpunodemaintenance_controller.go`
    `reconcileHold` (@1f7af1ed, index id 57664575831; DOMAIN.md 2.4): "arm" (absent: DPF writes
    "true" and waits), "hold" (a true value), "release" (a false value: "false", "0", "f", ...),
    "error" (no boolean: `NodeEffectApplied=False`, reason `Error`, and no release).
    """
    if value is None:
        return "arm"
    if value in _GO_TRUE:
        return "hold"
    if value in _GO_FALSE:
        return "release"
    return "error"


def after_host_reboot(previous: str, discovery_true: bool, after_agent: str) -> str:
    """The phase a v26 DPU goes to once its host reboot is done (DPF `rebooting.go` c=c406f0c5
    `reconcileHostRebootPhase`, first match wins): back to `Initialize Interface` when the reboot
    came from there; back to `DPU Config` when it came from there AND the agent's
    `RebootMethodDiscovery` condition is True (device-query discovery); else on, to
    `after_agent` (`DPU Cluster Config` zero trust, `Host Network Configuration` host trusted),
    which is where a boot-ID discovery's reboot from `DPU Config` goes (BEHAVIOUR.md R4)."""
    if previous == INITIALIZE_INTERFACE:
        return INITIALIZE_INTERFACE
    if previous == DPU_CONFIG and discovery_true:
        return DPU_CONFIG
    return after_agent


def arm_powered_off(power_state: str, status_state: str) -> bool:
    """DPF's test of a DPU BMC's System in WaitForShutdown (redfish `rebooting.go`
    `isDPUArmPoweredOff`): `PowerState` `Paused` or `Off`, or `Status.State` `StandbyOffline`."""
    return power_state in ("Paused", "Off") or status_state == "StandbyOffline"


def go_duration(seconds: float) -> str:
    """`seconds` as Go's `time.Duration.String` writes whole seconds: 300 -> "5m0s", 2 -> "2s"."""
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


def discovery_true(obj: Object) -> bool:
    """The agent's `RebootMethodDiscovery` condition is True (`agentStatus.conditions`)."""
    conds = agent_status(obj).get("conditions") or []
    return any(c.get("type") == DISCOVERY_CONDITION and c.get("status") == "True" for c in conds)


def agent_status(obj: Object) -> Object:
    """The DPU's `status.agentStatus` as it is (the agent's own report), or {}."""
    return dict((obj.get("status") or {}).get("agentStatus") or {})


def agent_started(agent: Object, started: str, *, device_query: bool) -> Object:
    """The agent's status once it started (BEHAVIOUR.md A3, R4): its start time, and with device
    query its `RebootMethodDiscovery=True` condition, reason NoAction, no message. Upstream the
    agent runs every operation on each start (`dpuagent.go` `Run`), `HandleReboot` among them,
    whose device query marks the condition first of all (`reboot.go` c=75d3fab2
    `getRebootMethodDeviceQuery`: "Mark device-query mode early"); the report then names the
    method (`_agent_report`). Boot ID sets no condition. Conditions merge (`updateStatus`:
    `meta.SetStatusCondition`), so one set at an earlier start stays."""
    out = {**agent, "lastStartupTime": started}
    if device_query:
        set_condition(out, DISCOVERY_CONDITION, True, "NoAction", "")
    return out


class Provisioner:
    """Moves DPUs through their phases; one instance per controller."""

    def __init__(
        self,
        client: Client,
        timings: Timings,
        violations: Violations,
        models: Mapping[str, str],
        on_gone: Callable[[Object], None],
        version: str = "25.10",
        deployment_mode: str = ZERO_TRUST,
        reboot_discovery: str = DEVICE_QUERY,
    ) -> None:
        self.client = client
        self.timings = timings
        self.violations = violations
        self.models = models  # DPU id -> "BF3" | "BF4"
        self.on_gone = on_gone
        self.timers = Timers()
        self.dpus_by_node: dict[str, set[str]] = defaultdict(set)
        self.device_of: dict[str, str] = {}
        self.node_of: dict[str, str] = {}
        self.waiting_for_bfb: set[str] = set()
        self.services_down: set[str] = set()
        self.reboots_done: dict[str, int] = {}  # by DPU uid: a recreated DPU starts again
        self.rounds: dict[str, RebootRound] = {}
        self.power_cycles: dict[str, int] = defaultdict(int)
        self.last_power_cycle: dict[str, datetime] = {}
        # (host, DPUNode, when) for each reboot DPF asks for: the benchmarks' reaction times.
        self.on_reboot_asked: Callable[[str, str, datetime], None] | None = None
        self.v26 = version in ("26", "26.4-rc.3")
        # v26.4.0-rc.3 (NICo's pin): no rebootStatus; DPF's stamp is the `Rebooted` condition
        # (BEHAVIOUR.md R7), no WaitForShutdown, no DPUNode status.rebootMethod, no Update
        # Firmware or Service Readiness phase.
        self.rc3 = version == "26.4-rc.3"
        # v26: after the agent's NoAction and after a host reboot a host-trusted DPF configures
        # the host network first, a zero-trust one joins the cluster (BEHAVIOUR.md P1).
        self.after_agent = HOST_NETWORK if deployment_mode == HOST_TRUSTED else CLUSTER_CONFIG
        # v26 (not rc.3): the DPU's `status.deploymentMode` (BEHAVIOUR.md Z1); 25.10 has none.
        self.deployment_mode = deployment_mode if version == "26" else ""
        # v26: how the agent finds the reboot method (BEHAVIOUR.md R4): device-query or boot-id.
        self.boot_id = reboot_discovery == BOOT_ID
        # v26 WaitForShutdown (BEHAVIOUR.md R2): the DPU BMC's System (PowerState, Status.State)
        # by DPU id, None without one (set by the site); the agent's shutdown, published to the
        # DPU BMCs (by DPU id); when each DPU's wait began (by uid); DPUs whose Arm does not
        # go down (the fault `arm-shutdown-hangs`).
        self.arm_state: Callable[[str], tuple[str, str] | None] | None = None
        self.on_arm_shutdown: Callable[[str], None] | None = None
        self.shutdown_since: dict[str, float] = {}
        self.arm_shutdown_hangs: set[str] = set()
        self.on_ready: Callable[[Object], None] | None = None  # a DPU reached Ready (RollingUpdate)
        # v26: the agent's reports still to come (by DPU uid), faults replacing them (by name),
        # each DPU's rebootSequenceCount, and DPUs whose cluster-join secret expired.
        self.agent_methods: dict[str, list[str]] = {}
        self.agent_faults: dict[str, list[str]] = {}
        self.sequence_counts: dict[str, int] = {}
        self.join_expired: set[str] = set()
        self.detours: dict[str, tuple[str, float]] = {}  # DPU name -> (phase, seconds): a fault
        # A fault (ours, BEHAVIOUR.md A4): DPUs a warm host reset does not reach; and the reset
        # type of each host's last power-off.
        self.warm_reset_ignored: set[str] = set()
        self.last_off_reset: dict[str, str] = {}
        self.install_failures: set[str] = set()  # DPU names whose next install fails (a fault)
        self._syncing = False

    # -- events ---------------------------------------------------------------------------------
    def on_dpu(self, event: str, obj: Object) -> None:
        name = obj["metadata"]["name"]
        if event == "DELETED":
            self._forget(obj)
            self.on_gone(obj)
            return
        spec = obj.get("spec") or {}
        node, device = spec.get("dpuNodeName", ""), spec.get("dpuDeviceName", "")
        self.node_of[name], self.device_of[name] = node, device
        self.dpus_by_node[node].add(name)
        self.reconcile(name)

    def on_node(self, obj: Object) -> None:
        self._check_round(obj["metadata"]["name"])

    def on_node_gone(self, node: str) -> None:
        self.rounds.pop(node, None)

    def on_maintenance(self, event: str, obj: Object) -> None:
        name = obj["metadata"]["name"]
        if event != "DELETED" and deleting(obj):
            # A client deleted the hold: let it go; waiting DPUs create a fresh one.
            self.client.remove_finalizer(self.client.maintenance, name, MAINTENANCE_FINALIZER)
            return
        node = (obj.get("spec") or {}).get("dpuNodeName", "")
        for dpu in list(self.dpus_by_node.get(node, ())):
            self.reconcile(dpu)

    def on_bfb_ready(self, bfb: str) -> None:
        for dpu in list(self.waiting_for_bfb):
            self.reconcile(dpu)

    def on_power_event(self, event: Event) -> None:
        if isinstance(event, DPUReset):
            self.on_dpu_reset(event)
        elif isinstance(event, PowerCycled):
            self.power_cycles[event.host_id] += 1
            self.last_power_cycle[event.host_id] = event.time
            warm = self.last_off_reset.get(event.host_id, "") in WARM_RESETS
            if self.v26:
                for name in sorted(self.dpus_by_node.get(f"node-{event.host_id}", ())):
                    if not (warm and name in self.warm_reset_ignored):  # the fault (BEHAVIOUR.md A4)
                        self._agent_restarted(name)
        elif (
            isinstance(event, PowerTransition)
            and event.to_state.lower() == "off"
            and event.from_state.lower() != "off"
        ):
            self.last_off_reset[event.host_id] = event.reset_type or ""
            current = self.rounds.get(f"node-{event.host_id}")
            if current is not None and (event.reset_type or "") not in WARM_RESETS:
                current.cold = True
            self._check_power_off(event)

    # -- the state machine ----------------------------------------------------------------------
    def reconcile(self, name: str) -> None:
        obj = self.client.get(self.client.dpu, name)
        if obj is None:
            return
        if deleting(obj):
            self._deleting(obj)
            return
        current = phase(obj)
        uid = obj["metadata"]["uid"]
        if current != PENDING:
            self.waiting_for_bfb.discard(name)
        if not current:
            self.set_phase(name, uid, INITIALIZING)
        elif current == PENDING:
            if self._bfb_ready(obj["spec"].get("bfb", "")):
                self.waiting_for_bfb.discard(name)
                self._after_delay(name, uid, PENDING, NODE_EFFECT)
            else:
                self.waiting_for_bfb.add(name)
        elif current == NODE_EFFECT:
            if name not in self.services_down and self._node_effect_released(obj):
                self._after_delay(name, uid, NODE_EFFECT, INITIALIZE_INTERFACE)
        elif current == REBOOTING:
            self._join_reboot(obj)
        elif self.v26:
            self._reconcile_v26(obj, name, uid, current)
        elif current in NEXT_PHASE:
            self._after_delay(name, uid, current, NEXT_PHASE[current])
        # Ready, Error, Deleting and phases this simulator does not drive: nothing to do.

    def _reconcile_v26(self, obj: Object, name: str, uid: str, current: str) -> None:
        if current == INITIALIZE_INTERFACE:
            self._after_delay(name, uid, current, CONFIG_FW)
        elif current == CONFIG_FW:  # DPF flashes a BF4's firmware after it (BEHAVIOUR.md P1)
            model = self.models.get(dpu_id_of_device(obj["spec"].get("dpuDeviceName", "")), "BF3")
            bf4_firmware = model == "BF4" and not self.rc3  # rc.3 has no Update Firmware phase
            self._after_delay(name, uid, current, UPDATE_FIRMWARE if bf4_firmware else PREPARE_BFB)
        elif current == DPU_CONFIG:
            refused = condition(obj, "DPUConfig")
            if _stale_report(obj):  # DPF waits for the agent to start again (A4)
                self.client.mutate(self.client.dpu, name, _waiting_for_fresh_report, status=True)
                return  # the agent's new start time reconciles it again
            if refused is None or refused.get("reason") != LIMIT_REASON:
                report = lambda: self._agent_report(name, uid)  # noqa: E731
                self.timers.start(name, (uid, current), self.timings.dpu_phase_seconds, report)
        elif current == CLUSTER_CONFIG and uid in self.join_expired:
            return  # the join secret expired: DPF leaves it here (ZT-doc); no condition says so
        elif current == CLUSTER_CONFIG and self.rc3:
            self._after_delay(name, uid, current, NODE_EFFECT_REMOVAL)  # rc.3 has no Service Readiness
        elif current in NEXT_PHASE_V26:
            self._after_delay(name, uid, current, NEXT_PHASE_V26[current])

    def _after_delay(self, name: str, uid: str, current: str, target: str) -> None:
        self.timers.start(
            name,
            (uid, current),
            self.timings.dpu_phase_seconds,
            lambda: self._advance(name, uid, current, target),
        )

    def _advance(self, name: str, uid: str, current: str, target: str) -> None:
        obj = self.client.get(self.client.dpu, name)
        if obj is None or obj["metadata"]["uid"] != uid or phase(obj) != current or deleting(obj):
            return
        node = obj["spec"]["dpuNodeName"]
        if target == INITIALIZE_INTERFACE:
            self._maintenance_status(node, applied=True)
        extra: Object = {}
        if target == PREPARE_BFB:
            extra["bfbFile"] = f"/bfb/{self.client.namespace}-{obj['spec'].get('bfb', '')}.bfb"
        if self.v26 and target == DPU_CONFIG:  # the installed OS boots its agent (BEHAVIOUR.md A3, R4)
            extra["agentStatus"] = agent_started(
                agent_status(obj), now_rfc3339(), device_query=not self.boot_id
            )
        if current == OS_INSTALLING and name in self.install_failures:
            # Fault `install-fails` (BEHAVIOUR.md E1): the BFB never made it onto the DPU.
            from simulators.dpf.faults import fail_install

            self.install_failures.discard(name)
            fail_install(self, name)
            return
        detour = self.detours.pop(name, None)
        if detour is not None:
            # A fault: a phase this DPF build passes through that the client may not know.
            detour_phase, seconds = detour
            if self.set_phase(name, uid, detour_phase) is None:
                return
            self.timers.start(
                name, (uid, detour_phase), seconds, lambda: self._advance(name, uid, detour_phase, target)
            )
            return
        if self.set_phase(name, uid, target, extra=extra) is None:
            return
        if target == NODE_EFFECT_REMOVAL:
            self._leave_maintenance(node, name)
        self.reconcile(name)

    def set_phase(
        self,
        name: str,
        uid: str,
        target: str,
        *,
        reason: str = "",
        message: str = "",
        extra: Object | None = None,
    ) -> Object | None:
        """Write the DPU's phase and the conditions that go with it (status subresource)."""

        def change(obj: Object) -> bool:
            if obj["metadata"]["uid"] != uid:
                return False
            status = obj.setdefault("status", {})
            generation = obj["metadata"].get("generation")
            if self.v26 and status.get("phase") and status.get("phase") != target:
                status["previousPhase"] = status["phase"]
            status["phase"] = target
            status["observedGeneration"] = generation
            status.setdefault("dpuInstallInterface", "redfish")
            status.setdefault("dpuMode", "dpu")
            if self.deployment_mode:
                status.setdefault("deploymentMode", self.deployment_mode)
            status.update(extra or {})
            if self.rc3 and target == REBOOTING:  # each host reboot cycle starts without it (R7)
                status["conditions"] = [
                    c for c in status.get("conditions") or [] if c.get("type") != "Rebooted"
                ]
            set_dpu_conditions(status, target, generation, v26=self.v26)
            if target == ERROR:
                set_condition(status, "Ready", False, reason or "Error", message, generation)
            elif target == NODE_EFFECT and reason:
                set_condition(status, "NodeEffectReady", False, "NodeEffectInProgress", message, generation)
                set_condition(status, "Ready", False, reason, message, generation)
            elif target == DELETING:
                set_condition(status, "Ready", False, "Deleting", "DPU is being deleted", generation)
            return True

        written = self.client.mutate(self.client.dpu, name, change, status=True)
        if written is not None and written["metadata"]["uid"] == uid:
            node = self.node_of.get(name) or written["spec"]["dpuNodeName"]
            self.refresh_node(node)
            if self.v26:
                self._sync_reboots(node)
            if target == READY and self.on_ready is not None:
                self.on_ready(written)
            return written
        return None

    # -- hold -----------------------------------------------------------------------------------
    def _node_effect_released(self, obj: Object) -> bool:
        if not (obj["spec"].get("nodeEffect") or {}).get("hold"):
            return True  # DPF applies other node effects itself
        node, name = obj["spec"]["dpuNodeName"], obj["metadata"]["name"]
        maintenance = self.client.get(self.client.maintenance, hold_name(node))
        if maintenance is None:
            created = self.client.create(self.client.maintenance, hold_maintenance(node, name))
            if created is not None:
                self._maintenance_status(node, applied=False)
            return False
        if deleting(maintenance):
            return False

        def add_requestor(m: Object) -> bool:
            requestors = m["spec"].get("requestor") or []
            if name in requestors:
                return False
            m["spec"]["requestor"] = [*requestors, name]
            return True

        self.client.mutate(self.client.maintenance, hold_name(node), add_requestor)
        if is_true(maintenance, "NodeEffectApplied"):
            return True  # "If node effect is already applied, return": the annotation no longer counts
        value = annotations_of(maintenance).get(HOLD_ANNOTATION)
        verdict = hold_verdict(value)
        if verdict == "arm":
            self.client.mutate(self.client.maintenance, hold_name(node), _arm_hold)
        elif verdict == "error":
            self._maintenance_error(node, f'strconv.ParseBool: parsing "{value}": invalid syntax')
        return verdict == "release"

    def _maintenance_error(self, node: str, error: str) -> None:
        def change(m: Object) -> bool:
            status = m.setdefault("status", {})
            return set_condition(status, "NodeEffectApplied", False, "Error", f"Error occurred: {error}")

        self.client.mutate(self.client.maintenance, hold_name(node), change, status=True)

    def _maintenance_status(self, node: str, *, applied: bool) -> None:
        def change(m: Object) -> bool:
            status = m.setdefault("status", {})
            if applied:
                return set_condition(status, "NodeEffectApplied", True, "NodeEffectApplied", "")
            message = (
                "Node effect is being applied: DPUNodeMaintenance is in waiting for external node effect"
            )
            return set_condition(status, "NodeEffectApplied", False, "NodeEffectIsProcessing", message)

        self.client.mutate(self.client.maintenance, hold_name(node), change, status=True)

    def _leave_maintenance(self, node: str, dpu: str) -> None:
        """Drop a DPU from the hold's requestors; the last one out deletes the hold."""

        def drop(m: Object) -> bool:
            requestors = m["spec"].get("requestor") or []
            if dpu not in requestors:
                return False
            m["spec"]["requestor"] = [r for r in requestors if r != dpu]
            return True

        maintenance = self.client.mutate(self.client.maintenance, hold_name(node), drop)
        if maintenance is not None and not maintenance["spec"].get("requestor"):
            self.client.remove_finalizer(self.client.maintenance, hold_name(node), MAINTENANCE_FINALIZER)
            self.client.delete(self.client.maintenance, hold_name(node))

    # -- external reboot ------------------------------------------------------------------------
    def _join_reboot(self, obj: Object) -> None:
        name, node = obj["metadata"]["name"], obj["spec"]["dpuNodeName"]
        self._check_round(node)  # an annotation removed but not yet seen completes first
        current = self.rounds.get(node)
        if current is None:
            if self.client.get(self.client.dpunode, node) is None:
                return
            if self.v26 and self._sync_deferred(node, name):
                return  # a sibling still installs: DPF waits (`HandleRebootSync`); its change re-checks
            host = host_of_node(node)
            current = self.rounds[node] = RebootRound(datetime.now(UTC), self.power_cycles[host])

            def ask(n: Object) -> bool:
                if REBOOT_ANNOTATION in annotations_of(n):
                    return False
                n["metadata"]["annotations"] = {**annotations_of(n), REBOOT_ANNOTATION: "true"}
                return True

            current.dpus.add(name)
            if self.rc3:  # DPF stamps the Rebooting DPUs, then sets the annotation (R7)
                self._stamp(node)
            self.client.mutate(self.client.dpunode, node, ask)
            log.info("DPU %s asks for an external reboot of %s", name, node)
            if self.on_reboot_asked is not None:
                self.on_reboot_asked(host, node, current.requested_at)
        current.dpus.add(name)
        self.refresh_node(node)
        if self.v26:
            # Step 2 happens at a later reconcile, never in the one that set the annotation (R3);
            # rc.3 stamps a DPU that joins the round already asked for at a later reconcile (R7).
            self.timers.start(
                ("stamp", node, name), current.requested_at, self.timings.reboot_stamp_seconds,
                lambda: self._stamp(node),
            )  # fmt: skip

    def _sync_deferred(self, node: str, name: str) -> bool:
        """v26: on a multi-DPU node, a sibling in an install phase defers the annotation."""
        siblings = [d for d in self.dpus_by_node.get(node, ()) if d != name]
        for sibling in siblings:
            obj = self.client.get(self.client.dpu, sibling)
            if obj is not None and phase(obj) in REBOOT_SYNC_DEFER:
                return True
        return False

    def _sync_reboots(self, node: str) -> None:
        """v26: a DPU of the node changed phase: Rebooting DPUs DPF deferred may go on now, ALL
        of them: DPF's round is every `Rebooting` DPU of the node (`HandleRebootSync` ->
        `GetDPUsWithPhase(DPURebooting)`; Step 2 stamps each, BEHAVIOUR.md R1, R3). Until issue
        36ae only the first to join went in: a sibling that reached `Rebooting` while the
        deferral held was left out of the round, never stamped, and nothing reconciled it again."""
        if self._syncing or node in self.rounds:
            return
        self._syncing = True
        try:
            for name in sorted(self.dpus_by_node.get(node, ())):
                obj = self.client.get(self.client.dpu, name)
                if obj is not None and phase(obj) == REBOOTING and not deleting(obj):
                    self._join_reboot(obj)
                    if node not in self.rounds:
                        return  # still deferred: a sibling installs
        finally:
            self._syncing = False

    def _stamp(self, node: str) -> None:
        """v26 Step 2: every DPU of the round whose Arm is down waits for the manual reboot."""
        current = self.rounds.get(node)
        if current is None:
            return
        if self.rc3:
            for name in sorted(current.dpus):
                self.client.mutate(self.client.dpu, name, _stamp_condition, status=True)
            return
        for name in sorted(current.dpus):

            def change(o: Object) -> bool:
                status = o.setdefault("status", {})
                reboot = dict(status.get("rebootStatus") or {})
                if (
                    phase(o) != REBOOTING
                    or reboot.get("phase") != "Pending"
                    or reboot.get("reason") == WAITING_FOR_MANUAL
                ):
                    return False
                status["rebootStatus"] = {
                    **reboot, "reason": WAITING_FOR_MANUAL,
                    "message": "waiting for manual power cycle or reboot",
                    "lastTransitionTime": now_rfc3339(),
                }  # fmt: skip
                set_condition(
                    status, "Rebooted", False, WAITING_FOR_MANUAL, "waiting for manual power cycle or reboot"
                )
                return True

            self.client.mutate(self.client.dpu, name, change, status=True)

    def aggregated_method(self, names: set[str]) -> tuple[str, str]:
        """The priority winner of the DPUs' `rebootStatus.method` (rc.3: the agent's method), and
        the DPU that drives it."""
        best, driver = len(REBOOT_METHOD_PRIORITY) - 1, ""
        for name in sorted(names):
            status = ((self.client.get(self.client.dpu, name) or {}).get("status")) or {}
            reported = (status.get("agentStatus") or {}).get("rebootMethod", "Unknown")
            method = (status.get("rebootStatus") or {}).get("method", reported)
            rank = REBOOT_METHOD_PRIORITY.index(method) if method in REBOOT_METHOD_PRIORITY else best
            if rank < best or not driver:
                best, driver = min(rank, best), name
        return REBOOT_METHOD_PRIORITY[best], driver

    # -- v26: the DPU agent ----------------------------------------------------------------------
    def _agent_report(self, name: str, uid: str) -> None:
        """The DPU agent reports the reboot method it found (DPF `dpu_config.go`, agent
        `checkRebootSequenceCount`): NoAction moves on and resets the count, FirmwareReset/
        DPUWarmReboot reboot the DPU alone, any other method asks for a host reboot; every method
        but NoAction counts, at most `MAX_REBOOT_SEQUENCE_COUNT` in one sequence."""
        obj = self.client.get(self.client.dpu, name)
        if obj is None or obj["metadata"]["uid"] != uid or phase(obj) != DPU_CONFIG or deleting(obj):
            return
        model = self.models.get(dpu_id_of_device(obj["spec"].get("dpuDeviceName", "")), "BF3")
        if uid not in self.agent_methods:
            first = BOOT_ID_METHODS if self.boot_id else AGENT_METHODS.get(model, AGENT_METHODS["BF3"])
            self.agent_methods[uid] = list(first)
        if name in self.agent_faults:
            self.agent_methods[uid] = self.agent_faults.pop(name)
        remaining = self.agent_methods[uid]
        method = remaining.pop(0) if remaining else "NoAction"
        count = self.sequence_counts.get(uid, 0)
        now = now_rfc3339()
        # The controller takes a fresh report and copies the agent's start time into
        # `agentLastStartupTime`, here and nowhere else (DPF `dpu_config.go` l.63: BEHAVIOUR.md A3).
        reported = agent_status(obj)
        if _stale_report(obj):  # the agent did not start since the last report DPF took (A4)
            self.client.mutate(self.client.dpu, name, _waiting_for_fresh_report, status=True)
            return
        if (condition(obj, "DPUConfig") or {}).get("reason") == "WaitingForFreshRebootMethod":
            # DPF takes the fresh report: its condition names the method (`dpu_config.go` l.73)
            taken = lambda o: set_condition(o.setdefault("status", {}), "DPUConfig", True, method, "")  # noqa: E731
            self.client.mutate(self.client.dpu, name, taken, status=True)
        started = reported.get("lastStartupTime") or now
        copied = {"agentLastStartupTime": started}
        if not self.boot_id:  # device-query: the agent says so on every report (`reboot.go`
            # `setRebootMethodDiscoveryCondition`, reason the method); boot-ID sets no condition
            reported = {**reported}
            set_condition(reported, DISCOVERY_CONDITION, True, method, "")
        if method == "NoAction":  # resets the count: the sequence ends (A1)
            self.sequence_counts[uid] = 0
            agent = {**reported, "rebootMethod": method, "rebootSequenceCount": 0, "lastStartupTime": started}
            self.set_phase(name, uid, self.after_agent, extra={"agentStatus": agent, **copied})
            self.reconcile(name)
            return
        # Every other method counts, the DPU's own reboots too, and at the cap the agent refuses
        # (DPF agent `reboot.go` c=75d3fab2 `checkRebootSequenceCount`: A1, A2).
        agent = {**reported, "rebootMethod": method, "rebootSequenceCount": count}
        if count >= MAX_REBOOT_SEQUENCE_COUNT:
            message = SEQUENCE_LIMIT_MESSAGE.format(count=count, limit=MAX_REBOOT_SEQUENCE_COUNT)

            def refuse(o: Object) -> bool:
                status = o.setdefault("status", {})
                status["agentStatus"] = {**(status.get("agentStatus") or {}), **agent}
                set_condition(status, "DPUConfig", False, LIMIT_REASON, message)
                return True

            self.client.mutate(self.client.dpu, name, refuse, status=True)
            log.info("DPU %s: %s", name, message)
            return
        count += 1
        self.sequence_counts[uid] = count
        if method in DPU_ONLY_METHODS:  # FirmwareReset/DPUWarmReboot: the DPU reboots itself,
            # its agent starts again and reports again; the phase stays DPU Config
            agent = {**agent, "rebootSequenceCount": count, "lastStartupTime": later_than(started)}
            self._write_status(name, uid, {"agentStatus": agent, **copied})
            self.timers.start(
                name, (uid, DPU_CONFIG, len(remaining)), self.timings.dpu_phase_seconds,
                lambda: self._agent_report(name, uid),
            )  # fmt: skip
            return
        shutdown = method == "SystemLevelReset" and not self.rc3  # rc.3 has no WaitForShutdown
        reboot = {
            "phase": "WaitForShutdown" if shutdown else "Pending",
            "method": method,
            # DPF redfish `rebooting.go` `reconcileWaitForArmShutdown` (BEHAVIOUR.md R2)
            "reason": "WaitingForDPUArmShutdown" if shutdown else "RebootRequested",
            "message": "waiting for DPU Arm to power off after System Level Reset shutdown" if shutdown
            else "reboot requested and pending execution",
            "lastTransitionTime": now,
        }  # fmt: skip
        written = self.set_phase(
            name, uid, REBOOTING, extra={"agentStatus": {**agent, "rebootSequenceCount": count},
                                        "rebootStatus": reboot, **copied},
        )  # fmt: skip
        if written is None:
            return
        self._mirror_reboot_status(name, uid)
        if shutdown:
            self.shutdown_since[uid] = time.monotonic()
            self.timers.start(
                ("shutdown", name), uid, self.timings.arm_shutdown_seconds,
                lambda: self._agent_shut_down(name, uid, obj),
            )  # fmt: skip
        self.reconcile(name)

    def _agent_shut_down(self, name: str, uid: str, obj: Object) -> None:
        """The agent's `shutdown -h now` took the Arm down (its BMC shows it: `ArmShutdown`),
        unless the fault `arm-shutdown-hangs` holds it; then DPF reads the DPU BMC (R2)."""
        if name not in self.arm_shutdown_hangs and self.on_arm_shutdown is not None:
            self.on_arm_shutdown(dpu_id_of_device(obj["spec"].get("dpuDeviceName", "")))
        self._read_arm(name, uid)

    def _read_arm(self, name: str, uid: str) -> None:
        """DPF in WaitForShutdown reads the DPU BMC's System (DPF redfish `rebooting.go`
        `reconcileWaitForArmShutdown`): the Arm off (`isDPUArmPoweredOff`) releases the gate;
        after `arm_shutdown_timeout_seconds` it is released anyway; else it reads again. Without
        a DPU BMC to read (a site without one, or the controller alone) the agent's own
        shutdown is the signal (ours)."""
        obj = self.client.get(self.client.dpu, name)
        reboot = ((obj or {}).get("status") or {}).get("rebootStatus") or {}
        if obj is None or obj["metadata"]["uid"] != uid or reboot.get("phase") != "WaitForShutdown":
            self.shutdown_since.pop(uid, None)
            return
        dpu_id = dpu_id_of_device(obj["spec"].get("dpuDeviceName", ""))
        read = self.arm_state(dpu_id) if self.arm_state is not None else None
        if read is None:
            read = ("On", "Enabled") if name in self.arm_shutdown_hangs else ("Off", "StandbyOffline")
        power, state = read
        if arm_powered_off(power, state):
            self._arm_down(name, uid, "DPUArmPoweredOff", ARM_OFF_MESSAGE)
            return
        waited = time.monotonic() - self.shutdown_since.get(uid, time.monotonic())
        limit = self.timings.arm_shutdown_timeout_seconds
        if waited > limit:
            self._arm_down(
                name, uid, "DPUArmShutdownWaitTimeout",
                f"timed out after {go_duration(limit)} waiting for DPU Arm to power off (last PowerState "
                f"{power!r}, Status.State {state!r}); proceeding with host reboot".replace("'", '"'),
            )  # fmt: skip
            return
        poll = self.timings.arm_poll_seconds
        self.timers.start(("shutdown", name), (uid, waited), poll, lambda: self._read_arm(name, uid))

    def _arm_down(self, name: str, uid: str, reason: str, message: str) -> None:
        """DPF releases its gate (WaitForShutdown -> Pending): the host reboot may go ahead."""
        self.shutdown_since.pop(uid, None)

        def change(o: Object) -> bool:
            reboot = dict((o.get("status") or {}).get("rebootStatus") or {})
            if o["metadata"]["uid"] != uid or reboot.get("phase") != "WaitForShutdown":
                return False
            o["status"]["rebootStatus"] = {  # DPF releases its gate so (BEHAVIOUR.md R2)
                **reboot, "phase": "Pending", "reason": reason, "message": message,
                "lastTransitionTime": now_rfc3339(),
            }  # fmt: skip
            return True

        self.client.mutate(self.client.dpu, name, change, status=True)
        self._mirror_reboot_status(name, uid)
        node = self.node_of.get(name, "")
        if node in self.rounds:
            self._stamp(node)

    def _mirror_reboot_status(self, name: str, uid: str) -> None:
        """`Rebooted=False` with the reason of a pending `rebootStatus` (DPF: "DPU controller
        derives user-facing DPUCondRebooted from this status"; Pending/Failed copied with their
        reason, `rebooting.go`)."""

        def change(o: Object) -> bool:
            reboot = (o.get("status") or {}).get("rebootStatus") or {}
            if o["metadata"]["uid"] != uid or reboot.get("phase") not in ("WaitForShutdown", "Pending"):
                return False
            reason, message = reboot.get("reason", ""), reboot.get("message", "")
            return set_condition(o["status"], "Rebooted", False, reason, message)

        self.client.mutate(self.client.dpu, name, change, status=True)

    def _write_status(self, name: str, uid: str, fields: Object) -> None:
        def change(o: Object) -> bool:
            if o["metadata"]["uid"] != uid:
                return False
            o.setdefault("status", {}).update(fields)
            return True

        self.client.mutate(self.client.dpu, name, change, status=True)

    def on_dpu_reset(self, event: DPUReset) -> None:
        """v26: a DPU reset restarts its agent (`agentStatus.lastStartupTime`), whoever reset it."""
        if not self.v26:
            return
        name = next((n for n, d in self.device_of.items() if d == f"device-{event.dpu_id}"), None)
        if name is not None:
            self._agent_restarted(name)

    def _agent_restarted(self, name: str) -> None:
        """The agent starts again and writes its own `agentStatus.lastStartupTime` (BEHAVIOUR.md
        A3); `agentLastStartupTime` stays: DPF copies it only in `DPU Config` (`_agent_report`)."""
        obj = self.client.get(self.client.dpu, name)
        if obj is None or deleting(obj) or phase(obj) not in AGENT_PHASES:
            return
        previous = agent_status(obj).get("lastStartupTime") or ""
        started = agent_started(agent_status(obj), later_than(previous), device_query=not self.boot_id)
        self._write_status(name, obj["metadata"]["uid"], {"agentStatus": started})

    def _check_round(self, node: str) -> None:
        current = self.rounds.get(node)
        if current is None:
            return
        obj = self.client.get(self.client.dpunode, node)
        if obj is None:
            del self.rounds[node]
            return
        if REBOOT_ANNOTATION in annotations_of(obj):
            return
        if self.v26 and self._rearm_if_early(node, current):
            return
        del self.rounds[node]
        host = host_of_node(node)
        if self.power_cycles[host] <= current.power_cycles_before:
            last = self.last_power_cycle.get(host)
            self.violations.record(
                kinds.REBOOT_ANNOTATION_REMOVED_WITHOUT_POWER_CYCLE,
                node,
                f"{REBOOT_ANNOTATION} was removed from DPUNode {node} without a power cycle of host {host} "
                f"since it was set at {current.requested_at.isoformat()} "
                f"(last power cycle: {last.isoformat() if last else 'never'}); DPUs {sorted(current.dpus)} "
                "continue as if rebooted",
            )
        elif self.v26:
            method, driver = self.aggregated_method(current.dpus)
            if method == "PowerCycle" and not current.cold:
                self.violations.record(
                    kinds.REBOOT_METHOD_NOT_MET,
                    node,
                    f"DPF asked DPUNode {node} for reboot method PowerCycle (driven by DPU {driver}), "
                    f"but host {host} was only warm-reset (ForceRestart/GracefulRestart) since "
                    f"{current.requested_at.isoformat()}",
                )
        if self.v26 and (datetime.now(UTC) - current.requested_at).total_seconds() > (
            self.timings.join_deadline_seconds
        ):
            for dpu in current.dpus:
                found = self.client.get(self.client.dpu, dpu)
                if found is not None:
                    self.join_expired.add(found["metadata"]["uid"])
            log.info("the reboot of %s came after the join deadline: its DPUs stay in DPU Cluster Config",
                     node)  # fmt: skip
        for dpu in sorted(current.dpus):
            self._rebooted(dpu)
        self.refresh_node(node)

    def _rearm_if_early(self, node: str, current: RebootRound) -> bool:
        """v26: a removal before every rebooting DPU was stamped (Step 2) is undone: DPF's next
        Step 1 sees the key absent and sets it again (DPF `processExternalReboot`)."""
        early = []
        for name in sorted(current.dpus):
            obj = self.client.get(self.client.dpu, name)
            if obj is None or phase(obj) != REBOOTING or deleting(obj):
                continue
            reboot = (obj.get("status") or {}).get("rebootStatus") or {}
            if self.rc3:  # rc.3: any `Rebooted` condition counts (DPF's `condExists`, R7)
                if condition(obj, "Rebooted") is None:
                    early.append(f"{name} (no Rebooted condition)")
            elif not (reboot.get("phase") == "Pending" and reboot.get("reason") == WAITING_FOR_MANUAL):
                early.append(f"{name} ({reboot.get('phase', 'no rebootStatus')})")
        if not early:
            return False

        def ask(n: Object) -> bool:
            if REBOOT_ANNOTATION in annotations_of(n):
                return False
            n["metadata"]["annotations"] = {**annotations_of(n), REBOOT_ANNOTATION: "true"}
            return True

        self.client.mutate(self.client.dpunode, node, ask)
        host = host_of_node(node)
        self.violations.record(
            kinds.REBOOT_ANNOTATION_REMOVED_EARLY,
            node,
            f"{REBOOT_ANNOTATION} was removed from DPUNode {node} before DPF stamped "
            f"{', '.join(early)} Pending/{WAITING_FOR_MANUAL}; DPF set it again: host {host} needs "
            "another reboot",
        )
        current.power_cycles_before = self.power_cycles[host]
        current.cold = False
        return True

    def _rebooted(self, name: str) -> None:
        obj = self.client.get(self.client.dpu, name)
        if obj is None or deleting(obj) or phase(obj) != REBOOTING:
            return
        uid = obj["metadata"]["uid"]
        done = self.reboots_done[uid] = self.reboots_done.get(uid, 0) + 1
        if self.v26:
            reboot = dict((obj.get("status") or {}).get("rebootStatus") or {})
            reboot.update({"phase": "Succeeded", "reason": "Rebooted", "message": "the host was rebooted",
                           "lastTransitionTime": now_rfc3339()})  # fmt: skip
            previous = (obj.get("status") or {}).get("previousPhase") or ""
            target = after_host_reboot(previous, discovery_true(obj), self.after_agent)
            written = self.set_phase(name, uid, target, extra={"rebootStatus": reboot})
            if written is not None:

                def rebooted(o: Object) -> bool:
                    return set_condition(o.setdefault("status", {}), "Rebooted", True, "Rebooted", "")

                self.client.mutate(self.client.dpu, name, rebooted, status=True)
                self.reconcile(name)
            return
        model = self.models.get(dpu_id_of_device(obj["spec"].get("dpuDeviceName", "")), "BF3")
        target = CHECKING_REBOOT if model == "BF4" and done < 2 else CLUSTER_CONFIG
        if self.set_phase(name, uid, target) is not None:
            self.reconcile(name)

    def _check_power_off(self, event: PowerTransition) -> None:
        """A host going Off while one of its DPUs installs corrupts that install.

        The reboot DPF asks for on a multi-DPU node does not make it safe: DPF sets the
        annotation when the FIRST DPU reaches `Rebooting`, so a client that power-cycles then,
        without waiting for every DPU (the barrier), still cuts a sibling's install short.
        """
        node = f"node-{event.host_id}"
        obj = self.client.get(self.client.dpunode, node)
        asked = obj is not None and REBOOT_ANNOTATION in annotations_of(obj)
        for name in sorted(self.dpus_by_node.get(node, ())):
            dpu = self.client.get(self.client.dpu, name)
            reboot = ((dpu or {}).get("status") or {}).get("rebootStatus") or {}
            shutting_down = reboot.get("phase") == "WaitForShutdown"
            if self.v26 and dpu is not None and phase(dpu) == REBOOTING and shutting_down:
                self.violations.record(
                    kinds.HOST_RESET_DURING_ARM_SHUTDOWN,
                    event.host_id,
                    f"host {event.host_id} went {event.to_state} ({event.reset_type or 'no reset'}) "
                    f"while DPU {name}'s Arm OS was shutting down (rebootStatus WaitForShutdown, method "
                    f"{reboot.get('method')}): DPF holds the host reboot until the shutdown is done",
                )
            if dpu is not None and phase(dpu) in INSTALL_PHASES:
                why = (
                    "a reboot was asked for by another DPU of the node, but not this one"
                    if asked
                    else "no reboot was asked for"
                )
                self.violations.record(
                    kinds.POWER_CYCLE_DURING_INSTALL,
                    event.host_id,
                    f"host {event.host_id} went {event.to_state} ({event.reset_type or 'no reset'}) while "
                    f"DPU {name} was in phase {phase(dpu)!r}: {why}",
                )

    # -- node conditions ------------------------------------------------------------------------
    def refresh_node(self, node: str) -> None:
        """DPUNode conditions from its DPUs: updating (node effect applied), reboot asked."""
        phases = []
        for name in self.dpus_by_node.get(node, ()):
            dpu = self.client.get(self.client.dpu, name)
            if dpu is not None:
                phases.append(phase(dpu))
        updating = any(p in UPDATE_PHASES for p in phases)
        rebooting = node in self.rounds

        def change(n: Object) -> bool:
            if condition(n, "Ready") is None or deleting(n):
                return False  # not registered yet, or going away
            status = n.setdefault("status", {})
            changed = set_condition(
                status,
                "DPUUpdateInProgress",
                updating,
                "DPUUpdateInProgress" if updating else "DPUUpdateNotInProgress",
            )
            if rebooting and self.v26 and not self.rc3:  # rc.3: no method in it (R7)
                method, driver = self.aggregated_method(self.rounds[node].dpus)
                message = f"required reboot method: {method} (driven by DPU {driver})"
                changed |= set_condition(
                    status, "DPUNodeRebootInProgress", True, "WaitForExternalReboot", message
                )
                if status.get("rebootMethod") != method:
                    status["rebootMethod"] = method
                    changed = True
            elif rebooting:
                changed |= set_condition(
                    status,
                    "DPUNodeRebootInProgress",
                    True,
                    "WaitForExternalReboot",
                    "waiting for external reboot",
                )
            else:
                changed |= set_condition(status, "DPUNodeRebootInProgress", False, "NoRebootInProgress")
            if updating:
                changed |= set_condition(
                    status, "Ready", False, "NodeEffectInProgress", "node effect is in progress"
                )
            else:
                changed |= set_condition(status, "Ready", True, "Success")
            return changed

        self.client.mutate(self.client.dpunode, node, change, status=True)

    # -- deletion -------------------------------------------------------------------------------
    def _deleting(self, obj: Object) -> None:
        name, uid = obj["metadata"]["name"], obj["metadata"]["uid"]
        self.leave_round(name)
        if phase(obj) != DELETING:
            self.set_phase(name, uid, DELETING)
        self.timers.start(
            name,
            (uid, DELETING),
            self.timings.dpu_phase_seconds,
            lambda: self.client.remove_finalizer(self.client.dpu, name, DPU_FINALIZER),
        )

    def leave_round(self, name: str) -> None:
        node = self.node_of.get(name, "")
        if node in self.rounds:
            self.rounds[node].dpus.discard(name)

    def _forget(self, obj: Object) -> None:
        name = obj["metadata"]["name"]
        self.timers.cancel(name)
        self.leave_round(name)
        self.waiting_for_bfb.discard(name)
        self.services_down.discard(name)
        self.reboots_done.pop(obj["metadata"].get("uid", ""), None)
        node = self.node_of.pop(name, (obj.get("spec") or {}).get("dpuNodeName", ""))
        self.device_of.pop(name, None)
        self.dpus_by_node.get(node, set()).discard(name)
        if not self.dpus_by_node.get(node):
            self.dpus_by_node.pop(node, None)
        self._leave_maintenance(node, name)
        self.refresh_node(node)

    def _bfb_ready(self, bfb: str) -> bool:
        obj = self.client.get(self.client.bfb, bfb)
        return obj is not None and phase(obj) == "Ready"

    def close(self) -> None:
        self.timers.close()
