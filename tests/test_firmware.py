"""FirmwareWorkflow end to end: a real worker, the Temporal dev server, the simulated site's DPU
BMCs (SimpleUpdate, FirmwareInventory) and host BMCs (the power log)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from host_operation_support import aborted_run, save_history
from sim_support import RunningSim, prefixed_sim, running_sim
from site_worker_support import FAST_POLICY, SiteView, eventually, site_worker
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError, CancelledError

from contracts import names
from contracts.models.control import OperatorAnswer, OperatorRequest
from contracts.models.dpf import DPF_STATE_CHANGED_SIGNAL
from contracts.models.firmware import FirmwareStatus
from contracts.models.host import FirmwareInput, FirmwareResult, HostOperationStatus
from contracts.with_start import execute_update
from workflows.firmware.options import worst_case_events

TARGET = "32.45.1020"
IMAGE = f"http://firmware.example.test/bf-fw-{TARGET}.bfb"
ORIGINAL = "32.43.1014"  # what the simulated DPUs run at start


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    # `demo` timings: staging and power transitions take real (short) time, as on hardware.
    # Host ids of this module's own (fw-001...): the dev server is shared by the whole session, and
    # these tests count the hosts' boot generations from 0.
    with prefixed_sim(tmp_path_factory.mktemp("firmware-sim"), "fw", hosts=4, timings="demo") as running:
        yield running


@pytest.fixture
def view(sim: RunningSim) -> Iterator[SiteView]:
    site = SiteView(sim)
    yield site
    site.close()


def firmware(
    host_id: str, *, dpu_ids: tuple[str, ...] | None = None, generation: int = 0, image: str = IMAGE
) -> FirmwareInput:
    return FirmwareInput(
        host_id=host_id,
        target_version=TARGET,
        image_uri=image,
        dpu_ids=dpu_ids,
        requested_by="test",
        boot_generation=generation,
        policy=FAST_POLICY,
    )


async def run_firmware(client: Client, task_queue: str, request: FirmwareInput) -> tuple[FirmwareResult, str]:
    workflow_id = (
        f"{names.host_operation_workflow_id(names.FIRMWARE, request.host_id)}-{uuid.uuid4().hex[:6]}"
    )
    handle = await client.start_workflow(
        "FirmwareWorkflow", request, id=workflow_id, task_queue=task_queue, result_type=FirmwareResult
    )
    return await handle.result(), workflow_id


async def test_two_dpus_staged_then_one_power_cycle(
    client: Client, task_queue: str, sim: RunningSim, view: SiteView
) -> None:
    host = "fw-001"
    assert await view.running_firmware(host) == {f"{host}-dpu-0": ORIGINAL, f"{host}-dpu-1": ORIGINAL}
    async with site_worker(client, task_queue, sim):
        result, workflow_id = await run_firmware(client, task_queue, firmware(host))
        handle = client.get_workflow_handle(workflow_id)
        status = await handle.query("status", result_type=HostOperationStatus)
        detail = await handle.query("firmware_status", result_type=FirmwareStatus)
        await save_history(handle, "firmware_two_dpus")
        events = (await handle.fetch_history()).events

    assert result.staged == (f"{host}-dpu-0", f"{host}-dpu-1")
    assert result.already_running == ()
    assert (result.reboots, result.boot_generation) == (1, 1)
    assert view.power_cycles(host) == 1  # one cycle activated both DPUs
    assert await view.running_firmware(host) == {f"{host}-dpu-0": TARGET, f"{host}-dpu-1": TARGET}
    assert status.phase == "done" and status.power_cycles_issued == 1
    assert {d.outcome for d in detail.dpus} == {"verified"}
    assert sim.violations() == []
    # The worst case the workflow states, and the wait for On as one activity whatever the BMC's
    # pace (polling from the workflow cost 9 events per 5 s); the one timer is the phase deadline.
    changes = [
        e for e in events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
        and e.workflow_execution_signaled_event_attributes.signal_name == DPF_STATE_CHANGED_SIGNAL
    ]  # fmt: skip
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert len(events) <= worst_case_events(dpus=2, dpf_changes=len(changes)), len(events)
    assert scheduled.count("wait_for_power_state") == 1, scheduled
    assert len([e for e in events if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED]) <= 1


async def test_only_the_dpu_that_needs_it_is_staged_and_the_target_everywhere_reboots_nothing(
    client: Client, task_queue: str, sim: RunningSim, view: SiteView
) -> None:
    host = "fw-002"
    async with site_worker(client, task_queue, sim):
        first, _ = await run_firmware(client, task_queue, firmware(host, dpu_ids=(f"{host}-dpu-0",)))
        assert first.staged == (f"{host}-dpu-0",) and first.reboots == 1
        assert await view.running_firmware(host) == {f"{host}-dpu-0": TARGET, f"{host}-dpu-1": ORIGINAL}

        second, workflow_id = await run_firmware(client, task_queue, firmware(host, generation=1))
        await save_history(client.get_workflow_handle(workflow_id), "firmware_one_already_running")
        assert second.staged == (f"{host}-dpu-1",)
        assert second.already_running == (f"{host}-dpu-0",)
        assert (second.reboots, second.boot_generation) == (1, 2)
        assert await view.running_firmware(host) == {f"{host}-dpu-0": TARGET, f"{host}-dpu-1": TARGET}
        assert view.power_cycles(host) == 2

        third, _ = await run_firmware(client, task_queue, firmware(host, generation=2))
    assert third.staged == () and third.reboots == 0 and third.boot_generation == 2
    assert set(third.already_running) == {f"{host}-dpu-0", f"{host}-dpu-1"}
    assert view.power_cycles(host) == 2  # the third run rebooted nothing
    assert sim.violations() == []


async def test_a_failed_stage_fails_clearly_and_reboots_nothing(
    client: Client, task_queue: str, sim: RunningSim, view: SiteView
) -> None:
    host = "fw-003"
    malformed = "http://firmware.example.test/bf-fw-latest.bfb"  # no version: the BMC task ends Exception
    async with site_worker(client, task_queue, sim):
        with pytest.raises(WorkflowFailureError) as failed:
            await run_firmware(client, task_queue, firmware(host, image=malformed))
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "FirmwareStageFailed"
    assert f"{host}-dpu-0" in cause.message and "Exception" in cause.message
    assert "no reboot was done" in cause.message
    assert view.power_cycles(host) == 0
    assert await view.running_firmware(host) == {f"{host}-dpu-0": ORIGINAL, f"{host}-dpu-1": ORIGINAL}


async def test_abort_while_staging_ends_the_run_without_a_reboot(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    # `slow` timings: a SimpleUpdate takes minutes, so the abort surely lands while staging.
    with running_sim(tmp_path, hosts=1, dpus_per_host=2, timings="slow", initialised=True) as slow:
        host = "host-001"  # its own simulator; no reboot is counted
        async with site_worker(client, task_queue, slow):
            handle = await client.start_workflow(
                "FirmwareWorkflow",
                firmware(host),
                id=f"{names.host_operation_workflow_id(names.FIRMWARE, host)}-abort-{uuid.uuid4().hex[:6]}",
                task_queue=task_queue,
                result_type=FirmwareResult,
            )
            await eventually(
                lambda: handle.query("firmware_status", result_type=FirmwareStatus),
                lambda s: s.phase == "staging",
            )
            answer = await execute_update(
                handle,
                "abort",
                OperatorRequest(requested_by="operator", reason="wrong image"),
                result_type=OperatorAnswer,
            )
            assert answer.accepted and "no reboot" in answer.message
            aborted = await aborted_run(handle)
            await save_history(handle, "firmware_aborted")
            ended = await handle.describe()
        assert list(ended.raw_description.pending_activities) == []  # the stages ended with the run
        # As every operation's abort reads (attack 40f: "firmware update of H aborted by ...").
        assert aborted.startswith(
            "aborted by operator: wrong image; stopped in phase staging; no reboot was done"
        )
        assert slow.power_log(host) == []
        assert slow.violations() == []


async def test_a_cancel_while_staging_ends_cancelled_says_what_is_left_and_reboots_nothing(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    # `slow` timings: a SimpleUpdate takes minutes, so the cancel surely lands while staging.
    with running_sim(tmp_path, hosts=1, dpus_per_host=2, timings="slow", initialised=True) as slow:
        host = "host-001"
        async with site_worker(client, task_queue, slow):
            handle = await client.start_workflow(
                "FirmwareWorkflow",
                firmware(host),
                id=f"{names.host_operation_workflow_id(names.FIRMWARE, host)}-cancel-{uuid.uuid4().hex[:6]}",
                task_queue=task_queue,
                result_type=FirmwareResult,
            )
            await eventually(
                lambda: handle.query("firmware_status", result_type=FirmwareStatus),
                lambda s: s.phase == "staging",
            )
            await handle.cancel()
            with pytest.raises(WorkflowFailureError) as failed:
                await handle.result()
            final = await handle.query("status", result_type=HostOperationStatus)
            described = await handle.describe()
            await save_history(handle, "firmware_cancelled_while_staging")
        assert isinstance(failed.value.cause, CancelledError)
        assert list(described.raw_description.pending_activities) == []
        assert final.phase == "cancelled" and "Left behind: nothing staged" in final.waiting_for
        assert described.typed_search_attributes.get(names.PHASE) == "cancelled"
        assert slow.power_log(host) == []
        assert slow.violations() == []
