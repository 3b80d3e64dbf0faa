"""`HostRemovalWorkflow` (`remove/<id>`): flows 7-10 of docs/DOMAIN.md section 2.8.

Runbook:
1. Resolve the host (its namespace, and that the DPUs asked for are its own).
2. Delete: each DPU asked for (`delete_dpu`: off the DPUNode's list, its DPUDevice deleted; DPF
   then deletes the DPU, "true deletion"), or the whole DPUNode (`delete_dpu_node`; DPF deletes
   its DPUs, then lets the node go). The DPUDevices of a removed node are left: they describe
   hardware that is still in the host; remove them with a DPU removal.
3. Wait until the objects are gone (the watcher's signals; a DPUDevice is confirmed gone by
   `delete_dpu` itself, which is idempotent and reports `gone`).
4. With `force`, when DPF has not finished within `force_after_seconds` (a finalizer nobody
   releases): delete again with force, which removes the finalizers; wait again.
Without `force` the wait is bounded by `policy.phase_timeout_seconds`, then the run fails
naming what is left.

Abort (update `abort`) is accepted in every phase (issue 40: every wait can be stopped). Before
the first delete nothing is deleted; after it no further DPU is deleted, and the run stops
waiting: a delete sent cannot be taken back, DPF finishes it, and the result says so
(`deletes_sent`: the host's entity then records those DPUs as removed, as after a completed
removal, so no reprovision is accepted for them). An aborted run completes (Phase `aborted`:
asked for, no Failed run), its result's `aborted` saying who, why and what was deleted. The
result lists every change the run made.

What the run changed and what is left are its state's to say (`state.py`); the runbook here
calls the activities, waits and shows the phases.

Cost per host and worst-case history: no activity slot while waiting (the site watch signals
each change); about 45 events plus 4 per DPF change signalled (about 15 more with force),
however long a finalizer holds an object: the DPUDevice wait polls inside one heartbeating
activity, not one poll per workflow task (bench/README.md). `WORST_CASE_EVENTS` (150: room for
~25 DPF changes) is held by tests/test_removal.py with a device held for the whole wait.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, ClassVar, Final

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api, names
    from contracts.errors import InvalidInput, RemovalTimedOut, WorkflowError
    from contracts.models.control import STATUS_QUERY
    from contracts.models.dpf import (
        DPF_STATE_CHANGED_SIGNAL,
        DeleteDPUInput,
        DeleteNodeInput,
        DevicesGoneInput,
        DPUProgress,
        DPURef,
        HostDPFState,
        HostRef,
    )
    from contracts.models.host import HostOperationStatus
    from contracts.models.inventory import HostLookup
    from contracts.models.removal import HostRemovalInput, HostRemovalResult
    from workflows import kernel
    from workflows.parts.dpf_watch import DPFWatch
    from workflows.removal.state import RemovalState

WORST_CASE_EVENTS: Final = 150  # see the module docstring; tests/test_removal.py holds us to it


def devices_wait_options(seconds: float) -> workflow.ActivityConfig:
    """`wait_until_dpu_devices_gone`: an attempt lasts up to the wait, heartbeating each poll; a
    retried attempt keeps the input's deadline, and all attempts end within a margin of it."""
    return {
        **kernel.bounded(kernel.KUBE_WRITE, seconds + 300),
        "start_to_close_timeout": timedelta(seconds=seconds + 60),
        "heartbeat_timeout": timedelta(seconds=30),
    }


