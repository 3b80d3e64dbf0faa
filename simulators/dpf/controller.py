"""`DPFController`: DPF as metalflow meets it, driven by store watches and timers.

One watch per kind, one asyncio loop, no thread and no polling: each event names an object,
and the handler decides from the store's current state (level-triggered). What it does:

- BFB -> `status.phase: Ready` after `dpu_registration_seconds` (the "download").
- DPUDeployment -> one owned DPUSet per `spec.dpus.dpuSets[]` entry, named
  `<deployment>-<nameSuffix>`, its template carrying the BFB, flavor and node effect; kept in
  step when the deployment changes, deleted with it.
- DPUNode / DPUDevice -> finalizer and `Ready` conditions after `dpu_registration_seconds`.
- DPUSet -> one DPU `<dpunode>-<dpudevice>` per DPUDevice listed by a selected DPUNode
  (`dpuNodeSelector` on DPUNode labels, `dpuSelector` on DPUDevice labels), both Ready; a DPU
  whose BFB or flavor differs from the template reports `status.outdated` and an `Outdated`
  condition (strategy OnDelete: nothing else happens until it is deleted).
- A deleted DPU (finalizer `provisioning.dpu.nvidia.com/dpu-protection`) goes `Deleting`, is
  released, and is created again under the same name when its DPUSet still selects it.
- A deleted DPUDevice or DPUNode takes its DPUs with it, then releases its own finalizer.
- DPUSet strategy `RollingUpdate`: DPF deletes drifted DPUs itself, `maxUnavailable` at a time
  (0 or unset means 1; unavailable DPUs first), and its recreated DPUs follow the template
  (DPF dpuset controller `rolloutRolling`; simulators/dpf/BEHAVIOUR.md row S2).

`version` picks the DPF release played (`simulators/dpf/versions.py`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime

from simulators.dpf import faults as dpu_faults
from simulators.dpf import objects
from simulators.dpf.client import Client
from simulators.dpf.initialise import initialise_site
from simulators.dpf.model import (
    DPUDEVICE_FINALIZER,
    DPUNODE_FINALIZER,
    LABEL_DPUSET,
    LABEL_OWNED_BY_DEPLOYMENT,
    READY,
    ZERO_TRUST,
    Object,
    condition,
    contains,
    deleting,
    dpu_name,
    is_true,
    labels_of,
    map_matches,
    phase,
    selector_matches,
    set_condition,
)
from simulators.dpf.provisioning import Provisioner
from simulators.dpf.timers import Timers
from simulators.events import ArmShutdown, DPUReset, Event, Hub, PowerCycled, PowerTransition
from simulators.kube.store import Gone, ResourceType, Store
from simulators.site import Site
from simulators.timings import Timings
from simulators.violations import Violations

log = logging.getLogger(__name__)

Handler = Callable[[str, Object], None]


class DPFController:
    """DPF's controllers for one namespace (the site's, `dpf-operator-system`)."""

    def __init__(
        self,
        store: Store,
        hub: Hub,
        timings: Timings,
        violations: Violations,
        site: Site,
        *,
        version: str = "25.10",
        deployment_mode: str = ZERO_TRUST,
        bmc_credentials: str = "ours",
        reboot_discovery: str = "device-query",
    ) -> None:
        self.store = store
        self.bmc_credentials = bmc_credentials  # "per-dpu": DPF 26.8 onboarded the DPUs' BMCs (Z1)
        self.hub = hub
        self.timings = timings
        self.site = site
        self.client = Client(store, site.namespace)
        models = {dpu.id: dpu.model for host in site.hosts for dpu in host.dpus}
        self.version = version
        self.provisioner = Provisioner(
            self.client, timings, violations, models, self._dpu_gone, version, deployment_mode,
            reboot_discovery,
        )  # fmt: skip
        self.provisioner.on_ready = self._dpu_ready
        self.provisioner.on_arm_shutdown = self._arm_shut_down
        self._host_of_dpu = {dpu.id: host.id for host in site.hosts for dpu in host.dpus}
        self.timers = Timers()
        self.dpusets: dict[str, Object] = {}
        self.node_of_device: dict[str, str] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._running = False
        self._subscribed = False

    def _arm_shut_down(self, dpu_id: str) -> None:
        """A DPU's agent shut its Arm down (SystemLevelReset): its BMC shows it (R2)."""
        host = self._host_of_dpu.get(dpu_id)
        if host is not None:
            self.hub.publish(ArmShutdown(host, dpu_id, datetime.now(UTC)))

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Sync with what the store holds, then follow every kind DPF watches."""
        if not self._subscribed:
            self.hub.subscribe(PowerTransition, self._on_power)
            self.hub.subscribe(PowerCycled, self._on_power)
            self.hub.subscribe(DPUReset, self._on_power)
            self._subscribed = True
        self._running = True
        c = self.client
        follows: list[tuple[ResourceType, Handler]] = [
            (c.bfb, self._on_bfb),
            (c.deployment, self._on_deployment),
            (c.dpuset, self._on_dpuset),
            (c.dpudevice, self._on_device),
            (c.dpunode, self._on_node),
            (c.maintenance, self.provisioner.on_maintenance),
            (c.dpu, self.provisioner.on_dpu),
        ]
        for rt, handler in follows:
            items, rv = self.store.list(rt, c.namespace)
            for obj in items:
                self._dispatch(handler, "ADDED", obj)
            self._tasks.append(
                asyncio.create_task(self._follow(rt, handler, rv, items), name=f"dpf-{rt.plural}")
            )

    async def stop(self) -> None:
        self._running = False
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass
        self._tasks.clear()
        self.timers.close()
        self.provisioner.close()

    async def _follow(self, rt: ResourceType, handler: Handler, rv: int, items: list[Object]) -> None:
        # The last state seen of each object, so a relist after 410 Gone can tell what went away.
        seen = {o["metadata"]["name"]: _skeleton(o) for o in items}
        while self._running:
            try:
                async for event in self.store.watch(rt, self.client.namespace, resource_version=rv):
                    rv = event.resource_version
                    if event.type not in ("ADDED", "MODIFIED", "DELETED"):
                        continue
                    name = event.object["metadata"]["name"]
                    if event.type == "DELETED":
                        seen.pop(name, None)
                    else:
                        seen[name] = _skeleton(event.object)
                    self._dispatch(handler, event.type, event.object)
            except Gone:
                fresh, rv = self.store.list(rt, self.client.namespace)
                names = {o["metadata"]["name"] for o in fresh}
                for name, last in list(seen.items()):
                    if name not in names:
                        del seen[name]
                        self._dispatch(handler, "DELETED", last)
                for obj in fresh:
                    seen[obj["metadata"]["name"]] = _skeleton(obj)
                    self._dispatch(handler, "MODIFIED", obj)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("DPF watch of %s failed; resuming", rt.plural)
                await asyncio.sleep(0.2)
            await asyncio.sleep(0)

    def _dispatch(self, handler: Handler, event: str, obj: Object) -> None:
        if not self._running:
            return
        try:
            handler(event, obj)
        except Exception:
            log.exception("DPF failed to handle %s of %s", event, obj.get("metadata", {}).get("name"))

    def _on_power(self, event: Event) -> None:
        if self._running:
            self.provisioner.on_power_event(event)

    # -- fault injection ------------------------------------------------------------------------
    async def inject_error(self, dpu_name: str, message: str) -> None:
        """Put a DPU in phase `Error` (Ready=False with `message`) until it is reprovisioned.

        Raises KeyError when there is no such DPU.
        """
        dpu_faults.inject_error(self.provisioner, dpu_name, message)

    async def inject_node_effect(self, dpu_name: str) -> None:
        """Send a `Ready` DPU back to `Node Effect`: a critical DPU service is down.

        Raises KeyError when there is no such DPU, ValueError when it is not Ready.
        """
        dpu_faults.inject_node_effect(self.provisioner, dpu_name)

    async def recover(self, dpu_name: str) -> None:
        """Bring a DPU sent to `Node Effect` back through `DPU Cluster Config` to `Ready`."""
        dpu_faults.recover(self.provisioner, dpu_name)

    async def inject(self, dpu_name: str, fault: str, body: dict[str, object]) -> None:
        """Every DPU fault by name (`/sim/faults/dpus/<dpu>/<fault>`), see `simulators.dpf.faults`.

        Raises:
            KeyError: No such DPU. LookupError: no such fault. ValueError: the fault does not
            apply now, or its body is wrong (the message says what).
        """
        dpu_faults.inject(self.provisioner, self._phases(), dpu_name, fault, body)

    def _phases(self) -> tuple[str, ...]:
        schema = self.client.dpu.schema or {}
        phase_schema = schema.get("properties", {}).get("status", {}).get("properties", {}).get("phase", {})
        return tuple(phase_schema.get("enum") or ())

    # -- BFB --------------------------------------------------------------------------------------
    def _on_bfb(self, event: str, obj: Object) -> None:
        name = obj["metadata"]["name"]
        if event == "DELETED" or deleting(obj):
            return
        if phase(obj) == READY:
            self.provisioner.on_bfb_ready(name)
            return
        uid = obj["metadata"]["uid"]
        self.timers.start(
            ("bfb", name), uid, self.timings.dpu_registration_seconds, lambda: self.bfb_ready(name)
        )

    def bfb_ready(self, name: str) -> None:
        def change(obj: Object) -> bool:
            status = obj.setdefault("status", {})
            status["phase"] = READY
            status["fileName"] = f"/bfb/{self.client.namespace}-{name}.bfb"
            return True

        self.client.mutate(self.client.bfb, name, change, status=True)
        for deployment in self.client.list(self.client.deployment):
            if deployment["spec"]["dpus"].get("bfb") == name:
                self._on_deployment("MODIFIED", deployment)

    # -- DPUDeployment -> DPUSets -----------------------------------------------------------------
    def _on_deployment(self, event: str, obj: Object) -> None:
        meta = obj["metadata"]
        owned = f"{meta.get('namespace', self.client.namespace)}_{meta['name']}"
        existing = {
            s["metadata"]["name"]: s
            for s in self.client.list(
                self.client.dpuset, label_selector=f"{LABEL_OWNED_BY_DEPLOYMENT}={owned}"
            )
        }
        if event == "DELETED" or deleting(obj):
            for name in existing:
                self.client.delete(self.client.dpuset, name)
            return
        obj = self.client.get(self.client.deployment, meta["name"]) or obj
        wanted = {}
        for entry in obj["spec"]["dpus"].get("dpuSets") or []:
            body = objects.dpuset_for(obj, entry)
            wanted[body["metadata"]["name"]] = body
        for name, body in wanted.items():
            if name not in existing:
                self.client.create(self.client.dpuset, body)
                continue

            def change(s: Object, spec: Object = body["spec"]) -> bool:
                if contains(s["spec"], spec):
                    return False  # the server's defaults fill in what the template leaves out
                s["spec"] = spec
                return True

            self.client.mutate(self.client.dpuset, name, change)
        for name in set(existing) - set(wanted):
            self.client.delete(self.client.dpuset, name)
        self._deployment_status(obj)

    def _deployment_status(self, obj: Object) -> None:
        dpus = obj["spec"]["dpus"]
        bfb = self.client.get(self.client.bfb, dpus.get("bfb", ""))
        flavor = self.client.get(self.client.flavor, dpus.get("flavor", ""))
        missing = [
            f"{kind} {name}"
            for kind, name, ok in (
                ("BFB", dpus.get("bfb"), bfb is not None and phase(bfb) == READY),
                ("DPUFlavor", dpus.get("flavor"), flavor is not None),
            )
            if not ok
        ]

        def change(d: Object) -> bool:
            status = d.setdefault("status", {})
            generation = d["metadata"].get("generation")
            changed: bool = status.get("observedGeneration") != generation
            status["observedGeneration"] = generation
            changed |= set_condition(status, "DPUSetsReconciled", True, "Success", "", generation)
            if missing:
                message = f"waiting for {', '.join(missing)}"
                changed |= set_condition(status, "Ready", False, "DependenciesNotReady", message, generation)
            else:
                changed |= set_condition(status, "Ready", True, "Success", "", generation)
            return changed

        self.client.mutate(self.client.deployment, obj["metadata"]["name"], change, status=True)

    # -- DPUSet -> DPUs ---------------------------------------------------------------------------
    def _on_dpuset(self, event: str, obj: Object) -> None:
        name = obj["metadata"]["name"]
        if event == "DELETED" or deleting(obj):
            self.dpusets.pop(name, None)
            for dpu in self.client.list(self.client.dpu, label_selector=f"{LABEL_DPUSET}={name}"):
                self.client.delete(self.client.dpu, dpu["metadata"]["name"])
            return
        self.dpusets[name] = obj
        for node in self.client.list(self.client.dpunode):
            if selector_matches(obj["spec"].get("dpuNodeSelector"), labels_of(node)):
                self._ensure_dpus(obj, node)
        template = obj["spec"]["dpuTemplate"]["spec"]
        bfb, flavor = (template.get("bfb") or {}).get("name", ""), template.get("dpuFlavor", "")
        for dpu in self.client.list(self.client.dpu, label_selector=f"{LABEL_DPUSET}={name}"):
            if not deleting(dpu):
                dpu_faults.outdated(self.provisioner, dpu, bfb, flavor)
        self._roll(name)

    def _dpu_ready(self, dpu: Object) -> None:
        dpuset = labels_of(dpu).get(LABEL_DPUSET, "")
        if dpuset in self.dpusets:
            self._roll(dpuset)

    def _roll(self, name: str) -> None:
        """`RollingUpdate`: delete drifted DPUs, unavailable ones first, the rest while fewer than
        `maxUnavailable` (0 or unset: 1) are unavailable (DPF `rolloutRolling`, `isUnavailable`)."""
        dpuset = self.client.get(self.client.dpuset, name)
        if dpuset is None or deleting(dpuset):
            return
        strategy = dpuset["spec"].get("strategy") or {}
        if strategy.get("type") != "RollingUpdate":
            return
        dpus = self.client.list(self.client.dpu, label_selector=f"{LABEL_DPUSET}={name}")
        budget = _max_unavailable((strategy.get("rollingUpdate") or {}).get("maxUnavailable"), len(dpus))
        unavailable = sum(1 for d in dpus if deleting(d) or not is_true(d, "Ready"))
        for dpu in dpus:
            if deleting(dpu) or not is_true(dpu, "Outdated"):
                continue
            if not is_true(dpu, "Ready"):
                self.client.delete(self.client.dpu, dpu["metadata"]["name"])
            elif unavailable < budget:
                self.client.delete(self.client.dpu, dpu["metadata"]["name"])
                unavailable += 1
            else:
                continue
            log.info("DPF (RollingUpdate) reprovisions %s", dpu["metadata"]["name"])

    def sets_for(self, node: Object) -> list[Object]:
        return [
            s
            for s in self.dpusets.values()
            if selector_matches(s["spec"].get("dpuNodeSelector"), labels_of(node)) and not deleting(s)
        ]

    def _ensure_dpus(self, dpuset: Object, node: Object, only_device: str | None = None) -> None:
        if deleting(node) or condition(node, "Ready") is None:
            return
        for entry in node["spec"].get("dpus") or []:
            device_name = entry["name"]
            if only_device is not None and device_name != only_device:
                continue
            device = self.client.get(self.client.dpudevice, device_name)
            if device is None or deleting(device) or not is_true(device, "Ready"):
                continue
            if not map_matches(dpuset["spec"].get("dpuSelector"), labels_of(device)):
                continue
            name = dpu_name(node["metadata"]["name"], device_name)
            if self.client.get(self.client.dpu, name) is not None:
                continue
            created = self.client.create(self.client.dpu, objects.dpu_for(dpuset, node, device))
            if created is not None:
                log.info("DPF created DPU %s", name)
                self.provisioner.on_dpu("ADDED", created)

    def _dpu_gone(self, obj: Object) -> None:
        """A DPU was removed: create it again if still wanted, else let its node/device go."""
        spec = obj.get("spec") or {}
        node_name, device_name = spec.get("dpuNodeName", ""), spec.get("dpuDeviceName", "")
        node = self.client.get(self.client.dpunode, node_name)
        device = self.client.get(self.client.dpudevice, device_name)
        dpuset = self.dpusets.get(labels_of(obj).get(LABEL_DPUSET, ""))
        if node is not None and deleting(node):
            self._release_when_empty(self.client.dpunode, node_name, "dpuNodeName", DPUNODE_FINALIZER)
        if device is not None and deleting(device):
            self._release_when_empty(self.client.dpudevice, device_name, "dpuDeviceName", DPUDEVICE_FINALIZER)
        if node is not None and dpuset is not None and dpuset in self.sets_for(node):
            self._ensure_dpus(dpuset, node, only_device=device_name)

    def _dpus_of(self, field: str, value: str) -> list[str]:
        """Names of the DPUs whose `spec.<field>` is `value`, as the store holds them now."""
        return [
            d["metadata"]["name"] for d in self.client.list(self.client.dpu) if d["spec"].get(field) == value
        ]

    def _delete_dpus_of(self, field: str, value: str) -> None:
        for name in self._dpus_of(field, value):
            self.client.delete(self.client.dpu, name)

    def _release_when_empty(self, rt: ResourceType, name: str, field: str, finalizer: str) -> None:
        """Let a deleted DPUNode/DPUDevice go once none of its DPUs is left."""
        self._delete_dpus_of(field, name)
        if not self._dpus_of(field, name):
            self.client.remove_finalizer(rt, name, finalizer)

    # -- DPUNode / DPUDevice: registration and deletion ----------------------------------------
    def _on_node(self, event: str, obj: Object) -> None:
        name = obj["metadata"]["name"]
        if event == "DELETED":
            self.provisioner.on_node_gone(name)
            self._delete_dpus_of("dpuNodeName", name)
            return
        for entry in obj["spec"].get("dpus") or []:
            self.node_of_device[entry["name"]] = name
        if deleting(obj):
            self.provisioner.on_node_gone(name)
            self._release_when_empty(self.client.dpunode, name, "dpuNodeName", DPUNODE_FINALIZER)
            return
        if condition(obj, "Ready") is None:
            uid = obj["metadata"]["uid"]
            self.timers.start(
                ("dpunode", name),
                uid,
                self.timings.dpu_registration_seconds,
                lambda: self.register_node(name, uid),
            )
            return
        for dpuset in self.sets_for(obj):
            self._ensure_dpus(dpuset, obj)
        self.provisioner.on_node(obj)

    def register_node(self, name: str, uid: str) -> None:
        self.client.add_finalizer(self.client.dpunode, name, DPUNODE_FINALIZER)

        def change(obj: Object) -> bool:
            if obj["metadata"]["uid"] != uid or deleting(obj):
                return False
            status = obj.setdefault("status", {})
            generation = obj["metadata"].get("generation")
            status["dpuInstallInterface"] = "redfish"
            set_condition(status, "Ready", True, "Success", "", generation)
            set_condition(status, "DPUNodeRebootInProgress", False, "NoRebootInProgress", "", generation)
            set_condition(status, "DPUUpdateInProgress", False, "DPUUpdateNotInProgress", "", generation)
            return True

        self.client.mutate(self.client.dpunode, name, change, status=True)

    def _on_device(self, event: str, obj: Object) -> None:
        name = obj["metadata"]["name"]
        if event == "DELETED":
            self._delete_dpus_of("dpuDeviceName", name)
            return
        if deleting(obj):
            self._release_when_empty(self.client.dpudevice, name, "dpuDeviceName", DPUDEVICE_FINALIZER)
            return
        if not is_true(obj, "Ready"):
            uid = obj["metadata"]["uid"]
            self.timers.start(
                ("dpudevice", name),
                uid,
                self.timings.dpu_registration_seconds,
                lambda: self.register_device(name, uid),
            )
            return
        node = self.client.get(self.client.dpunode, self.node_of_device.get(name, ""))
        if node is not None:
            for dpuset in self.sets_for(node):
                self._ensure_dpus(dpuset, node, only_device=name)

    def register_device(self, name: str, uid: str) -> None:
        self.client.add_finalizer(self.client.dpudevice, name, DPUDEVICE_FINALIZER)

        def change(obj: Object) -> bool:
            if obj["metadata"]["uid"] != uid or deleting(obj):
                return False
            status = obj.setdefault("status", {})
            generation = obj["metadata"].get("generation")
            spec = obj["spec"]
            status.update({"serialNumber": spec["serialNumber"], "dpuMode": "dpu"})
            if spec.get("bmcIp"):
                status.update({"bmcIp": spec["bmcIp"], "bmcPort": spec.get("bmcPort", 443)})
            for ctype in ("Initialized", "Discovered", "Ready"):
                set_condition(status, ctype, True, "Success", "", generation)
            return True

        self.client.mutate(self.client.dpudevice, name, change, status=True)

    # -- an initialised site ----------------------------------------------------------------------
    async def initialise(self) -> None:
        """Create the site set-up objects and every host's DPUNode, DPUDevices and DPUs, Ready.

        For tests of later flows (`sim up --initialised`): the site as it is after flows 1-3.
        Objects that exist already are left as they are.
        """
        initialise_site(self)


def _max_unavailable(value: object, total: int) -> int:
    """`maxUnavailable` as a count: an int, or "N%" of `total` (rounded down); 0 means 1."""
    if isinstance(value, str) and value.endswith("%"):
        try:
            count = int(value[:-1]) * total // 100
        except ValueError:
            count = 1
    else:
        count = value if isinstance(value, int) else 1
    return max(1, min(count, max(total, 1)))


def _skeleton(obj: Object) -> Object:
    """What a DELETED handler needs of an object (its status, the bulk, is left out)."""
    return {"metadata": obj["metadata"], "spec": obj.get("spec") or {}}
