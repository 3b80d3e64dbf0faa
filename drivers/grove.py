"""Grove objects as the rollout reads them (pure), and the pod calls the custom-object client
lacks. Grove pinned: ai-dynamo/grove 6eaa77f0 (v0.1.0-alpha.12's PodGangMap change); what each
rule relies on is a row of `simulators/grove/BEHAVIOUR.md` (codes in brackets).

What runs is read from the pods, never from a PodGang's hash label (at the pin that label is
the PodCliqueSet's current hash whatever the pods run [S1]): a pod's `grove.io/pod-template-hash`
is the template it was created from [H2], its `grove.io/podgang` the gang it joined [D6], its
Ready condition whether it serves. The target of each clique is the hash label Grove puts on the
clique's PodCliques once it reconciled the template [U1, U2].
"""

from __future__ import annotations

import json
from functools import cache
from typing import TYPE_CHECKING, Any

from contracts.errors import InvalidInput
from contracts.models.grove import (
    EPOCH_LABEL,
    FIELD_MANAGER,
    GROVE_GROUP,
    GROVE_VERSION,
    ON_DELETE,
    PART_OF_LABEL,
    PCSG_LABEL,
    PCSG_REPLICA_INDEX_LABEL,
    POD_TEMPLATE_HASH_LABEL,
    PODCLIQUE_LABEL,
    PODGANG_LABEL,
    PODGANG_ROLE_LABEL,
    REPLICA_INDEX_LABEL,
    ROLLING_RECREATE,
    ROLLOUT_DORMANT_ANNOTATION,
    SCHEDULER_GROUP,
    FieldChange,
    GangState,
    GroupState,
    PCSState,
    PCSSummary,
    image_problem,
)

if TYPE_CHECKING:
    from drivers.kube import Kind, Kube

Object = dict[str, Any]


@cache
def kinds() -> tuple[Kind, Kind, Kind, Kind, Kind]:
    """(PodCliqueSet, PodGang, PodClique, PodCliqueScalingGroup, Pod). Built on first use:
    workflows reference the Grove activities, and the Kubernetes client must not be imported."""
    from drivers.kube import Kind

    return (
        Kind("PodCliqueSet", GROVE_GROUP, "podcliquesets", GROVE_VERSION),
        Kind("PodGang", SCHEDULER_GROUP, "podgangs", GROVE_VERSION),
        Kind("PodClique", GROVE_GROUP, "podcliques", GROVE_VERSION),
        Kind("PodCliqueScalingGroup", GROVE_GROUP, "podcliquescalinggroups", GROVE_VERSION),
        Kind("Pod", "", "pods", "v1"),
    )


def podgangmap_kind() -> Kind:
    """PodGangMap (grove.io, Grove v0.1.0-alpha.12): one per PodCliqueSet replica."""
    from drivers.kube import Kind

    return Kind("PodGangMap", GROVE_GROUP, "podgangmaps", GROVE_VERSION)


def anchor_hashes(maps: list[Object]) -> dict[int, str]:
    """Replica -> the hash its PodGangMap's AnchorIndex-0 anchor carries. Grove's ScaleOut entry
    depends on the anchor at the template's current hash; under OnDelete the entries keep the
    hash they were made at, so a template at another hash leaves a scale-out gated
    (simulators/grove/BEHAVIOUR.md G5)."""
    out = {}
    for m in maps:
        spec = m.get("spec") or {}
        for e in spec.get("entries") or []:
            if e.get("role") == "Anchor" and e.get("anchorIndex") == 0:
                out[int(spec.get("podCliqueSetReplicaIndex", 0))] = str(
                    e.get("podCliqueSetGenerationHash", "")
                )
    return dict(sorted(out.items()))


# -- reading --------------------------------------------------------------------------------------
def _ready(pod: Object) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def _duration(text: Any) -> float:
    import re

    if not text:
        return 4 * 3600.0  # the webhook's default [T1]
    found = re.findall(r"([0-9.]+)(h|ms|m|s)", str(text))
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1, "ms": 0.001}[u] for n, u in found) or 4 * 3600.0


