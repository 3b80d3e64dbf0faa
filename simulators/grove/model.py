"""Grove's object model at the pinned commit, as the simulator realises it: names, labels, hashes,
the PodGangMap layout and the object builders. Pure functions over plain dicts; the controller
(`controller.py`) decides when to write. Every rule here has its row, with the upstream file and
commit it was read from, in `BEHAVIOUR.md` (the numbers in brackets, e.g. [N3], name the rows).

Pinned Grove: ai-dynamo/grove `6eaa77f0debebd29f373a27c68f25931fc734156` (PR #778's final head,
the PodGangMap change released as v0.1.0-alpha.12); see `BEHAVIOUR.md` for why.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

Object = dict[str, Any]

GROVE_API = "grove.io/v1alpha1"
SCHEDULER_API = "scheduler.grove.io/v1alpha1"

# Label keys as Grove spells them (operator/api/common/labels.go at the pin) [L1-L7].
MANAGED_BY = "app.kubernetes.io/managed-by"
PART_OF = "app.kubernetes.io/part-of"
NAME = "app.kubernetes.io/name"
COMPONENT = "app.kubernetes.io/component"
REPLICA_INDEX = "grove.io/podcliqueset-replica-index"
GENERATION_HASH = "grove.io/podcliqueset-generation-hash"
POD_TEMPLATE_HASH = "grove.io/pod-template-hash"
PODCLIQUE = "grove.io/podclique"
PODGANG = "grove.io/podgang"
POD_INDEX = "grove.io/podclique-pod-index"
PCSG = "grove.io/podcliquescalinggroup"
PCSG_REPLICA_INDEX = "grove.io/podcliquescalinggroup-replica-index"
EPOCH = "grove.io/epoch"
PODGANG_ROLE = "grove.io/podgang-role"
SCHEDULER_NAME = "grove.io/scheduler-name"
OPERATOR = "grove-operator"
SCHEDULER = "kai-scheduler"
GATE = "grove.io/podgang-pending-creation"  # the scheduling gate Grove creates every pod with [P3]

ANCHOR, TAIL, SCALE_OUT = "Anchor", "Tail", "ScaleOut"
DEFAULT_TERMINATION_DELAY = 4 * 3600.0  # the webhook's default terminationDelay [T1]

# -- hashes [H1-H3] ------------------------------------------------------------------------------
_ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery rand.SafeEncodeString's alphabet


def _fnv64a(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for byte in data:
        h ^= byte
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def compute_hash(value: Any) -> str:
    """FNV-64a of a deterministic dump, rendered as SafeEncodeString renders it. Grove dumps Go
    structs with a deep-hash printer; we dump canonical JSON, so the strings differ from Grove's
    but move exactly when Grove's do (what they cover is what matters) [H1]."""
    blob = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    return "".join(_ALPHANUMS[ord(c) % len(_ALPHANUMS)] for c in str(_fnv64a(blob)))


def clique_pod_template(pcs: Object, clique: Object) -> Object:
    """What Grove hashes for one clique: its labels, annotations and podSpec, with the template's
    priorityClassName [H1]. Not replicas, minAvailable, scaling groups, or anything else."""
    spec = dict((clique.get("spec") or {}).get("podSpec") or {})
    priority = (pcs["spec"].get("template") or {}).get("priorityClassName")
    if priority:
        spec["priorityClassName"] = priority
    else:
        spec.pop("priorityClassName", None)
    return {
        "labels": clique.get("labels") or {},
        "annotations": clique.get("annotations") or {},
        "spec": spec,
    }


def pod_template_hash(pcs: Object, clique: Object) -> str:
    """`grove.io/pod-template-hash` of one clique [H2]."""
    return compute_hash(clique_pod_template(pcs, clique))


def generation_hash(pcs: Object) -> str:
    """`status.currentGenerationHash`: the pod templates of every clique, in order [H1]."""
    return compute_hash([clique_pod_template(pcs, c) for c in _template(pcs).get("cliques") or []])


# -- the template, with Grove's defaults [T1] ---------------------------------------------------------
def _template(pcs: Object) -> Object:
    return pcs["spec"].get("template") or {}


def cliques_of(pcs: Object) -> dict[str, Object]:
    return {c["name"]: c for c in _template(pcs).get("cliques") or []}


