"""The DPU state machine: phases on timers, the hold and external-reboot handshakes, the power
checks, and the injectable faults.

Level-triggered: every event only names a DPU (or a DPUNode); what to do is decided from the
object as the store holds it now, so stale or repeated watch events are harmless.

Choices where DPF's behaviour is not pinned down by the sources (documented for metalflow):
- The `<dpunode>-hold` DPUNodeMaintenance is created with the hold annotation "true" when the
  first DPU of the node reaches `Node Effect`; each DPU adds itself to `spec.requestor`. A DPU
  leaves the requestors in `Node Effect Removal` (or when deleted); the last one out deletes the
  maintenance. So a reprovisioned DPU finds no maintenance and a new one is created "true":
  reprovisioning is held again. The hold counts as released when the annotation is anything
  but "true" (set to "false", as the DPF docs say, or removed, as the Carbide SDK does).
- External reboot: the annotation is set when the first DPU of the node reaches `Rebooting`;
  every DPU of the node in `Rebooting` until the annotation is removed is served by that one
  reboot. Only removal completes it (a value of "false" does not: DPF checks presence). A DPU
  reaching `Rebooting` after the removal starts a new round.
- Removal without a host power cycle since the annotation was set is recorded as a violation
  and the DPUs continue anyway: DPF trusts its client.
- BF4 DPUs ask for a second reboot: after the first they go `Checking Host Reboot Required ->
  Rebooting` and the annotation is set again.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from simulators import violations as kinds
from simulators.dpf.client import Client
from simulators.dpf.model import (
    CHECKING_REBOOT,
    CLUSTER_CONFIG,
    DELETING,
    DPU_FINALIZER,
    ERROR,
    HOLD_ANNOTATION,
    INITIALIZE_INTERFACE,
    INITIALIZING,
    INSTALL_PHASES,
    MAINTENANCE_FINALIZER,
    NEXT_PHASE,
    NODE_EFFECT,
    NODE_EFFECT_REMOVAL,
    PENDING,
    PREPARE_BFB,
    REBOOT_ANNOTATION,
    REBOOTING,
    UPDATE_PHASES,
    Object,
    annotations_of,
    condition,
    deleting,
    dpu_id_of_device,
    hold_name,
    host_of_node,
    phase,
    set_condition,
    set_dpu_conditions,
)
from simulators.dpf.objects import hold_maintenance
from simulators.dpf.timers import Timers
from simulators.events import Event, PowerCycled, PowerTransition
from simulators.timings import Timings
from simulators.violations import Violations

log = logging.getLogger(__name__)


@dataclass
class RebootRound:
    """One external reboot asked of a host, serving every DPU of its node in `Rebooting`."""

    requested_at: datetime
    power_cycles_before: int
    dpus: set[str] = field(default_factory=set)


class Provisioner:
    """Moves DPUs through their phases; one instance per controller."""

    def __init__(
        self,
        client: Client,
        timings: Timings,
        violations: Violations,
        models: Mapping[str, str],
        on_gone: Callable[[Object], None],
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
        if isinstance(event, PowerCycled):
            self.power_cycles[event.host_id] += 1
            self.last_power_cycle[event.host_id] = event.time
        elif event.to_state.lower() == "off" and event.from_state.lower() != "off":
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
        elif current in NEXT_PHASE:
            self._after_delay(name, uid, current, NEXT_PHASE[current])
        # Ready, Error, Deleting and phases this simulator does not drive: nothing to do.

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
            status["phase"] = target
            status["observedGeneration"] = generation
            status.setdefault("dpuInstallInterface", "redfish")
            status.setdefault("dpuMode", "dpu")
            status.update(extra or {})
            set_dpu_conditions(status, target, generation)
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
            self.refresh_node(self.node_of.get(name) or written["spec"]["dpuNodeName"])
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
        return annotations_of(maintenance).get(HOLD_ANNOTATION) != "true"

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
            host = host_of_node(node)
            current = self.rounds[node] = RebootRound(datetime.now(UTC), self.power_cycles[host])

            def ask(n: Object) -> bool:
                if REBOOT_ANNOTATION in annotations_of(n):
                    return False
                n["metadata"]["annotations"] = {**annotations_of(n), REBOOT_ANNOTATION: "true"}
                return True

            self.client.mutate(self.client.dpunode, node, ask)
            log.info("DPU %s asks for an external reboot of %s", name, node)
            if self.on_reboot_asked is not None:
                self.on_reboot_asked(host, node, current.requested_at)
        current.dpus.add(name)
        self.refresh_node(node)

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
        for dpu in sorted(current.dpus):
            self._rebooted(dpu)
        self.refresh_node(node)

    def _rebooted(self, name: str) -> None:
        obj = self.client.get(self.client.dpu, name)
        if obj is None or deleting(obj) or phase(obj) != REBOOTING:
            return
        uid = obj["metadata"]["uid"]
        done = self.reboots_done[uid] = self.reboots_done.get(uid, 0) + 1
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
            if rebooting:
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
