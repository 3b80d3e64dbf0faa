"""The DPF activities: every operation the bare-metal manager needs (docs/DOMAIN.md section 2.9).

Each is idempotent: it reads the world first and writes only what differs, so running it twice
changes nothing the second time (an annotation already as asked, an object already created
and equal, a DPU already deleted). Edits are conditional on the resourceVersion they read
(`Kube.edit`), so concurrent writers never lose each other's changes.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from temporalio import activity

from activities.heartbeat import beats_while_running
from contracts.errors import ConflictRetriesExhausted, InvalidInput
from contracts.models.dpf import (
    DPUNODE_NAME_LABEL,
    HOLD_ANNOTATION,
    REBOOT_ACK_ANNOTATION,
    REBOOT_REQUIRED_ANNOTATION,
    ChangeResult,
    DeleteDPUInput,
    DeleteNodeInput,
    DeploymentBFBInput,
    DeploymentFlavorInput,
    DevicesGoneInput,
    DPFVersion,
    HostDPFState,
    HostRef,
    MarkRebootedInput,
    ObjectOutcome,
    ObjectsResult,
    RegisterHostInput,
    ReprovisionInput,
    SiteSetupInput,
)
from contracts.models.dpf_answers import RebootAcknowledged
from drivers import dpf as bodies
from drivers.kube import (
    BFB,
    DEPLOYMENT,
    DPU,
    DPUDEVICE,
    DPUNODE,
    FLAVOR,
    KINDS,
    MAINTENANCE,
    SITE_KEY,
    Kind,
    Kube,
    Object,
)
from drivers.settings import Settings

log = logging.getLogger(__name__)


class DPFActivities:
    """The DPF operations as activities; holds one `Kube` (client, thread pool, per-host limits)."""

    def __init__(self, settings: Settings, kube: Kube | None = None) -> None:
        self.settings = settings
        self.kube = kube or Kube(settings)

    # -- flow 1 and 2: create -------------------------------------------------------------------
    async def _ensure(self, key: str, ns: str, body: Object, *, converge: bool) -> ObjectOutcome:
        kind = KINDS[body["kind"]]
        name = body["metadata"]["name"]
        if await self.kube.create(key, kind, ns, body) is not None:
            return ObjectOutcome(kind=kind.kind, name=name, outcome="created")
        existing = await self.kube.get(key, kind, ns, name)
        assert existing is not None
        wanted = {k: v for k, v in body.items() if k in ("spec", "metadata")}
        wanted["metadata"] = {k: v for k, v in body["metadata"].items() if k in ("labels", "annotations")}
        diffs = bodies.differences(existing, wanted)
        if not diffs:
            return ObjectOutcome(kind=kind.kind, name=name, outcome="unchanged")
        if not converge:
            return ObjectOutcome(kind=kind.kind, name=name, outcome="differs", detail=", ".join(diffs))

        def change(obj: Object) -> Object | None:
            return wanted if bodies.differences(obj, wanted) else None

        _, changed = await self.kube.edit(key, kind, ns, name, change)
        return ObjectOutcome(kind=kind.kind, name=name, outcome="updated" if changed else "unchanged",
                             detail=", ".join(diffs))  # fmt: skip

    @activity.defn(name="create_site_objects")
    @beats_while_running
    async def create_site_objects(self, setup: SiteSetupInput) -> ObjectsResult:
        """Flow 1: BFB, DPUFlavor, DPUServiceTemplates/Configurations and one DPUDeployment per
        group, holding the node effect. Existing objects that differ are reported, not changed
        (BFB and flavor changes go through `update_deployment_bfb`/`update_deployment_flavor`)."""
        outcomes = [
            await self._ensure(SITE_KEY, setup.namespace, body, converge=False)
            for body in bodies.site_setup_objects(setup)
        ]
        return ObjectsResult(objects=tuple(outcomes))

    @activity.defn(name="register_host_dpus")
    @beats_while_running
    async def register_host_dpus(self, request: RegisterHostInput) -> ObjectsResult:
        """Flow 2: the host's DPUDevices, then its DPUNode (external reboot, group labels, the
        inventory annotations). Existing ones are brought to the inventory's labels,
        annotations and device list; an immutable field that differs is `InvalidInput`."""
        inventory = request.inventory
        group = bodies.node_group(inventory, request.group)
        ns, key = inventory.namespace, inventory.host_id
        outcomes = []
        for body in bodies.dpudevice_bodies(inventory, group):
            outcomes.append(await self._ensure(key, ns, body, converge=True))
        outcomes.append(await self._ensure(key, ns, bodies.dpunode_body(inventory, group), converge=True))
        return ObjectsResult(objects=tuple(outcomes))

    # -- the two handshakes ---------------------------------------------------------------------
    @activity.defn(name="release_node_effect_hold")
    @beats_while_running
    async def release_node_effect_hold(self, host: HostRef) -> ChangeResult:
        """Set the hold annotation of `<dpunode>-hold` to "false": DPF may start the node effect.

        One request where DPF holds (issue 37): a JSON patch that tests the annotation is "true"
        (what DPF sets) and replaces it, in one write the API server applies to the object as it
        is (`Kube.json_patch`); so `changed` is known without a read. Anything else (released
        already, another value, no annotation: the test fails, 422, nothing written) is read and
        decided as before, a conditional edit.

        Raises:
            ObjectNotFound: DPF has not created the hold (no DPU of the node is in Node Effect).
        """
        pointer = _pointer(HOLD_ANNOTATION)
        ops: list[Object] = [
            {"op": "test", "path": pointer, "value": "true"},
            {"op": "replace", "path": pointer, "value": "false"},
        ]
        try:
            await self.kube.json_patch(host.host_id, MAINTENANCE, host.namespace, host.hold_name(), ops)
            return ChangeResult(name=host.hold_name(), changed=True)
        except InvalidInput:
            pass  # not "true" now: read it and decide

        def change(obj: Object) -> Object | None:
            if (obj["metadata"].get("annotations") or {}).get(HOLD_ANNOTATION) == "false":
                return None
            return {"metadata": {"annotations": {HOLD_ANNOTATION: "false"}}}

        _, changed = await self.kube.edit(host.host_id, MAINTENANCE, host.namespace, host.hold_name(), change)
        return ChangeResult(name=host.hold_name(), changed=changed)

    @activity.defn(name="mark_dpu_node_rebooted")
    @beats_while_running
    async def mark_dpu_node_rebooted(self, request: MarkRebootedInput) -> RebootAcknowledged:
        """Remove the external-reboot-required annotation: the host was power-cycled.

        Call it only after the power cycle; DPF trusts it. The removal and the request's token
        (`REBOOT_ACK_ANNOTATION`) are one write, conditional on the resourceVersion read, so it
        happens once per token: a retry that lands after DPF asked again (a BF4's next round, a
        reboot loop) finds its token and leaves DPF's new request alone. Without the annotation,
        the token is still written, for the same reason. An empty token removes whatever is there.

        Where the request says what the node showed when DPF asked (`asked`, `token_before`), one
        JSON patch tests both and writes, no read (issue 37; a failed test reads and decides as
        below). The answer carries the DPUNode as the write left it (as read, when nothing was
        written) and its resourceVersion, so the workflow orders the site watch's signals against its own
        write without reading again (`RebootAcknowledged`, `DPFWatch.written`).
        """
        token = request.token
        if token and request.asked is not None and request.token_before is not None:
            # One request: the node still shows what the workflow saw when DPF asked (its value,
            # the token before ours), tested and changed in one write; else read and decide.
            required, acked = _pointer(REBOOT_REQUIRED_ANNOTATION), _pointer(REBOOT_ACK_ANNOTATION)
            ops: list[Object] = [
                {"op": "test", "path": required, "value": request.asked},
                {"op": "test", "path": acked, "value": request.token_before},
                {"op": "remove", "path": required},
                {"op": "add", "path": acked, "value": token},
            ]
            try:
                written = await self.kube.json_patch(
                    request.host_id, DPUNODE, request.namespace, request.node_name(), ops
                )
                return RebootAcknowledged(
                    name=request.node_name(), changed=True, detail="removed",
                    node=bodies.node_state(written), node_version=_version_of(written),
                )  # fmt: skip
            except InvalidInput:
                pass  # the node moved on (our token there, another request, no annotation)
        found: list[str] = []  # what the last read showed: "done" (our token), "removing", "absent"

        def change(obj: Object) -> Object | None:
            annotations = obj["metadata"].get("annotations") or {}
            if token and annotations.get(REBOOT_ACK_ANNOTATION) == token:
                found.append("done")
                return None  # this acknowledgement happened: what is there now is a new request
            patch: dict[str, str | None] = {}
            if REBOOT_REQUIRED_ANNOTATION in annotations:
                patch[REBOOT_REQUIRED_ANNOTATION] = None
            if token:
                patch[REBOOT_ACK_ANNOTATION] = token
            found.append("removing" if REBOOT_REQUIRED_ANNOTATION in annotations else "absent")
            return {"metadata": {"annotations": patch}} if patch else None

        obj, _ = await self.kube.edit(
            request.host_id, DPUNODE, request.namespace, request.node_name(), change
        )
        annotations = ((obj or {}).get("metadata") or {}).get("annotations") or {}
        if found[-1] == "done" and REBOOT_REQUIRED_ANNOTATION in annotations:
            detail = "already acknowledged; DPF asks again: left for the next acknowledgement"
        elif found[-1] == "done":
            detail = "already acknowledged"
        else:
            detail = "removed" if found[-1] == "removing" else "not there"
        # True: this acknowledgement removed it (now, or an earlier attempt whose token is there).
        return RebootAcknowledged(
            name=request.node_name(), changed=found[-1] in ("done", "removing"), detail=detail,
            node=bodies.node_state(obj) if obj is not None else None, node_version=_version_of(obj),
        )  # fmt: skip

    # -- reads ----------------------------------------------------------------------------------
    @activity.defn(name="read_host_dpf_state")
    @beats_while_running
    async def read_host_dpf_state(self, host: HostRef) -> HostDPFState:
        """The host's DPUNode, DPUs and hold as they are now (the watcher signals the same model),
        with `as_of`: the DPU list's resourceVersion and each object's own (0: missing), no epoch
        (the workflow's `DPFWatch.adopt_read` puts it in the epoch it holds)."""
        key, ns = host.host_id, host.namespace
        node = await self.kube.get(key, DPUNODE, ns, host.node_name(), missing_ok=True)
        listed = await self.kube.list(key, DPU, ns, label_selector=f"{DPUNODE_NAME_LABEL}={host.node_name()}")
        hold = await self.kube.get(key, MAINTENANCE, ns, host.hold_name(), missing_ok=True)
        state = bodies.host_state(host.host_id, node, list(listed.get("items") or []), hold)
        version = DPFVersion(dpus=_version_of(listed), node=_version_of(node), hold=_version_of(hold))
        return state.model_copy(update={"as_of": version})

    # -- flow 4: reprovision --------------------------------------------------------------------
    @activity.defn(name="reprovision_dpu")
    @beats_while_running
    async def reprovision_dpu(self, request: ReprovisionInput) -> ChangeResult:
        """Delete the DPU object with `request.uid`; DPF recreates it (held in Node Effect).

        One request, the DELETE with the uid precondition, no read before it (issue 37): its
        answer says what a read would have. 404: gone, DPF is recreating it; 409 (the precondition
        failed): already recreated under another uid, left alone; 200: deleted, or already
        deleting with this uid, which the API server leaves as it is (k8s.io/apiserver
        pkg/registry/rest/delete.go `BeforeDelete`: a uid precondition that differs is a
        Conflict, "the object might have been deleted and then recreated"; an object that
        already has a deletionTimestamp may only have its grace period shortened, and a custom
        resource has none).
        So a retried or replayed call never reprovisions twice: the uid precondition, not a
        read, is what keeps the recreated DPU from a second delete (a read and then a delete
        would race DPF's recreation anyway). The caller asks only for a DPU its watch shows
        with that uid and not deleting (`HostOperationState.current`).
        """
        ref = request.dpu
        name = ref.dpu_name()
        try:
            deleted = await self.kube.delete(ref.host_id, DPU, ref.namespace, name, uid=request.uid)
        except ConflictRetriesExhausted:  # the uid precondition failed: recreated meanwhile
            return ChangeResult(name=name, changed=False, detail="already recreated (another uid)")
        if deleted is None:
            return ChangeResult(name=name, changed=False, detail="gone: DPF is recreating it")
        return ChangeResult(name=name, changed=True, detail="deleted")

    # -- flow 6: the deployment -----------------------------------------------------------------
    async def _update_deployment(
        self, deployment: str, ns: str, field: str, ref_kind: Kind, value: str
    ) -> ChangeResult:
        # The referenced object must exist: DPF would otherwise stall every DPU of the group.
        await self.kube.get(SITE_KEY, ref_kind, ns, value)

        def change(obj: Object) -> Object | None:
            if ((obj.get("spec") or {}).get("dpus") or {}).get(field) == value:
                return None
            return {"spec": {"dpus": {field: value}}}

        _, changed = await self.kube.edit(SITE_KEY, DEPLOYMENT, ns, deployment, change)
        return ChangeResult(name=deployment, changed=changed, detail=f"{field}={value}")

    @activity.defn(name="update_deployment_bfb")
    @beats_while_running
    async def update_deployment_bfb(self, request: DeploymentBFBInput) -> ChangeResult:
        """Point the DPUDeployment at another BFB (DPUs then report `Outdated`; under OnDelete each
        is upgraded by `reprovision_dpu`, at the pace the workflow chooses).

        Raises:
            ObjectNotFound: The DPUDeployment or the BFB does not exist.
        """
        return await self._update_deployment(request.deployment, request.namespace, "bfb", BFB, request.bfb)

    @activity.defn(name="update_deployment_flavor")
    @beats_while_running
    async def update_deployment_flavor(self, request: DeploymentFlavorInput) -> ChangeResult:
        """Point the DPUDeployment at another DPUFlavor (see `update_deployment_bfb`)."""
        return await self._update_deployment(
            request.deployment, request.namespace, "flavor", FLAVOR, request.flavor
        )

    # -- flows 7-10: delete ---------------------------------------------------------------------
    async def _strip_finalizers(self, key: str, kind: Kind, ns: str, name: str) -> ObjectOutcome | None:
        def change(obj: Object) -> Object | None:
            return {"metadata": {"finalizers": None}} if obj["metadata"].get("finalizers") else None

        obj, changed = await self.kube.edit(key, kind, ns, name, change, missing_ok=True)
        if not changed:
            return None
        log.warning("force: removed the finalizers of %s %s/%s", kind.kind, ns, name)
        return ObjectOutcome(kind=kind.kind, name=name, outcome="finalizers removed")

    async def _delete(self, key: str, kind: Kind, ns: str, name: str) -> ObjectOutcome:
        obj = await self.kube.get(key, kind, ns, name, missing_ok=True)
        if obj is None:
            return ObjectOutcome(kind=kind.kind, name=name, outcome="gone")
        if obj["metadata"].get("deletionTimestamp"):
            return ObjectOutcome(kind=kind.kind, name=name, outcome="deleting")
        deleted = await self.kube.delete(key, kind, ns, name, uid=obj["metadata"].get("uid"))
        return ObjectOutcome(kind=kind.kind, name=name, outcome="deleted" if deleted is not None else "gone")

    @activity.defn(name="delete_dpu")
    @beats_while_running
    async def delete_dpu(self, request: DeleteDPUInput) -> ObjectsResult:
        """Flow 7 (and 9 with `force`): take the DPU off its DPUNode's list and delete its
        DPUDevice; DPF then deletes the DPU. `force` also deletes the DPU object and removes the
        finalizers (`provisioning.dpu.nvidia.com/dpu-protection`...) DPF would otherwise release."""
        ref = request.dpu
        key, ns, device = ref.host_id, ref.namespace, ref.device_name()

        def unlist(obj: Object) -> Object | None:
            entries = list((obj.get("spec") or {}).get("dpus") or [])
            kept = [e for e in entries if e.get("name") != device]
            return None if kept == entries else {"spec": {"dpus": kept}}

        outcomes: list[ObjectOutcome] = []
        _, unlisted = await self.kube.edit(key, DPUNODE, ns, ref.host().node_name(), unlist, missing_ok=True)
        if unlisted:
            outcomes.append(ObjectOutcome(kind="DPUNode", name=ref.host().node_name(), outcome="updated",
                                          detail=f"{device} removed from spec.dpus"))  # fmt: skip
        outcomes.append(await self._delete(key, DPUDEVICE, ns, device))
        if request.force:
            outcomes.append(await self._delete(key, DPU, ns, ref.dpu_name()))
            for kind, name in ((DPU, ref.dpu_name()), (DPUDEVICE, device)):
                stripped = await self._strip_finalizers(key, kind, ns, name)
                if stripped is not None:
                    outcomes.append(stripped)
        return ObjectsResult(objects=tuple(outcomes))

    @activity.defn(name="wait_until_dpu_devices_gone")
    @beats_while_running
    async def wait_until_dpu_devices_gone(self, request: DevicesGoneInput) -> ObjectsResult:
        """Each DPUDevice `gone`, or `present` once the deadline passed.

        Polls the API every `poll_seconds` inside the activity and heartbeats with each poll, so
        a device a finalizer keeps for an hour costs the workflow a handful of history events,
        not one activity and one timer per poll."""
        while True:
            outcomes = []
            for ref in request.dpus:
                obj = await self.kube.get(
                    ref.host_id, DPUDEVICE, ref.namespace, ref.device_name(), missing_ok=True
                )
                outcomes.append(
                    ObjectOutcome(
                        kind="DPUDevice", name=ref.device_name(), outcome="gone" if obj is None else "present"
                    )
                )
            present = [o.name for o in outcomes if o.outcome == "present"]
            if not present or datetime.now(UTC) >= request.deadline:
                return ObjectsResult(objects=tuple(outcomes))
            activity.heartbeat(f"waiting for {', '.join(present)}")
            await asyncio.sleep(request.poll_seconds)

    @activity.defn(name="delete_dpu_node")
    @beats_while_running
    async def delete_dpu_node(self, request: DeleteNodeInput) -> ObjectsResult:
        """Flow 8 (and 10 with `force`): delete the DPUNode; DPF deletes its DPUs, then lets it go.
        `force` also deletes the node's DPUs and removes the finalizers of the node and its DPUs."""
        host = request.host
        key, ns, node = host.host_id, host.namespace, host.node_name()
        outcomes = [await self._delete(key, DPUNODE, ns, node)]
        if request.force:
            listed = await self.kube.list(key, DPU, ns, label_selector=f"{DPUNODE_NAME_LABEL}={node}")
            dpus = [d["metadata"]["name"] for d in listed.get("items") or []
                    if (d.get("spec") or {}).get("dpuNodeName") == node]  # fmt: skip
            for name in dpus:
                outcomes.append(await self._delete(key, DPU, ns, name))
            for kind, name in [(DPU, n) for n in dpus] + [(DPUNODE, node)]:
                stripped = await self._strip_finalizers(key, kind, ns, name)
                if stripped is not None:
                    outcomes.append(stripped)
        return ObjectsResult(objects=tuple(outcomes))


def _pointer(annotation: str) -> str:
    """The JSON pointer (RFC 6901) of an annotation of an object."""
    return "/metadata/annotations/" + annotation.replace("~", "~0").replace("/", "~1")


def _version_of(obj: Object | None) -> int:
    """An object's resourceVersion as the site watch orders it (an integer; 0: none or not one).
    Kubernetes makes resourceVersions of one resource comparable (KEP-5504, stable in v1.35:
    k8s.io/apimachinery `util/resourceversion.CompareResourceVersion`); `DPFVersion` and the
    site watch compare them so already (`activities.site_watch`, "Ordering")."""
    try:
        return int(((obj or {}).get("metadata") or {}).get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return 0