def groups_of(pcs: Object) -> list[Object]:
    return list(_template(pcs).get("podCliqueScalingGroups") or [])


def standalone_cliques(pcs: Object) -> list[Object]:
    grouped = {c for g in groups_of(pcs) for c in g.get("cliqueNames") or []}
    return [c for c in _template(pcs).get("cliques") or [] if c["name"] not in grouped]


def clique_replicas(clique: Object) -> int:
    return int((clique.get("spec") or {}).get("replicas", 1))


def clique_min(clique: Object) -> int:
    """A clique's minAvailable; the webhook defaults it to the clique's replicas [T1]."""
    spec = clique.get("spec") or {}
    return int(spec.get("minAvailable", spec.get("replicas", 1)))


def group_replicas(group: Object) -> int:
    return int(group.get("replicas", 1))


def group_min(group: Object) -> int:
    return int(group.get("minAvailable", 1))


def termination_delay(pcs: Object) -> float:
    """`spec.template.terminationDelay` in seconds (a Go duration), 4h when unset [T1]."""
    text = _template(pcs).get("terminationDelay")
    if not text:
        return DEFAULT_TERMINATION_DELAY
    total, found = 0.0, False
    for number, unit in re.findall(r"([0-9.]+)(h|ms|m|s)", str(text)):
        found = True
        total += float(number) * {"h": 3600, "m": 60, "s": 1, "ms": 0.001}[unit]
    return total if found else DEFAULT_TERMINATION_DELAY


def strategy(pcs: Object) -> str:
    return str((pcs["spec"].get("updateStrategy") or {}).get("type") or "RollingRecreate")


def auto_update_in_progress(pcs: Object, hash_: str) -> bool:
    """Grove rolls by itself only under RollingRecreate and only while an update is open [U3, U6]:
    one starts when the template hash moves (under OnDelete it ends at once [U5]), and it stays
    open until Grove ends it. A switch from OnDelete does not move the hash [H1], so the update
    that OnDelete ended stays ended and nothing rolls (`isAutoUpdateInProgress`, rollingupdate.go
    L293-296 @P). `hash_` is the hash this reconcile computed, written to the status after it."""
    if strategy(pcs) == "OnDelete":
        return False
    status = pcs.get("status") or {}
    previous = status.get("currentGenerationHash")
    if previous is None:
        return False  # the first reconcile sets the hash: no update [H3]
    if previous != hash_:
        return True  # a new update starts in this reconcile, under RollingRecreate [H3]
    progress = status.get("updateProgress") or {}
    return bool(progress) and "updateEndedAt" not in progress


# -- names [N1-N5] ----------------------------------------------------------------------------------
def pclq_name(pcs: str, replica: int, clique: str) -> str:
    return f"{pcs}-{replica}-{clique}"


def pcsg_name(pcs: str, replica: int, group: str) -> str:
    return f"{pcs}-{replica}-{group}"


def member_pclq_name(pcs: str, replica: int, group: str, j: int, clique: str) -> str:
    return f"{pcsg_name(pcs, replica, group)}-{j}-{clique}"


def anchor_gang_name(pcs: str, replica: int, epoch: str) -> str:
    return f"{pcs}-{replica}-{epoch}"


def member_gang_name(pcs: str, replica: int, epoch: str, group: str, j: int) -> str:
    return f"{pcs}-{replica}-{epoch}-{group}-{j}"


# -- the PodGangMap [G1-G4] -----------------------------------------------------------------------------
def bootstrap_entries(pcs: Object, epoch: int, hash_: str, pcsg_replicas: dict[str, int]) -> list[Object]:
    """A new replica's entries: the Anchor (every standalone pod, scaling-group replicas below
    minAvailable), one Tail (the scaling-group replicas above), one empty ScaleOut [G2]."""
    anchor: Object = {
        "epoch": str(epoch),
        "podCliqueSetGenerationHash": hash_,
        "role": ANCHOR,
        "anchorIndex": 0,
        "podCliques": {c["name"]: clique_replicas(c) for c in standalone_cliques(pcs)},
        "pcsgReplicaIndices": {
            g["name"]: list(range(min(group_min(g), pcsg_replicas.get(g["name"], group_replicas(g)))))
            for g in groups_of(pcs)
        },
    }
    entries = [anchor]
    tail = {
        g["name"]: list(range(group_min(g), pcsg_replicas.get(g["name"], group_replicas(g))))
        for g in groups_of(pcs)
        if pcsg_replicas.get(g["name"], group_replicas(g)) > group_min(g)
    }
    if tail:
        entries.append(
            {
                "epoch": str(epoch + 1),
                "podCliqueSetGenerationHash": hash_,
                "role": TAIL,
                "pcsgReplicaIndices": tail,
                "dependsOn": [str(epoch)],
            }
        )
    if groups_of(pcs):
        entries.append(
            {
                "epoch": str(epoch + 2),
                "podCliqueSetGenerationHash": hash_,
                "role": SCALE_OUT,
                "dependsOn": [str(epoch)],
            }
        )
    return entries


