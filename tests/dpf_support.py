"""Shared pieces of the DPF simulator tests: a real store with the real CRDs, a running
controller, and waits that follow store watches (never sleeps)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from simulators.dpf import DPFController, versions
from simulators.dpf import objects as dpf_objects
from simulators.dpf.client import Client
from simulators.dpf.versions import V25
from simulators.events import Hub, PowerCycled, PowerTransition
from simulators.kube.cel import RuleValidator
from simulators.kube.crds import find_crd_dir, load_resource_types, make_validator
from simulators.kube.store import NotFound, ResourceType, Store
from simulators.site import DPU, Host, Site
from simulators.timings import Timings, timings_for
from simulators.violations import Violations

CRD_DIR = find_crd_dir()
NS = "dpf-operator-system"
TIMEOUT = 5.0

HOLD = "provisioning.dpu.nvidia.com/wait-for-external-nodeeffect"
REBOOT = "provisioning.dpu.nvidia.com/dpunode-external-reboot-required"

Object = dict[str, Any]


def site_of(*hosts: tuple[str, str, int]) -> Site:
    """A site of (host id, DPU model, DPU count) hosts, all in group `gpu-compute`."""
    return Site(
        hosts=[
            Host(
                id=host_id,
                dpus=[
                    DPU(id=f"{host_id}-dpu-{k}", model=model, serial=f"MT{i:04d}{k:02d}")
                    for k in range(count)
                ],  # type: ignore[arg-type]
            )
            for i, (host_id, model, count) in enumerate(hosts)
        ]
    )


@dataclass
class Sim:
    store: Store
    hub: Hub
    violations: Violations
    site: Site
    dpf: DPFController
    kube: Client = field(init=False)

    def __post_init__(self) -> None:
        self.kube = Client(self.store, NS)

    # -- raw API calls, as metalflow makes them -------------------------------------------------
    def create(self, body: Object) -> Object:
        rt = self.store.resource_type_for_kind(body["apiVersion"], body["kind"])
        return self.store.create(rt, NS, body)

    def get(self, rt: ResourceType, name: str) -> Object | None:
        try:
            return self.store.get(rt, NS, name)
        except NotFound:
            return None

    def site_setup(self) -> None:
        """Flow 1, as metalflow does it."""
        for body in dpf_objects.site_setup_objects(["gpu-compute"]):
            self.create(body)

    def discover(self, host_id: str) -> None:
        """Flow 2, as metalflow does it: the DPUDevices, then the DPUNode listing them."""
        host = self.site.host(host_id)
        for dpu in host.dpus:
            self.create(dpf_objects.dpudevice_for(host, dpu))
        self.create(dpf_objects.dpunode_for(host))

    def release_hold(self, node: str) -> None:
        self.store.patch(
            self.kube.maintenance, NS, f"{node}-hold", {"metadata": {"annotations": {HOLD: "false"}}}, "merge"
        )

    def remove_reboot_annotation(self, node: str) -> None:
        self.store.patch(self.kube.dpunode, NS, node, {"metadata": {"annotations": {REBOOT: None}}}, "merge")

    def power_cycle(self, host_id: str) -> None:
        """What the host's BMC publishes for a power cycle."""
        now = datetime.now(UTC)
        self.hub.publish(PowerTransition(host_id, now, "On", "Off", "ForceOff"))
        self.hub.publish(PowerTransition(host_id, now, "Off", "On", "On"))
        self.hub.publish(PowerCycled(host_id, now))

    def kinds(self) -> list[str]:
        return [v["kind"] for v in self.violations.as_json()]


@asynccontextmanager
async def running(
    site: Site,
    timings: Timings | None = None,
    *,
    initialised: bool = False,
    version: str = V25,
    mode: str = "zero-trust",
    discovery: str = "device-query",
) -> AsyncIterator[Sim]:
    """The DPF controller of `site` on a real store serving the CRDs of DPF `version`, in
    deployment `mode` (v26), its agent finding reboot methods by `discovery` (v26, R4)."""
    types = versions.apply(load_resource_types(CRD_DIR), version)
    store = Store(types, validate=make_validator(types), validate_rules=RuleValidator())
    store.ensure_namespace(NS)
    hub, violations = Hub(), Violations()
    dpf = DPFController(
        store, hub, timings or timings_for("zero"), violations, site,
        version=version, deployment_mode=mode, reboot_discovery=discovery,
    )  # fmt: skip
    await dpf.start()
    if initialised:
        await dpf.initialise()
    try:
        yield Sim(store, hub, violations, site, dpf)
    finally:
        await dpf.stop()
        store.close_watches()


async def wait_for(
    store: Store,
    rt: ResourceType,
    name: str,
    predicate: Callable[[Object | None], bool],
    timeout: float = TIMEOUT,
) -> Object | None:
    """The object (None once gone) as soon as `predicate` holds, following a watch."""

    async def follow() -> Object | None:
        while True:
            try:
                obj: Object | None = store.get(rt, NS, name)
            except NotFound:
                obj = None
            if predicate(obj):
                return obj
            rv = store.resource_version
            async for event in store.watch(
                rt, NS, resource_version=rv, field_selector=f"metadata.name={name}"
            ):
                obj = None if event.type == "DELETED" else event.object
                if predicate(obj):
                    return obj

    try:
        return await asyncio.wait_for(follow(), timeout)
    except TimeoutError:
        try:
            last = store.get(rt, NS, name)
        except NotFound:
            last = None
        raise AssertionError(f"{rt.kind} {name} never matched; last seen: {last}") from None


def phase_is(*phases: str) -> Callable[[Object | None], bool]:
    return lambda obj: obj is not None and (obj.get("status") or {}).get("phase") in phases


def gone(obj: Object | None) -> bool:
    return obj is None


def cond(obj: Object | None, ctype: str) -> Object | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return dict(c)
    return None


def has_annotation(key: str) -> Callable[[Object | None], bool]:
    return lambda obj: obj is not None and key in (obj["metadata"].get("annotations") or {})


class PhaseLog:
    """Every phase a DPU's status passes through, in order, read from a watch."""

    def __init__(self, store: Store, rt: ResourceType, name: str) -> None:
        self.phases: list[str] = []
        self.uids: list[str] = []
        self._watch = store.watch(
            rt, NS, resource_version=store.resource_version, field_selector=f"metadata.name={name}"
        )
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async for event in self._watch:
            if event.type == "DELETED":
                continue
            current = (event.object.get("status") or {}).get("phase")
            if current and (not self.phases or self.phases[-1] != current):
                self.phases.append(current)
            uid = event.object["metadata"]["uid"]
            if not self.uids or self.uids[-1] != uid:
                self.uids.append(uid)

    def close(self) -> None:
        self._watch.close()
        self._task.cancel()


async def settle(rounds: int = 50) -> None:
    """Let every ready callback and zero-delay timer run (to assert that nothing happens)."""
    for _ in range(rounds):
        await asyncio.sleep(0)