def containers_of(pcs: Object) -> dict[str, dict[str, str]]:
    """clique -> container name -> image, for every container and init container."""
    out: dict[str, dict[str, str]] = {}
    for c in (pcs["spec"].get("template") or {}).get("cliques") or []:
        pod_spec = (c.get("spec") or {}).get("podSpec") or {}
        images = {}
        for x in [*(pod_spec.get("initContainers") or []), *(pod_spec.get("containers") or [])]:
            images[str(x.get("name", ""))] = str(x.get("image", ""))
        out[c["name"]] = images
    return out


def summary_of(
    namespace: str, name: str, pcs: Object | None, pclqs: list[Object], pcsgs: list[Object]
) -> PCSSummary:
    if pcs is None:
        return PCSSummary(namespace=namespace, name=name, exists=False)
    status = pcs.get("status") or {}
    progress = status.get("updateProgress") or {}
    seen: dict[str, set[str]] = {}
    for p in pclqs:
        clique = _clique_of(p["metadata"]["name"], p["metadata"].get("labels") or {}, name)
        h = (p["metadata"].get("labels") or {}).get(POD_TEMPLATE_HASH_LABEL)
        if clique and h and not p["metadata"].get("deletionTimestamp"):
            seen.setdefault(clique, set()).add(h)
    # A clique whose PodCliques disagree is mid-patch: no hash for it until Grove is done [U1, U2].
    clique_hashes = {c: next(iter(hs)) for c, hs in seen.items() if len(hs) == 1}
    return PCSSummary(
        namespace=namespace,
        name=name,
        generation=int(pcs["metadata"].get("generation", 0)),
        observed_generation=int(status.get("observedGeneration", 0)),
        current_hash=str(status.get("currentGenerationHash", "")),
        update_strategy=str((pcs["spec"].get("updateStrategy") or {}).get("type", ROLLING_RECREATE)),
        replicas=int(pcs["spec"].get("replicas", 0)),
        images={f"{c}/{n}": i for c, xs in containers_of(pcs).items() for n, i in xs.items()},
        clique_hashes=dict(sorted(clique_hashes.items())),
        scaling_groups={g["metadata"]["name"]: int(g["spec"].get("minAvailable", 1)) for g in pcsgs},
        termination_delay_seconds=_duration((pcs["spec"].get("template") or {}).get("terminationDelay")),
        updated_replicas=int(status.get("updatedReplicas", 0)),
        available_replicas=int(status.get("availableReplicas", 0)),
        update_started_at=progress.get("updateStartedAt"),
        update_ended_at=progress.get("updateEndedAt"),
        currently_updating=tuple(
            int(e.get("replicaIndex", 0)) for e in progress.get("currentlyUpdating") or []
        ),
    )


def _clique_of(pclq: str, labels: dict[str, str], pcs: str) -> str:
    """The template clique of a PodClique: `<pcs>-<r>-<clique>` or `<pcsg>-<j>-<clique>` [N1]."""
    group = labels.get(PCSG_LABEL)
    if group:
        rest = pclq[len(group) + 1 :]
        return rest.split("-", 1)[1] if "-" in rest else rest
    return pclq[len(f"{pcs}-{labels.get(REPLICA_INDEX_LABEL, '')}-") :]


def pclq_clique(pclq: Object, pcs: str) -> str:
    """The template clique of a PodClique object."""
    return _clique_of(pclq["metadata"]["name"], pclq["metadata"].get("labels") or {}, pcs)


