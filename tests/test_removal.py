"""HostRemovalWorkflow end to end (flows 7-10) against the simulated DPF: delete a DPU, delete a
DPUNode, and the force variants when a finalizer nobody releases holds an object."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from cli_support import ended, metalflow, until_shown, use_site_file
from host_operation_support import save_history, worker_for
from sim_support import RunningSim, prefixed_sim
from site_worker_support import DPU, DPUDEVICE, DPUNODE, FAST_POLICY, SiteView, eventually, site_worker
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.testing import WorkflowEnvironment

from contracts import names
from contracts.models.host import HostOperationStatus
from contracts.models.inventory import DPF_NAMESPACE
from contracts.models.removal import HostRemovalInput, HostRemovalResult
from drivers.kube import Kind
from workflows.removal.workflow import WORST_CASE_EVENTS

FOREIGN_FINALIZER = "example.test/keep"  # another controller's finalizer that it never releases


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with prefixed_sim(tmp_path_factory.mktemp("removal-sim"), "rm", hosts=7) as running:
        yield running


@pytest.fixture
def view(sim: RunningSim) -> Iterator[SiteView]:
    site = SiteView(sim)
    yield site
    site.close()


async def remove(client: Client, task_queue: str, request: HostRemovalInput) -> tuple[HostRemovalResult, Any]:
    handle = await client.start_workflow(
        "HostRemovalWorkflow",
        request,
        id=names.host_operation_workflow_id(names.REMOVE, request.host_id),
        task_queue=task_queue,
        result_type=HostRemovalResult,
    )
    return await handle.result(), handle


async def hold_with_foreign_finalizer(view: SiteView, kind: Kind, name: str) -> None:
    obj = await view.get(kind, name)
    assert obj is not None
    finalizers = [*(obj["metadata"].get("finalizers") or []), FOREIGN_FINALIZER]
    await view.kube.patch("test", kind, DPF_NAMESPACE, name, {"metadata": {"finalizers": finalizers}})


async def test_removing_a_dpu_deletes_its_device_and_dpu_and_keeps_its_sibling(
    client: Client, task_queue: str, sim: RunningSim, view: SiteView
) -> None:
    host = "rm-001"
    async with site_worker(client, task_queue, sim):
        result, handle = await remove(
            client,
            task_queue,
            HostRemovalInput(host_id=host, dpu_ids=(f"{host}-dpu-1",), requested_by="test"),
        )
        await save_history(handle, "removal_one_dpu")
    assert result.removed == (f"DPUDevice/device-{host}-dpu-1", f"DPU/node-{host}-device-{host}-dpu-1")
    assert not result.forced
    assert ("DPUDevice", f"device-{host}-dpu-1", "deleted") in [
        (a.kind, a.name, a.outcome) for a in result.actions
    ]
    assert await view.get(DPUDEVICE, f"device-{host}-dpu-1") is None
    assert await view.get(DPU, f"node-{host}-device-{host}-dpu-1") is None
    node = await view.get(DPUNODE, f"node-{host}")
    assert node is not None and [d["name"] for d in node["spec"]["dpus"]] == [f"device-{host}-dpu-0"]
    assert await view.dpu_phase(host, f"{host}-dpu-0") == "Ready"
    assert sim.violations() == []


async def test_removing_the_node_deletes_the_dpunode_and_its_dpus(
    client: Client, task_queue: str, sim: RunningSim, view: SiteView
) -> None:
    host = "rm-002"
    async with site_worker(client, task_queue, sim):
        result, handle = await remove(client, task_queue, HostRemovalInput(host_id=host, requested_by="test"))
        await save_history(handle, "removal_node")
    assert result.removed[0] == f"DPUNode/node-{host}"
    assert await view.get(DPUNODE, f"node-{host}") is None
    for k in (0, 1):
        assert await view.get(DPU, f"node-{host}-device-{host}-dpu-{k}") is None
    assert sim.violations() == []


async def test_a_stuck_dpu_fails_without_force_and_is_removed_with_force(
    client: Client, task_queue: str, sim: RunningSim, view: SiteView
) -> None:
    host = "rm-003"
    dpu_name = f"node-{host}-device-{host}-dpu-0"
    await hold_with_foreign_finalizer(view, DPU, dpu_name)
    quick = FAST_POLICY.model_copy(update={"phase_timeout_seconds": 2.0})
    request = HostRemovalInput(host_id=host, dpu_ids=(f"{host}-dpu-0",), requested_by="test", policy=quick)
    async with site_worker(client, task_queue, sim):
        with pytest.raises(WorkflowFailureError) as failed:
            await remove(client, task_queue, request)
        cause = failed.value.cause
        assert isinstance(cause, ApplicationError) and cause.type == "RemovalTimedOut"
        assert dpu_name in cause.message and "force" in cause.message
        assert await view.get(DPU, dpu_name) is not None  # held by the finalizer

        forced = request.model_copy(update={"force": True, "force_after_seconds": 1.0})
        result, _ = await remove(client, task_queue, forced)
    assert result.forced
    assert ("DPU", dpu_name, "finalizers removed") in [(a.kind, a.name, a.outcome) for a in result.actions]
    assert await view.get(DPU, dpu_name) is None
    assert await view.get(DPUDEVICE, f"device-{host}-dpu-0") is None


async def test_a_stuck_node_is_removed_with_force(
    client: Client, task_queue: str, sim: RunningSim, view: SiteView
) -> None:
    host = "rm-004"
    await hold_with_foreign_finalizer(view, DPUNODE, f"node-{host}")
    request = HostRemovalInput(
        host_id=host, force=True, force_after_seconds=1.0, requested_by="test", policy=FAST_POLICY
    )
    async with site_worker(client, task_queue, sim):
        result, handle = await remove(client, task_queue, request)
        await save_history(handle, "removal_node_forced")
    assert result.forced
    assert ("DPUNode", f"node-{host}", "finalizers removed") in [
        (a.kind, a.name, a.outcome) for a in result.actions
    ]
    assert await view.get(DPUNODE, f"node-{host}") is None
    assert sim.violations() == []


async def test_a_device_held_for_the_whole_wait_costs_a_bounded_history(
    client: Client, task_queue: str, sim: RunningSim, view: SiteView
) -> None:
    """The worst case of the DPUDevice wait: held by a finalizer until the phase timeout. The wait
    polls inside one activity, so the history stays within the bound the workflow states (it
    grew by ~11 events per second of waiting when the workflow polled: ~260 here)."""
    host = "rm-005"
    device = f"device-{host}-dpu-0"
    await hold_with_foreign_finalizer(view, DPUDEVICE, device)
    policy = FAST_POLICY.model_copy(update={"phase_timeout_seconds": 20.0})
    request = HostRemovalInput(host_id=host, dpu_ids=(f"{host}-dpu-0",), requested_by="test", policy=policy)
    async with site_worker(client, task_queue, sim):
        handle = await client.start_workflow(
            "HostRemovalWorkflow",
            request,
            id=names.host_operation_workflow_id(names.REMOVE, host),
            task_queue=task_queue,
            result_type=HostRemovalResult,
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        events = (await handle.fetch_history()).events
        await save_history(handle, "removal_device_held_to_the_deadline")
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "RemovalTimedOut"
    assert device in cause.message
    assert await view.get(DPUDEVICE, device) is not None  # the finalizer still holds it
    assert len(events) <= WORST_CASE_EVENTS, f"{len(events)} events"


async def test_a_cancel_while_waiting_until_gone_ends_cancelled_naming_what_was_deleted(
    client: Client, task_queue: str, sim: RunningSim, view: SiteView
) -> None:
    host = "rm-006"
    dpu_name = f"node-{host}-device-{host}-dpu-1"
    await hold_with_foreign_finalizer(view, DPU, dpu_name)
    request = HostRemovalInput(
        host_id=host, dpu_ids=(f"{host}-dpu-1",), requested_by="test", policy=FAST_POLICY
    )
    async with site_worker(client, task_queue, sim):
        handle = await client.start_workflow(
            "HostRemovalWorkflow",
            request,
            id=f"{names.host_operation_workflow_id(names.REMOVE, host)}-cancel",
            task_queue=task_queue,
            result_type=HostRemovalResult,
        )

        async def waiting() -> str | None:
            return (await handle.describe()).typed_search_attributes.get(names.PHASE)

        await eventually(waiting, lambda phase: phase == "waiting-until-gone")
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        final = await handle.query("status", result_type=HostOperationStatus)
    assert isinstance(failed.value.cause, CancelledError)
    assert final.phase == "cancelled"
    assert f"DPUDevice device-{host}-dpu-1 deleted" in final.waiting_for
    assert await view.get(DPU, dpu_name) is not None  # held by the finalizer; nothing undone


async def test_host_abort_while_waiting_until_gone_stops_the_wait_and_no_reprovision_is_taken_after(
    local_env: WorkflowEnvironment, task_queue: str, sim: RunningSim, view: SiteView
) -> None:
    """Issue 40: `host abort` works in every phase where a host operation waits. A removal refused
    it from its first delete on, and waited (an hour by default) for a finalizer nobody releases.
    Now the abort ends the wait, saying the delete sent goes on in DPF, and the entity counts the
    DPU as removed: a reprovision of it is refused, as after a completed removal."""
    host = "rm-007"
    dpu = f"{host}-dpu-1"
    await hold_with_foreign_finalizer(view, DPU, f"node-{host}-device-{dpu}")
    use_site_file(sim.site_file)
    async with worker_for(local_env.client, task_queue, sim):
        queue = ("--task-queue", task_queue)
        started = await metalflow(
            local_env, "host", "remove", host, "--dpus", dpu, "--by", "alice@test", *queue
        )
        assert started.status == 0, started.stdout + started.stderr
        await until_shown(
            local_env, host, lambda s: (s["operation"] or {}).get("phase") == "waiting-until-gone", "waited"
        )
        aborted = await metalflow(
            local_env, "host", "abort", host, "--by", "bob@test", "--reason", "debugging", *queue
        )
        assert aborted.status == 0, aborted.stdout + aborted.stderr
        assert "the deletes sent cannot be taken back: DPF finishes them" in aborted.stdout, aborted.stdout
        shown = await until_shown(local_env, host, ended, "ended the removal")
        outcome = shown["host"]["recent"][-1]["outcome"]
        assert outcome.startswith("aborted by bob@test: debugging; the deletes sent cannot"), outcome
        assert f"DPUDevice device-{dpu} deleted" in outcome, outcome
        again = await metalflow(local_env, "host", "reprovision", host, "--dpus", dpu, *queue)
        # Nor a reset of it (before: accepted, and it completed, for a DPU DPF no longer has).
        reset = await metalflow(local_env, "host", "reset", host, "--dpu", dpu, *queue)
    assert again.status == 1, again.stdout + again.stderr
    assert f"DPF no longer has {dpu} (removed by remove/{host})" in again.stderr, again.stderr
    assert reset.status == 1, reset.stdout + reset.stderr
    assert f"DPF no longer has {dpu} (removed by remove/{host}); reset refused" in reset.stderr, reset.stderr