@workflow.defn(name="HostRemovalWorkflow")
class HostRemovalWorkflow(kernel.Abortable):
    """Delete DPUs of a host, or its whole DPUNode, and wait until they are gone."""

    ENDED: ClassVar = ("done", "failed", "aborted", "cancelled")

    @workflow.init
    def __init__(self, request: HostRemovalInput) -> None:
        super().__init__()
        self._request = request
        self.state = RemovalState(request=request, started_at=workflow.now())
        self.details = "the host's inventory"
        self._watch = DPFWatch()
        self.operation_kind = names.REMOVE

    @workflow.run
    async def run(self, request: HostRemovalInput) -> HostRemovalResult:
        """Delete, wait until gone, force when asked; see the module docstring."""
        return await self.to_the_end(lambda: self._runbook(request), self._left_behind)

    async def _left_behind(self, err: BaseException) -> str:
        # The watch is stopped by the runbook; a delete cannot be undone: say what was done.
        return f"Changed by this run: {self.state.changed()}"

    async def _runbook(self, request: HostRemovalInput) -> HostRemovalResult:
        kernel.upsert_changed(  # none when the entity gave them at the start
            [names.HOST_ID.value_set(request.host_id), names.OPERATION.value_set(names.REMOVE)]
        )
        host = await self._resolve_host()
        if self.abort_request is not None:  # "aborted by <who>: <why>; nothing deleted"
            raise self.aborted("nothing deleted")
        self._watch.start(host, self._request.dpu_ids or ())
        try:
            await self._delete(host, force=False)
            gone = await self._wait_until_gone(
                request.force_after_seconds if request.force else request.policy.phase_timeout_seconds
            )
            if not gone and request.force:
                self.state.forced = True
                await self._delete(host, force=True)
                gone = await self._wait_until_gone(request.policy.phase_timeout_seconds)
            if not gone:
                hint = "" if request.force else "; run it again with force to remove finalizers"
                raise RemovalTimedOut(
                    f"removal of {self.state.what()} of host {request.host_id}: still present after the "
                    f"wait ({self.state.left(self._watch.state)}){hint}"
                )
        finally:
            await self._watch.stop()
        await self._confirm_devices_gone(host)
        await self.finish("done", f"{self.state.what()} removed")
        return HostRemovalResult(
            host_id=request.host_id,
            removed=self.state.removed(host),
            actions=self.state.changes(),
            forced=self.state.forced,
            started_at=self.state.started_at,
            finished_at=workflow.now(),
        )

    # -- steps -------------------------------------------------------------------------------------
    # No call here is cut short by an abort (`abortable=False`): one taken while the host is
    # resolved is acted on after it, before any delete, and none is taken once a delete is sent.
    async def _resolve_host(self) -> HostRef:
        self.enter("resolving-inventory", f"the inventory's record of {self._request.host_id}")
        inventory = await self.call(
            activity_api.resolve_host_inventory,
            HostLookup(host_id=self._request.host_id),
            kernel.options(kernel.INVENTORY, f"resolve {self._request.host_id}"),
            abortable=False,
        )
        workflow.upsert_search_attributes([names.SITE.value_set(inventory.site)])
        unknown = sorted(set(self._request.dpu_ids or ()) - {d.id for d in inventory.dpus})
        if unknown:
            raise InvalidInput(f"host {inventory.host_id} has no DPU {', '.join(unknown)}")
        return HostRef.of(inventory)

    async def _delete(self, host: HostRef, *, force: bool) -> None:
        verb = "force-deleting" if force else "deleting"
        self.enter(verb, f"{self.state.what()} of {host.host_id}")
        self.state.deleting = True
        if self._request.dpu_ids is None:
            result = await self.call(
                activity_api.delete_dpu_node,
                DeleteNodeInput(host=host, force=force),
                kernel.options(self._kube_write(), f"{verb} DPUNode {host.node_name()}"),
                abortable=False,
            )
            self.state.record(result)
            return
        for dpu_id in self._request.dpu_ids:
            if self.aborting:  # taken during a delete: no further one (the wait below ends the run)
                break
            await self._delete_dpu(host, dpu_id, force=force)

    async def _delete_dpu(self, host: HostRef, dpu_id: str, *, force: bool) -> None:
        verb = "force-delete" if force else "delete"
        result = await self.call(
            activity_api.delete_dpu,
            DeleteDPUInput(
                dpu=DPURef(host_id=host.host_id, dpu_id=dpu_id, namespace=host.namespace), force=force
            ),
            kernel.options(self._kube_write(), f"{verb} DPU {dpu_id}"),
            abortable=False,
        )
        self.state.record(result)

    async def _wait_until_gone(self, seconds: float) -> bool:
        self.enter("waiting-until-gone", f"{self.state.what()} gone (DPF releases them)")
        return await self.wait(
            lambda: self._watch.state is not None and self.state.gone(self._watch.state),
            timeout=seconds,
            timeout_summary=f"deadline: {self.state.what()} gone from DPF",
        )

    async def _confirm_devices_gone(self, host: HostRef) -> None:
        """DPUDevices are not in the watched state: one activity waits for them (polling inside
        it, heartbeating), so a device a finalizer keeps costs a few events, not thousands."""
        if not self._request.dpu_ids:
            return
        seconds = self._request.policy.phase_timeout_seconds
        self.enter("waiting-until-gone", f"the DPUDevices of {', '.join(self._request.dpu_ids)} gone")
        refs = tuple(
            DPURef(host_id=host.host_id, dpu_id=d, namespace=host.namespace) for d in self._request.dpu_ids
        )
        result = await self.call(
            activity_api.wait_until_dpu_devices_gone,
            DevicesGoneInput(dpus=refs, deadline=workflow.now() + timedelta(seconds=seconds)),
            kernel.options(
                devices_wait_options(seconds), f"wait until the DPUDevices of {host.host_id} are gone"
            ),
        )
        left = [o.name for o in result.objects if o.outcome != "gone"]
        if left:
            raise RemovalTimedOut(
                f"DPUDevice {', '.join(left)} of host {host.host_id} still present after {seconds:g} s"
            )

    def _kube_write(self) -> workflow.ActivityConfig:
        # Bounded: an API that stays away fails the run, naming the call, instead of a silent retry.
        return kernel.bounded(kernel.KUBE_WRITE, self._request.policy.kube_call_timeout_seconds)

    # -- messages ----------------------------------------------------------------------------------
    @workflow.signal(name=DPF_STATE_CHANGED_SIGNAL)
    def dpf_state_changed(self, state: HostDPFState) -> None:
        """From the watcher: the host's DPF state changed."""
        self._watch.accept(state)

    def aborted_result(self, err: BaseException) -> HostRemovalResult:
        """An operator's abort completes the run (Phase `aborted`): the result says who aborted,
        why and what this run changed (nothing is deleted after an abort: `abort_refusal`)."""
        return HostRemovalResult(
            host_id=self._request.host_id,
            removed=(),
            actions=self.state.changes(),
            forced=self.state.forced,
            started_at=self.state.started_at,
            finished_at=workflow.now(),
            aborted=self.aborted_words(),
            deletes_sent=self.state.deleting,
        )

    def abort_promise(self) -> str:
        """What an abort taken now leaves (`RemovalState.abort_leaves`)."""
        return f"removal on {self._request.host_id} aborting: {self.state.abort_leaves()}"

    def aborted(self, outcome: str = "", *details: Any) -> WorkflowError:
        """Who aborted and why, and what the abort leaves (nothing deleted, or deletes DPF finishes)."""
        return super().aborted(outcome or self.state.abort_leaves(), *details)

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> HostOperationStatus:
        """Where the removal is, and each watched DPU's phase."""
        dpus = tuple(
            DPUProgress(
                dpu_id=d.dpu_id,
                phase=d.phase,
                since=self._watch.clock.phases.get(d.dpu_id, ("", self.state.started_at))[1],
            )
            for d in (self._watch.state.dpus if self._watch.state else ())
            if d.dpu_id is not None and self.state.counts(d.dpu_id)
        )
        return HostOperationStatus(
            host_id=self._request.host_id,
            operation=names.REMOVE,
            phase=self.phase,
            waiting_for=self.details,
            dpus=dpus,
            started_at=self.state.started_at,
        )