def ensure_scale_out(pcs: Object, entries: list[Object], hash_: str, epoch: str) -> bool:
    """Grove's `ensureScaleOutEntry` [G5]: with scaling groups and no ScaleOut entry at the
    current hash, add an empty one that depends on the AnchorIndex-0 anchor at the current hash,
    or on "" when there is none: after a template change under OnDelete the entries never
    advance [G4], so its dependency is never found and a scale-out joining it stays gated."""
    if not groups_of(pcs) or any(
        e["role"] == SCALE_OUT and e.get("podCliqueSetGenerationHash") == hash_ for e in entries
    ):
        return False
    anchor = next(
        (
            e["epoch"]
            for e in entries
            if e["role"] == ANCHOR
            and e.get("podCliqueSetGenerationHash") == hash_
            and e.get("anchorIndex") == 0
        ),
        "",
    )
    entries.append(
        {"epoch": epoch, "podCliqueSetGenerationHash": hash_, "role": SCALE_OUT, "dependsOn": [anchor]}
    )
    return True


def without_empty(entries: list[Object], hash_: str) -> list[Object]:
    """Grove's `removeEmptyEntries` [G5]: entries with no pods and no scaling-group replicas go,
    but for the ScaleOut entry at the current hash."""

    def empty(e: Object) -> bool:
        return not any((e.get("podCliques") or {}).values()) and not any(
            (e.get("pcsgReplicaIndices") or {}).values()
        )

    return [
        e
        for e in entries
        if (e["role"] == SCALE_OUT and e.get("podCliqueSetGenerationHash") == hash_) or not empty(e)
    ]


@dataclass(frozen=True)
class GangLayout:
    """One PodGang of a replica, from its PodGangMap entry."""

    name: str
    replica: int
    epoch: str
    role: str
    pclqs: tuple[str, ...]  # the PodCliques whose pods it holds (one podgroup each)


def layout(pcs: Object, replica: int, pgm: Object) -> tuple[list[GangLayout], dict[str, str]]:
    """The PodGangs one PodGangMap describes, and PodClique -> the PodGang its pods join [G3]."""
    name = pcs["metadata"]["name"]
    gangs: list[GangLayout] = []
    gang_of: dict[str, str] = {}
    for entry in pgm["spec"].get("entries") or []:
        epoch, role = str(entry["epoch"]), entry["role"]
        indices = entry.get("pcsgReplicaIndices") or {}
        if role == ANCHOR:
            gang = anchor_gang_name(name, replica, epoch)
            members = [pclq_name(name, replica, c) for c in (entry.get("podCliques") or {})]
            for group in groups_of(pcs):
                for j in indices.get(group["name"], []):
                    members += [
                        member_pclq_name(name, replica, group["name"], j, c)
                        for c in group.get("cliqueNames") or []
                    ]
            gangs.append(GangLayout(gang, replica, epoch, role, tuple(members)))
            for m in members:
                gang_of[m] = gang
            continue
        for group in groups_of(pcs):
            for j in indices.get(group["name"], []):
                gang = member_gang_name(name, replica, epoch, group["name"], j)
                members = [
                    member_pclq_name(name, replica, group["name"], j, c)
                    for c in group.get("cliqueNames") or []
                ]
                gangs.append(GangLayout(gang, replica, epoch, role, tuple(members)))
                for m in members:
                    gang_of[m] = gang
    return gangs, gang_of


