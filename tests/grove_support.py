"""Helpers for the simulated Grove's tests: a store with the served CRDs, a running controller,
waiting on watch events."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from simulators.grove import GroveController, pcs_for_workload
from simulators.kube.crds import find_crd_dir, new_store
from simulators.kube.store import ResourceType, Store, WatchEvent
from simulators.timings import timings_for
from simulators.violations import Violations

CRDS = find_crd_dir()
NS = "default"
POD_HASH = "grove.io/pod-template-hash"
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

    @property
    def pod_rt(self) -> ResourceType:
        return self.controller.pod_rt

    @property
    def pgm_rt(self) -> ResourceType:
        return self.controller.pgm_rt

    def gangs(self, pcs: str = "inference") -> dict[str, dict[str, Any]]:
        objs = self.store.list(self.pg_rt, NS, label_selector=f"app.kubernetes.io/part-of={pcs}")[0]
        return {o["metadata"]["name"]: o for o in objs}

    def pods(self, selector: str = "app.kubernetes.io/part-of=inference") -> dict[str, dict[str, Any]]:
        return {
            o["metadata"]["name"]: o for o in self.store.list(self.pod_rt, NS, label_selector=selector)[0]
        }

    def pcs(self, name: str = "inference") -> dict[str, Any]:
        return self.store.get(self.pcs_rt, NS, name)

    def kinds(self) -> list[str]:
        return [v["kind"] for v in self.violations.as_json()]

    async def until(self, cond: Callable[[], T | None | bool], timeout: float = 5.0) -> T:
        """Wait until `cond()` is truthy, re-checking on every Grove or pod watch event."""
        return await until(self.store, [self.pcs_rt, self.pg_rt, self.pclq_rt, self.pod_rt], cond, timeout)

    async def all_ready(self, pcs: str = "inference", count: int | None = None) -> None:
        def done() -> bool:
            pods = self.pods(f"app.kubernetes.io/part-of={pcs}")
            gangs = self.gangs(pcs)
            want = sum(len(pg["podReferences"]) for g in gangs.values() for pg in g["spec"]["podgroups"])
            return (
                bool(pods)
                and len(pods) == want
                and (count is None or len(pods) == count)
                and all(ready(p) for p in pods.values())
            )

        await self.until(done)

    def set_image(self, image: str, clique: str, pcs: str = "inference") -> None:
        obj = self.pcs(pcs)
        for c in obj["spec"]["template"]["cliques"]:
            if c["name"] == clique:
                c["spec"]["podSpec"]["containers"][0]["image"] = image
        self.store.update(self.pcs_rt, NS, pcs, obj)


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == type_:
            return dict(c)
    return None


def ready(pod: dict[str, Any]) -> bool:
    c = condition(pod, "Ready")
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