def gang_states(
    pcs_name: str, gangs: list[Object], pclqs: list[Object], pods: list[Object]
) -> list[GangState]:
    """Each PodGang with its pods counted per podgroup by pod-template hash."""
    by_pclq = {p["metadata"]["name"]: p for p in pclqs}
    pods_of: dict[tuple[str, str], list[Object]] = {}
    for p in pods:
        labels = p["metadata"].get("labels") or {}
        pods_of.setdefault((labels.get(PODGANG_LABEL, ""), labels.get(PODCLIQUE_LABEL, "")), []).append(p)
    out = []
    for gang in gangs:
        meta = gang["metadata"]
        labels = meta.get("labels") or {}
        groups = []
        for pg in gang["spec"].get("podgroups") or []:
            pclq = by_pclq.get(pg["name"])
            plabels = (pclq or {}).get("metadata", {}).get("labels") or {}
            counts: dict[str, int] = {}
            ready: dict[str, int] = {}
            gated = term = 0
            for p in pods_of.get((meta["name"], pg["name"]), []):
                if p["metadata"].get("deletionTimestamp"):
                    term += 1
                    continue
                h = (p["metadata"].get("labels") or {}).get(POD_TEMPLATE_HASH_LABEL, "")
                counts[h] = counts.get(h, 0) + 1
                if _ready(p):
                    ready[h] = ready.get(h, 0) + 1
                gated += bool((p.get("spec") or {}).get("schedulingGates"))
            groups.append(
                GroupState(
                    pclq=pg["name"],
                    clique=_clique_of(pg["name"], plabels, pcs_name) if pclq else "",
                    min_replicas=int(pg.get("minReplicas", 1)),
                    expected=int((pclq or {}).get("spec", {}).get("replicas", 0)),
                    pcsg=plabels.get(PCSG_LABEL),
                    pcsg_replica=int(plabels[PCSG_REPLICA_INDEX_LABEL])
                    if PCSG_REPLICA_INDEX_LABEL in plabels
                    else None,
                    pods=dict(sorted(counts.items())),
                    ready=dict(sorted(ready.items())),
                    gated=gated,
                    terminating=term,
                )
            )
        out.append(
            GangState(
                name=meta["name"],
                replica=int(labels.get(REPLICA_INDEX_LABEL, -1)),
                role=labels.get(PODGANG_ROLE_LABEL, ""),
                epoch=labels.get(EPOCH_LABEL, ""),
                uid=meta.get("uid", ""),
                groups=tuple(groups),
            )
        )
    return sorted(out, key=lambda g: g.name)


def pcs_state(
    namespace: str,
    name: str,
    pcs: Object | None,
    gangs: list[Object],
    pclqs: list[Object],
    pcsgs: list[Object],
    pods: list[Object],
) -> PCSState:
    """The rollout's view of one PodCliqueSet: its summary and its PodGangs' pods."""
    return PCSState(
        summary=summary_of(namespace, name, pcs, pclqs, pcsgs),
        gangs=tuple(gang_states(name, gangs, pclqs, pods)) if pcs is not None else (),
    )


# -- writing the template -------------------------------------------------------------------------
def _resolve(pcs: Object, images: dict[str, str]) -> dict[tuple[str, str], str]:
    """("clique", "container") -> image; "clique" alone names its only container.

    Raises:
        InvalidInput: An unknown clique or container, an ambiguous "clique", an unusable image.
    """
    ref = f"PodCliqueSet {pcs['metadata']['namespace']}/{pcs['metadata']['name']}"
    current = containers_of(pcs)
    out: dict[tuple[str, str], str] = {}
    for key, image in images.items():
        clique, _, container = key.partition("/")
        if clique not in current:
            raise InvalidInput(f"{ref} has no clique {clique}; its cliques: {', '.join(sorted(current))}")
        names = sorted(current[clique])
        if not container:
            if len(names) != 1:
                raise InvalidInput(
                    f"clique {clique} of {ref} has {len(names)} containers ({', '.join(names)}): "
                    f"name one as {clique}/<container>"
                )
            container = names[0]
        if container not in current[clique]:
            raise InvalidInput(
                f"clique {clique} of {ref} has no container {container!r}; its containers: {', '.join(names)}"
            )
        if (problem := image_problem(image)) is not None:
            raise InvalidInput(f"{clique}/{container} of {ref}: {problem}")
        out[(clique, container)] = image
    return out


def _with_images(template: Object, images: dict[tuple[str, str], str]) -> Object:
    cliques = []
    for c in template.get("cliques") or []:
        c = {**c, "spec": dict(c.get("spec") or {})}
        pod_spec = dict(c["spec"].get("podSpec") or {})
        for field in ("initContainers", "containers"):
            if field in pod_spec:
                pod_spec[field] = [
                    {**x, "image": images[(c["name"], x.get("name"))]}
                    if (c["name"], x.get("name")) in images
                    else x
                    for x in pod_spec[field]
                ]
        c["spec"]["podSpec"] = pod_spec
        cliques.append(c)
    return {**template, "cliques": cliques}


