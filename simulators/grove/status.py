"""Status of PodCliques, PodCliqueScalingGroups and the PodCliqueSet, from the pods, as Grove's
status reconcilers compute them at the pin (rows [S3]-[S6] of `BEHAVIOUR.md`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from simulators.grove.model import (
    PCSG,
    PCSG_REPLICA_INDEX,
    POD_TEMPLATE_HASH,
    PODCLIQUE,
    REPLICA_INDEX,
    Object,
    clique_min,
    condition,
    groups_of,
    pclq_name,
    pcsg_name,
    pod_gated,
    pod_ready,
    pod_scheduled,
    standalone_cliques,
    strategy,
)
from simulators.kube.store import NotFound, ResourceType

if TYPE_CHECKING:
    from simulators.grove.controller import GroveController


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class StatusWriter:
    def __init__(self, controller: GroveController) -> None:
        self._c = controller

    def write(
        self,
        pcs: Object,
        hash_: str,
        replicas: int,
        pclqs: dict[str, Object],
        pcsgs: dict[str, Object],
        pods: list[Object],
    ) -> None:
        c = self._c
        ns, name = pcs["metadata"]["namespace"], pcs["metadata"]["name"]
        stamp = now()
        rolling = c.rolling.get((ns, name)) if strategy(pcs) == "RollingRecreate" else None
        by_pclq: dict[str, list[Object]] = {}
        for p in pods:
            by_pclq.setdefault(p["metadata"]["labels"].get(PODCLIQUE, ""), []).append(p)
        pclq_status: dict[str, Object] = {}
        for pname, obj in pclqs.items():
            mine = by_pclq.get(pname, [])
            want_hash = obj["metadata"]["labels"].get(POD_TEMPLATE_HASH)
            minimum = int(obj["spec"].get("minAvailable", 1))
            ready = sum(pod_ready(p) for p in mine)
            scheduled = sum(pod_scheduled(p) for p in mine)
            updated = sum(p["metadata"]["labels"].get(POD_TEMPLATE_HASH) == want_hash for p in mine)
            old = (obj.get("status") or {}).get("conditions") or []
            r = int(obj["metadata"]["labels"].get(REPLICA_INDEX, -1))
            if rolling is not None and rolling[1] == r:
                breach = ("Unknown", "UpdateInProgress", "an update of this PodClique is in progress")
            elif scheduled < minimum:
                breach = (
                    "True",
                    "ScheduledReplicasBelowMinAvailable",
                    f"{scheduled} scheduled, minAvailable {minimum}",
                )
            elif ready < minimum:
                breach = ("True", "InsufficientReadyPods", f"{ready} ready, minAvailable {minimum}")
            else:
                breach = ("False", "SufficientReadyPods", f"{ready} ready, minAvailable {minimum}")
            status: Object = {
                "observedGeneration": obj["metadata"]["generation"],
                "replicas": len(mine),
                "readyReplicas": ready,
                "scheduledReplicas": scheduled,
                "scheduleGatedReplicas": sum(pod_gated(p) for p in mine),
                "updatedReplicas": updated,
                "currentPodTemplateHash": want_hash,
                "conditions": [
                    condition("MinAvailableBreached", *breach, stamp, old),
                    condition(
                        "PodCliqueScheduled",
                        "True" if scheduled >= minimum else "False",
                        "SufficientScheduledPods" if scheduled >= minimum else "InsufficientScheduledPods",
                        f"{scheduled} scheduled, minAvailable {minimum}",
                        stamp,
                        old,
                    ),
                ],
            }
            previous = (obj.get("status") or {}).get("currentPodCliqueSetGenerationHash")
            if (
                updated == int(obj["spec"].get("replicas", 1))
                and len(mine) == updated
                and (rolling is None or rolling[1] != r)
            ):
                status["currentPodCliqueSetGenerationHash"] = hash_  # only once converged [S3]
            elif previous:
                status["currentPodCliqueSetGenerationHash"] = previous
            pclq_status[pname] = status
            self._put(c.pclq_rt, ns, pname, status)

        def pclq_ok(pname: str) -> bool:
            s = pclq_status.get(pname)
            return s is not None and s["readyReplicas"] >= int(pclqs[pname]["spec"].get("minAvailable", 1))

        def pclq_updated(pname: str) -> bool:
            s = pclq_status.get(pname)
            return s is not None and s.get("currentPodCliqueSetGenerationHash") == hash_

        group_ok: dict[str, bool] = {}
        group_updated: dict[str, bool] = {}
        for fqn, obj in pcsgs.items():
            members: dict[int, list[str]] = {}
            for pname, p in pclqs.items():
                if p["metadata"]["labels"].get(PCSG) == fqn:
                    members.setdefault(int(p["metadata"]["labels"][PCSG_REPLICA_INDEX]), []).append(pname)
            want = int(obj["spec"]["replicas"])
            minimum = int(obj["spec"].get("minAvailable", 1))
            available = sum(all(pclq_ok(m) for m in ms) for j, ms in members.items() if j < want)
            scheduled = sum(
                all(
                    pclq_status[m]["scheduledReplicas"] >= int(pclqs[m]["spec"].get("minAvailable", 1))
                    for m in ms
                )
                for j, ms in members.items()
                if j < want
            )
            done = sum(all(pclq_updated(m) for m in ms) for j, ms in members.items() if j < want)
            old = (obj.get("status") or {}).get("conditions") or []
            group_ok[fqn] = available >= minimum
            group_updated[fqn] = done == want
            status = {
                "observedGeneration": obj["metadata"]["generation"],
                "replicas": want,
                "scheduledReplicas": scheduled,
                "availableReplicas": available,
                "updatedReplicas": done,
                "selector": f"{PCSG}={fqn}",
                "conditions": [
                    condition(
                        "MinAvailableBreached",
                        "False" if available >= minimum else "True",
                        "SufficientAvailablePodCliqueScalingGroupReplicas"
                        if available >= minimum
                        else "InsufficientAvailablePodCliqueScalingGroupReplicas",
                        f"{available} available replicas, minAvailable {minimum}",
                        stamp,
                        old,
                    )
                ],
            }
            if done == want:
                status["currentPodCliqueSetGenerationHash"] = hash_
            elif (obj.get("status") or {}).get("currentPodCliqueSetGenerationHash"):
                status["currentPodCliqueSetGenerationHash"] = obj["status"][
                    "currentPodCliqueSetGenerationHash"
                ]
            self._put(c.pcsg_rt, ns, fqn, status)

        available_replicas = updated_replicas = 0
        updated_pclqs = total_pclqs = updated_groups = total_groups = 0
        for r in range(replicas):
            standalone = [pclq_name(name, r, s["name"]) for s in standalone_cliques(pcs)]
            groups = [pcsg_name(name, r, g["name"]) for g in groups_of(pcs)]
            ok = all(pclq_ok(p) for p in standalone) and all(group_ok.get(g, False) for g in groups)
            available_replicas += ok
            current = [
                pclq_updated(p) and pclq_status[p]["updatedReplicas"] >= clique_min(_clique(pcs, p, name, r))
                for p in standalone
            ]
            updated_replicas += ok and all(current) and all(group_updated.get(g, False) for g in groups)
            total_pclqs += len(standalone)
            updated_pclqs += sum(current)
            total_groups += len(groups)
            updated_groups += sum(group_updated.get(g, False) for g in groups)
        old_status = pcs.get("status") or {}
        status = {
            "observedGeneration": pcs["metadata"]["generation"],
            "replicas": replicas,
            "availableReplicas": available_replicas,
            "updatedReplicas": updated_replicas,
            "currentGenerationHash": hash_,
        }
        for k in ("conditions", "hpaPodSelector", "lastErrors"):
            if k in old_status:
                status[k] = old_status[k]
        upd = dict(old_status.get("updateProgress") or {})
        previous = old_status.get("currentGenerationHash")
        if previous is not None and previous != hash_:
            upd = {"updateStartedAt": stamp}  # a new update starts [H3]
            if strategy(pcs) == "OnDelete":
                upd["updateEndedAt"] = stamp  # OnDelete: it ends at once [U5]
        if upd:
            upd.update(
                totalPodCliquesCount=total_pclqs,
                updatedPodCliquesCount=updated_pclqs,
                totalPodCliqueScalingGroupsCount=total_groups,
                updatedPodCliqueScalingGroupsCount=updated_groups,
            )
            if strategy(pcs) == "RollingRecreate":
                history = c.progress.get((ns, name)) or []
                if history:
                    upd["currentlyUpdating"] = [dict(e) for e in history if "updateEndedAt" not in e][
                        -1:
                    ] or None
                    if upd["currentlyUpdating"] is None:
                        del upd["currentlyUpdating"]
                if updated_replicas == replicas and "updateEndedAt" not in upd:
                    upd["updateEndedAt"] = stamp
            status["updateProgress"] = upd
        self._put(c.pcs_rt, ns, name, status)

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


def _clique(pcs: Object, pname: str, name: str, r: int) -> Object:
    for c in standalone_cliques(pcs):
        if pclq_name(name, r, c["name"]) == pname:
            return c
    return {"spec": {}}
