"""The Grove activities of a coherent rollout (DOMAIN.md section 3).

How a step replaces its units: it deletes each PodGang of the step that is not at the target
hash, pinned by the uid it read, and Grove recreates the missing PodGang at the PodCliqueSet's
current generation hash together with its members (the scaling-group PodCliques it holds and
its share of standalone pods). Why this and not writing a PodGangMap: the shipped Grove CRDs
have no PodGangMap (GREP-393 is still a proposal), and with `OnDelete` deletion is the contract
Grove already honours; one deletion rolls one whole gang, so a gang never holds two hashes.

Each activity is idempotent and conflict-safe: writes are conditional on the resourceVersion
read (`Kube.edit`), deletes are pinned by uid (a retry never deletes the recreated gang), and a
gang already at the target hash is left alone, so a retried step after a worker crash deletes
nothing twice. Cost per rollout: one or two API calls per activity; at most
`dpf_max_in_flight_per_host` calls in flight per PodCliqueSet.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from temporalio import activity

from contracts.errors import ConflictRetriesExhausted, InvalidInput, ObjectNotFound
from contracts.models.grove import (
    PART_OF_LABEL,
    ROLLOUT_ANNOTATION,
    PCSRef,
    PCSState,
    ProgressInput,
    RollPodGangsInput,
    RollPodGangsResult,
    ScalePCSInput,
    SetImagesInput,
    TemplateInput,
    TemplateResult,
)
from drivers.grove import images_patch, kinds, members_updated, pcs_state, replacement

if TYPE_CHECKING:
    from drivers.kube import Kube

log = logging.getLogger(__name__)
Object = dict[str, Any]


def _key(pcs: PCSRef) -> str:
    return f"pcs:{pcs}"


class GroveActivities:
    """Reads and writes of PodCliqueSets and PodGangs; holds one `Kube` (shared with DPF)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    async def _pcs(self, pcs: PCSRef) -> Object:
        obj = await self.kube.get(_key(pcs), kinds()[0], pcs.namespace, pcs.name, missing_ok=True)
        if obj is None:
            raise InvalidInput(f"no PodCliqueSet {pcs} (check the namespace and the name)")
        return obj

    @activity.defn(name="read_pcs_state")
    async def read_pcs_state(self, pcs: PCSRef) -> PCSState:
        """The PodCliqueSet, its PodGangs, and how many of its PodCliques and scaling groups run
        the current hash (`exists=False` when the PodCliqueSet is gone). Four list/get calls."""
        key, ns, selector = _key(pcs), pcs.namespace, f"{PART_OF_LABEL}={pcs.name}"
        obj = await self.kube.get(key, kinds()[0], ns, pcs.name, missing_ok=True)
        listed = await self.kube.list(key, kinds()[1], ns, label_selector=selector)
        state = pcs_state(ns, pcs.name, obj, listed.get("items") or [])
        members: list[Object] = []
        for kind in kinds()[2:]:
            members += (await self.kube.list(key, kind, ns, label_selector=selector)).get("items") or []
        return state.model_copy(
            update={
                "members_updated": members_updated(state.current_hash, members),
                "members_total": len(members),
            }
        )

    @activity.defn(name="read_pcs_template")
    async def read_pcs_template(self, pcs: PCSRef) -> TemplateResult:
        """The template as it is now (what a rollback restores).

        Raises:
            InvalidInput: No such PodCliqueSet.
        """
        obj = await self._pcs(pcs)
        return TemplateResult(
            generation=obj["metadata"]["generation"], changed=False, template=obj["spec"]["template"]
        )

    @activity.defn(name="set_pcs_images")
    async def set_pcs_images(self, request: SetImagesInput) -> TemplateResult:
        """Set the images of the named cliques in the template; Grove then computes a new hash.

        Raises:
            InvalidInput: Unknown PodCliqueSet or clique, bad image, not `OnDelete`.
        """
        await self._pcs(request.pcs)  # a clear error for an unknown PodCliqueSet
        obj, changed = await self.kube.edit(
            _key(request.pcs),
            kinds()[0],
            request.pcs.namespace,
            request.pcs.name,
            lambda o: images_patch(o, request.images),
        )
        assert obj is not None
        return TemplateResult(
            generation=obj["metadata"]["generation"], changed=changed, template=obj["spec"]["template"]
        )

    @activity.defn(name="restore_pcs_template")
    async def restore_pcs_template(self, request: TemplateInput) -> TemplateResult:
        """Put back a template read earlier (a rollback), exactly."""

        def change(obj: Object) -> Object | None:
            old = obj["spec"]["template"]
            return (
                None
                if old == request.template
                else {"spec": {"template": replacement(old, request.template)}}
            )

        obj, changed = await self.kube.edit(
            _key(request.pcs), kinds()[0], request.pcs.namespace, request.pcs.name, change
        )
        assert obj is not None
        return TemplateResult(
            generation=obj["metadata"]["generation"], changed=changed, template=obj["spec"]["template"]
        )

    @activity.defn(name="roll_podgangs")
    async def roll_podgangs(self, request: RollPodGangsInput) -> RollPodGangsResult:
        """Delete the step's PodGangs that are not yet at the target hash (see the module docstring)."""
        ns, key = request.pcs.namespace, _key(request.pcs)
        deleted, done = [], []
        if request.require_healthy:
            listed = await self.kube.list(
                key, kinds()[1], ns, label_selector=f"{PART_OF_LABEL}={request.pcs.name}"
            )
            now = pcs_state(
                ns, request.pcs.name, {"metadata": {"name": ""}, "spec": {}}, listed.get("items") or []
            )
            ok = {
                g.name
                for g in now.gangs
                if not g.deleting and (g.ready if request.condition == "Ready" else g.available)
            }
            blocked = tuple(n for n in request.require_healthy if n not in ok)
            if blocked:
                log.info("not rolling %s: %s not %s", request.podgangs, blocked, request.condition)
                return RollPodGangsResult(deleted=(), already_done=(), blocked_by=blocked)
        for name in request.podgangs:
            gang = await self.kube.get(key, kinds()[1], ns, name, missing_ok=True)
            if gang is None or gang["metadata"].get("deletionTimestamp"):
                done.append(name)  # already deleted: Grove is recreating it at the current hash
                continue
            view = pcs_state(ns, request.pcs.name, {"metadata": {"name": ""}, "spec": {}}, [gang]).gangs[0]
            stale = view.hash != request.target_hash
            if not stale and not (request.recreate_unavailable and not view.available):
                done.append(name)
                continue
            try:
                await self.kube.delete(key, kinds()[1], ns, name, uid=view.uid)
            except ConflictRetriesExhausted:  # the uid no longer matches: already replaced
                done.append(name)
                continue
            except ObjectNotFound:
                done.append(name)
                continue
            log.info("deleted PodGang %s/%s (uid %s, hash %s) to roll it", ns, name, view.uid, view.hash)
            deleted.append(name)
        return RollPodGangsResult(deleted=tuple(deleted), already_done=tuple(done))

    @activity.defn(name="publish_rollout_progress")
    async def publish_rollout_progress(self, request: ProgressInput) -> None:
        """Write where the rollout is as the PodCliqueSet annotation `metalflow.io/rollout` (JSON),
        or remove it when the rollout ended. An annotation, not `status`: Grove owns the status
        subresource and rewrites it on every reconcile."""
        value = None
        if not request.ended:
            value = json.dumps(
                {
                    "workflowId": request.workflow_id,
                    "phase": request.phase,
                    "replicas": list(request.replicas),
                    "inFlightPodGangs": list(request.in_flight),
                    "updated": request.done,
                    "total": request.total,
                    "updateStartedAt": request.started_at.isoformat() if request.started_at else None,
                },
                sort_keys=True,
            )

        def change(obj: Object) -> Object | None:
            current = (obj["metadata"].get("annotations") or {}).get(ROLLOUT_ANNOTATION)
            return None if current == value else {"metadata": {"annotations": {ROLLOUT_ANNOTATION: value}}}

        await self.kube.edit(
            _key(request.pcs), kinds()[0], request.pcs.namespace, request.pcs.name, change, missing_ok=True
        )

    @activity.defn(name="scale_pcs")
    async def scale_pcs(self, request: ScalePCSInput) -> int:
        """Set `spec.replicas` (applied by the rollout between steps); returns the generation."""

        def change(obj: Object) -> Object | None:
            return (
                None
                if obj["spec"].get("replicas") == request.replicas
                else {"spec": {"replicas": request.replicas}}
            )

        pcs = request.pcs
        obj, _ = await self.kube.edit(_key(pcs), kinds()[0], pcs.namespace, pcs.name, change)
        assert obj is not None
        return int(obj["metadata"]["generation"])
