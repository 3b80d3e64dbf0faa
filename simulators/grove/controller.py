"""The Grove controller: realises PodCliqueSets as PodCliques, scaling groups and PodGangs.

Driven by store watches (any change to a PodCliqueSet or to an object labelled
`app.kubernetes.io/part-of=<pcs>` marks that PodCliqueSet dirty) and timers (a PodGang becomes
Available `timings.podgang_ready_seconds` after it was (re)created). One worker reconciles
dirty PodCliqueSets one at a time, diffing the store against the plan of `model.py`, so a
reconcile never depends on having seen a particular event.

Rolling one unit: deleting a PodGang. The controller recreates a missing PodGang at the
PodCliqueSet's current generation hash together with its members (the scaling-group
PodCliques it holds are brought to the new template, its share of standalone pods is
recreated), so one deletion rolls one whole gang coherently. Deleting a PodClique or a
PodCliqueScalingGroup instead recreates only that piece (its pods) at the new hash: the
gangs holding it are then of mixed hashes, a violation (`checks.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from simulators.grove import checks
from simulators.grove.model import (
    GENERATION_HASH,
    GROVE_API,
    MANAGED_BY,
    OPERATOR,
    PART_OF,
    POD_TEMPLATE_HASH,
    SCHEDULER_API,
    GangPlan,
    Object,
    ReplicaPlan,
    condition,
    generation_hash,
    is_available,
    pcs_for_workload,
    plan_replica,
    podclique,
    podgang,
    podgroup,
    scaling_group,
    short_hash,
)
from simulators.grove.status import StatusWriter
from simulators.kube.store import AlreadyExists, Gone, NotFound, ResourceType, Store, StoreError, WatchEvent
from simulators.site import Workload
from simulators.timings import Timings
from simulators.violations import Violations

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name)


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class GroveController:
    """Grove behaviour (DOMAIN.md section 3) over the simulated API's store."""

    def __init__(self, store: Store, timings: Timings, violations: Violations) -> None:
        self._store = store
        self._timings = timings
        self._violations = violations
        self.pcs_rt = store.resource_type_for_kind(GROVE_API, "PodCliqueSet")
        self.pclq_rt = store.resource_type_for_kind(GROVE_API, "PodClique")
        self.pcsg_rt = store.resource_type_for_kind(GROVE_API, "PodCliqueScalingGroup")
        self.pg_rt = store.resource_type_for_kind(SCHEDULER_API, "PodGang")
        self._dirty: dict[Key, None] = {}
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._timers: dict[Key, asyncio.TimerHandle] = {}
        # Gangs (re)created to replace an earlier incarnation and not yet Available since.
        self.in_flight: set[Key] = set()
        # (kind, namespace, name) of every child the controller made: a known child that is
        # missing was removed by a client.
        self._known: set[tuple[str, str, str]] = set()
        self._never: set[Key] = set()
        self._fall_back: set[Key] = set()
        self._rolling: dict[Key, int] = {}
        self._progress: dict[Key, tuple[str, list[Object]]] = {}
        self._status = StatusWriter(self)
        self.checks = checks.Checks(violations)

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        """List what exists, then follow every Grove kind's watch."""
        rv = self._store.resource_version
        for pcs in self._store.list(self.pcs_rt)[0]:
            self._mark(pcs["metadata"]["namespace"], pcs["metadata"]["name"])
        for rt, handler in (
            (self.pcs_rt, self._on_pcs),
            (self.pclq_rt, self._on_child),
            (self.pcsg_rt, self._on_child),
            (self.pg_rt, self._on_child),
        ):
            self._tasks.append(asyncio.create_task(self._follow(rt, rv, handler), name=f"grove-{rt.plural}"))
        self._tasks.append(asyncio.create_task(self._work(), name="grove-worker"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()

    async def initialise(self, workloads: Iterable[Workload]) -> None:
        """Create the PodCliqueSet of each site workload (an initialised site)."""
        for w in workloads:
            groups = [(g.name, g.cliques, g.replicas, g.min_available) for g in w.scaling_groups]
            pcs = pcs_for_workload(
                w.namespace, w.name, w.replicas, w.cliques, groups, w.update_strategy, w.image
            )
            with contextlib.suppress(AlreadyExists):
                self._store.create(self.pcs_rt, w.namespace, pcs)

    # -- injectable failures --------------------------------------------------------------------
    def _find(self, podgang_name: str, namespace: str | None) -> list[Object]:
        found = self._store.list(self.pg_rt, namespace, field_selector=f"metadata.name={podgang_name}")[0]
        if not found:
            raise KeyError(podgang_name)
        return found

    async def inject_never_available(self, podgang_name: str, namespace: str | None = None) -> None:
        """The PodGang (and every later re-creation of it) never becomes Available."""
        for gang in self._find(podgang_name, namespace):
            key = (gang["metadata"]["namespace"], podgang_name)
            self._never.add(key)
            if not is_available(gang) and key in self._timers:
                self._timers.pop(key).cancel()

    async def inject_fall_back(self, podgang_name: str, namespace: str | None = None) -> None:
        """The PodGang falls back to not Available (a pod crashed): now if it is Available,
        else as soon as it becomes Available. It stays so until it is recreated."""
        for gang in self._find(podgang_name, namespace):
            key = (gang["metadata"]["namespace"], podgang_name)
            if is_available(gang):
                self._fall(key)
            else:
                self._fall_back.add(key)

    async def clear_faults(self, podgang_name: str, namespace: str | None = None) -> None:
        """Forget the faults injected for a PodGang (its next re-creation behaves normally)."""
        for gang in self._find(podgang_name, namespace):
            key = (gang["metadata"]["namespace"], podgang_name)
            self._never.discard(key)
            self._fall_back.discard(key)

    # -- event plumbing -------------------------------------------------------------------------
    async def _follow(self, rt: ResourceType, rv: int, handler: Callable[[WatchEvent], None]) -> None:
        while True:
            try:
                watcher = self._store.watch(rt, resource_version=rv)
            except Gone:
                rv = self._store.resource_version
                for pcs in self._store.list(self.pcs_rt)[0]:
                    self._mark(pcs["metadata"]["namespace"], pcs["metadata"]["name"])
                continue
            async for event in watcher:
                rv = event.resource_version
                handler(event)

    def _on_pcs(self, event: WatchEvent) -> None:
        meta = event.object["metadata"]
        if event.type == "DELETED":
            self._forget(meta["namespace"], meta["name"])
        self._mark(meta["namespace"], meta["name"])

    def _on_child(self, event: WatchEvent) -> None:
        labels = event.object["metadata"].get("labels") or {}
        if labels.get(MANAGED_BY) == OPERATOR and PART_OF in labels:
            self._mark(event.object["metadata"]["namespace"], labels[PART_OF])

    def _mark(self, namespace: str, name: str) -> None:
        self._dirty[(namespace, name)] = None
        self._wake.set()

    async def _work(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._dirty:
                key = next(iter(self._dirty))
                del self._dirty[key]
                try:
                    self.reconcile(*key)
                except StoreError as err:
                    # A client raced us (e.g. deleted what we were updating): try again shortly.
                    log.info("grove: reconcile of %s/%s: %s; retrying", *key, err.message)
                    asyncio.get_running_loop().call_later(0.05, self._mark, *key)
                except Exception:
                    log.exception("grove: reconcile of %s/%s failed", *key)
                await asyncio.sleep(0)

    def _forget(self, namespace: str, name: str) -> None:
        prefix = f"{name}-"
        for key in [k for k in self._timers if k[0] == namespace and k[1].startswith(prefix)]:
            self._timers.pop(key).cancel()
        self.in_flight = {k for k in self.in_flight if not (k[0] == namespace and k[1].startswith(prefix))}
        self._known = {k for k in self._known if not (k[1] == namespace and k[2].startswith(prefix))}
        self._rolling.pop((namespace, name), None)
        self._progress.pop((namespace, name), None)

    # -- reconcile ------------------------------------------------------------------------------
    def _children(self, rt: ResourceType, namespace: str, name: str) -> dict[str, Object]:
        objs = self._store.list(rt, namespace, label_selector=f"{PART_OF}={name},{MANAGED_BY}={OPERATOR}")[0]
        return {o["metadata"]["name"]: o for o in objs}

    def reconcile(self, namespace: str, name: str) -> None:
        try:
            pcs = self._store.get(self.pcs_rt, namespace, name)
        except NotFound:
            self._forget(namespace, name)
            return
        if pcs["metadata"].get("deletionTimestamp"):
            return
        hash_ = generation_hash(pcs)
        plans = [plan_replica(pcs, r) for r in range(int(pcs["spec"].get("replicas", 0)))]
        pclqs = self._children(self.pclq_rt, namespace, name)
        pcsgs = self._children(self.pcsg_rt, namespace, name)
        gangs = self._children(self.pg_rt, namespace, name)
        planned = {
            n for p in plans for n in (*p.groups, *(c.name for c in p.cliques), *(g.name for g in p.gangs))
        }
        self._scale_in(planned, (self.pg_rt, gangs), (self.pcsg_rt, pcsgs), (self.pclq_rt, pclqs))
        rolled: set[str] = set()
        if (pcs["spec"].get("updateStrategy") or {}).get("type", "RollingRecreate") == "RollingRecreate":
            rolled = self._roll(pcs, hash_, plans, gangs)
        removed: set[int] = set()
        for plan in plans:
            if self._realise(pcs, hash_, plan, pclqs, pcsgs, gangs, rolled):
                removed.add(plan.replica)
        gangs = self._children(self.pg_rt, namespace, name)
        pclqs = self._children(self.pclq_rt, namespace, name)
        self.checks.run(pcs, hash_, plans, gangs, pclqs, self.in_flight, removed)
        self._status.write(pcs, hash_, plans, gangs, pclqs, self._progress.get((namespace, name)))

    def _own_delete(self, rt: ResourceType, obj: Object) -> None:
        meta = obj["metadata"]
        self._known.discard((rt.kind, meta["namespace"], meta["name"]))
        with contextlib.suppress(NotFound):
            self._store.delete(rt, meta["namespace"], meta["name"])

    def _scale_in(self, planned: set[str], *kinds: tuple[ResourceType, dict[str, Object]]) -> None:
        """Delete what the plan no longer holds (replicas scaled in, a smaller layout)."""
        for rt, objs in kinds:
            for obj_name, obj in list(objs.items()):
                if obj_name not in planned:
                    self._own_delete(rt, obj)
                    del objs[obj_name]

    def _create(self, rt: ResourceType, obj: Object) -> Object:
        created = self._store.create(rt, obj["metadata"]["namespace"], obj)
        self._known.add((rt.kind, obj["metadata"]["namespace"], obj["metadata"]["name"]))
        return created

    def _realise(
        self,
        pcs: Object,
        hash_: str,
        plan: ReplicaPlan,
        pclqs: dict[str, Object],
        pcsgs: dict[str, Object],
        gangs: dict[str, Object],
        rolled: set[str],
    ) -> bool:
        """Create what is missing of one replica; True when a client had removed some of it."""
        ns = pcs["metadata"]["namespace"]
        removed = False
        groups = {g["name"]: g for g in pcs["spec"]["template"].get("podCliqueScalingGroups", [])}
        for fqn in plan.groups:
            if fqn not in pcsgs:
                removed |= ("PodCliqueScalingGroup", ns, fqn) in self._known
                group = groups[fqn[len(f"{pcs['metadata']['name']}-{plan.replica}-") :]]
                pcsgs[fqn] = self._create(self.pcsg_rt, scaling_group(pcs, plan.replica, group, hash_))
        restarted: set[str] = set()
        for cp in plan.cliques:
            if cp.name not in pclqs:
                removed |= ("PodClique", ns, cp.name) in self._known
                owner = (
                    pcs if cp.group is None else pcsgs[f"{pcs['metadata']['name']}-{plan.replica}-{cp.group}"]
                )
                pclqs[cp.name] = self._create(self.pclq_rt, podclique(pcs, cp, hash_, owner))
                restarted.add(cp.name)
        for gp in plan.gangs:
            key = (ns, gp.name)
            old = gangs.get(gp.name)
            if old is None:
                recreated = ("PodGang", ns, gp.name) in self._known or gp.name in rolled
                removed |= recreated and gp.name not in rolled
                if recreated and gp.name not in rolled:
                    self.checks.step_started(ns, plan, gp.name, self.in_flight)
                self._bring_members(pcs, hash_, gp, pclqs)
                gangs[gp.name] = self._create(self.pg_rt, podgang(pcs, gp, hash_))
                self._start_gang(key, recreated)
            elif restarted & {pg["name"] for pg in old["spec"]["podgroups"]}:
                # A member PodClique was recreated: its pods are new (at the current hash) and
                # the gang must be placed again.
                shares = {s.pclq: s for s in gp.shares}
                spec = old["spec"]
                spec["podgroups"] = [
                    podgroup(shares[pg["name"]], ns, hash_)
                    if pg["name"] in restarted and pg["name"] in shares
                    else pg
                    for pg in spec["podgroups"]
                ]
                self._store.patch(self.pg_rt, ns, gp.name, {"spec": spec}, "merge")
                self._start_gang(key, True)
        return removed

    def _bring_members(self, pcs: Object, hash_: str, gp: GangPlan, pclqs: dict[str, Object]) -> None:
        """Bring the PodCliques a (re)created gang holds to the current template."""
        cliques = {c["name"]: c for c in pcs["spec"]["template"]["cliques"]}
        for share in gp.shares:
            obj = pclqs[share.pclq]
            if obj["metadata"]["labels"].get(GENERATION_HASH) == hash_:
                continue
            spec = {k: v for k, v in cliques[share.clique]["spec"].items() if k != "autoScalingConfig"}
            labels = {GENERATION_HASH: hash_, POD_TEMPLATE_HASH: short_hash(cliques[share.clique]["spec"])}
            patch = {"metadata": {"labels": labels}, "spec": spec}
            pclqs[share.pclq] = self._store.patch(
                self.pclq_rt, obj["metadata"]["namespace"], share.pclq, patch, "merge"
            )

    def _roll(self, pcs: Object, hash_: str, plans: list[ReplicaPlan], gangs: dict[str, Object]) -> set[str]:
        """RollingRecreate: one replica at a time; in it one MPG at a time, then all TPGs."""
        key = (pcs["metadata"]["namespace"], pcs["metadata"]["name"])
        progress = self._progress_for(key, hash_)

        def outdated(plan: ReplicaPlan) -> list[GangPlan]:
            return [g for g in plan.gangs if g.name in gangs and self._hash_of(gangs[g.name]) != hash_]

        ns = key[0]

        def settled(plan: ReplicaPlan) -> bool:
            # Only the gangs this update recreated are waited for: an old gang that fell back
            # must not stall the roll (rolling it is the cure).
            return all(g.name in gangs and (ns, g.name) not in self.in_flight for g in plan.gangs)

        current = self._rolling.get(key)
        if current is not None and (
            current >= len(plans) or (not outdated(plans[current]) and settled(plans[current]))
        ):
            for entry in progress:
                if entry["replicaIndex"] == current and "updateEndedAt" not in entry:
                    entry["updateEndedAt"] = now()
            current = None
            del self._rolling[key]
        if current is None:
            todo = [p.replica for p in plans if outdated(p)]
            if not todo:
                return set()
            current = self._rolling[key] = todo[0]
            progress.append({"replicaIndex": current, "updateStartedAt": now()})
        plan = plans[current]
        if not settled(plan):
            return set()  # the last step is still in flight (or a gang is missing/unavailable)
        stale = outdated(plan)
        step = [g for g in stale if g.mpg][:1] or stale
        for gp in step:
            self._own_delete(self.pg_rt, gangs.pop(gp.name))
        return {g.name for g in step}

    def _progress_for(self, key: Key, hash_: str) -> list[Object]:
        held = self._progress.get(key)
        if held is None or held[0] != hash_:
            held = self._progress[key] = (hash_, [])
        return held[1]

    @staticmethod
    def _hash_of(obj: Object) -> str | None:
        labels: dict[str, str] = obj["metadata"].get("labels") or {}
        return labels.get(GENERATION_HASH)

    # -- PodGang readiness ------------------------------------------------------------------------
    def _gang_status(self, key: Key, ready: bool, reason: str, message: str) -> Object | None:
        try:
            gang = self._store.get(self.pg_rt, *key)
        except NotFound:
            return None
        stamp = now()
        old = (gang.get("status") or {}).get("conditions") or []
        gen = gang["metadata"]["generation"]
        conds = [
            condition("Scheduled", True, "AllPodsScheduled", "every pod of the gang is placed", stamp, old),
            condition("Ready", ready, reason, message, stamp, old),
            condition("Available", ready, reason, message, stamp, old),
        ]
        for c in conds:
            c["observedGeneration"] = gen
        gang["status"] = {"phase": "Running" if ready else "Starting", "conditions": conds}
        return self._store.update(self.pg_rt, key[0], key[1], gang, subresource="status")

    def _start_gang(self, key: Key, in_flight: bool) -> None:
        if in_flight:
            self.in_flight.add(key)
        self._gang_status(key, False, "PodsNotReady", "pods are starting")
        if (handle := self._timers.pop(key, None)) is not None:
            handle.cancel()
        if key not in self._never:
            loop = asyncio.get_running_loop()
            self._timers[key] = loop.call_later(self._timings.podgang_ready_seconds, self._ready, key)

    def _ready(self, key: Key) -> None:
        self._timers.pop(key, None)
        self.in_flight.discard(key)
        if self._gang_status(key, True, "PodsReady", "every pod of the gang is ready") is None:
            return
        if key in self._fall_back:
            asyncio.get_running_loop().call_soon(self._fall, key)
        self._mark_owner(key)

    def _fall(self, key: Key) -> None:
        self._fall_back.discard(key)
        self._gang_status(key, False, "PodFailed", "a pod of the gang failed (injected fault)")
        self._mark_owner(key)

    def _mark_owner(self, key: Key) -> None:
        with contextlib.suppress(NotFound):
            gang = self._store.get(self.pg_rt, *key)
            self._mark(key[0], gang["metadata"]["labels"][PART_OF])
