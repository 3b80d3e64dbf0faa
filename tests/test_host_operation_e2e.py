"""End to end: HostOperationWorkflow and HostRebootWorkflow on a real dev server and a real
worker, against the simulated site (a separate process, reached over HTTP only).

What a user would see is asserted: the workflow's result, its status query, the BMC's power log
(exactly one power cycle per reboot DPF asked for) and the simulator's violations (none)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bmc_lease_support import lease_of
from host_operation_support import (
    FAST_POLICY,
    cycle_by_hand,
    inject_error_when_recreated,
    power_cycles,
    save_history,
    start_operation,
    status_of,
    wait_for_phase,
    wait_for_status,
    worker_for,
)
from sim_support import RunningSim, running_sim
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from contracts import names
from contracts.models.control import OperatorRequest
from contracts.models.host import HOST_REBOOTED_SIGNAL, HostOperationKind, RebootMethod

PROVISION = HostOperationKind.PROVISION
REPROVISION = HostOperationKind.REPROVISION


@pytest.fixture
def fresh_site(tmp_path: Path) -> Iterator[RunningSim]:
    """Hosts 1-3 (host-003 has BF4 DPUs), nothing registered yet."""
    with running_sim(tmp_path / "sim", hosts=3, dpus_per_host=2, timings="zero") as sim:
        yield sim


@pytest.fixture
def ready_site(tmp_path: Path) -> Iterator[RunningSim]:
    """Hosts 1-3 with every DPU Ready (as after provisioning)."""
    with running_sim(tmp_path / "sim", hosts=3, dpus_per_host=2, timings="zero", initialised=True) as sim:
        yield sim


async def rebooted_by(client: Client, host_id: str, generation: int) -> str | None:
    """The workflow that started the reboot of `host_id` to `generation`."""
    described = await client.get_workflow_handle(
        names.host_reboot_workflow_id(host_id, generation)
    ).describe()
    return described.parent_id


async def priority_key(client: Client, workflow_id: str) -> int:
    """The Temporal task priority key a workflow runs at (0: unset, served as the default 3)."""
    described = await client.get_workflow_handle(workflow_id).describe()
    return described.raw_description.workflow_execution_info.priority.priority_key


async def scheduled_activities(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """The activity types a workflow scheduled, in order."""
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        async for e in handle.fetch_history_events()
        if e.HasField("activity_task_scheduled_event_attributes")
    ]


async def test_provision_bf3_and_bf4_hosts_one_power_cycle_per_reboot_request(
    client: Client, task_queue: str, fresh_site: RunningSim
) -> None:
    async with worker_for(client, task_queue, fresh_site):
        bf3 = await start_operation(client, task_queue, "host-001", PROVISION)
        bf4 = await start_operation(client, task_queue, "host-003", PROVISION)
        r3, r4 = await asyncio.gather(bf3.result(), bf4.result())
        await save_history(bf3, "host_operation_provision_bf3")
        final = await status_of(bf4)
        # One read of DPF's objects for the watch, however many rounds: after each acknowledgement
        # the write's answer stands for a read (issue 37: 3 lists and 1 activity a round less),
        # and DPF's second request, right after the first removal, is still seen (2 reboots).
        bf4_activities = await scheduled_activities(bf4)
        assert bf4_activities.count("join_site_dpf_watch") == 1, bf4_activities
    assert (r3.operation, r3.dpu_ids, r3.reboots) == ("provision", ("host-001-dpu-0", "host-001-dpu-1"), 1)
    assert r4.reboots == 2
    # The server is shared by the whole session: earlier tests may have spent low generations of
    # these hosts, so the operation took the next free one; it must be its own reboot.
    assert await rebooted_by(client, "host-001", r3.boot_generation) == bf3.id
    assert await rebooted_by(client, "host-003", r4.boot_generation) == bf4.id
    # The reboot passes a backlog of operations (contracts.priorities); its BMC serves this host
    # only, so no lease workflow was asked (tests/test_bmc_lease*.py: a shared BMC's lease is).
    assert await priority_key(client, names.host_reboot_workflow_id("host-001", r3.boot_generation)) == 2
    with pytest.raises(RPCError):
        await lease_of(client, fresh_site, "host-001", task_queue).describe()
    assert await priority_key(client, bf3.id) == 0
    assert power_cycles(fresh_site.power_log("host-001")) == 1
    assert power_cycles(fresh_site.power_log("host-003")) == 2
    assert fresh_site.violations() == []
    assert final.phase == "completed"
    assert [d.phase for d in final.dpus] == ["Ready", "Ready"]
    assert (final.reboots_requested, final.power_cycles_issued) == (2, 2)


async def test_reprovision_all_and_a_subset(client: Client, task_queue: str, ready_site: RunningSim) -> None:
    async with worker_for(client, task_queue, ready_site):
        everything = await start_operation(client, task_queue, "host-002", REPROVISION, boot_generation=7)
        subset = await start_operation(
            client, task_queue, "host-001", REPROVISION, dpu_ids=("host-001-dpu-1",)
        )
        r_all, r_subset = await asyncio.gather(everything.result(), subset.result())
        await save_history(everything, "host_operation_reprovision_all")
        # One release of the hold: the state it answered still shows it on until the watch's
        # next change, and is not released again (issue 37: one activity and one GET less).
        scheduled = await scheduled_activities(everything)
        assert scheduled.count("release_node_effect_hold") == 1, scheduled
        assert scheduled.count("join_site_dpf_watch") == 1, scheduled  # no read after the acknowledgement
    assert r_all.reboots == 1 and r_all.boot_generation >= 8
    assert await rebooted_by(client, "host-002", r_all.boot_generation) == everything.id
    assert r_subset.dpu_ids == ("host-001-dpu-1",)
    assert power_cycles(ready_site.power_log("host-002")) == 1
    assert power_cycles(ready_site.power_log("host-001")) == 1
    assert ready_site.violations() == []


async def test_manual_reboot_method_waits_for_host_rebooted_signal(
    client: Client, task_queue: str, ready_site: RunningSim
) -> None:
    policy = FAST_POLICY.model_copy(update={"reboot_method": RebootMethod.MANUAL})
    async with worker_for(client, task_queue, ready_site):
        handle = await start_operation(client, task_queue, "host-001", REPROVISION, policy=policy)
        status = await wait_for_phase(handle, "rebooting-host")
        assert status.reboots_requested == 1
        assert [d.phase for d in status.dpus] == ["Rebooting", "Rebooting"]
        # The operator reboots the host by hand (here: through the simulated BMC), then says so.
        await cycle_by_hand(ready_site, "host-001")
        await handle.signal(HOST_REBOOTED_SIGNAL, OperatorRequest(requested_by="alice", reason="done"))
        result = await handle.result()
        await save_history(handle, "host_operation_manual_reboot")
        await save_history(client.get_workflow_handle("reboot/host-001/generation-1"), "host_reboot_manual")
    assert result.reboots == 1
    assert power_cycles(ready_site.power_log("host-001")) == 1
    assert ready_site.violations() == []


async def test_dpu_error_is_reprovisioned_automatically(
    client: Client, task_queue: str, ready_site: RunningSim
) -> None:
    async with worker_for(client, task_queue, ready_site):
        handle = await start_operation(client, task_queue, "host-001", REPROVISION)
        await inject_error_when_recreated(
            handle, ready_site, "node-host-001-device-host-001-dpu-0", {"message": "bad BFB"}
        )
        result = await handle.result()
        status = await status_of(handle)
        # Replays dpf-wait-counts-changes-before-moves (every wait for DPF since takes its branch).
        await save_history(handle, "host_operation_dpu_error_reprovisioned")
    # One reboot, or two when the error hit after the first: each reboot DPF asked for, once.
    assert result.reboots == status.reboots_requested == power_cycles(ready_site.power_log("host-001"))
    assert [(d.dpu_id, d.phase) for d in status.dpus] == [
        ("host-001-dpu-0", "Ready"),
        ("host-001-dpu-1", "Ready"),
    ]
    assert [(d.dpu_id, d.error_reprovisions) for d in status.dpus] == [
        ("host-001-dpu-0", 1),
        ("host-001-dpu-1", 0),
    ]
    assert ready_site.violations() == []


async def test_dpu_error_beyond_the_limit_fails_with_dpf_message(
    client: Client, task_queue: str, ready_site: RunningSim
) -> None:
    policy = FAST_POLICY.model_copy(update={"max_dpu_error_reprovisions": 0})
    async with worker_for(client, task_queue, ready_site):
        handle = await start_operation(client, task_queue, "host-002", REPROVISION, policy=policy)
        await inject_error_when_recreated(
            handle, ready_site, "node-host-002-device-host-002-dpu-1", {"message": "flash worn out"}
        )
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "DPUFailed"
    assert "flash worn out" in cause.message
    assert ready_site.violations() == []


async def test_reprovision_with_demo_timings_reports_progress(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The demo's pace (a second or so per DPF phase): the status query follows every DPU."""
    with running_sim(tmp_path / "sim", hosts=1, dpus_per_host=2, timings="demo", initialised=True) as sim:
        async with worker_for(client, task_queue, sim):
            started = time.monotonic()
            handle = await start_operation(client, task_queue, "host-001", REPROVISION)
            installing = await wait_for_status(
                handle, lambda s: any(d.phase == "OS Installing" for d in s.dpus), "a DPU installing"
            )
            result = await handle.result()
            elapsed = time.monotonic() - started
        print(f"reprovision of a 2-DPU BF3 host with demo timings: {elapsed:.1f} s")
        assert installing.phase == "waiting-for-reboot-request"
        assert "Rebooting" in installing.waiting_for
        assert result.reboots == 1 and power_cycles(sim.power_log("host-001")) == 1
        assert sim.violations() == []