def images_patch(pcs: Object, images: dict[str, str]) -> tuple[Object | None, tuple[FieldChange, ...]]:
    """The merge patch that sets `images`, and the fields it changes (None: they already hold).

    Raises:
        InvalidInput: Not `OnDelete` (Grove rolls RollingRecreate itself), an unknown clique or
            container, an unusable image. Nothing is written.
    """
    ref = f"PodCliqueSet {pcs['metadata']['namespace']}/{pcs['metadata']['name']}"
    kind = (pcs["spec"].get("updateStrategy") or {}).get("type", ROLLING_RECREATE)
    if kind != ON_DELETE:
        raise InvalidInput(
            f"{ref} has updateStrategy {kind}: Grove rolls it itself, so metalflow does not drive it "
            "(`metalflow rollout status` shows Grove's own progress); a coherent rollout needs OnDelete"
        )
    wanted = _resolve(pcs, images)
    current = containers_of(pcs)
    changes = tuple(
        FieldChange(path=f"{c}/{n}", before=current[c][n], after=i)
        for (c, n), i in sorted(wanted.items())
        if current[c][n] != i
    )
    if not changes:
        return None, ()
    template = _with_images(pcs["spec"]["template"], wanted)
    # A merge patch replaces lists whole: the cliques go as they are, only the images changed.
    return {"spec": {"template": {"cliques": template["cliques"]}}}, changes


def _cliques(cliques: Any) -> dict[str, Object]:
    return {str(c.get("name")): c for c in cliques or []}


def _with_befores(clique: Object, befores: dict[str, str]) -> Object:
    """`clique` with each named container's image set to its recorded value; nothing else moves."""
    if not befores:
        return clique
    pod_spec = dict((clique.get("spec") or {}).get("podSpec") or {})
    for field in ("initContainers", "containers"):
        if field in pod_spec:
            pod_spec[field] = [
                {**x, "image": befores[x.get("name")]} if x.get("name") in befores else x
                for x in pod_spec[field]
            ]
    return {**clique, "spec": {**(clique.get("spec") or {}), "podSpec": pod_spec}}


def _merged(base: Any, recorded: Any, new: Any) -> Any:
    """`new`'s changes from `base`, on top of `recorded` (a three-way merge of JSON values; lists
    are whole values): an edit made on the restored original keeps an edit recorded before."""
    if not (isinstance(base, dict) and isinstance(recorded, dict) and isinstance(new, dict)):
        return recorded if new == base else new
    out = dict(recorded)
    for key in set(base) | set(new):
        if key not in new:
            out.pop(key, None)
        elif new[key] != base.get(key):
            out[key] = _merged(base.get(key), recorded.get(key), new[key])
    return out


def restore_patch(
    pcs: Object, fields: tuple[FieldChange, ...], original: tuple[Object, ...]
) -> tuple[Object | None, list[FieldChange], list[str], dict[str, Object]]:
    """The rollback's restore: every clique written back as it was before the rollout
    (`original`, the cliques of its first read), so the PodCliques carry the original hashes again
    and a pod deleted comes back at the original.

    Returns the patch (None: already so), the rollout's fields put back, those someone else had
    set since (put back all the same, named: the operator's rollback answered that edit), and the
    cliques someone else edited (`dormant`): each as it is now with the rollout's fields at their
    recorded values, for `foreign_edits_patch` to put back once every pod runs the original. The
    same write records them in the annotation `metalflow.io/rollout-dormant`, so a retry (or a
    later restore, after another edit) finds them: a clique edited again since the restore takes
    the newer edit's changes on top of the recorded one.
    A clique the original does not have is left as it is. Without `original` (a state from before
    it was recorded) the original is the template with the rollout's fields put back."""
    template = pcs["spec"].get("template") or {}
    now = _cliques(template.get("cliques"))
    current = containers_of(pcs)
    befores: dict[str, dict[str, str]] = {}
    back, overwritten = [], []
    for f in fields:
        clique, _, container = f.path.partition("/")
        value = current.get(clique, {}).get(container)
        befores.setdefault(clique, {})[container] = f.before
        if value == f.before:
            continue
        back.append(f)
        if value != f.after:
            overwritten.append(f"{f.path} ({value!r}, set by someone else, put back to {f.before!r})")
    ours_back = {name: _with_befores(c, befores.get(name, {})) for name, c in now.items()}
    before = _cliques(original) if original else ours_back
    recorded = json.loads((pcs["metadata"].get("annotations") or {}).get(ROLLOUT_DORMANT_ANNOTATION) or "{}")
    dormant = dict(recorded)
    for n, c in ours_back.items():
        if n in before and c != before[n]:
            dormant[n] = _merged(before[n], recorded.get(n, before[n]), c)
    cliques = [before.get(name, c) for name, c in now.items()]
    if cliques == list(now.values()) and dormant == recorded:
        return None, back, overwritten, dormant
    annotations = {ROLLOUT_DORMANT_ANNOTATION: json.dumps(dormant, sort_keys=True) if dormant else None}
    patch = {"metadata": {"annotations": annotations}, "spec": {"template": {"cliques": cliques}}}
    return patch, back, overwritten, dormant


