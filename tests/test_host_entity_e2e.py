"""The host entity end to end: HostWorkflow with its real children (HostOperationWorkflow,
HostRebootWorkflow) on a real worker against the simulated site, through the same entry point the
CLI uses (`metalflow.hosts.send_update`, update-with-start).

These runs also record the replay histories of HostWorkflow and HostRebootWorkflow (BMC and
manual) (with METALFLOW_RECORD_HISTORIES=1; see tests/history_tool.py)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import pytest
from host_operation_support import FAST_POLICY, eventually, power_cycles, save_history, worker_for
from pydantic import BaseModel
from sim_support import RunningSim, prefixed_sim
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowExecutionStatus

from contracts import names
from contracts.models.control import OperatorAnswer, OperatorRequest
from contracts.models.host import (
    APPROVE_UPDATE,
    ASSIGN_INSTANCE_UPDATE,
    HOST_REBOOTED_SIGNAL,
    REQUEST_REBOOT_UPDATE,
    REQUEST_REPROVISION_UPDATE,
    AssignInstanceRequest,
    HostRebootResult,
    HostStatus,
    HostWorkflowInput,
    OperationAccepted,
    OperationRequest,
    RebootMethod,
)
from metalflow.hosts import HostRequestError, host_status, send_update

R = TypeVar("R", bound=BaseModel)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[RunningSim, str]]:
    """Two hosts with ids no other test's entity uses (entities outlive their tests' workers)."""
    prefix = f"ent{uuid.uuid4().hex[:6]}"
    with prefixed_sim(tmp_path, prefix, hosts=2) as sim:
        yield sim, prefix


def phases_upserted(events: Sequence[HistoryEvent]) -> list[str]:
    """The Phase each upsert of a history wrote, in order."""
    return [
        json.loads(
            e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields[
                "Phase"
            ].data
        )
        for e in events
        if e.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
        and "Phase" in e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
    ]


async def settled(client: Client, host: str, predicate: Callable[[HostStatus], bool]) -> HostStatus:
    seen: list[HostStatus] = []

    async def check() -> bool:
        seen.append(await host_status(client, host))
        return predicate(seen[-1])

    await eventually(check, timeout=60, what=f"the entity of {host} to settle")
    return seen[-1]


async def test_an_assigned_host_is_reprovisioned_after_approval_and_rebooted_in_its_window(
    client: Client, task_queue: str, site: tuple[RunningSim, str]
) -> None:
    sim, prefix = site
    host = f"{prefix}-001"
    entity = HostWorkflowInput(
        host_id=host, instance="i-tenant", policy=FAST_POLICY, auto_approval_window_seconds=600
    )

    async def update(name: str, request: BaseModel, result_type: type[R]) -> R:
        return await send_update(client, entity, name, request, result_type, task_queue)

    alice = OperationRequest(requested_by="alice", reason="new BFB")
    async with worker_for(client, task_queue, sim):
        held = await update(REQUEST_REPROVISION_UPDATE, alice, OperationAccepted)
        assert held.awaiting_approval
        with pytest.raises(
            HostRequestError, match="cannot take instance i-other: reprovision awaits approval"
        ):
            await update(ASSIGN_INSTANCE_UPDATE, AssignInstanceRequest(instance="i-other", requested_by="t"),
                         OperatorAnswer)  # fmt: skip
        assert sim.power_log(host) == []  # nothing happens before the approval

        approved = await update(APPROVE_UPDATE, OperatorRequest(requested_by="carol"), OperatorAnswer)
        assert approved.message == f"approved reprovision; started reprovision/{host}"
        with pytest.raises(HostRequestError, match="reprovision is in flight"):
            await update(REQUEST_REBOOT_UPDATE, alice, OperationAccepted)
        status = await settled(client, host, lambda s: s.current is None)
        assert [(r.operation, r.outcome) for r in status.recent] == [("reprovision", "completed")]
        assert status.boot_generation == 1 and status.instance == "i-tenant"
        # The entity starts its child in the phase the child enters first: no upsert of it (issue 37).
        operation = await client.get_workflow_handle(f"reprovision/{host}").fetch_history()
        upserted = phases_upserted(operation.events)
        assert upserted[0] != "resolving-inventory", upserted
        started = operation.events[0].workflow_execution_started_event_attributes.search_attributes
        assert b"resolving-inventory" in started.indexed_fields["Phase"].data

        # Inside the window the approval opened, a reboot of the same tenant's host starts at once.
        reboot = await update(REQUEST_REBOOT_UPDATE, alice, OperationAccepted)
        assert not reboot.awaiting_approval
        assert reboot.workflow_id == f"reboot/{host}/generation-2"
        result = await client.get_workflow_handle(reboot.workflow_id, result_type=HostRebootResult).result()
        status = await settled(client, host, lambda s: s.current is None)
        entity_handle = client.get_workflow_handle(names.host_workflow_id(host))
        await save_history(entity_handle, "host_entity_approved_reprovision_and_reboot")
        await save_history(client.get_workflow_handle(reboot.workflow_id), "host_reboot_bmc")
        await entity_handle.terminate("test over")
        power_log, violations = sim.power_log(host), sim.violations()
    assert result.method.startswith("bmc:") and result.boot_generation == 2
    assert [r.outcome for r in status.recent] == ["completed", "completed"] and status.boot_generation == 2
    assert power_cycles(power_log) == 2, power_log  # one for the reprovision, one for the reboot
    assert violations == []


async def test_a_manual_reboot_waits_for_the_person_who_rebooted_the_host(
    client: Client, task_queue: str, site: tuple[RunningSim, str]
) -> None:
    sim, prefix = site
    host = f"{prefix}-002"
    manual = FAST_POLICY.model_copy(update={"reboot_method": RebootMethod.MANUAL})
    async with worker_for(client, task_queue, sim):
        accepted = await send_update(
            client, HostWorkflowInput(host_id=host), REQUEST_REBOOT_UPDATE,
            OperationRequest(requested_by="alice", policy=manual), OperationAccepted, task_queue,
        )  # fmt: skip
        reboot = client.get_workflow_handle(accepted.workflow_id, result_type=HostRebootResult)

        async def waiting_for_person() -> bool:
            described = await reboot.describe()
            return described.typed_search_attributes.get(names.PHASE) == "waiting-for-manual-reboot"

        await eventually(waiting_for_person, what="the reboot to wait for a person")
        await reboot.signal(
            HOST_REBOOTED_SIGNAL, OperatorRequest(requested_by="bob", reason="pressed the button")
        )
        result = await reboot.result()
        status = await settled(client, host, lambda s: s.current is None)
        await save_history(reboot, "host_reboot_manual_confirmed")
        await client.get_workflow_handle(names.host_workflow_id(host)).terminate("test over")
        power_log = sim.power_log(host)
    assert (result.method, result.confirmed_by, result.boot_generation) == ("manual", "bob", 1)
    assert status.boot_generation == 1 and [r.outcome for r in status.recent] == ["completed"]
    assert power_log == []  # metalflow never touched the BMC: the person rebooted the host


async def test_a_failed_reboot_is_followed_by_the_next_generation_never_a_reused_id(
    client: Client, task_queue: str, site: tuple[RunningSim, str]
) -> None:
    sim, prefix = site
    host = f"{prefix}-001"
    manual = FAST_POLICY.model_copy(update={"reboot_method": RebootMethod.MANUAL})
    entity = HostWorkflowInput(host_id=host)
    alice = OperationRequest(requested_by="alice", reason="{stuck} kernel", policy=manual)
    async with worker_for(client, task_queue, sim):
        first = await send_update(client, entity, REQUEST_REBOOT_UPDATE, alice, OperationAccepted, task_queue)
        assert first.workflow_id == f"reboot/{host}/generation-1"
        failed = client.get_workflow_handle(first.workflow_id)

        async def waiting_for_person() -> bool:
            phase = (await failed.describe()).typed_search_attributes.get(names.PHASE)
            return phase == "waiting-for-manual-reboot"

        await eventually(waiting_for_person, what="the reboot to wait for a person")
        await failed.terminate("the person never came")
        await settled(client, host, lambda s: s.current is None)

        second = await send_update(
            client, entity, REQUEST_REBOOT_UPDATE, alice, OperationAccepted, task_queue
        )
        # The id's newest run is still the terminated one: no second run under a spent id.
        latest_of_first = await client.get_workflow_handle(first.workflow_id).describe()
        await client.get_workflow_handle(second.workflow_id).terminate("test over")
        await client.get_workflow_handle(names.host_workflow_id(host)).terminate("test over")
    # Generation 1 was spent by the failed reboot: the next request reboots at generation 2.
    assert second.workflow_id == f"reboot/{host}/generation-2"
    assert latest_of_first.status == WorkflowExecutionStatus.TERMINATED
    assert sim.power_log(host) == []
