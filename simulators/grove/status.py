"""Status of PodCliques, PodCliqueScalingGroups and the PodCliqueSet, from the PodGangs.

A pod is ready when its PodGang is Available; a pod is updated when the generation hash in its
name (see `model.py`) is the PodCliqueSet's current one. Availability follows the CRDs'
definitions: a scaling-group replica is available when each of its PodCliques has at least
`minAvailable` ready pods; a PodCliqueSet replica is available when each standalone PodClique
has at least `minAvailable` ready pods and each scaling group at least `minAvailable` available
replicas.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from simulators.grove.model import (
    GENERATION_HASH,
    IN_FLIGHT_ANNOTATION,
    PCSG,
    Object,
    ReplicaPlan,
    condition,
    is_available,
    pod_hash,
)
from simulators.kube.store import NotFound, ResourceType

if TYPE_CHECKING:
    from simulators.grove.controller import GroveController

Pods = dict[str, list[tuple[str, bool]]]  # PodClique name -> (generation hash, ready) per pod


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pods_of(gangs: dict[str, Object]) -> Pods:
    pods: Pods = {}
    for gang in gangs.values():
        ready = is_available(gang)
        for group in gang["spec"].get("podgroups", []):
            for ref in group.get("podReferences", []):
                pods.setdefault(group["name"], []).append((pod_hash(group["name"], ref["name"]), ready))
    return pods


def ready_count(pods: Pods, pclq: str) -> int:
    return sum(1 for _, ready in pods.get(pclq, []) if ready)


def updated(pods: Pods, pclq: str, hash_: str) -> bool:
    return all(h == hash_ for h, _ in pods.get(pclq, []))


def group_available(pods: Pods, pclq_min: dict[str, int], members: tuple[str, ...]) -> bool:
    return all(ready_count(pods, p) >= pclq_min.get(p, 1) for p in members)


def replica_available(plan: ReplicaPlan, pods: Pods, pclq_min: dict[str, int]) -> bool:
    """The PodCliqueSet replica is available (CRD definition of `availableReplicas`)."""
    if any(ready_count(pods, p) < m for p, m in plan.standalone_min):
        return False
    for _, minimum, members in plan.group_min:
        if sum(group_available(pods, pclq_min, m) for m in members) < minimum:
            return False
    return True


def clique_minimums(pclqs: dict[str, Object]) -> dict[str, int]:
    out = {}
    for name, obj in pclqs.items():
        spec = obj["spec"]
        out[name] = int(spec.get("minAvailable", spec.get("replicas", 1)))
    return out


class StatusWriter:
    def __init__(self, controller: GroveController) -> None:
        self._c = controller

    def write(
        self,
        pcs: Object,
        hash_: str,
        plans: list[ReplicaPlan],
        gangs: dict[str, Object],
        pclqs: dict[str, Object],
        progress: tuple[str, list[Object]] | None,
    ) -> None:
        c = self._c
        ns, name = pcs["metadata"]["namespace"], pcs["metadata"]["name"]
        stamp = now()
        pods = pods_of(gangs)
        mins = clique_minimums(pclqs)
        for pclq_name, obj in pclqs.items():
            mine = pods.get(pclq_name, [])
            ready = ready_count(pods, pclq_name)
            old = (obj.get("status") or {}).get("conditions") or []
            breached = ready < mins[pclq_name]
            status: Object = {
                "observedGeneration": obj["metadata"]["generation"],
                "replicas": len(mine),
                "readyReplicas": ready,
                "scheduledReplicas": len(mine),
                "scheduleGatedReplicas": 0,
                "updatedReplicas": sum(1 for h, _ in mine if h == hash_),
                "conditions": [
                    condition(
                        "MinAvailableBreached",
                        breached,
                        "InsufficientReadyPods" if breached else "SufficientReadyPods",
                        f"{ready} ready pods, minAvailable {mins[pclq_name]}",
                        stamp,
                        old,
                    ),
                    condition("PodCliqueScheduled", True, "SufficientScheduledPods", "", stamp, old),
                ],
            }
            if mine and updated(pods, pclq_name, hash_):
                status["currentPodCliqueSetGenerationHash"] = hash_
            self._put(c.pclq_rt, ns, pclq_name, status)

        updated_pclqs = sum(1 for p in pclqs if p in pods and updated(pods, p, hash_))
        updated_groups = 0
        for plan in plans:
            for fqn, minimum, members in plan.group_min:
                avail = sum(group_available(pods, mins, m) for m in members)
                done = sum(all(updated(pods, p, hash_) for p in m) for m in members)
                updated_groups += done == len(members)
                try:
                    old = (c._store.get(c.pcsg_rt, ns, fqn).get("status") or {}).get("conditions") or []
                except NotFound:
                    continue
                status = {
                    "replicas": len(members),
                    "scheduledReplicas": len(members),
                    "availableReplicas": avail,
                    "updatedReplicas": done,
                    "selector": f"{PCSG}={fqn}",
                    "conditions": [
                        condition(
                            "MinAvailableBreached",
                            avail < minimum,
                            "InsufficientAvailablePodCliqueScalingGroupReplicas"
                            if avail < minimum
                            else "SufficientAvailablePodCliqueScalingGroupReplicas",
                            f"{avail} available replicas, minAvailable {minimum}",
                            stamp,
                            old,
                        )
                    ],
                }
                if done == len(members):
                    status["currentPodCliqueSetGenerationHash"] = hash_
                self._put(c.pcsg_rt, ns, fqn, status)

        def replica_updated(plan: ReplicaPlan) -> bool:
            return all(
                g.name in gangs and gangs[g.name]["metadata"]["labels"].get(GENERATION_HASH) == hash_
                for g in plan.gangs
            ) and all(updated(pods, cp.name, hash_) for cp in plan.cliques)

        old_status = pcs.get("status") or {}
        status = {
            "observedGeneration": pcs["metadata"]["generation"],
            "replicas": len(plans),
            "availableReplicas": sum(replica_available(p, pods, mins) for p in plans),
            "updatedReplicas": sum(replica_updated(p) for p in plans),
            "currentGenerationHash": hash_,
            "podGangStatuses": [
                {
                    "name": g["metadata"]["name"],
                    "phase": (g.get("status") or {}).get("phase", "Pending"),
                    "conditions": (g.get("status") or {}).get("conditions", []),
                }
                for g in gangs.values()
            ],
        }
        for k in ("conditions", "hpaPodSelector", "lastErrors"):
            if k in old_status:
                status[k] = old_status[k]
        upd = dict(old_status.get("updateProgress") or {})
        previous = old_status.get("currentGenerationHash")
        if previous is not None and previous != hash_:
            upd = {"updateStartedAt": stamp}  # a new update starts (and supersedes one in flight)
        if upd:
            total_groups = sum(len(p.group_min) for p in plans)
            upd.update(
                totalPodCliquesCount=len(pclqs),
                updatedPodCliquesCount=updated_pclqs,
                totalPodCliqueScalingGroupsCount=total_groups,
                updatedPodCliqueScalingGroupsCount=updated_groups,
            )
            if progress is not None and progress[0] == hash_ and progress[1]:
                upd["currentlyUpdating"] = [dict(e) for e in progress[1]]
            flying = any((ns, g) in c.in_flight for g in gangs)
            done = status["updatedReplicas"] == len(plans) and not flying
            if done and "updateEndedAt" not in upd:
                upd["updateEndedAt"] = stamp
            status["updateProgress"] = upd
        self._put(c.pcs_rt, ns, name, status)

        in_flight = ",".join(sorted(g for (gns, g) in c.in_flight if gns == ns and g in gangs))
        annotations = pcs["metadata"].get("annotations") or {}
        if annotations.get(IN_FLIGHT_ANNOTATION, "") != in_flight:
            value = in_flight or None
            c._store.patch(
                c.pcs_rt, ns, name, {"metadata": {"annotations": {IN_FLIGHT_ANNOTATION: value}}}, "merge"
            )

    def _put(self, rt: ResourceType, ns: str, name: str, status: Object) -> None:
        store = self._c._store
        try:
            obj = store.get(rt, ns, name)
        except NotFound:
            return
        if obj.get("status") == status:
            return
        obj["status"] = status
        obj["metadata"].pop("resourceVersion", None)
        store.update(rt, ns, name, obj, subresource="status")