def foreign_edits_patch(
    pcs: Object, dormant: dict[str, Object], original: tuple[Object, ...]
) -> tuple[Object | None, list[str], list[str]]:
    """Put back the cliques someone else edited (`restore_patch`'s `dormant`), each only where it
    still holds its original entry (what the restore wrote), and drop the annotation that
    recorded them. The PodCliques are patched and no pod is deleted, so under OnDelete the edit
    stays dormant, as it would have without the rollout. Returns the patch (None: nothing to
    write), the cliques back (now or already), those left alone (changed again since)."""
    before = _cliques(original)
    cliques, put, left = [], [], []
    for name, c in _cliques((pcs["spec"].get("template") or {}).get("cliques")).items():
        if name in dormant and c == dormant[name]:
            put.append(name)
        elif name in dormant and c == before.get(name):
            c = dormant[name]
            put.append(name)
        elif name in dormant:
            left.append(name)
        cliques.append(c)
    recorded = ROLLOUT_DORMANT_ANNOTATION in (pcs["metadata"].get("annotations") or {})
    if cliques == (pcs["spec"].get("template") or {}).get("cliques") and not recorded:
        return None, put, left
    patch = {
        "metadata": {"annotations": {ROLLOUT_DORMANT_ANNOTATION: None}},
        "spec": {"template": {"cliques": cliques}},
    }
    return patch, put, left


def template_diff(old: Any, new: Any, path: str = "spec.template") -> list[str]:
    """The paths where two templates differ; list items with a `name` are named, e.g.
    `spec.template.cliques[router].spec.podSpec.containers[main].image`."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new)):
            if old.get(k) != new.get(k):
                out += template_diff(old.get(k), new.get(k), f"{path}.{k}")
        return out
    if isinstance(old, list) and isinstance(new, list):
        named = all(isinstance(x, dict) and "name" in x for x in [*old, *new])
        if named:
            a, b = {x["name"]: x for x in old}, {x["name"]: x for x in new}
            out = []
            for k in [*a, *(k for k in b if k not in a)]:
                if a.get(k) != b.get(k):
                    out += template_diff(a.get(k), b.get(k), f"{path}[{k}]")
            return out
    return [path] if old != new else []


def template_managers(pcs: Object, since: str) -> list[str]:
    """Managers (managedFields) other than the rollout's that own template fields and wrote
    at or after `since` (RFC 3339): who edited the template."""
    out = []
    for e in pcs["metadata"].get("managedFields") or []:
        if e.get("manager") == FIELD_MANAGER or str(e.get("time", "")) < since:
            continue
        fields = ((e.get("fieldsV1") or {}).get("f:spec") or {}).get("f:template")
        if fields is not None:
            out.append(f"{e.get('manager')} ({e.get('operation', 'Update')} at {e.get('time')})")
    return out


def strategy_managers(pcs: Object) -> list[str]:
    """Managers (managedFields) that own `spec.updateStrategy`: who set the strategy (a manager
    loses a field another one changes later, so this is who set it last)."""
    out = []
    for e in pcs["metadata"].get("managedFields") or []:
        if e.get("subresource"):
            continue
        if "f:updateStrategy" in ((e.get("fieldsV1") or {}).get("f:spec") or {}):
            out.append(f"{e.get('manager')} ({e.get('operation', 'Update')} at {e.get('time')})")
    return out


def replacement(old: Any, new: Any) -> Any:
    """A merge patch turning `old` into exactly `new` (keys only in `old` are set to null)."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    patch = {k: None for k in old if k not in new}
    for k, v in new.items():
        if old.get(k) != v:
            patch[k] = replacement(old.get(k), v)
    return patch


