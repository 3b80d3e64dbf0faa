"""The Grove activities of a coherent rollout (DOMAIN.md section 3; Grove at the pin, rows of
`simulators/grove/BEHAVIOUR.md` in brackets).

The lever: under OnDelete Grove patches every PodClique in place when the template changes and
replaces a pod only when it is deleted, from the PodClique's current spec, into the PodGang its
PodClique names [U1, U2, D1, D6]. So a PodGang is rolled by deleting its pods that are not at
their clique's target hash, together (`roll_podgang`); deleting a PodGang rolls nothing [D5].

Each activity is idempotent and conflict-safe: template writes are conditional on the
resourceVersion read and carry the field manager `metalflow-rollout`; pod deletes are pinned by
a selector of the stale hashes (a replacement runs the target, so a retry never deletes it), and
a pod already at its target is left alone, so a step retried after a worker crash deletes nothing
twice. Cost: `read_pcs_state` 5 list calls;
`roll_podgang` 2 lists + 1 deletecollection (2 when two cliques share a template); a template write 2 calls.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from temporalio import activity

from activities.heartbeat import beats_while_running
from contracts.errors import InvalidInput
from contracts.models.grove import (
    FIELD_MANAGER,
    PART_OF_LABEL,
    POD_TEMPLATE_HASH_LABEL,
    PODCLIQUE_LABEL,
    PODGANG_LABEL,
    ROLLING_RECREATE,
    ROLLOUT_ANNOTATION,
    ForeignEditsInput,
    PCSRef,
    PCSState,
    ProgressInput,
    RestoreInput,
    RollGangInput,
    RollGangResult,
    ScalePCSInput,
    SetImagesInput,
    TemplateChange,
    TemplateChangeInput,
    TemplateResult,
)
from drivers.grove import (
    delete_pods,
    foreign_edits_patch,
    images_patch,
    kinds,
    list_pods,
    pclq_clique,
    read_state,
    restore_patch,
    stale_selectors,
    strategy_managers,
    template_diff,
    template_managers,
)

if TYPE_CHECKING:
    from drivers.kube import Kube

log = logging.getLogger(__name__)
Object = dict[str, Any]


def _key(pcs: PCSRef) -> str:
    return f"pcs:{pcs}"


class GroveActivities:
    """Reads and writes of PodCliqueSets and pods; holds one `Kube` (shared with DPF)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    @activity.defn(name="read_pcs_state")
    @beats_while_running
    async def read_pcs_state(self, pcs: PCSRef) -> PCSState:
        """The PodCliqueSet, its PodCliques, scaling groups, PodGangs and pods (5 calls)."""
        return await read_state(self.kube, _key(pcs), pcs.namespace, pcs.name)

    async def _edit(self, pcs: PCSRef, change: Any) -> tuple[Object, bool]:
        """Read, ask `change` for a patch, write it conditionally as `metalflow-rollout`."""
        obj, changed = await self.kube.edit(
            _key(pcs),
            kinds()[0],
            pcs.namespace,
            pcs.name,
            change,
            missing_ok=True,
            field_manager=FIELD_MANAGER,
        )
        if obj is None:
            raise InvalidInput(f"no PodCliqueSet {pcs} (check the namespace and the name)")
        return obj, changed

    @activity.defn(name="set_pcs_images")
    @beats_while_running
    async def set_pcs_images(self, request: SetImagesInput) -> TemplateResult:
        """Set the images ("clique/container", or "clique" with one container).

        Raises:
            InvalidInput: No such PodCliqueSet, not OnDelete, an unknown clique or container,
                an unusable image (nothing written).
        """
        changed: list[Any] = []

        def change(obj: Object) -> Object | None:
            patch, fields = images_patch(obj, request.images)
            changed[:] = fields
            return patch

        obj, _ = await self._edit(request.pcs, change)
        return TemplateResult(
            generation=obj["metadata"]["generation"], changed=tuple(changed), template=obj["spec"]["template"]
        )

    @activity.defn(name="restore_pcs_template")
    @beats_while_running
    async def restore_pcs_template(self, request: RestoreInput) -> TemplateResult:
        """Write every clique back as it was before the rollout (`drivers.grove.restore_patch`):
        the rollout's fields put back, someone else's edits taken out and recorded (`dormant`,
        and the PodCliqueSet's annotation `metalflow.io/rollout-dormant`), to be put back once
        every pod runs the original (`put_back_foreign_edits`)."""
        done: list[Any] = []
        overwritten: list[str] = []
        dormant: dict[str, Any] = {}

        def change(obj: Object) -> Object | None:
            patch, back, over, kept = restore_patch(obj, request.fields, request.original)
            done[:], overwritten[:] = back, over
            dormant.clear()
            dormant.update(kept)
            return patch

        obj, _ = await self._edit(request.pcs, change)
        return TemplateResult(
            generation=obj["metadata"]["generation"],
            changed=tuple(done),
            overwritten=tuple(overwritten),
            dormant=dormant,
            template=obj["spec"]["template"],
        )

    @activity.defn(name="put_back_foreign_edits")
    @beats_while_running
    async def put_back_foreign_edits(self, request: ForeignEditsInput) -> TemplateResult:
        """Put back the cliques someone else edited, each where it still holds its original
        (`drivers.grove.foreign_edits_patch`); no pod is deleted, so the edit stays dormant."""
        left: list[str] = []

        def change(obj: Object) -> Object | None:
            patch, _, kept = foreign_edits_patch(obj, request.dormant, request.original)
            left[:] = kept
            return patch

        obj, _ = await self._edit(request.pcs, change)
        return TemplateResult(
            generation=obj["metadata"]["generation"], skipped=tuple(left), template=obj["spec"]["template"]
        )

    @activity.defn(name="describe_template_change")
    @beats_while_running
    async def describe_template_change(self, request: TemplateChangeInput) -> TemplateChange:
        """The template fields that differ from what the rollout wrote, and the managers
        (managedFields) that wrote template fields since; the update strategy and who set it."""
        obj = await self.kube.get(_key(request.pcs), kinds()[0], request.pcs.namespace, request.pcs.name)
        assert obj is not None
        template = obj["spec"].get("template") or {}
        since = request.since.strftime("%Y-%m-%dT%H:%M:%SZ")
        return TemplateChange(
            generation=int(obj["metadata"]["generation"]),
            fields=tuple(template_diff(request.written, template)),
            managers=tuple(template_managers(obj, since)),
            template=template,
            strategy=str((obj["spec"].get("updateStrategy") or {}).get("type", ROLLING_RECREATE)),
            strategy_set_by=tuple(strategy_managers(obj)),
        )

    @activity.defn(name="roll_podgang")
    @beats_while_running
    async def roll_podgang(self, request: RollGangInput) -> RollGangResult:
        """Delete the PodGang's pods whose pod-template hash is not their clique's target, in
        one call; first, each of `require_healthy` must still be serving."""
        ns, key = request.pcs.namespace, _key(request.pcs)
        if request.require_healthy:
            state = await self.read_pcs_state(request.pcs)
            ok = {
                g.name for g in state.gangs if all(sum(x.ready.values()) >= x.min_replicas for x in g.groups)
            }
            blocked = tuple(n for n in request.require_healthy if n not in ok)
            if blocked:
                log.info("not rolling %s: %s not serving", request.podgang, blocked)
                return RollGangResult(blocked_by=blocked)
        pods = await list_pods(self.kube, key, ns, f"{PODGANG_LABEL}={request.podgang}")
        listed = await self.kube.list(
            key, kinds()[2], ns, label_selector=f"{PART_OF_LABEL}={request.pcs.name}"
        )
        clique_of = {
            p["metadata"]["name"]: pclq_clique(p, request.pcs.name) for p in listed.get("items") or []
        }
        stale: dict[str, set[str]] = {}
        targets_of: dict[str, str] = {}
        for p in pods:
            meta = p["metadata"]
            labels = meta.get("labels") or {}
            pclq = labels.get(PODCLIQUE_LABEL, "")
            target = request.targets.get(clique_of.get(pclq, ""))
            if target is None:
                continue
            targets_of[pclq] = target
            if not meta.get("deletionTimestamp") and labels.get(POD_TEMPLATE_HASH_LABEL) != target:
                stale.setdefault(pclq, set()).add(labels.get(POD_TEMPLATE_HASH_LABEL, ""))
        # Last, so a template edit seen here deletes nothing. One round trip (this read, then the
        # delete) stays open: Kubernetes has no precondition across two objects. An edit landing
        # in it is seen at the next safe point (tests/test_rollout_control.py).
        if request.generation:
            obj = await self.kube.get(key, kinds()[0], ns, request.pcs.name, missing_ok=True)
            if obj is None or int(obj["metadata"]["generation"]) != request.generation:
                log.info(
                    "not rolling %s: the PodCliqueSet changed since the step was planned", request.podgang
                )
                return RollGangResult(blocked_by=(f"{request.pcs} (generation changed)",))
        deleted: list[str] = []
        # One deletecollection per selector, so Grove sees the stale pods go together and the
        # PodGang never holds a replacement beside an old pod [D1, P3].
        for selector in stale_selectors(request.podgang, stale, targets_of):
            deleted += await delete_pods(self.kube, key, ns, selector)
        log.info("rolled PodGang %s/%s: deleted %d pods", ns, request.podgang, len(deleted))
        return RollGangResult(deleted=tuple(sorted(deleted)))

    @activity.defn(name="publish_rollout_progress")
    @beats_while_running
    async def publish_rollout_progress(self, request: ProgressInput) -> None:
        """Write where the rollout is as the PodCliqueSet annotation `metalflow.io/rollout` (JSON),
        or remove it when the rollout ended. An annotation, not `status`: Grove owns the status."""
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
    @beats_while_running
    async def scale_pcs(self, request: ScalePCSInput) -> int:
        """Set `spec.replicas` (applied by the rollout between steps); returns the generation."""

        def change(obj: Object) -> Object | None:
            return (
                None
                if obj["spec"].get("replicas") == request.replicas
                else {"spec": {"replicas": request.replicas}}
            )

        obj, _ = await self._edit(request.pcs, change)
        return int(obj["metadata"]["generation"])
