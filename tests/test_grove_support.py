"""Helpers for the Grove tests (a store with the real CRDs, a running controller, waiting on
watch events), and the layout the controller plans for a PodCliqueSet."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from simulators.grove import GroveController, pcs_for_workload
from simulators.grove.model import plan_replica
from simulators.kube.crds import find_crd_dir, new_store
from simulators.kube.store import ResourceType, Store, WatchEvent
from simulators.timings import timings_for
from simulators.violations import Violations

CRDS = find_crd_dir()
NS = "default"
HASH = "grove.io/podcliqueset-generation-hash"
T = TypeVar("T")


def inference(
    strategy: str = "OnDelete", *, replicas: int = 2, router: int = 2, name: str = "inference"
) -> dict[str, Any]:
    """The site's default workload: a router and a prefill/decode scaling group (3, minAvailable 1)."""
    pcs = pcs_for_workload(
        NS, name, replicas, ["router"], [("workers", ["prefill", "decode"], 3, 1)], strategy, "img:1"
    )
    for clique in pcs["spec"]["template"]["cliques"]:
        if clique["name"] == "router":
            clique["spec"]["replicas"] = router
    return pcs


@dataclass
class Grove:
    store: Store
    controller: GroveController
    violations: Violations

    @property
    def pcs_rt(self) -> ResourceType:
        return self.controller.pcs_rt

    @property
    def pg_rt(self) -> ResourceType:
        return self.controller.pg_rt

    @property
    def pclq_rt(self) -> ResourceType:
        return self.controller.pclq_rt

    @property
    def pcsg_rt(self) -> ResourceType:
        return self.controller.pcsg_rt

    def gang(self, name: str) -> dict[str, Any]:
        return self.store.get(self.pg_rt, NS, name)

    def find(self, name: str) -> dict[str, Any]:
        """The PodGang, or an empty dict while it does not exist (between delete and re-create)."""
        return self.gangs().get(name, {})

    def rolled(self, name: str, hash_: str) -> bool:
        gang = self.find(name)
        return bool(gang) and gang["metadata"]["labels"][HASH] == hash_ and available(gang)

    def gangs(self, pcs: str = "inference") -> dict[str, dict[str, Any]]:
        objs = self.store.list(self.pg_rt, NS, label_selector=f"app.kubernetes.io/part-of={pcs}")[0]
        return {o["metadata"]["name"]: o for o in objs}

    def pcs(self, name: str = "inference") -> dict[str, Any]:
        return self.store.get(self.pcs_rt, NS, name)

    def kinds(self) -> list[str]:
        return [v["kind"] for v in self.violations.as_json()]

    async def until(self, cond: Callable[[], T | None | bool], timeout: float = 5.0) -> T:
        """Wait until `cond()` is truthy, re-checking on every Grove watch event (no sleeping)."""
        return await until(self.store, [self.pcs_rt, self.pg_rt, self.pclq_rt, self.pcsg_rt], cond, timeout)

    async def all_available(self, pcs: str = "inference", count: int | None = None) -> None:
        def done() -> bool:
            gangs = self.gangs(pcs)
            return (
                bool(gangs)
                and (count is None or len(gangs) == count)
                and all(available(g) for g in gangs.values())
            )

        await self.until(done)

    def set_image(self, image: str, pcs: str = "inference") -> None:
        obj = self.pcs(pcs)
        for clique in obj["spec"]["template"]["cliques"]:
            clique["spec"]["podSpec"]["containers"][0]["image"] = image
        self.store.update(self.pcs_rt, NS, pcs, obj)


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == type_:
            return dict(c)
    return None


def available(gang: dict[str, Any]) -> bool:
    if not gang:
        return False
    c = condition(gang, "Available")
    return c is not None and c["status"] == "True"


async def until(
    store: Store, rts: Iterable[ResourceType], cond: Callable[[], T | None | bool], timeout: float
) -> T:
    deadline = time.monotonic() + timeout
    rv = store.resource_version
    watchers = [store.watch(rt, resource_version=rv) for rt in rts]
    pending: dict[asyncio.Task[WatchEvent], int] = {}
    try:
        while True:
            result = cond()
            if result:
                return result  # type: ignore[return-value]
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"condition not met within {timeout}s")
            for i, w in enumerate(watchers):
                if i not in pending.values():
                    pending[asyncio.ensure_future(anext(aiter(w)))] = i
            done, _ = await asyncio.wait(pending, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                del pending[task]
    finally:
        for task in pending:
            task.cancel()
        for w in watchers:
            await w.aclose()


@asynccontextmanager
async def running(**timings: float) -> AsyncIterator[Grove]:
    store = new_store(CRDS)
    violations = Violations()
    controller = GroveController(store, timings_for("zero", **timings), violations)
    await controller.start()
    try:
        yield Grove(store, controller, violations)
    finally:
        await controller.stop()


# -- the planned layout -------------------------------------------------------------------------
def test_default_workload_has_two_mpgs_and_a_tail_per_replica() -> None:
    store = new_store(CRDS)
    pcs = store.create(store.resource_type_for_kind("grove.io/v1alpha1", "PodCliqueSet"), NS, inference())
    plan = plan_replica(pcs, 1)
    assert plan.mpg_count == 2
    assert [g.name for g in plan.gangs] == ["inference-1-mpg-0", "inference-1-mpg-1", "inference-1-workers-2"]
    mpg0 = plan.gangs[0]
    assert [(s.pclq, s.pods) for s in mpg0.shares] == [
        ("inference-1-router", (0,)),
        ("inference-1-workers-0-prefill", (0,)),
        ("inference-1-workers-0-decode", (0,)),
    ]
    assert not plan.gangs[2].mpg


def test_a_single_router_pod_makes_one_mpg_holding_the_minimum() -> None:
    pcs = inference(router=1)
    pcs["metadata"]["uid"] = "u"
    plan = plan_replica(pcs, 0)
    assert plan.mpg_count == 1
    assert [g.name for g in plan.gangs] == [
        "inference-0-mpg-0",
        "inference-0-workers-1",
        "inference-0-workers-2",
    ]


def test_excess_standalone_pods_go_to_the_last_mpg() -> None:
    pcs = inference(router=5)
    plan = plan_replica(pcs, 0)
    assert plan.mpg_count == 3  # min(router 5 // 1, workers 3 // 1)
    assert [s.pods for s in plan.gangs[2].shares if s.pclq.endswith("router")] == [(2, 3, 4)]
