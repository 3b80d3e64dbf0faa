"""Grove objects as the rollout reads them: the kinds, and `PCSState` from raw objects (pure).

A PodGang's template hash is its `grove.io/podcliqueset-generation-hash` label (Grove sets it
when it creates the gang and its pods); its readiness is its `Available` and `Ready`
conditions. The PodCliqueSet's target hash is `status.currentGenerationHash`, trusted only once
`status.observedGeneration` has caught up with `metadata.generation`.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from contracts.errors import InvalidInput
from contracts.models.grove import (
    GENERATION_HASH_LABEL,
    GROVE_GROUP,
    GROVE_VERSION,
    ON_DELETE,
    REPLICA_INDEX_LABEL,
    SCHEDULER_GROUP,
    CliqueShape,
    PCSShape,
    PCSState,
    PodGangState,
    ScalingGroupShape,
    image_problem,
)

if TYPE_CHECKING:
    from drivers.kube import Kind

Object = dict[str, Any]


@cache
def kinds() -> tuple[Kind, Kind, Kind, Kind]:
    """(PodCliqueSet, PodGang, PodClique, PodCliqueScalingGroup). Built on first use: workflows
    reference the Grove activities, and the Kubernetes client must not be imported with them."""
    from drivers.kube import Kind

    return (
        Kind("PodCliqueSet", GROVE_GROUP, "podcliquesets", GROVE_VERSION),
        Kind("PodGang", SCHEDULER_GROUP, "podgangs", GROVE_VERSION),
        Kind("PodClique", GROVE_GROUP, "podcliques", GROVE_VERSION),
        Kind("PodCliqueScalingGroup", GROVE_GROUP, "podcliquescalinggroups", GROVE_VERSION),
    )


def _condition(obj: Object, type_: str) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == type_ and c.get("status") == "True" for c in conditions)


def shape_of(pcs: Object) -> PCSShape:
    """The plan's view of a PodCliqueSet (Grove's defaults: a clique's minAvailable is its
    replicas, a scaling group's replicas and minAvailable are 1)."""
    template = pcs["spec"].get("template") or {}
    cliques = []
    for c in template.get("cliques") or []:
        replicas = int(c["spec"].get("replicas", 1))
        cliques.append(
            CliqueShape(
                name=c["name"],
                replicas=replicas,
                min_available=max(1, int(c["spec"].get("minAvailable", replicas))),
            )
        )
    groups = tuple(
        ScalingGroupShape(
            name=g["name"],
            cliques=tuple(g.get("cliqueNames") or []),
            replicas=int(g.get("replicas", 1)),
            min_available=max(1, int(g.get("minAvailable", 1))),
        )
        for g in template.get("podCliqueScalingGroups") or []
    )
    return PCSShape(
        name=pcs["metadata"]["name"],
        replicas=int(pcs["spec"].get("replicas", 0)),
        cliques=tuple(cliques),
        groups=groups,
    )


def images_of(pcs: Object) -> dict[str, str]:
    """Clique -> image of its first container."""
    out = {}
    for c in (pcs["spec"].get("template") or {}).get("cliques") or []:
        containers = ((c.get("spec") or {}).get("podSpec") or {}).get("containers") or []
        if containers:
            out[c["name"]] = str(containers[0].get("image", ""))
    return out


def pcs_state(namespace: str, name: str, pcs: Object | None, gangs: list[Object]) -> PCSState:
    """The rollout's view of one PodCliqueSet and its PodGangs."""
    if pcs is None:
        return PCSState(namespace=namespace, name=name, exists=False)
    status = pcs.get("status") or {}
    views = []
    for gang in gangs:
        meta = gang["metadata"]
        labels = meta.get("labels") or {}
        views.append(
            PodGangState(
                name=meta["name"],
                uid=meta.get("uid", ""),
                replica=int(labels.get(REPLICA_INDEX_LABEL, -1)),
                hash=labels.get(GENERATION_HASH_LABEL, ""),
                available=_condition(gang, "Available"),
                ready=_condition(gang, "Ready"),
                deleting=bool(meta.get("deletionTimestamp")),
            )
        )
    return PCSState(
        namespace=namespace,
        name=name,
        generation=int(pcs["metadata"].get("generation", 0)),
        observed_generation=int(status.get("observedGeneration", 0)),
        current_hash=str(status.get("currentGenerationHash", "")),
        update_strategy=str((pcs["spec"].get("updateStrategy") or {}).get("type", "RollingRecreate")),
        images=images_of(pcs),
        shape=shape_of(pcs),
        gangs=tuple(sorted(views, key=lambda g: g.name)),
        updated_replicas=int(status.get("updatedReplicas", 0)),
        available_replicas=int(status.get("availableReplicas", 0)),
    )


def members_updated(current_hash: str, members: list[Object]) -> int:
    """PodCliques and scaling groups whose status says they run the current hash."""
    return sum(
        (m.get("status") or {}).get("currentPodCliqueSetGenerationHash") == current_hash for m in members
    )


def images_patch(pcs: Object, images: dict[str, str]) -> Object | None:
    """The merge patch that sets `images` (clique -> image), None when they already hold.

    Raises:
        InvalidInput: Not `OnDelete`, an unknown clique, or an unusable image (nothing written).
    """
    ref = f"PodCliqueSet {pcs['metadata']['namespace']}/{pcs['metadata']['name']}"
    strategy = (pcs["spec"].get("updateStrategy") or {}).get("type", "RollingRecreate")
    if strategy != ON_DELETE:
        raise InvalidInput(
            f"{ref} has updateStrategy {strategy}: a coherent rollout needs OnDelete "
            "(otherwise Grove rolls it by itself)"
        )
    current = images_of(pcs)
    unknown = sorted(set(images) - set(current))
    if unknown:
        raise InvalidInput(
            f"{ref} has no clique {', '.join(unknown)}; its cliques: {', '.join(sorted(current))}"
        )
    for clique, image in images.items():
        if (problem := image_problem(image)) is not None:
            raise InvalidInput(f"clique {clique} of {ref}: {problem}")
    if all(current[c] == i for c, i in images.items()):
        return None
    cliques = []
    for c in pcs["spec"]["template"]["cliques"]:
        c = {**c, "spec": dict(c["spec"])}
        if c["name"] in images:
            pod_spec = dict(c["spec"]["podSpec"])
            containers = [dict(x) for x in pod_spec["containers"]]
            containers[0]["image"] = images[c["name"]]
            c["spec"]["podSpec"] = {**pod_spec, "containers": containers}
        cliques.append(c)
    # A merge patch replaces lists whole: the cliques go as they are, only the images changed.
    return {"spec": {"template": {"cliques": cliques}}}


def replacement(old: Any, new: Any) -> Any:
    """A merge patch turning `old` into exactly `new` (keys only in `old` are set to null)."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    patch = {k: None for k in old if k not in new}
    for k, v in new.items():
        if old.get(k) != v:
            patch[k] = replacement(old.get(k), v)
    return patch