# -- pod and patch calls the custom-object client does not make ------------------------------------
async def read_state(kube: Kube, key: str, ns: str, name: str) -> PCSState:
    """The PodCliqueSet (with its template's cliques), its PodGangs, PodCliques, scaling groups,
    pods and PodGangMaps (6 calls), as one `PCSState`: what the rollout's `read_pcs_state` activity and
    `metalflow rollout start`'s pre-check read."""
    obj = await kube.get(key, kinds()[0], ns, name, missing_ok=True)
    selector = f"{PART_OF_LABEL}={name}"
    gangs = (await kube.list(key, kinds()[1], ns, label_selector=selector)).get("items") or []
    pclqs = (await kube.list(key, kinds()[2], ns, label_selector=selector)).get("items") or []
    pcsgs = (await kube.list(key, kinds()[3], ns, label_selector=selector)).get("items") or []
    pods = await list_pods(kube, key, ns, selector)
    maps = (await kube.list(key, podgangmap_kind(), ns, label_selector=selector)).get("items") or []
    state = pcs_state(ns, name, obj, gangs, pclqs, pcsgs, pods)
    cliques = ((obj or {}).get("spec", {}).get("template") or {}).get("cliques") or []
    summary = state.summary.model_copy(update={"anchor_hashes": anchor_hashes(maps)})
    return state.model_copy(update={"cliques": tuple(cliques), "summary": summary})


async def list_pods(kube: Kube, key: str, ns: str, label_selector: str) -> list[Object]:
    """Pods by label (core API)."""
    import kubernetes.client as k8s

    def call(api: Any) -> list[Object]:
        response = k8s.CoreV1Api(api.api_client).list_namespaced_pod(
            ns, label_selector=label_selector, _preload_content=False
        )
        items: list[Object] = json.loads(response.data)["items"]  # type: ignore[attr-defined]
        return items

    result: list[Object] = await kube._call(key, f"pods in {ns}", call)  # noqa: SLF001
    return result


async def delete_pods(kube: Kube, key: str, ns: str, label_selector: str) -> list[str]:
    """Delete every pod the selector matches in one call (deletecollection), so a controller
    watching sees them go together; returns the names deleted."""
    import kubernetes.client as k8s

    def call(api: Any) -> list[str]:
        response = k8s.CoreV1Api(api.api_client).delete_collection_namespaced_pod(
            ns, label_selector=label_selector, _preload_content=False
        )
        items = json.loads(response.data).get("items") or []  # type: ignore[attr-defined]
        return sorted(str(i["metadata"]["name"]) for i in items)

    result: list[str] = await kube._call(key, f"pods {label_selector} in {ns}", call)  # noqa: SLF001
    return result


def stale_selectors(gang: str, stale: dict[str, set[str]], targets_of: dict[str, str]) -> list[str]:
    """Label selectors that match exactly the stale pods of one PodGang, as few as possible.

    `stale`: PodClique -> the pod-template hashes of its stale pods; `targets_of`: PodClique ->
    its target. One selector (`podclique in (...)`, `pod-template-hash in (...)`) unless a
    selected PodClique's target is among the stale hashes (two cliques with identical templates):
    then one selector per PodClique."""
    if not stale:
        return []
    hashes = set().union(*stale.values())
    if not any(targets_of.get(p) in hashes for p in stale):
        pclqs = ",".join(sorted(stale))
        return [
            f"{PODGANG_LABEL}={gang},{PODCLIQUE_LABEL} in ({pclqs}),"
            f"{POD_TEMPLATE_HASH_LABEL} in ({','.join(sorted(hashes))})"
        ]
    return [
        f"{PODGANG_LABEL}={gang},{PODCLIQUE_LABEL}={p},{POD_TEMPLATE_HASH_LABEL} in ({','.join(sorted(hs))})"
        for p, hs in sorted(stale.items())
    ]
