"""Reset sequences (`reset/<host>`, workflows/host_reset.py) through the host's entity, on the
simulated site (a separate process) with a real worker; and the DPU reset's exactly-once guard
(drivers/redfish/dpu_reset.py) against served BMCs.

What is held: the DPU-only full reset runs host off, DPU PowerCycle, DPU up, host on (once each);
a Paused DPU is recovered by ForceRestart; an abort while a DPU boots powers the host back on;
a reset is refused while a DPU installs and held for approval on an assigned host; a retried
DPU reset whose first attempt was taken sends nothing again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from host_operation_support import FAST_POLICY, eventually, save_history
from sim_support import RunningSim, running_sim
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from test_host_operation_e2e import worker_for

from contracts import names, workflow_api
from contracts.host_entity import EntityRefused, HostEntityClient
from contracts.models.control import ABORT_UPDATE, OperatorAnswer, OperatorRequest
from contracts.models.host import (
    AssignInstanceRequest,
    HostResetResult,
    HostWorkflowInput,
    ResetRequest,
    ResetTarget,
)
from contracts.models.inventory import BMCAccess, CredentialRef
from contracts.models.redfish import DPUResetInput, DPUResetProgress
from drivers.credentials import CredentialResolver
from drivers.redfish.client import RedfishClient
from drivers.redfish.dpu_reset import DPUReset
from simulators.redfish.standalone import serve_bmcs
from simulators.site import default_site
from simulators.timings import timings_for

DPU0 = "host-001-dpu-0"


def dpu_bmc(sim: RunningSim, dpu_id: str) -> dict[str, Any]:
    response = httpx.get(f"{sim.url}/sim/dpu-bmcs/{dpu_id}", timeout=10)
    response.raise_for_status()
    found: dict[str, Any] = response.json()
    return found


@contextlib.asynccontextmanager
async def entity(client: Client, task_queue: str, host_id: str) -> AsyncIterator[HostEntityClient]:
    """The host's entity client; the entity is terminated at the end (tests share the server)."""
    entities = HostEntityClient(client, task_queue)
    try:
        yield entities
    finally:
        with contextlib.suppress(RPCError):
            await entities.handle(host_id).terminate("the test is over")


async def ask_reset(entities: HostEntityClient, host_id: str, request: ResetRequest) -> Any:
    start = HostWorkflowInput(host_id=host_id, policy=FAST_POLICY)
    return await entities.ask(start, workflow_api.HostWorkflow.request_reset, request)


def reset_of(client: Client, host_id: str) -> Any:
    return client.get_workflow_handle(
        names.host_operation_workflow_id("reset", host_id), result_type=HostResetResult
    )


