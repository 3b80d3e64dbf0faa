"""Every way a host operation can end early, on a real dev server and worker against the simulated
site: an activity that fails for good, a reboot child terminated or cancelled, a cancel while an
activity retries, and a Kubernetes outage (a visible stall an operator decides; an abort that
cancels the retrying call). Each test asserts the final Phase and details, and what the site was
left with: the DPUs' objects, the reboot-required annotation, the BMC's power log, no violation.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from dpf_activities_support import REBOOT, Api, annotation
from host_operation_support import (
    FAST_POLICY,
    aborted_run,
    cycle_by_hand,
    eventually,
    power_cycles,
    save_history,
    start_operation,
    status_of,
    wait_for_phase,
    wait_for_status,
    worker_for,
)
from sim_support import RunningSim, prefixed_sim, running_sim, sim_http, site_file_with_prefix
from takeover_support import takeover_seconds
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

from contracts import names
from contracts.models.control import ABORT_UPDATE, RETRY_UPDATE, OperatorAnswer, OperatorRequest
from contracts.models.host import (
    HOST_REBOOTED_SIGNAL,
    MANUAL_INTERVENTION_REQUIRED,
    HostOperationKind,
    RebootMethod,
)
from contracts.with_start import execute_update
from drivers.settings import Settings
from metalflow.runtime.worker import build_worker

REPROVISION = HostOperationKind.REPROVISION
PROVISION = HostOperationKind.PROVISION
# Host ids of this module alone: the dev server is shared by the session, and other modules count
# host-001's boot generations from 1.
PREFIX = f"end{uuid.uuid4().hex[:5]}"
H1, H2 = f"{PREFIX}-001", f"{PREFIX}-002"
ALICE = OperatorRequest(requested_by="alice", reason="seen it")
MANUAL = FAST_POLICY.model_copy(update={"reboot_method": RebootMethod.MANUAL})


# One site for the module's tests that start from a ready site (a simulator's start is seconds of
# CPU), each test on two hosts of its own (`hosts`): what a test asserts of a host (its DPUs, its
# annotation, its power log) is its own; the API faults are cleared by the test that sets them.
_READY_TESTS = 7
_pairs = iter(range(1, _READY_TESTS + 1))


@pytest.fixture(scope="module")
def ready_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with prefixed_sim(tmp_path_factory.mktemp("ready"), PREFIX, hosts=5 * _READY_TESTS + 2) as sim:
        yield sim


@pytest.fixture
def hosts(ready_site: RunningSim) -> tuple[str, str]:
    """Two hosts of the ready site no other test of the module touches, with H1's and H2's BMC
    profiles (host i of a generated site gets DEFAULT_ROTATION[i % 5])."""
    first = 5 * next(_pairs) + 1
    return f"{PREFIX}-{first:03d}", f"{PREFIX}-{first + 1:03d}"


def _uids(api: Api, host: str) -> list[str]:
    return [api.must("DPU", f"node-{host}-device-{host}-dpu-{k}")["metadata"]["uid"] for k in (0, 1)]


def _suffix() -> str:
    return f"-{uuid.uuid4().hex[:6]}"


async def _calls_retrying(handle: WorkflowHandle[Any, Any], activity_type: str) -> None:
    async def retrying() -> bool:
        pending = (await handle.describe()).raw_description.pending_activities
        return any(p.activity_type.name == activity_type and p.attempt >= 2 for p in pending)

    await eventually(retrying, timeout=60, what=f"{activity_type} retrying")


async def test_an_activity_failing_for_good_ends_failed_and_registers_nothing(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    with running_sim(
        tmp_path / "sim", site_file=site_file_with_prefix(tmp_path / "in", PREFIX, hosts=1), timings="zero"
    ) as sim:
        site = yaml.safe_load(sim.site_file.read_text())
        site["hosts"][0]["groups"] = ["a-group-name-far-too-long-for-dpf"]  # DPF allows 20 characters
        site_file = tmp_path / "site.yaml"
        site_file.write_text(yaml.safe_dump(site))
        async with build_worker(
            client,
            task_queue,
            Settings(
                site_file=site_file, kubeconfig=sim.kubeconfig, worker_takeover_seconds=takeover_seconds()
            ),
        ):
            handle = await start_operation(client, task_queue, H1, PROVISION, id_suffix=_suffix())
            with pytest.raises(WorkflowFailureError) as failed:
                await handle.result()
            final = await status_of(handle)
        api = Api(sim)
        assert api.get("DPUNode", f"node-{H1}") is None
        assert sim.power_log(H1) == [] and sim.violations() == []
    cause = failed.value.cause  # the activity's error, in words (issue 40), then the activity
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidInput", cause
    assert "DPU group name" in cause.message and "Changed by this run: nothing" in cause.message
    assert isinstance(cause.cause, ActivityError) and cause.cause.activity_type == "create_site_objects"
    assert final.phase == "failed"
    assert "activity create_site_objects failed: InvalidInput: DPU group name" in final.waiting_for
    assert "Changed by this run: nothing" in final.waiting_for


async def _at_manual_reboot(
    client: Client, task_queue: str, host: str
) -> tuple[WorkflowHandle[Any, Any], str]:
    handle = await start_operation(client, task_queue, host, REPROVISION, policy=MANUAL, id_suffix=_suffix())
    status = await wait_for_phase(handle, "rebooting-host")
    assert status.rebooting_to is not None  # reached stays until the reboot happened
    reboot_id = names.host_reboot_workflow_id(host, status.rebooting_to)
    child = client.get_workflow_handle(reboot_id)

    async def waiting_for_person() -> bool:
        phase = (await child.describe()).typed_search_attributes.get(names.PHASE)
        return phase == "waiting-for-manual-reboot"

    await eventually(waiting_for_person, what="the reboot child to wait for a person")
    return handle, reboot_id


async def test_a_terminated_reboot_child_ends_failed_and_leaves_the_reboot_unacknowledged(
    client: Client, task_queue: str, ready_site: RunningSim, hosts: tuple[str, str]
) -> None:
    H1, H2 = hosts  # noqa: N806 - the module's names for the pair
    api = Api(ready_site)
    async with worker_for(client, task_queue, ready_site):
        handle, reboot_id = await _at_manual_reboot(client, task_queue, H1)
        await client.get_workflow_handle(reboot_id).terminate("the operator gave up on this reboot")
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        final = await status_of(handle)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "RebootFailed"
    assert final.phase == "failed" and "RebootFailed" in final.waiting_for
    assert "deleted DPU" in final.waiting_for  # what the run changed, for the operator
    # Each DPU and the host, in the failure's words too (issue 40 Deliver 2; before: only the
    # deletions, nothing of the host nor of what DPF showed of the DPUs since).
    for words in (final.waiting_for, cause.message):
        assert f"Each DPU: {H1}-dpu-0 deleted (uid " in words, words
        assert words.endswith("The host: not power-cycled by this run"), words
    # Nobody rebooted the host: DPF must keep asking for it.
    assert annotation(api.must("DPUNode", f"node-{H1}"), REBOOT) == "true"
    assert power_cycles(ready_site.power_log(H1)) == 0
    assert ready_site.violations() == []


async def test_a_cancel_while_the_reboot_child_is_awaited_cancels_it(
    client: Client, task_queue: str, ready_site: RunningSim, hosts: tuple[str, str]
) -> None:
    H1, H2 = hosts  # noqa: N806 - the module's names for the pair
    api = Api(ready_site)
    async with worker_for(client, task_queue, ready_site):
        handle, reboot_id = await _at_manual_reboot(client, task_queue, H1)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        final = await status_of(handle)
        child = await client.get_workflow_handle(reboot_id).describe()
    assert isinstance(failed.value.cause, CancelledError)
    assert final.phase == "cancelled" and "Changed by this run: deleted DPU" in final.waiting_for
    assert child.status == WorkflowExecutionStatus.CANCELED
    assert annotation(api.must("DPUNode", f"node-{H1}"), REBOOT) == "true"
    assert power_cycles(ready_site.power_log(H1)) == 0
    assert ready_site.violations() == []


async def test_a_cancel_while_a_kubernetes_call_retries_ends_cancelled_and_changes_nothing(
    client: Client, task_queue: str, ready_site: RunningSim, hosts: tuple[str, str]
) -> None:
    H1, H2 = hosts  # noqa: N806 - the module's names for the pair
    api = Api(ready_site)
    before = _uids(api, H2)
    async with worker_for(client, task_queue, ready_site):
        ready_site.inject("api/outage", {"down": True})
        try:
            handle = await start_operation(client, task_queue, H2, REPROVISION, id_suffix=_suffix())
            await _calls_retrying(handle, "join_site_dpf_watch")
            await handle.cancel()
            with pytest.raises(WorkflowFailureError) as failed:
                await handle.result()
            final = await status_of(handle)
        finally:
            ready_site.inject("api/outage", {"down": False})
    assert isinstance(failed.value.cause, CancelledError)
    assert final.phase == "cancelled" and "Changed by this run: nothing" in final.waiting_for
    assert _uids(api, H2) == before  # nothing deleted
    assert ready_site.power_log(H2) == [] and ready_site.violations() == []


async def test_a_kubernetes_outage_is_a_visible_stall_and_retry_finishes_the_operation(
    client: Client, task_queue: str, ready_site: RunningSim, hosts: tuple[str, str]
) -> None:
    H1, H2 = hosts  # noqa: N806 - the module's names for the pair
    policy = FAST_POLICY.model_copy(update={"kube_call_timeout_seconds": 3})
    async with worker_for(client, task_queue, ready_site):
        ready_site.inject("api/outage", {"down": True})
        try:
            handle = await start_operation(
                client, task_queue, H1, REPROVISION, policy=policy, id_suffix=_suffix()
            )
            stalled = await wait_for_phase(handle, MANUAL_INTERVENTION_REQUIRED)
        finally:
            ready_site.inject("api/outage", {"down": False})
        answer = await execute_update(handle, RETRY_UPDATE, ALICE, result_type=OperatorAnswer)
        result = await handle.result()
        await save_history(handle, "host_operation_kubernetes_stall_retried")
    reason = stalled.manual_intervention_reason or ""
    assert f"the Kubernetes call `join the site's DPF watch for {H1}` did not succeed within 3 s" in reason
    assert "KubernetesUnavailable" in reason or "503" in reason
    assert answer.accepted and result.reboots == 1
    assert power_cycles(ready_site.power_log(H1)) == 1
    assert ready_site.violations() == []


async def test_abort_during_a_kubernetes_outage_cancels_the_retrying_call(
    client: Client, task_queue: str, ready_site: RunningSim, hosts: tuple[str, str]
) -> None:
    H1, H2 = hosts  # noqa: N806 - the module's names for the pair
    api = Api(ready_site)
    before = _uids(api, H1)
    async with worker_for(client, task_queue, ready_site):
        ready_site.inject("api/outage", {"down": True})
        try:
            handle = await start_operation(client, task_queue, H1, REPROVISION, id_suffix=_suffix())
            await _calls_retrying(handle, "join_site_dpf_watch")
            answer = await execute_update(handle, ABORT_UPDATE, ALICE, result_type=OperatorAnswer)
            aborted = await aborted_run(handle)  # Completed, Phase aborted: asked for, no failure
            final = await wait_for_status(handle, lambda s: s.phase == "aborted", "phase aborted")
            history = await handle.fetch_history()
            await save_history(handle, "host_operation_aborted_during_kubernetes_outage")
        finally:
            ready_site.inject("api/outage", {"down": False})
    assert answer.accepted
    assert aborted.startswith("aborted by alice: seen it"), aborted
    assert "aborted by alice: seen it" in final.waiting_for
    cancel_requested = [
        e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED
    ]
    scheduled = {
        e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    }
    cancelled = {
        scheduled[e.activity_task_cancel_requested_event_attributes.scheduled_event_id]
        for e in cancel_requested
    }
    assert "join_site_dpf_watch" in cancelled
    assert _uids(api, H1) == before
    assert ready_site.power_log(H1) == [] and ready_site.violations() == []


async def test_host_rebooted_arriving_as_the_reboot_child_completes_does_not_fail_the_run(
    client: Client, task_queue: str, ready_site: RunningSim, hosts: tuple[str, str]
) -> None:
    H1, H2 = hosts  # noqa: N806 - the module's names for the pair
    async with worker_for(client, task_queue, ready_site):
        handle, reboot_id = await _at_manual_reboot(client, task_queue, H1)
    # No worker runs: the person's confirmation reaches the reboot child and the operation at
    # once, so the operation's handler passes it on to a child that closes meanwhile.
    await cycle_by_hand(ready_site, H1)
    await client.get_workflow_handle(reboot_id).signal(HOST_REBOOTED_SIGNAL, ALICE)
    await handle.signal(HOST_REBOOTED_SIGNAL, ALICE)
    async with worker_for(client, task_queue, ready_site):
        result = await handle.result()
        final = await status_of(handle)
    assert result.reboots == 1 and final.phase == "completed"
    assert power_cycles(ready_site.power_log(H1)) == 1  # the person's, and no other
    assert ready_site.violations() == []


async def test_abort_while_a_kubernetes_write_hangs_waits_for_it_and_ends_with_no_call_pending(
    client: Client, task_queue: str, ready_site: RunningSim, hosts: tuple[str, str]
) -> None:
    """The API has accepted the operation's first write and not answered when the abort arrives:
    the call is cancelled and waited for before the cleanup reads the world, and the ended run
    shows no pending activity."""
    H1, H2 = hosts  # noqa: N806 - the module's names for the pair
    hold = f"{ready_site.url}/sim/faults/api/hold-writes"
    async with worker_for(client, task_queue, ready_site):
        sim_http().post(hold, json={"next": 1}).raise_for_status()
        try:
            handle = await start_operation(client, task_queue, H2, REPROVISION, id_suffix=_suffix())

            held: list[str] = []

            async def held_call() -> bool:
                if sim_http().get(hold).json()["held"] != 1:
                    return False
                pending = (await handle.describe()).raw_description.pending_activities
                joins = "join_site_dpf_watch"
                held[:] = [p.activity_type.name for p in pending if p.activity_type.name != joins]
                return len(held) == 1  # a write of the runbook (the first: a DPU's reprovision)

            await eventually(held_call, timeout=60, what="the first write held")
            answer = await execute_update(handle, ABORT_UPDATE, ALICE, result_type=OperatorAnswer)

            async def events() -> list[EventType.ValueType]:
                return [e.event_type for e in (await handle.fetch_history()).events]

            await eventually(
                lambda: _has(events(), EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED),
                timeout=30,
                what="the held call cancelled",
            )
            await asyncio.sleep(2)  # time enough for a cleanup that would not wait
            while_held = await handle.describe()
        finally:
            sim_http().post(hold, json={"next": 0}).raise_for_status()
        aborted = await aborted_run(handle)
        final = await wait_for_status(handle, lambda s: s.phase == "aborted", "phase aborted")
        ended = await handle.describe()
        await save_history(handle, "host_operation_aborted_while_a_write_hangs")
    assert answer.accepted
    assert while_held.status == WorkflowExecutionStatus.RUNNING, f"the run waits for {held}"
    assert aborted.startswith("aborted by alice: seen it"), aborted
    assert "aborted by alice: seen it" in final.waiting_for
    assert list(ended.raw_description.pending_activities) == []
    assert ready_site.power_log(H2) == [] and ready_site.violations() == []


async def _has(events: Awaitable[list[EventType.ValueType]], wanted: EventType.ValueType) -> bool:
    return wanted in await events