# -- object builders --------------------------------------------------------------------------------
def owner_ref(owner: Object) -> Object:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def base_labels(pcs: Object) -> dict[str, str]:
    return {MANAGED_BY: OPERATOR, PART_OF: pcs["metadata"]["name"]}


def podclique_labels(
    pcs: Object, clique: Object, name: str, replica: int, gang: str, group: str | None, j: int | None
) -> dict[str, str]:
    """The template's labels first, Grove's on top [L2, L3]."""
    labels = {
        **(clique.get("labels") or {}),
        **base_labels(pcs),
        NAME: name,
        COMPONENT: "pcs-podclique" if group is None else "pcsg-podclique",
        REPLICA_INDEX: str(replica),
        PODGANG: gang,
        POD_TEMPLATE_HASH: pod_template_hash(pcs, clique),
    }
    if group is not None:
        labels[PCSG] = pcsg_name(pcs["metadata"]["name"], replica, group)
        labels[PCSG_REPLICA_INDEX] = str(j)
    return labels


def podclique_spec(clique: Object, replicas: int) -> Object:
    spec = {k: v for k, v in (clique.get("spec") or {}).items() if k != "autoScalingConfig"}
    spec["replicas"] = replicas
    return spec


def pod(pcs: Object, pclq: Object, index: int) -> Object:
    """A pod of a PodClique: every label of its PodClique, its index, gated [P1-P3]."""
    labels = pclq["metadata"]["labels"]
    pcs_name, replica = pcs["metadata"]["name"], labels[REPLICA_INDEX]
    pod_spec = dict(pclq["spec"].get("podSpec") or {})
    priority = _template(pcs).get("priorityClassName")
    if priority:
        pod_spec["priorityClassName"] = priority
    pod_spec["schedulingGates"] = [*(pod_spec.get("schedulingGates") or []), {"name": GATE}]
    pod_spec["hostname"] = f"{pclq['metadata']['name']}-{index}"
    pod_spec["subdomain"] = f"{pcs_name}-{replica}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{pclq['metadata']['name']}-",
            "namespace": pclq["metadata"]["namespace"],
            "labels": {**labels, PODCLIQUE: pclq["metadata"]["name"], POD_INDEX: str(index)},
            "annotations": dict(pclq["metadata"].get("annotations") or {}),
            "ownerReferences": [owner_ref(pclq)],
        },
        "spec": pod_spec,
    }


def pcs_for_workload(
    namespace: str,
    name: str,
    replicas: int,
    cliques: list[str],
    groups: list[tuple[str, list[str], int, int]],
    update_strategy: str,
    image: str,
) -> Object:
    """A PodCliqueSet for a site workload: standalone cliques of 2 pods (minAvailable 1), one pod
    per scaling-group clique; one container `main` per clique."""
    grouped = {c for _, members, _, _ in groups for c in members}
    template_cliques = []
    for clique in [*cliques, *(c for _, members, _, _ in groups for c in members)]:
        pods, minimum = (1, 1) if clique in grouped else (2, 1)
        template_cliques.append(
            {
                "name": clique,
                "spec": {
                    "roleName": clique,
                    "replicas": pods,
                    "minAvailable": minimum,
                    "podSpec": {"containers": [{"name": "main", "image": image}]},
                },
            }
        )
    return {
        "apiVersion": GROVE_API,
        "kind": "PodCliqueSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "updateStrategy": {"type": update_strategy},
            "template": {
                "cliques": template_cliques,
                "podCliqueScalingGroups": [
                    {"name": g, "cliqueNames": members, "replicas": reps, "minAvailable": mins}
                    for g, members, reps, mins in groups
                ],
            },
        },
    }


def condition(type_: str, status: str, reason: str, message: str, now: str, old: list[Object]) -> Object:
    """A condition that keeps its lastTransitionTime while its status does not change."""
    for c in old:
        if c.get("type") == type_ and c.get("status") == status:
            now = c.get("lastTransitionTime", now)
    return {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": now}


def pod_ready(p: Object) -> bool:
    conds = (p.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def pod_gated(p: Object) -> bool:
    return bool((p.get("spec") or {}).get("schedulingGates"))


def pod_scheduled(p: Object) -> bool:
    return bool((p.get("spec") or {}).get("nodeName"))


def terminating(obj: Object) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))