async def test_dpu_only_full_reset_runs_host_off_dpu_reset_dpu_up_host_on(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    with running_sim(tmp_path / "sim", hosts=1, dpus_per_host=2, initialised=True,
                     timing={"dpu_boot_seconds": 0.5}) as sim:  # fmt: skip
        async with worker_for(client, task_queue, sim), entity(client, task_queue, "host-001") as entities:
            accepted = await ask_reset(
                entities, "host-001",
                ResetRequest(requested_by="pytest", target=ResetTarget.DPU, dpu_ids=(DPU0,), full=True),
            )  # fmt: skip
            assert accepted.workflow_id == "reset/host-001"
            result = await reset_of(client, "host-001").result()
            await save_history(reset_of(client, "host-001"), "host_reset_dpu_full")
        log = [(e["to"], e["reset_type"]) for e in sim.power_log("host-001")]
        assert log == [("Off", "ForceOff"), ("On", "On")]
        state = dpu_bmc(sim, DPU0)
        assert (state["resets"], state["nic_resets"], state["arm"]) == ({"PowerCycle": 1}, 1, "OsIsRunning")
        assert dpu_bmc(sim, "host-001-dpu-1")["resets"] == {}  # the sibling is not touched
        assert result.resets == (f"{DPU0}: PowerCycle", "host host-001: ForceOff, On around the DPU resets")
        assert sim.violations() == []


async def test_a_paused_dpu_is_recovered_by_its_arm_reset(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    with running_sim(tmp_path / "sim", hosts=1, dpus_per_host=1, initialised=True) as sim:
        httpx.post(f"{sim.url}/sim/faults/dpu-bmcs/{DPU0}/paused", timeout=10).raise_for_status()
        async with worker_for(client, task_queue, sim), entity(client, task_queue, "host-001") as entities:
            await ask_reset(
                entities, "host-001", ResetRequest(requested_by="pytest", target=ResetTarget.ALL_DPUS)
            )
            result = await reset_of(client, "host-001").result()
        state = dpu_bmc(sim, DPU0)
        assert (state["paused"], state["arm"], state["resets"]) == (False, "OsIsRunning", {"ForceRestart": 1})
        assert result.resets == (f"{DPU0}: ForceRestart",)
        assert sim.power_log("host-001") == []  # the host kept running


async def test_an_abort_while_the_dpu_boots_powers_the_host_back_on(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    with running_sim(tmp_path / "sim", hosts=1, dpus_per_host=1, initialised=True,
                     timing={"dpu_boot_seconds": 60}) as sim:  # fmt: skip
        async with worker_for(client, task_queue, sim), entity(client, task_queue, "host-001") as entities:
            await ask_reset(
                entities, "host-001", ResetRequest(requested_by="pytest", target=ResetTarget.BOTH)
            )
            handle = reset_of(client, "host-001")

            async def booting() -> bool:
                return dpu_bmc(sim, DPU0)["nic_resets"] == 1

            await eventually(booting, what="the DPU reset while the host is off")
            await handle.execute_update(
                ABORT_UPDATE,
                OperatorRequest(requested_by="alice", reason="enough"),
                result_type=OperatorAnswer,
            )
            with pytest.raises(WorkflowFailureError) as failure:
                await handle.result()
        cause = failure.value.cause
        assert isinstance(cause, ApplicationError) and cause.type == "OperationAborted"
        log = [(e["to"], e["reset_type"]) for e in sim.power_log("host-001")]
        assert log == [("Off", "ForceOff"), ("On", "On")]  # never left off


async def test_refused_while_a_dpu_installs_and_held_for_approval_on_an_assigned_host(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    with running_sim(tmp_path / "sim", hosts=2, dpus_per_host=1, initialised=True) as sim:
        async with worker_for(client, task_queue, sim), entity(client, task_queue, "host-002") as entities:
            start = HostWorkflowInput(host_id="host-002", policy=FAST_POLICY)
            await entities.ask(start, workflow_api.HostWorkflow.assign_instance,
                               AssignInstanceRequest(instance="vm-7", requested_by="pytest"))  # fmt: skip
            held = await ask_reset(
                entities, "host-002", ResetRequest(requested_by="pytest", target=ResetTarget.HOST)
            )
            assert held.awaiting_approval
            with pytest.raises(EntityRefused, match="busy"):
                await ask_reset(
                    entities, "host-002", ResetRequest(requested_by="pytest", target=ResetTarget.HOST)
                )
        # A DPU in an install phase: the reset is refused before anything is touched.
        dpu = "node-host-001-device-host-001-dpu-0"
        sim.inject(f"dpus/{dpu}/phase", {"phase": "OS Installing", "seconds": 60})
        httpx.delete(
            f"{sim.url}/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/dpf-operator-system/dpus/{dpu}",
            headers=sim.headers, timeout=10,
        ).raise_for_status()  # fmt: skip

        async def installing() -> bool:
            got = httpx.get(
                f"{sim.url}/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/dpf-operator-system/dpus/{dpu}",
                headers=sim.headers, timeout=10,
            )  # fmt: skip
            return got.status_code == 200 and (got.json().get("status") or {}).get("phase") == "OS Installing"

        await eventually(installing, what="the recreated DPU in OS Installing")
        async with worker_for(client, task_queue, sim), entity(client, task_queue, "host-001") as entities:
            await ask_reset(
                entities, "host-001", ResetRequest(requested_by="pytest", target=ResetTarget.ALL_DPUS)
            )
            with pytest.raises(WorkflowFailureError) as failure:
                await reset_of(client, "host-001").result()
        cause = failure.value.cause
        assert isinstance(cause, ApplicationError) and cause.type == "HostBusy"
        assert "OS Installing" in cause.message
        assert dpu_bmc(sim, DPU0)["resets"] == {}


async def test_a_retried_dpu_reset_whose_reset_was_taken_sends_nothing(tmp_path: Path) -> None:
    """The attempt recorded `reset_requested` with the mark before, sent, and died: the retry
    sees the mark moved and sends nothing. Deliberate break: a retry that trusts a lost step
    (resumes from `started`) resets the DPU a second time."""
    site = default_site(1, 1)
    timings = timings_for("zero", dpu_boot_seconds=0.1)
    async with serve_bmcs(site, timings=timings) as bmcs:
        user, password = bmcs.credentials[DPU0]
        secret = tmp_path / "dpu.json"
        secret.write_text(f'{{"username": "{user}", "password": "{password}"}}')
        access = BMCAccess(bmc_id=DPU0, endpoint=bmcs.base(DPU0), credentials=CredentialRef(file=str(secret)))
        request = DPUResetInput(bmc=access, reset_type="ForceRestart", owed_since=datetime.now(UTC))
        recorded: list[DPUResetProgress] = []
        redfish = RedfishClient(CredentialResolver(None))
        try:
            async with redfish.connect(access) as connection:
                first = DPUReset(connection, request, None, persist=recorded.append, confirm=None)
                assert (await first.run()).sent
                sent_at = next(p for p in recorded if p.step == "reset_requested")
                retry = DPUReset(connection, request, sent_at, persist=recorded.append, confirm=None)
                await retry.run()
                assert bmcs.bmcs.reset_counts(DPU0) == {"ForceRestart": 1}
                await asyncio.sleep(0.2)
                broken = DPUReset(
                    connection, request, DPUResetProgress(), persist=recorded.append, confirm=None
                )
                await broken.run()
                assert bmcs.bmcs.reset_counts(DPU0) == {"ForceRestart": 2}
        finally:
            await redfish.aclose()
