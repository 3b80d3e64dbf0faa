"""The simulated Grove operator (pinned commit: see `model.py`) and the scheduler and kubelet
under it, over the simulated API's store. Every behaviour has its row in `BEHAVIOUR.md`; the
codes in brackets name the rows.

Driven by store watches: a PodCliqueSet, or a PodClique, PodCliqueScalingGroup, PodGangMap or
Pod labelled `app.kubernetes.io/part-of=<pcs>`, marks that PodCliqueSet dirty. PodGangs do not:
Grove's PodCliqueSet controller does not watch them [D5], so a deleted PodGang comes back at the
next reconcile something else triggers (or the resync, `RESYNC_SECONDS`). One worker reconciles
dirty PodCliqueSets one at a time, diffing the store against what the PodCliqueSet and its
PodGangMaps say, so a reconcile never depends on having seen a particular event.

What Grove itself would not do but a cluster does, simulated here so pods come and go: the
scheduler binds a PodGang's ungated pods once every podgroup has `minReplicas` of them (gang
scheduling), and a bound pod turns Ready `timings.podgang_ready_seconds` later (the kubelet).
Injected faults act on those pods (`inject_*`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from simulators.grove import checks
from simulators.grove.backends import KAI_POD_GROUP, GroveSetup, legacy_gang, prepare_pod
from simulators.grove.model import (
    ANCHOR,
    COMPONENT,
    EPOCH,
    GATE,
    GENERATION_HASH,
    GROVE_API,
    MANAGED_BY,
    NAME,
    OPERATOR,
    PART_OF,
    PCSG,
    PCSG_REPLICA_INDEX,
    POD_INDEX,
    POD_TEMPLATE_HASH,
    PODCLIQUE,
    PODGANG,
    PODGANG_ROLE,
    REPLICA_INDEX,
    SCALE_OUT,
    SCHEDULER_API,
    SCHEDULER_NAME,
    TAIL,
    GangLayout,
    Object,
    auto_update_in_progress,
    base_labels,
    bootstrap_entries,
    clique_min,
    clique_replicas,
    cliques_of,
    condition,
    ensure_scale_out,
    generation_hash,
    group_min,
    group_replicas,
    groups_of,
    layout,
    member_pclq_name,
    owner_ref,
    pclq_name,
    pcs_for_workload,
    pcsg_name,
    pod,
    pod_gated,
    pod_ready,
    pod_scheduled,
    pod_template_hash,
    podclique_labels,
    podclique_spec,
    standalone_cliques,
    strategy,
    terminating,
    termination_delay,
    without_empty,
)
from simulators.grove.status import StatusWriter
from simulators.kube.store import AlreadyExists, Gone, NotFound, ResourceType, Store, StoreError, WatchEvent
from simulators.site import Workload
from simulators.timings import Timings
from simulators.violations import Violations

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name)
RESYNC_SECONDS = 30.0
"""How soon a reconcile happens with nothing changing (a deleted PodGang is noticed by then) [D5]."""
NODE = "sim-node"


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class GroveController:
    """Grove's behaviour at the pin over the simulated API's store; see the module docstring."""

    def __init__(
        self, store: Store, timings: Timings, violations: Violations, setup: GroveSetup | None = None
    ) -> None:
        self._store = store
        self.setup = setup or GroveSetup()
        self._legacy: set[Key] = set()  # migrated PodCliqueSets whose pods are not yet replaced [K5]
        self._timings = timings
        self.pcs_rt = store.resource_type_for_kind(GROVE_API, "PodCliqueSet")
        self.pclq_rt = store.resource_type_for_kind(GROVE_API, "PodClique")
        self.pcsg_rt = store.resource_type_for_kind(GROVE_API, "PodCliqueScalingGroup")
        self.pgm_rt = store.resource_type_for_kind(GROVE_API, "PodGangMap")
        self.pg_rt = store.resource_type_for_kind(SCHEDULER_API, "PodGang")
        self.pod_rt = store.resource_type_for_kind("v1", "Pod")
        self._dirty: dict[Key, None] = {}
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._timers: dict[str, asyncio.TimerHandle] = {}  # pod uid -> its Ready timer
        self._later: dict[Key, asyncio.TimerHandle] = {}  # PodCliqueSet -> its next requeue
        self._never: set[Key] = set()  # PodGangs whose pods never turn Ready
        self._fall_back: set[Key] = set()  # PodGangs one of whose pods fails once Ready
        self._own: set[str] = set()  # uids this controller deleted (and whose dependents it did)
        self._epoch = 0
        self.breached_since: dict[Key, float] = {}  # PodClique -> monotonic time of its breach
        self.ever_scheduled: set[Key] = set()
        self.rolling: dict[Key, tuple[str, int, str]] = {}  # RollingRecreate: pcs -> (hash, replica, start)
        self.progress: dict[Key, list[Object]] = {}  # RollingRecreate: currentlyUpdating history
        self._status = StatusWriter(self)
        self.checks = checks.Checks(violations)

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        """List what exists, then follow every kind the operator watches."""
        rv = self._store.resource_version
        for pcs in self._store.list(self.pcs_rt)[0]:
            self._mark(pcs["metadata"]["namespace"], pcs["metadata"]["name"])
        for rt, handler in (
            (self.pcs_rt, self._on_pcs),
            (self.pclq_rt, self._on_child),
            (self.pcsg_rt, self._on_child),
            (self.pgm_rt, self._on_child),
            (self.pod_rt, self._on_pod),
            (self.pg_rt, self._on_gang),
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
        for handle in [*self._timers.values(), *self._later.values()]:
            handle.cancel()
        self._timers.clear()
        self._later.clear()

    async def initialise(self, workloads: Iterable[Workload]) -> None:
        """Create the PodCliqueSet of each site workload (an initialised site)."""
        for w in workloads:
            groups = [(g.name, g.cliques, g.replicas, g.min_available) for g in w.scaling_groups]
            pcs = pcs_for_workload(
                w.namespace, w.name, w.replicas, w.cliques, groups, w.update_strategy, w.image
            )
            with contextlib.suppress(AlreadyExists):
                self._store.create(self.pcs_rt, w.namespace, pcs)
            if self.setup.migrated:
                self._legacy.add((w.namespace, w.name))

    # -- injectable failures (act on the gang's pods, as a crash-looping image would) -----------
    def _find(self, podgang_name: str, namespace: str | None) -> list[Object]:
        found = self._store.list(self.pg_rt, namespace, field_selector=f"metadata.name={podgang_name}")[0]
        if not found:
            raise KeyError(podgang_name)
        return found

    async def inject_never_available(self, podgang_name: str, namespace: str | None = None) -> None:
        """The pods of the PodGang (and every later replacement of them) never turn Ready."""
        for gang in self._find(podgang_name, namespace):
            key = (gang["metadata"]["namespace"], podgang_name)
            self._never.add(key)
            for p in self._gang_pods(key):
                if not pod_ready(p) and (t := self._timers.pop(p["metadata"]["uid"], None)) is not None:
                    t.cancel()

    async def inject_fall_back(self, podgang_name: str, namespace: str | None = None) -> None:
        """One pod of the PodGang fails (not Ready): now if one is Ready, else once one is. It
        stays so until it is replaced."""
        for gang in self._find(podgang_name, namespace):
            key = (gang["metadata"]["namespace"], podgang_name)
            if not self._fail_one(key):
                self._fall_back.add(key)

    async def clear_faults(self, podgang_name: str, namespace: str | None = None) -> None:
        """Forget the faults injected for a PodGang (its pods' replacements behave normally)."""
        for gang in self._find(podgang_name, namespace):
            key = (gang["metadata"]["namespace"], podgang_name)
            self._never.discard(key)
            self._fall_back.discard(key)

    def _gang_pods(self, key: Key) -> list[Object]:
        return self._store.list(self.pod_rt, key[0], label_selector=f"{PODGANG}={key[1]}")[0]

    def _fail_one(self, key: Key) -> bool:
        for p in self._gang_pods(key):
            if pod_ready(p) and not terminating(p):
                self._set_ready(
                    p, False, "ContainerCrashed", "a container of the pod failed (injected fault)"
                )
                self._mark_of(p)
                return True
        return False

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
                try:
                    handler(event)
                except Exception:
                    log.exception("grove: handling a %s event failed", rt.kind)

    def _on_pcs(self, event: WatchEvent) -> None:
        meta = event.object["metadata"]
        if event.type != "DELETED":
            pcs = event.object
            cliques = {c: pod_template_hash(pcs, t) for c, t in cliques_of(pcs).items()}
            self.checks.template_at(
                (meta["namespace"], meta["name"]), event.resource_version, generation_hash(pcs), cliques
            )
        if event.type == "DELETED":
            self._forget(meta["namespace"], meta["name"])
        self._mark(meta["namespace"], meta["name"])

    def _mark_of(self, obj: Object) -> None:
        labels = obj["metadata"].get("labels") or {}
        if labels.get(MANAGED_BY) == OPERATOR and PART_OF in labels:
            self._mark(obj["metadata"]["namespace"], labels[PART_OF])

    def _on_child(self, event: WatchEvent) -> None:
        meta = event.object["metadata"]
        if (
            event.type == "DELETED"
            and meta.get("uid") not in self._own
            and event.object["kind"] == "PodClique"
        ):
            self.checks.client_removed_podclique(self, event.object)
        self._mark_of(event.object)

    def _on_pod(self, event: WatchEvent) -> None:
        obj = event.object
        meta = obj["metadata"]
        if event.type == "DELETED":
            if (t := self._timers.pop(meta["uid"], None)) is not None:
                t.cancel()
            # A migrated cluster: pods made from now on carry their own PodGang's group [K5].
            self._legacy.discard((meta["namespace"], (meta.get("labels") or {}).get(PART_OF, "")))
            owners = {r.get("uid") for r in meta.get("ownerReferences") or []}
            if meta["uid"] not in self._own and not owners & self._own:
                self.checks.client_removed_pod(self, obj, event.resource_version)
        self._mark_of(obj)

    def _on_gang(self, event: WatchEvent) -> None:
        """Not a trigger of the reconcile [D5]; only the checks look."""
        if event.type == "DELETED" and event.object["metadata"]["uid"] not in self._own:
            self.checks.client_removed_podgang(event.object)

    def _mark(self, namespace: str, name: str) -> None:
        self._dirty[(namespace, name)] = None
        self._wake.set()

    def _requeue(self, key: Key, seconds: float) -> None:
        """Reconcile `key` again after `seconds` (an earlier requeue stands)."""
        loop = asyncio.get_running_loop()
        old = self._later.get(key)
        due = loop.time() + seconds
        if old is not None and old.when() <= due:
            return
        if old is not None:
            old.cancel()
        self._later[key] = loop.call_at(due, self._fire, key)

    def _fire(self, key: Key) -> None:
        self._later.pop(key, None)
        self._mark(*key)

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
                    log.info("grove: reconcile of %s/%s: %s; retrying", *key, err.message)
                    asyncio.get_running_loop().call_later(0.05, self._mark, *key)
                except Exception:
                    log.exception("grove: reconcile of %s/%s failed", *key)
                await asyncio.sleep(0)

    def _forget(self, namespace: str, name: str) -> None:
        prefix = f"{name}-"
        for d in (self.breached_since,):
            for k in [k for k in d if k[0] == namespace and k[1].startswith(prefix)]:
                del d[k]
        self.rolling.pop((namespace, name), None)
        self.progress.pop((namespace, name), None)
        if (t := self._later.pop((namespace, name), None)) is not None:
            t.cancel()

    # -- store helpers ----------------------------------------------------------------------------
    def _children(self, rt: ResourceType, namespace: str, name: str) -> dict[str, Object]:
        objs = self._store.list(rt, namespace, label_selector=f"{PART_OF}={name},{MANAGED_BY}={OPERATOR}")[0]
        return {o["metadata"]["name"]: o for o in objs}

    def _delete(self, rt: ResourceType, obj: Object) -> None:
        meta = obj["metadata"]
        self._own.add(meta["uid"])
        with contextlib.suppress(NotFound):
            self._store.delete(rt, meta["namespace"], meta["name"])

    def _patch_if(self, rt: ResourceType, obj: Object, labels: dict[str, str], spec: Object | None) -> Object:
        """Patch labels (and spec) in place when they differ [U1]."""
        meta = obj["metadata"]
        changed_labels = {k: v for k, v in labels.items() if (meta.get("labels") or {}).get(k) != v}
        if not changed_labels and (spec is None or obj.get("spec") == spec):
            return obj
        body: Object = {"metadata": {"labels": changed_labels}} if changed_labels else {}
        if spec is not None and obj.get("spec") != spec:
            body["spec"] = spec
        return self._store.patch(rt, meta["namespace"], meta["name"], body, "merge")

    def next_epoch(self) -> int:
        """A unix-nano epoch, strictly increasing within this process [G1]."""
        self._epoch = max(self._epoch + 3, time.time_ns())
        return self._epoch

    # -- reconcile --------------------------------------------------------------------------------
    def reconcile(self, namespace: str, name: str) -> None:
        try:
            pcs = self._store.get(self.pcs_rt, namespace, name)
        except NotFound:
            self._forget(namespace, name)
            return
        if terminating(pcs):
            return
        key = (namespace, name)
        self._requeue(key, RESYNC_SECONDS)
        hash_ = generation_hash(pcs)
        self.checks.saw_version(
            key, hash_, {c: pod_template_hash(pcs, t) for c, t in cliques_of(pcs).items()}
        )
        replicas = int(pcs["spec"].get("replicas", 0))
        pgms = self._children(self.pgm_rt, namespace, name)
        pcsgs = self._children(self.pcsg_rt, namespace, name)
        pclqs = self._children(self.pclq_rt, namespace, name)
        gangs = self._children(self.pg_rt, namespace, name)
        pods = [p for p in self._children(self.pod_rt, namespace, name).values() if not terminating(p)]
        # Scale-in of whole replicas: what belongs to a replica index >= replicas goes [N2].
        for rt, objs in (
            (self.pgm_rt, pgms),
            (self.pcsg_rt, pcsgs),
            (self.pclq_rt, pclqs),
            (self.pg_rt, gangs),
        ):
            for obj_name, obj in list(objs.items()):
                if int((obj["metadata"].get("labels") or {}).get(REPLICA_INDEX, -1)) >= replicas:
                    self._delete(rt, obj)
                    del objs[obj_name]
        expected_gangs: dict[str, tuple[GangLayout, dict[str, int]]] = {}
        for r in range(replicas):
            pgm = self._sync_pgm(pcs, r, hash_, pgms, pcsgs, gangs)
            gang_layouts, gang_of = layout(pcs, r, pgm)
            self._sync_pcsgs(pcs, r, pcsgs)
            self._sync_podcliques(pcs, r, gang_of, pclqs, pcsgs)
            mins = {
                p: int(pclqs[p]["spec"].get("minAvailable", 1))
                for g in gang_layouts
                for p in g.pclqs
                if p in pclqs
            }
            for g in gang_layouts:
                expected_gangs[g.name] = (g, mins)
        for gang_name, gang in list(gangs.items()):
            if gang_name not in expected_gangs:
                self._delete(self.pg_rt, gang)  # excess PodGangs first [D6]
                del gangs[gang_name]
        pods = self._sync_pods(pcs, pclqs, pods)
        for gang_name, (g, mins) in expected_gangs.items():
            gangs[gang_name] = self._sync_gang(pcs, hash_, g, mins, gangs.get(gang_name), pods)
        self._ungate_and_schedule(pcs, gangs, pclqs, pods)
        if auto_update_in_progress(pcs, hash_):
            self._roll(pcs, hash_, replicas, pclqs, pcsgs, pods)
        pods = [p for p in self._children(self.pod_rt, namespace, name).values() if not terminating(p)]
        pclqs = self._children(self.pclq_rt, namespace, name)
        self._gang_termination(pcs, replicas, pclqs, pcsgs, pods)
        self._status.write(pcs, hash_, replicas, pclqs, pcsgs, pods)
        self.checks.run(pcs, hash_, gangs, pods)

    # -- PodGangMap [G1-G4] -------------------------------------------------------------------------
    def _sync_pgm(
        self,
        pcs: Object,
        r: int,
        hash_: str,
        pgms: dict[str, Object],
        pcsgs: dict[str, Object],
        gangs: dict[str, Object],
    ) -> Object:
        ns, name = pcs["metadata"]["namespace"], pcs["metadata"]["name"]
        pgm_name = f"{name}-{r}"
        live = {
            g["name"]: int(pcsgs[pcsg_name(name, r, g["name"])]["spec"]["replicas"])
            for g in groups_of(pcs)
            if pcsg_name(name, r, g["name"]) in pcsgs
        }
        pgm = pgms.get(pgm_name)
        if pgm is None:
            # Bootstrap, reusing the epochs of live PodGangs (a lost map) [G2].
            found = {
                (g["metadata"]["labels"].get(PODGANG_ROLE), g["metadata"]["labels"].get(EPOCH))
                for g in gangs.values()
                if g["metadata"]["labels"].get(REPLICA_INDEX) == str(r)
            }
            epoch = next((int(e) for role, e in found if role == ANCHOR and e), None) or self.next_epoch()
            entries = bootstrap_entries(pcs, epoch, hash_, live)
            for entry in entries:
                for role, e in found:
                    if role == entry["role"] and role != ANCHOR and e:
                        entry["epoch"] = e
            body = {
                "apiVersion": GROVE_API,
                "kind": "PodGangMap",
                "metadata": {
                    "name": pgm_name,
                    "namespace": ns,
                    "labels": {**base_labels(pcs), COMPONENT: "pcs-podgangmap", REPLICA_INDEX: str(r)},
                    "ownerReferences": [owner_ref(pcs)],
                },
                "spec": {
                    "podCliqueSetReplicaIndex": r,
                    "entries": sorted(entries, key=lambda e: int(e["epoch"])),
                },
            }
            pgm = pgms[pgm_name] = self._store.create(self.pgm_rt, ns, body)
            return pgm
        entries = [dict(e) for e in pgm["spec"].get("entries") or []]
        changed = self._follow_scale(pcs, entries, live, hash_)
        if strategy(pcs) == "RollingRecreate" and self.rolling.get((ns, name), ("", -1, ""))[1] == r:
            for e in entries:  # a RollingRecreate advances the replica's entries only [G4]
                if e.get("podCliqueSetGenerationHash") != hash_:
                    e["podCliqueSetGenerationHash"], changed = hash_, True
        changed = ensure_scale_out(pcs, entries, hash_, str(self.next_epoch())) or changed  # [G5]
        kept = without_empty(entries, hash_)
        if len(kept) != len(entries):
            entries, changed = kept, True
        if changed:
            pgm = pgms[pgm_name] = self._store.patch(
                self.pgm_rt, ns, pgm_name, {"spec": {"entries": entries}}, "merge"
            )
        return pgm

    def _follow_scale(self, pcs: Object, entries: list[Object], live: dict[str, int], hash_: str) -> bool:
        """Follow the live scaling-group replicas: new indices join the ScaleOut entry, removed
        ones leave ScaleOut, then Tail, then the Anchor (never below minAvailable) [G3]."""
        changed = False
        anchor = next((e for e in entries if e["role"] == ANCHOR), None)
        standalone = {c["name"]: clique_replicas(c) for c in standalone_cliques(pcs)}
        for group in groups_of(pcs):
            g, want = group["name"], live.get(group["name"], group_replicas(group))
            held = {j for e in entries for j in (e.get("pcsgReplicaIndices") or {}).get(g, [])}
            for e in sorted(entries, key=lambda e: {SCALE_OUT: 0, TAIL: 1, ANCHOR: 2}[e["role"]]):
                indices = (e.get("pcsgReplicaIndices") or {}).get(g, [])
                keep = [j for j in indices if j < want or (e["role"] == ANCHOR and j < group_min(group))]
                if keep != indices:
                    e["pcsgReplicaIndices"] = {**(e.get("pcsgReplicaIndices") or {}), g: keep}
                    changed = True
            missing = sorted(set(range(want)) - held)
            if missing:
                scale_out = next((e for e in entries if e["role"] == SCALE_OUT), None)
                if scale_out is None:
                    epoch = str(self.next_epoch())
                    scale_out = {"epoch": epoch, "podCliqueSetGenerationHash": hash_, "role": SCALE_OUT}
                    if anchor is not None:
                        scale_out["dependsOn"] = [anchor["epoch"]]
                    entries.append(scale_out)
                indices = {**(scale_out.get("pcsgReplicaIndices") or {})}
                indices[g] = sorted({*indices.get(g, []), *missing})
                scale_out["pcsgReplicaIndices"] = indices
                changed = True
        if anchor is not None and anchor.get("podCliques") != standalone:
            anchor["podCliques"] = standalone
            changed = True
        return changed

    # -- PodCliqueScalingGroups and PodCliques [N1, L2-L4, U1, U2] -------------------------------------
    def _sync_pcsgs(self, pcs: Object, r: int, pcsgs: dict[str, Object]) -> None:
        ns, name = pcs["metadata"]["namespace"], pcs["metadata"]["name"]
        for group in groups_of(pcs):
            fqn = pcsg_name(name, r, group["name"])
            labels = {
                **base_labels(pcs),
                NAME: fqn,
                COMPONENT: "pcs-podcliquescalinggroup",
                REPLICA_INDEX: str(r),
            }
            obj = pcsgs.get(fqn)
            if obj is None:
                body = {
                    "apiVersion": GROVE_API,
                    "kind": "PodCliqueScalingGroup",
                    "metadata": {
                        "name": fqn,
                        "namespace": ns,
                        "labels": labels,
                        "ownerReferences": [owner_ref(pcs)],
                    },
                    "spec": {
                        "replicas": group_replicas(group),  # from the template at creation only [L4]
                        "minAvailable": group_min(group),
                        "cliqueNames": list(group.get("cliqueNames") or []),
                    },
                }
                pcsgs[fqn] = self._store.create(self.pcsg_rt, ns, body)
                continue
            spec = {
                **obj["spec"],
                "minAvailable": group_min(group),
                "cliqueNames": list(group.get("cliqueNames") or []),
            }
            pcsgs[fqn] = self._patch_if(self.pcsg_rt, obj, labels, spec)

    def _sync_podcliques(
        self, pcs: Object, r: int, gang_of: dict[str, str], pclqs: dict[str, Object], pcsgs: dict[str, Object]
    ) -> None:
        name = pcs["metadata"]["name"]
        cliques = cliques_of(pcs)
        on_delete = strategy(pcs) == "OnDelete"
        for clique in standalone_cliques(pcs):
            pname = pclq_name(name, r, clique["name"])
            labels = podclique_labels(pcs, clique, pname, r, gang_of.get(pname, ""), None, None)
            obj = pclqs.get(pname)
            if obj is None:
                pclqs[pname] = self._create_pclq(
                    pcs, pname, labels, podclique_spec(clique, clique_replicas(clique)), pcs
                )
            else:  # patched in place under every strategy; the live replicas are kept [U1]
                spec = podclique_spec(clique, int(obj["spec"].get("replicas", clique_replicas(clique))))
                pclqs[pname] = self._patch_if(self.pclq_rt, obj, labels, spec)
        for group in groups_of(pcs):
            fqn = pcsg_name(name, r, group["name"])
            owner = pcsgs.get(fqn)
            if owner is None:
                continue
            want = int(owner["spec"]["replicas"])
            for pname, existing in list(pclqs.items()):
                labels = existing["metadata"].get("labels") or {}
                if labels.get(PCSG) == fqn and int(labels.get(PCSG_REPLICA_INDEX, 0)) >= want:
                    self._delete(self.pclq_rt, existing)  # scale-in of the scaling group
                    del pclqs[pname]
            for j in range(want):
                for cname in group.get("cliqueNames") or []:
                    member = cliques.get(cname)
                    if member is None:
                        continue
                    pname = member_pclq_name(name, r, group["name"], j, cname)
                    labels = podclique_labels(pcs, member, pname, r, gang_of.get(pname, ""), group["name"], j)
                    obj = pclqs.get(pname)
                    if obj is None:
                        spec = podclique_spec(member, clique_replicas(member))
                        pclqs[pname] = self._create_pclq(pcs, pname, labels, spec, owner)
                    elif on_delete:  # patched in place under OnDelete only [U2]
                        spec = podclique_spec(
                            member, int(obj["spec"].get("replicas", clique_replicas(member)))
                        )
                        pclqs[pname] = self._patch_if(self.pclq_rt, obj, labels, spec)
                    else:  # RollingRecreate: only the gang label follows the map
                        pclqs[pname] = self._patch_if(self.pclq_rt, obj, {PODGANG: labels[PODGANG]}, None)

    def _create_pclq(
        self, pcs: Object, pname: str, labels: dict[str, str], spec: Object, owner: Object
    ) -> Object:
        body = {
            "apiVersion": GROVE_API,
            "kind": "PodClique",
            "metadata": {
                "name": pname,
                "namespace": pcs["metadata"]["namespace"],
                "labels": labels,
                "ownerReferences": [owner_ref(owner)],
            },
            "spec": spec,
        }
        return self._store.create(self.pclq_rt, pcs["metadata"]["namespace"], body)

    # -- Pods [P1-P4, D1] ------------------------------------------------------------------------------
    def _sync_pods(self, pcs: Object, pclqs: dict[str, Object], pods: list[Object]) -> list[Object]:
        """Each PodClique gets `spec.replicas` pods: missing ones are created from its current spec
        at the lowest free index (so a replaced pod runs the PodClique's template now) [D1]."""
        ns = pcs["metadata"]["namespace"]
        by_pclq: dict[str, list[Object]] = {}
        for p in pods:
            by_pclq.setdefault(p["metadata"]["labels"].get(PODCLIQUE, ""), []).append(p)
        out = [p for p in pods if p["metadata"]["labels"].get(PODCLIQUE) in pclqs]
        for pname, pclq in pclqs.items():
            if terminating(pclq):
                continue
            mine = by_pclq.get(pname, [])
            want = int(pclq["spec"].get("replicas", 1))
            if len(mine) > want:  # scale-in: not ready first, then old hash, then newest [P4]
                order = sorted(
                    mine,
                    key=lambda p: (
                        pod_ready(p),
                        p["metadata"]["labels"].get(POD_TEMPLATE_HASH)
                        == pclq["metadata"]["labels"].get(POD_TEMPLATE_HASH),
                        p["metadata"]["creationTimestamp"],
                    ),
                )
                for p in order[: len(mine) - want]:
                    self._delete(self.pod_rt, p)
                    out.remove(p)
                continue
            used = {int(p["metadata"]["labels"].get(POD_INDEX, -1)) for p in mine}
            free = (i for i in range(want * 2 + 1) if i not in used)
            for _ in range(want - len(mine)):
                body = prepare_pod(pod(pcs, pclq, next(free)), self._backend(pcs))  # [K1, K3]
                if (ns, pcs["metadata"]["name"]) in self._legacy and KAI_POD_GROUP in body["metadata"].get(
                    "annotations", {}
                ):  # created before the migration: the legacy PodGroup stays named [K5]
                    body["metadata"]["annotations"][KAI_POD_GROUP] = legacy_gang(
                        body, pcs["metadata"]["name"]
                    )
                out.append(self._store.create(self.pod_rt, ns, body))
        return out

    def _backend(self, pcs: Object) -> str:
        """The PodCliqueSet's scheduler backend: a clique's `podSpec.schedulerName`, else Grove's
        default profile (`getSchedulerNameForPCS`, …/components/podgang/podgang.go L250-261 @P) [K1]."""
        for clique in (pcs.get("spec") or {}).get("template", {}).get("cliques") or []:
            name = ((clique.get("spec") or {}).get("podSpec") or {}).get("schedulerName")
            if name:
                return str(name)
        return self.setup.scheduler

    # -- PodGangs [D6, S1, S2] -----------------------------------------------------------------------
    def _sync_gang(
        self,
        pcs: Object,
        hash_: str,
        g: GangLayout,
        mins: dict[str, int],
        old: Object | None,
        pods: list[Object],
    ) -> Object:
        """CreateOrPatch one PodGang: podReferences from the live pods labelled for it [D6]."""
        ns = pcs["metadata"]["namespace"]
        refs: dict[str, list[str]] = {p: [] for p in g.pclqs}
        for p in pods:
            labels = p["metadata"]["labels"]
            if labels.get(PODGANG) == g.name and labels.get(PODCLIQUE) in refs:
                refs[labels[PODCLIQUE]].append(p["metadata"]["name"])
        labels = {
            **base_labels(pcs),
            COMPONENT: "podgang",
            SCHEDULER_NAME: self._backend(pcs),
            REPLICA_INDEX: str(g.replica),
            EPOCH: g.epoch,
            PODGANG_ROLE: g.role,
            GENERATION_HASH: hash_,  # the PodCliqueSet's current hash, not the pods' [S1]
        }
        spec = {
            "podgroups": [
                {
                    "name": p,
                    "podReferences": [{"namespace": ns, "name": n} for n in sorted(refs[p])],
                    "minReplicas": mins.get(p, 1),
                }
                for p in g.pclqs
            ]
        }
        if old is None:
            body = {
                "apiVersion": SCHEDULER_API,
                "kind": "PodGang",
                "metadata": {
                    "name": g.name,
                    "namespace": ns,
                    "labels": labels,
                    "ownerReferences": [owner_ref(pcs)],
                },
                "spec": spec,
            }
            old = self._store.create(self.pg_rt, ns, body)
        else:
            old = self._patch_if(self.pg_rt, old, labels, spec)
        want = {p: int(self._pclq_replicas(ns, p)) for p in g.pclqs}
        whole = all(len(refs[p]) >= want[p] for p in g.pclqs)
        stamp = now()
        conds = (old.get("status") or {}).get("conditions") or []
        status = {
            "phase": "Pending",  # Grove's operator writes no other phase at the pin [S2]
            "conditions": [
                condition(
                    "Initialized",
                    "True" if whole else "False",
                    "PodGangPodsCreated" if whole else "PodGangPodsCreationPending",
                    "every expected pod exists and carries the PodGang label"
                    if whole
                    else "pods pending creation",
                    stamp,
                    conds,
                )
            ],
        }
        if old.get("status") != status:
            old = {**old, "status": status}
            old["metadata"] = {**old["metadata"]}
            old["metadata"].pop("resourceVersion", None)
            old = self._store.update(self.pg_rt, ns, g.name, old, subresource="status")
        return old

    def _pclq_replicas(self, ns: str, name: str) -> int:
        try:
            return int(self._store.get(self.pclq_rt, ns, name)["spec"].get("replicas", 1))
        except NotFound:
            return 0

    # -- the scheduler and kubelet under Grove [P3, P5] ---------------------------------------------------
    def _ungate_and_schedule(
        self, pcs: Object, gangs: dict[str, Object], pclqs: dict[str, Object], pods: list[Object]
    ) -> None:
        ns = pcs["metadata"]["namespace"]
        by_name = {p["metadata"]["name"]: p for p in pods}

        def scheduled(gang: Object) -> bool:
            return all(
                sum(
                    1
                    for r in pg["podReferences"]
                    if r["name"] in by_name and pod_scheduled(by_name[r["name"]])
                )
                >= pg.get("minReplicas", 1)
                for pg in gang["spec"]["podgroups"]
            )

        anchors = {
            (g["metadata"]["labels"].get(REPLICA_INDEX), g["metadata"]["labels"].get(EPOCH)): g
            for g in gangs.values()
            if g["metadata"]["labels"].get(PODGANG_ROLE) == ANCHOR
        }
        pgms = self._children(self.pgm_rt, ns, pcs["metadata"]["name"])
        depends: dict[str, str] = {}  # gang -> the anchor epoch it depends on
        for pgm in pgms.values():
            for e in pgm["spec"].get("entries") or []:
                if e["role"] != ANCHOR and e.get("dependsOn"):
                    depends[e["epoch"]] = e["dependsOn"][0]
        for gang in gangs.values():
            labels = gang["metadata"]["labels"]
            ready_dep = True
            if labels.get(PODGANG_ROLE) != ANCHOR:
                dep = anchors.get((labels.get(REPLICA_INDEX), depends.get(labels.get(EPOCH, ""), "")))
                ready_dep = dep is not None and scheduled(dep)
            refs = [r["name"] for pg in gang["spec"]["podgroups"] for r in pg["podReferences"]]
            for pod_name in refs:
                p = by_name.get(pod_name)
                if p is None or not pod_gated(p) or not ready_dep:
                    continue
                gates = [x for x in p["spec"].get("schedulingGates") or [] if x.get("name") != GATE]
                if gates == p["spec"].get("schedulingGates"):
                    continue
                by_name[pod_name] = self._store.patch(
                    self.pod_rt, ns, pod_name, {"spec": {"schedulingGates": gates or None}}, "merge"
                )
            # Gang scheduling: bind once every podgroup has minReplicas ungated pods.
            groups = gang["spec"]["podgroups"]
            placeable = all(
                sum(
                    1
                    for r in pg["podReferences"]
                    if r["name"] in by_name and not pod_gated(by_name[r["name"]])
                )
                >= pg.get("minReplicas", 1)
                for pg in groups
            )
            if not placeable:
                continue
            for pod_name in refs:
                p = by_name.get(pod_name)
                if p is None or pod_gated(p) or pod_scheduled(p):
                    continue
                p = self._store.patch(self.pod_rt, ns, pod_name, {"spec": {"nodeName": NODE}}, "merge")
                status = {
                    "phase": "Running",
                    "conditions": [
                        {"type": "PodScheduled", "status": "True", "lastTransitionTime": now()},
                        {
                            "type": "Ready",
                            "status": "False",
                            "reason": "ContainersNotReady",
                            "lastTransitionTime": now(),
                        },
                    ],
                }
                p = self._store.update(
                    self.pod_rt, ns, pod_name, {**p, "status": status}, subresource="status"
                )
                by_name[pod_name] = p
                self._start_pod(p, (ns, gang["metadata"]["name"]))

    def _start_pod(self, p: Object, gang: Key) -> None:
        uid = p["metadata"]["uid"]
        if gang in self._never or uid in self._timers:
            return
        loop = asyncio.get_running_loop()
        ns, name = p["metadata"]["namespace"], p["metadata"]["name"]
        self._timers[uid] = loop.call_later(
            self._timings.podgang_ready_seconds, self._pod_ready, ns, name, uid, gang
        )

    def _pod_ready(self, ns: str, name: str, uid: str, gang: Key) -> None:
        self._timers.pop(uid, None)
        try:
            p = self._store.get(self.pod_rt, ns, name)
        except NotFound:
            return
        if p["metadata"]["uid"] != uid or terminating(p):
            return
        self._set_ready(p, True, "PodReady", "")
        if gang in self._fall_back:
            self._fall_back.discard(gang)
            asyncio.get_running_loop().call_soon(self._fail_one, gang)
        self._mark_of(p)

    def _set_ready(self, p: Object, ready: bool, reason: str, message: str) -> None:
        meta = p["metadata"]
        conds = [c for c in (p.get("status") or {}).get("conditions") or [] if c.get("type") != "Ready"]
        conds.append({"type": "Ready", "status": "True" if ready else "False", "reason": reason,
                      "message": message, "lastTransitionTime": now()})  # fmt: skip
        status = {**(p.get("status") or {}), "conditions": conds}
        with contextlib.suppress(NotFound):
            body = {**p, "status": status, "metadata": {**meta}}
            body["metadata"].pop("resourceVersion", None)
            self._store.update(self.pod_rt, meta["namespace"], meta["name"], body, subresource="status")

    # -- RollingRecreate [U3, U4] ----------------------------------------------------------------------
    def _roll(
        self,
        pcs: Object,
        hash_: str,
        replicas: int,
        pclqs: dict[str, Object],
        pcsgs: dict[str, Object],
        pods: list[Object],
    ) -> None:
        """Grove's own update: one PodCliqueSet replica at a time; in it, standalone pods one by
        one (old Ready pods oldest first, while the PodClique keeps minAvailable Ready) and
        scaling-group replicas one by one (all their PodCliques deleted and recreated)."""
        key = (pcs["metadata"]["namespace"], pcs["metadata"]["name"])
        name = key[1]
        cliques = cliques_of(pcs)
        history = self.progress.setdefault(key, [])
        current = self.rolling.get(key)
        if current is not None and current[0] != hash_:
            current = None  # a newer template supersedes the update in flight
            history.clear()
        by_pclq: dict[str, list[Object]] = {}
        for p in pods:
            by_pclq.setdefault(p["metadata"]["labels"].get(PODCLIQUE, ""), []).append(p)

        def stale_pods(pname: str) -> list[Object]:
            want = pclqs[pname]["metadata"]["labels"].get(POD_TEMPLATE_HASH)
            return [
                p for p in by_pclq.get(pname, []) if p["metadata"]["labels"].get(POD_TEMPLATE_HASH) != want
            ]

        def stale_members(r: int, group: Object) -> dict[int, list[str]]:
            out: dict[int, list[str]] = {}
            for pname, obj in pclqs.items():
                labels = obj["metadata"]["labels"]
                if labels.get(PCSG) != pcsg_name(name, r, group["name"]) or labels.get(REPLICA_INDEX) != str(
                    r
                ):
                    continue
                clique = pname.rsplit("-", 1)[-1]
                clique = next((c for c in group.get("cliqueNames") or [] if pname.endswith(f"-{c}")), clique)
                if labels.get(POD_TEMPLATE_HASH) != pod_template_hash(pcs, cliques[clique]):
                    out.setdefault(int(labels[PCSG_REPLICA_INDEX]), []).append(pname)
            return out

        def replica_done(r: int) -> bool:
            for c in standalone_cliques(pcs):
                pname = pclq_name(name, r, c["name"])
                if pname not in pclqs or stale_pods(pname):
                    return False
                ready = sum(pod_ready(p) for p in by_pclq.get(pname, []))
                if ready < clique_min(c):
                    return False
            for g in groups_of(pcs):
                if stale_members(r, g):
                    return False
            return True

        if current is not None and replica_done(current[1]):
            for entry in history:
                if entry["replicaIndex"] == current[1] and "updateEndedAt" not in entry:
                    entry["updateEndedAt"] = now()
            current = None
            del self.rolling[key]
        if current is None:
            todo = [r for r in range(replicas) if not replica_done(r)]
            if not todo:
                return

            def order(r: int) -> tuple[bool, bool, int]:
                members = [p for p in pclqs.values() if p["metadata"]["labels"].get(REPLICA_INDEX) == str(r)]
                scheduled = any(
                    pod_scheduled(p) for m in members for p in by_pclq.get(m["metadata"]["name"], [])
                )
                breached = any((key[0], m["metadata"]["name"]) in self.breached_since for m in members)
                return (scheduled, not breached, r)

            r = min(todo, key=order)
            current = self.rolling[key] = (hash_, r, now())
            history.append({"replicaIndex": r, "updateStartedAt": current[2]})
        r = current[1]
        for c in standalone_cliques(pcs):
            pname = pclq_name(name, r, c["name"])
            if pname not in pclqs:
                continue
            old = stale_pods(pname)
            not_ready = [p for p in old if not pod_ready(p)]
            for p in not_ready:
                self._delete(self.pod_rt, p)
            if not_ready:
                continue
            mine = by_pclq.get(pname, [])
            fresh_pending = [p for p in mine if p not in old and not pod_ready(p)]
            ready = sum(pod_ready(p) for p in mine)
            if (
                old
                and not fresh_pending
                and ready >= clique_min(c)
                and len(mine) >= int(pclqs[pname]["spec"]["replicas"])
            ):
                oldest = min(old, key=lambda p: p["metadata"]["creationTimestamp"])
                self._delete(self.pod_rt, oldest)
        for g in groups_of(pcs):
            stale = stale_members(r, g)
            if not stale:
                continue
            fqn = pcsg_name(name, r, g["name"])
            want = int(pcsgs[fqn]["spec"]["replicas"]) if fqn in pcsgs else group_replicas(g)
            available = 0
            for j in range(want):
                members = [member_pclq_name(name, r, g["name"], j, c) for c in g.get("cliqueNames") or []]
                if all(
                    m in pclqs
                    and sum(pod_ready(p) for p in by_pclq.get(m, []))
                    >= int(pclqs[m]["spec"].get("minAvailable", 1))
                    for m in members
                ):
                    available += 1
            in_flight = available < want - len(stale)
            for _, members in sorted(stale.items()):
                unavailable = any(
                    sum(pod_ready(p) for p in by_pclq.get(m, []))
                    < int(pclqs[m]["spec"].get("minAvailable", 1))
                    for m in members
                )
                if unavailable or (not in_flight and available >= group_min(g)):
                    for m in members:
                        self._delete(self.pclq_rt, pclqs[m])
                    if not unavailable:
                        break

    # -- gang termination [T2-T4] ------------------------------------------------------------------------
    def _gang_termination(
        self,
        pcs: Object,
        replicas: int,
        pclqs: dict[str, Object],
        pcsgs: dict[str, Object],
        pods: list[Object],
    ) -> None:
        ns, name = pcs["metadata"]["namespace"], pcs["metadata"]["name"]
        delay = termination_delay(pcs)
        clock = time.monotonic()
        rolling = self.rolling.get((ns, name)) if strategy(pcs) == "RollingRecreate" else None
        by_pclq: dict[str, list[Object]] = {}
        for q in pods:
            by_pclq.setdefault(q["metadata"]["labels"].get(PODCLIQUE, ""), []).append(q)
        breached: dict[str, float] = {}
        for pname, obj in pclqs.items():
            key = (ns, pname)
            held = by_pclq.get(pname, [])
            minimum = int(obj["spec"].get("minAvailable", 1))
            scheduled = sum(pod_scheduled(q) for q in held)
            ready = sum(pod_ready(q) for q in held)
            if scheduled >= minimum:
                self.ever_scheduled.add(key)
            r = int(obj["metadata"]["labels"].get(REPLICA_INDEX, -1))
            suppressed = rolling is not None and rolling[1] == r  # Unknown while updating [T2]
            if key in self.ever_scheduled and not suppressed and (scheduled < minimum or ready < minimum):
                breached[pname] = self.breached_since.setdefault(key, clock)
            else:
                self.breached_since.pop(key, None)
        for r in range(replicas):
            mine = {
                p: t
                for p, t in breached.items()
                if pclqs[p]["metadata"]["labels"].get(REPLICA_INDEX) == str(r)
            }
            standalone = [p for p in mine if pclqs[p]["metadata"]["labels"].get(COMPONENT) == "pcs-podclique"]
            expired_standalone = [p for p in standalone if clock - mine[p] >= delay]
            for group in groups_of(pcs):
                fqn = pcsg_name(name, r, group["name"])
                members = {p: t for p, t in mine.items() if pclqs[p]["metadata"]["labels"].get(PCSG) == fqn}
                by_j: dict[int, float] = {}
                for p, t in members.items():
                    j = int(pclqs[p]["metadata"]["labels"][PCSG_REPLICA_INDEX])
                    by_j[j] = min(t, by_j.get(j, t))
                want = int(pcsgs[fqn]["spec"]["replicas"]) if fqn in pcsgs else group_replicas(group)
                healthy = want - len(by_j)
                expired = [j for j, t in by_j.items() if clock - t >= delay]
                if healthy < group_min(group):
                    if expired:
                        expired_standalone.append(fqn)  # the scaling group breached: the whole replica
                    continue
                for j in expired:
                    doomed = [p for p, o in pclqs.items() if o["metadata"]["labels"].get(PCSG) == fqn
                              and o["metadata"]["labels"].get(PCSG_REPLICA_INDEX) == str(j)]  # fmt: skip
                    self.checks.gang_terminated(
                        ns, f"{fqn}-{j}", f"scaling-group replica {j} of {fqn}", delay
                    )
                    for p in doomed:
                        self._delete(self.pclq_rt, pclqs[p])
                        self.breached_since.pop((ns, p), None)
            if expired_standalone:
                self.checks.gang_terminated(
                    ns,
                    f"{name}-{r}",
                    f"PodCliqueSet replica {r} ({', '.join(sorted(expired_standalone))})",
                    delay,
                )
                for p, obj in pclqs.items():
                    if obj["metadata"]["labels"].get(REPLICA_INDEX) == str(r):
                        self._delete(self.pclq_rt, obj)
                        self.breached_since.pop((ns, p), None)
            elif mine:
                left = min(delay - (clock - t) for t in mine.values())
                self._requeue((ns, name), max(0.05, left))
