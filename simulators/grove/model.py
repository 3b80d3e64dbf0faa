"""Grove's object model as the simulator realises it: template hash, PodGang layout, builders.

Pure functions over PodCliqueSet dicts; the controller (`controller.py`) decides when to write.

Layout of one PodCliqueSet replica `r` (the coherent-update shape of GREP-393, used from the
start so a PodGang keeps its name across updates and a client can roll it by deleting it):

- standalone cliques (template cliques not named by any scaling group): one PodClique
  `<pcs>-<r>-<clique>` each;
- scaling groups: one PodCliqueScalingGroup `<pcs>-<r>-<group>`, and per scaling-group replica
  `j` one PodClique `<pcs>-<r>-<group>-<j>-<clique>` per clique of the group;
- `k` minimum-viable PodGangs (MPGs) `<pcs>-<r>-mpg-<i>`, `k = min(replicas // minAvailable)`
  over every standalone clique (pods) and every scaling group (replicas), at least 1. MPG `i`
  holds pods `[i*m, (i+1)*m)` of each standalone clique (the last MPG also takes the excess
  pods, as GREP-393 puts excess standalone pods in the highest-index MPG) and scaling-group
  replicas `[i*M, (i+1)*M)`;
- one tail PodGang (TPG) `<pcs>-<r>-<group>-<j>` per scaling-group replica `j >= k*M` (Grove's
  non-anchor naming `...-<pcsg>-<pcsg-replica-index>`, without the epoch segment).

Pods are not objects of the simulated API (it serves only the CRDs); a PodGang names its pods
in `spec.podgroups[].podReferences` as `<podclique>-<hash>-<index>`, so the generation hash
each pod was created at is visible in the PodGang itself (as a ReplicaSet's pods carry the
pod-template hash in their names).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

Object = dict[str, Any]

GROVE_API = "grove.io/v1alpha1"
SCHEDULER_API = "scheduler.grove.io/v1alpha1"

# Label keys as Grove spells them (operator/api/common/labels.go).
MANAGED_BY = "app.kubernetes.io/managed-by"
PART_OF = "app.kubernetes.io/part-of"
COMPONENT = "app.kubernetes.io/component"
REPLICA_INDEX = "grove.io/podcliqueset-replica-index"
GENERATION_HASH = "grove.io/podcliqueset-generation-hash"
POD_TEMPLATE_HASH = "grove.io/pod-template-hash"
PODCLIQUE = "grove.io/podclique"
PCSG = "grove.io/podcliquescalinggroup"
PCSG_REPLICA_INDEX = "grove.io/podcliquescalinggroup-replica-index"
MINIMUM_VIABLE_UNIT = "grove.io/minimum-viable-unit"
BASE_PODGANG = "grove.io/base-podgang"
# Not in Grove's CRDs (GREP-393 puts InFlightPodGangs in a status the shipped CRD lacks), so the
# simulator publishes the PodGangs in flight as this PodCliqueSet annotation.
IN_FLIGHT_ANNOTATION = "grove.io/in-flight-podgangs"
OPERATOR = "grove-operator"


def short_hash(value: Any) -> str:
    """A stable 10-hex-digit hash of JSON-like data."""
    blob = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:10]


def generation_hash(pcs: Object) -> str:
    """The PodCliqueSet generation hash: every field of the template counts."""
    return short_hash(pcs["spec"]["template"])


def pod_name(pclq: str, hash_: str, index: int) -> str:
    return f"{pclq}-{hash_}-{index}"


def pod_hash(pclq: str, pod: str) -> str:
    """The generation hash a pod of `pclq` was created at (read back from its name)."""
    return pod[len(pclq) + 1 :].rsplit("-", 1)[0]


@dataclass(frozen=True)
class Share:
    """The pods of one PodClique that belong to one PodGang."""

    pclq: str
    clique: str  # template clique name
    pods: tuple[int, ...]
    min_replicas: int
    group: str | None = None  # template scaling-group name when the PodClique belongs to one
    group_replica: int | None = None


@dataclass(frozen=True)
class GangPlan:
    name: str
    replica: int
    mpg: bool
    shares: tuple[Share, ...]
    group: str | None = None  # TPGs: the scaling group; MPGs: None


@dataclass(frozen=True)
class CliquePlan:
    name: str  # PodClique object name
    clique: str
    replica: int
    group: str | None = None
    group_replica: int | None = None


@dataclass(frozen=True)
class ReplicaPlan:
    replica: int
    mpg_count: int
    cliques: tuple[CliquePlan, ...]
    groups: tuple[str, ...]  # PodCliqueScalingGroup object names
    gangs: tuple[GangPlan, ...]
    # What availability needs: standalone PodClique -> minAvailable; PCSG -> (minAvailable, pclqs)
    standalone_min: tuple[tuple[str, int], ...]
    group_min: tuple[tuple[str, int, tuple[tuple[str, ...], ...]], ...]


def _cliques(template: Object) -> dict[str, Object]:
    return {c["name"]: c for c in template.get("cliques", [])}


def clique_min(clique: Object) -> int:
    spec = clique["spec"]
    replicas = int(spec.get("replicas", 1))
    # Grove defaults a clique's minAvailable to its replicas.
    return max(1, min(int(spec.get("minAvailable", replicas)), max(replicas, 1)))


def plan_replica(pcs: Object, replica: int) -> ReplicaPlan:
    """The PodCliques, scaling groups and PodGangs of one replica, from the current template."""
    name = pcs["metadata"]["name"]
    template = pcs["spec"]["template"]
    cliques = _cliques(template)
    groups = template.get("podCliqueScalingGroups", [])
    grouped = {c for g in groups for c in g.get("cliqueNames", [])}
    standalone = [c for n, c in cliques.items() if n not in grouped]
    base = f"{name}-{replica}"

    ratios = [int(c["spec"].get("replicas", 1)) // clique_min(c) for c in standalone]
    ratios += [int(g.get("replicas", 1)) // max(1, int(g.get("minAvailable", 1))) for g in groups]
    k = max(1, min(ratios)) if ratios else 1

    clique_plans: list[CliquePlan] = []
    mpg_shares: list[list[Share]] = [[] for _ in range(k)]
    tpgs: list[GangPlan] = []
    standalone_min: list[tuple[str, int]] = []
    for c in standalone:
        pclq, n, m = f"{base}-{c['name']}", int(c["spec"].get("replicas", 1)), clique_min(c)
        clique_plans.append(CliquePlan(pclq, c["name"], replica))
        standalone_min.append((pclq, m))
        for i in range(k):
            end = n if i == k - 1 else (i + 1) * m
            pods = tuple(range(i * m, min(end, n)))
            if pods:
                mpg_shares[i].append(Share(pclq, c["name"], pods, min(m, len(pods))))
    group_min = []
    for g in groups:
        fqn, reps, mins = f"{base}-{g['name']}", int(g.get("replicas", 1)), int(g.get("minAvailable", 1))
        members: list[tuple[str, ...]] = []
        for j in range(reps):
            shares = []
            for cn in g.get("cliqueNames", []):
                member = cliques.get(cn)
                if member is None:
                    continue
                pclq = f"{fqn}-{j}-{cn}"
                clique_plans.append(CliquePlan(pclq, cn, replica, g["name"], j))
                n = int(member["spec"].get("replicas", 1))
                shares.append(Share(pclq, cn, tuple(range(n)), clique_min(member), g["name"], j))
            members.append(tuple(s.pclq for s in shares))
            if j < k * mins:
                mpg_shares[j // max(1, mins)].extend(shares)
            else:
                tpgs.append(GangPlan(f"{fqn}-{j}", replica, False, tuple(shares), g["name"]))
        group_min.append((fqn, mins, tuple(members)))
    mpgs = [GangPlan(f"{base}-mpg-{i}", replica, True, tuple(mpg_shares[i])) for i in range(k)]
    return ReplicaPlan(
        replica=replica,
        mpg_count=k,
        cliques=tuple(clique_plans),
        groups=tuple(f"{base}-{g['name']}" for g in groups),
        gangs=tuple(mpgs + tpgs),
        standalone_min=tuple(standalone_min),
        group_min=tuple(group_min),
    )


# -- object builders --------------------------------------------------------------------------
def owner_ref(owner: Object) -> Object:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _labels(pcs: Object, replica: int, component: str, **extra: str) -> dict[str, str]:
    return {
        MANAGED_BY: OPERATOR,
        PART_OF: pcs["metadata"]["name"],
        COMPONENT: component,
        REPLICA_INDEX: str(replica),
        **extra,
    }


def podclique(pcs: Object, plan: CliquePlan, hash_: str, owner: Object) -> Object:
    clique = _cliques(pcs["spec"]["template"])[plan.clique]
    extra = {GENERATION_HASH: hash_, POD_TEMPLATE_HASH: short_hash(clique["spec"]), PODCLIQUE: plan.name}
    component = "pcs-podclique"
    if plan.group is not None:
        component = "pcsg-podclique"
        extra[PCSG] = f"{pcs['metadata']['name']}-{plan.replica}-{plan.group}"
        extra[PCSG_REPLICA_INDEX] = str(plan.group_replica)
    spec = {k: v for k, v in clique["spec"].items() if k != "autoScalingConfig"}
    return {
        "apiVersion": GROVE_API,
        "kind": "PodClique",
        "metadata": {
            "name": plan.name,
            "namespace": pcs["metadata"]["namespace"],
            "labels": {**clique.get("labels", {}), **_labels(pcs, plan.replica, component, **extra)},
            "ownerReferences": [owner_ref(owner)],
        },
        "spec": spec,
    }


def scaling_group(pcs: Object, replica: int, group: Object, hash_: str) -> Object:
    return {
        "apiVersion": GROVE_API,
        "kind": "PodCliqueScalingGroup",
        "metadata": {
            "name": f"{pcs['metadata']['name']}-{replica}-{group['name']}",
            "namespace": pcs["metadata"]["namespace"],
            "labels": _labels(pcs, replica, "pcs-podcliquescalinggroup", **{GENERATION_HASH: hash_}),
            "ownerReferences": [owner_ref(pcs)],
        },
        "spec": {
            "cliqueNames": list(group.get("cliqueNames", [])),
            "replicas": int(group.get("replicas", 1)),
            "minAvailable": int(group.get("minAvailable", 1)),
        },
    }


def podgroup(share: Share, namespace: str, hash_: str) -> Object:
    return {
        "name": share.pclq,
        "minReplicas": share.min_replicas,
        "podReferences": [
            {"namespace": namespace, "name": pod_name(share.pclq, hash_, i)} for i in share.pods
        ],
    }


def podgang(pcs: Object, plan: GangPlan, hash_: str) -> Object:
    ns, name = pcs["metadata"]["namespace"], pcs["metadata"]["name"]
    extra = {GENERATION_HASH: hash_}
    if plan.mpg:
        extra[MINIMUM_VIABLE_UNIT] = "true"
    else:
        extra[BASE_PODGANG] = f"{name}-{plan.replica}-mpg-0"
        extra[PCSG] = f"{name}-{plan.replica}-{plan.group}"
    return {
        "apiVersion": SCHEDULER_API,
        "kind": "PodGang",
        "metadata": {
            "name": plan.name,
            "namespace": ns,
            "labels": _labels(pcs, plan.replica, "podgang", **extra),
            "ownerReferences": [owner_ref(pcs)],
        },
        "spec": {"podgroups": [podgroup(s, ns, hash_) for s in plan.shares]},
    }


def condition(type_: str, status: bool, reason: str, message: str, now: str, old: list[Object]) -> Object:
    """A condition that keeps its lastTransitionTime while its status does not change."""
    value = "True" if status else "False"
    for c in old:
        if c.get("type") == type_ and c.get("status") == value:
            now = c.get("lastTransitionTime", now)
    return {"type": type_, "status": value, "reason": reason, "message": message, "lastTransitionTime": now}


def is_available(gang: Object) -> bool:
    conds = (gang.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Available" and c.get("status") == "True" for c in conds)


def pcs_for_workload(
    namespace: str,
    name: str,
    replicas: int,
    cliques: list[str],
    groups: list[tuple[str, list[str], int, int]],
    update_strategy: str,
    image: str,
) -> Object:
    """A PodCliqueSet for a site workload.

    Standalone cliques get 2 pods with minAvailable 1 (so a replica holds two MPGs when its
    scaling groups allow it, and a rollout can keep a replica serving); scaling-group cliques
    one pod each.
    """
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
                    "podSpec": {"containers": [{"name": clique, "image": image}]},
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
