"""The floor: the same reprovision as metalflow's, written as ONE workflow with no guarantees.

Used only by the benchmarks (`bench_fleet.py`), never by the product. It calls the very
activities a metalflow reprovision calls, with the same options, in the same order, and waits on
DPF the same way (the site's one watch and its signals, `workflows.parts.dpf_watch.DPFWatch`), so
the site sees the same Kubernetes and Redfish requests:

    resolve_host_inventory -> join_site_dpf_watch -> reprovision_dpu (each DPU, pinned by uid)
    -> wait until every DPU is held -> release_node_effect_hold
    -> per reboot round DPF asks for: power_cycle_host -> mark_dpu_node_rebooted -> join again
    -> until every DPU is Ready

What it leaves out is what metalflow's guarantees cost: no host entity (no per-host lock, no
request queue, no approval), no reboot child (nothing stops a second reboot of the host across a
restarted operation), no fleet-wide BMC lease, no search attributes or phases in the UI, no
abort, pause or operator decisions, no escalation to a person, no cleanup. A failure just fails.

Per host (2 DPUs, one reboot round): 1 workflow, 7 activities, the DPF signals; about 65 history
events. Started by `start_ideal` on its own task queue (`IDEAL_TASK_QUEUE`), served by
`bench/ideal_worker.py` beside the metalflow worker.
"""

from __future__ import annotations

import functools

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api
    from contracts.models.dpf import DPF_STATE_CHANGED_SIGNAL, DPURef, HostDPFState, HostRef, ReprovisionInput
    from contracts.models.inventory import HostInventory, HostLookup
    from contracts.models.redfish import PowerCycleInput
    from workflows import kernel
    from workflows.parts import dpf_barrier as barrier
    from workflows.parts.dpf_watch import DPFWatch
    from workflows.parts.power_cycle_options import power_cycle_options

IDEAL_TASK_QUEUE = "metalflow-ideal"
IDEAL_WORKFLOW = "IdealReprovisionWorkflow"


def ideal_workflow_id(host_id: str) -> str:
    return f"ideal-reprovision/{host_id}"


@workflow.defn(name=IDEAL_WORKFLOW)
class IdealReprovisionWorkflow:
    """Reprovision every DPU of one host; the module docstring says what it leaves out."""

    def __init__(self) -> None:
        self._watch = DPFWatch()
        self._replaced: dict[str, str] = {}
        self._dpu_ids: tuple[str, ...] = ()

    @workflow.signal(name=DPF_STATE_CHANGED_SIGNAL)
    def dpf_state_changed(self, state: HostDPFState) -> None:
        self._watch.accept(state)

    @workflow.run
    async def run(self, host_id: str, power_down_wait_seconds: float = 0.0) -> int:
        """Reprovision `host_id`; returns the power cycles it took."""
        inventory: HostInventory = await workflow.execute_activity(
            activity_api.resolve_host_inventory,
            HostLookup(host_id=host_id),
            **kernel.options(kernel.INVENTORY, f"resolve {host_id}"),
        )
        host = HostRef.of(inventory)
        self._dpu_ids = tuple(d.id for d in inventory.dpus)
        self._watch.start(host, self._dpu_ids)
        await workflow.wait_condition(lambda: self._watch.state is not None)
        for dpu_id in self._dpu_ids:
            current = barrier.current_dpu(self.state, dpu_id)
            if current is None:
                continue
            await workflow.execute_activity(
                activity_api.reprovision_dpu,
                ReprovisionInput(dpu=DPURef(host_id=host_id, dpu_id=dpu_id, namespace=host.namespace),
                                 uid=current.uid),
                **kernel.options(kernel.KUBE_WRITE, f"reprovision DPU {dpu_id}"),
            )  # fmt: skip
            self._replaced[dpu_id] = current.uid
        await self._wait(lambda s: barrier.held_or_beyond(s, self._dpu_ids, self._replaced), host, False)
        await self._release_if_held(host)
        cycles = 0
        while True:
            await self._wait(
                lambda s: (
                    barrier.all_ready(s, self._dpu_ids, self._replaced)
                    or barrier.reboot_barrier_reached(s, self._dpu_ids, self._replaced)
                ),
                host,
                True,
            )
            if barrier.all_ready(self.state, self._dpu_ids, self._replaced):
                break
            marks = barrier.progress_marks(self.state, self._dpu_ids)
            cycles += 1
            await workflow.execute_activity(
                activity_api.power_cycle_host,
                PowerCycleInput(
                    bmc=inventory.bmc,
                    boot_generation=cycles,
                    requested_at=workflow.now(),
                    power_down_wait_seconds=power_down_wait_seconds,
                ),
                **kernel.options(power_cycle_options(power_down_wait_seconds), f"power cycle {host_id}"),
            )
            await workflow.execute_activity(
                activity_api.mark_dpu_node_rebooted,
                host,
                **kernel.options(kernel.KUBE_WRITE, f"tell DPF {host.node_name()} was rebooted"),
            )
            state = self.state
            if state.node is not None:
                node = state.node.model_copy(update={"reboot_required": None})
                state = state.model_copy(update={"node": node})
            self._watch.restart(state)
            await workflow.wait_condition(functools.partial(self._moved_on, marks))
        await self._watch.stop()
        return cycles

    @property
    def state(self) -> HostDPFState:
        return self._watch.state or HostDPFState(host_id="")

    async def _wait(self, goal: object, host: HostRef, release: bool) -> None:
        """Until `goal(state)`; a hold DPF sets again meanwhile is released (as metalflow does)."""
        assert callable(goal)
        while True:
            seen = self._watch.changes
            if release:
                await self._release_if_held(host)
            if goal(self.state):
                return
            await workflow.wait_condition(functools.partial(self._changed_since, seen))

    def _moved_on(self, marks: object) -> bool:
        """DPF moved a DPU on after the reboot, or asks for another one."""
        state = self.state
        asks = state.node is not None and state.node.waiting_for_reboot
        return barrier.progress_marks(state, self._dpu_ids) != marks or asks

    def _changed_since(self, seen: int) -> bool:
        return self._watch.changes != seen

    async def _release_if_held(self, host: HostRef) -> None:
        if barrier.any_held(self.state, self._dpu_ids, self._replaced):
            await workflow.execute_activity(
                activity_api.release_node_effect_hold,
                host,
                **kernel.options(kernel.KUBE_WRITE, f"release the hold of {host.node_name()}"),
            )
