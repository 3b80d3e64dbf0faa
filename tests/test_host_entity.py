"""HostWorkflow on a real Temporal, with stand-in operation workflows under the real type names
(tests/host_entity_support.py).

The stand-ins wait until the test tells them to end (signal `finish`), so a test decides when an
operation is in flight; everything the entity does (ids, refusals, approvals, records) is real.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator

import pytest
from host_entity_support import StandInOperation, StandInReboot, stand_in_versions
from takeover_support import sticky_timeout
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError
from temporalio.worker import Worker

from contracts import names
from contracts.host_entity import HostEntityClient
from contracts.models.control import OperatorAnswer, OperatorRequest
from contracts.models.host import (
    APPROVE_UPDATE,
    ASSIGN_INSTANCE_UPDATE,
    RELEASE_INSTANCE_UPDATE,
    REQUEST_PROVISION_UPDATE,
    REQUEST_REBOOT_UPDATE,
    REQUEST_REPROVISION_UPDATE,
    AssignInstanceRequest,
    HostStatus,
    HostWorkflowInput,
    OperationAccepted,
    OperationPolicy,
    OperationRequest,
)
from metalflow.hosts import HostRequestError, host_status, send_update
from workflows.host.workflow import HostWorkflow
from workflows.parts.host_power import POWER_NOT_TOUCHED


@pytest.fixture
async def worker(client: Client, task_queue: str) -> AsyncIterator[str]:
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[HostWorkflow, StandInOperation, StandInReboot],
        activities=[stand_in_versions],
        sticky_queue_schedule_to_start_timeout=sticky_timeout(),
    ):
        yield task_queue


def _host() -> str:
    return f"h{uuid.uuid4().hex[:10]}"


async def _request(
    client: Client, queue: str, host: str, update: str, by: str = "alice", **entity: object
) -> OperationAccepted:
    return await send_update(
        client,
        HostWorkflowInput(host_id=host, **entity),  # type: ignore[arg-type]
        update,
        OperationRequest(requested_by=by),
        OperationAccepted,
        queue,
    )


async def _assign(client: Client, queue: str, host: str, instance: str) -> OperatorAnswer:
    request = AssignInstanceRequest(instance=instance, requested_by="tenant")
    return await send_update(
        client, HostWorkflowInput(host_id=host), ASSIGN_INSTANCE_UPDATE, request, OperatorAnswer, queue
    )


async def _approve(client: Client, queue: str, host: str) -> OperatorAnswer:
    request = OperatorRequest(requested_by="carol", reason="maintenance agreed")
    return await send_update(
        client, HostWorkflowInput(host_id=host), APPROVE_UPDATE, request, OperatorAnswer, queue
    )


async def _finish(client: Client, workflow_id: str, how: str = "ok") -> None:
    handle = client.get_workflow_handle(workflow_id)
    await handle.signal("finish", how)
    await handle.result() if how == "ok" else None


async def _settled(client: Client, host: str, predicate: object, timeout: float = 15) -> HostStatus:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        status = await host_status(client, host)
        if predicate(status):  # type: ignore[operator]
            return status
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"host never settled: {status}")
        await asyncio.sleep(0.1)


async def test_one_operation_at_a_time_and_a_busy_refusal_names_it(
    client: Client, worker: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="temporalio.workflow")
    host = _host()
    accepted = await _request(client, worker, host, REQUEST_PROVISION_UPDATE)
    assert accepted == OperationAccepted(
        workflow_id=f"provision/{host}", message=f"started provision as provision/{host}"
    )
    child = await client.get_workflow_handle(accepted.workflow_id).describe()
    assert child.status == WorkflowExecutionStatus.RUNNING
    assert child.parent_id == names.host_workflow_id(host)

    with pytest.raises(HostRequestError) as refused:
        await _request(client, worker, host, REQUEST_REPROVISION_UPDATE, by="bob")
    assert f"provision is in flight (workflow provision/{host}, requested by alice)" in str(refused.value)
    assert "reprovision refused" in str(refused.value)
    with pytest.raises(HostRequestError, match="cannot take instance i-1: provision is in flight"):
        await _assign(client, worker, host, "i-1")

    status = await host_status(client, host)
    assert status.phase == "running provision" and status.current is not None
    assert status.current.outcome == "running" and status.current.requested_by == "alice"
    # The worker's log tells each step once: the entity's first activation both accepts the
    # request and shows its phase, and once logged it twice.
    started = [
        r
        for r in caplog.records
        if r.getMessage().startswith(f"running provision: provision (provision/{host})")
    ]
    assert len(started) == 1, [r.getMessage() for r in started]
    entity = await client.get_workflow_handle(names.host_workflow_id(host)).describe()
    attributes = entity.typed_search_attributes
    assert attributes.get(names.PHASE) == "running provision"
    assert attributes.get(names.OPERATION) == "host" and attributes.get(names.HOST_ID) == host

    await _finish(client, accepted.workflow_id)
    status = await _settled(client, host, lambda s: s.current is None)
    assert status.boot_generation == 1 and status.phase == "idle"
    assert [(r.operation, r.outcome) for r in status.recent] == [("provision", "completed")]

    # The next reboot is keyed by the next boot generation.
    reboot = await _request(client, worker, host, REQUEST_REBOOT_UPDATE)
    assert reboot.workflow_id == f"reboot/{host}/generation-2"
    status = await _settled(client, host, lambda s: s.current is None)
    assert status.boot_generation == 2


async def test_a_failed_operation_is_recorded_and_can_be_restarted(client: Client, worker: str) -> None:
    host = _host()
    first = await _request(client, worker, host, REQUEST_REPROVISION_UPDATE)
    # Its end says the host's power, as every real operation's finaliser does: an end that does not
    # makes the entity read the power once (i40q, `takeover_rules.power_to_read`), and this module's
    # worker runs no BMC activities.
    await _finish(client, first.workflow_id, how=f"BFB install failed; {POWER_NOT_TOUCHED}")
    status = await _settled(client, host, lambda s: s.current is None)
    assert (
        status.recent[-1].outcome.startswith("failed: ") and "BFB install failed" in status.recent[-1].outcome
    )
    assert status.boot_generation == 0

    again = await _request(client, worker, host, REQUEST_REPROVISION_UPDATE)
    assert again.workflow_id == first.workflow_id and not again.awaiting_approval
    await _finish(client, again.workflow_id)
    status = await _settled(client, host, lambda s: s.current is None)
    assert [r.outcome for r in status.recent][-1] == "completed"


async def test_an_assigned_host_is_reprovisioned_only_after_approval(client: Client, worker: str) -> None:
    host = _host()
    assert (await _assign(client, worker, host, "i-tenant")).message == "assigned to i-tenant"
    with pytest.raises(HostRequestError, match="nothing awaits approval"):
        await _approve(client, worker, host)

    held = await _request(client, worker, host, REQUEST_REPROVISION_UPDATE)
    assert held.awaiting_approval and "awaits approval" in held.message and "i-tenant" in held.message
    with pytest.raises(RPCError):  # nothing started: the child does not exist
        await client.get_workflow_handle(held.workflow_id).describe()
    status = await host_status(client, host)
    assert status.phase == "awaiting-approval" and status.current is not None
    assert status.current.outcome == "awaiting-approval"
    with pytest.raises(HostRequestError, match="reprovision awaits approval"):
        await _request(client, worker, host, REQUEST_PROVISION_UPDATE)
    with pytest.raises(HostRequestError, match="cannot take instance i-other: reprovision awaits approval"):
        await _assign(client, worker, host, "i-other")

    answer = await _approve(client, worker, host)
    assert answer.message == f"approved reprovision; started reprovision/{host}"
    status = await host_status(client, host)
    assert status.phase == "running reprovision" and status.current is not None
    assert status.current.approved_by == "carol"
    await _finish(client, held.workflow_id)
    await _settled(client, host, lambda s: s.current is None)

    # Without a window, the next disruptive request needs its own approval.
    again = await _request(client, worker, host, REQUEST_REBOOT_UPDATE)
    assert again.awaiting_approval


async def test_an_approval_opens_the_auto_approval_window_for_that_instance(
    client: Client, worker: str
) -> None:
    host = _host()
    window = {"auto_approval_window_seconds": 3600.0}
    await send_update(
        client,
        HostWorkflowInput(host_id=host, **window),  # type: ignore[arg-type]
        ASSIGN_INSTANCE_UPDATE,
        AssignInstanceRequest(instance="i-1", requested_by="tenant"),
        OperatorAnswer,
        worker,
    )
    first = await _request(client, worker, host, REQUEST_REPROVISION_UPDATE)
    assert first.awaiting_approval
    await _approve(client, worker, host)
    await _finish(client, first.workflow_id)
    status = await _settled(client, host, lambda s: s.current is None)
    assert status.auto_approved_until is not None

    inside = await _request(client, worker, host, REQUEST_REPROVISION_UPDATE)
    assert not inside.awaiting_approval  # inside the window: starts at once
    status = await host_status(client, host)
    assert status.current is not None and (status.current.approved_by or "").startswith(
        "auto-approval window"
    )
    await _finish(client, inside.workflow_id)
    await _settled(client, host, lambda s: s.current is None)

    # A new tenant is not covered by the previous one's approval.
    release = AssignInstanceRequest(instance="i-1", requested_by="tenant")
    entity = HostWorkflowInput(host_id=host)
    await send_update(client, entity, RELEASE_INSTANCE_UPDATE, release, OperatorAnswer, worker)
    await _assign(client, worker, host, "i-2")
    assert (await _request(client, worker, host, REQUEST_REPROVISION_UPDATE)).awaiting_approval


async def test_a_request_not_approved_in_time_expires(client: Client, worker: str) -> None:
    host = _host()
    policy = OperationPolicy(approval_timeout_seconds=1.0)
    await send_update(
        client,
        HostWorkflowInput(host_id=host, instance="i-1", policy=policy),
        REQUEST_REPROVISION_UPDATE,
        OperationRequest(requested_by="alice"),
        OperationAccepted,
        worker,
    )
    status = await _settled(client, host, lambda s: s.current is None)
    assert status.recent[-1].outcome.startswith("expired: not approved within")
    with pytest.raises(HostRequestError, match="nothing awaits approval"):
        await _approve(client, worker, host)


async def test_the_assignment_reprovision_race_has_only_the_two_allowed_outcomes(
    client: Client, worker: str
) -> None:
    """The single-program race: assignment and reprovision sent at the same moment, many times.

    Allowed: the assignment wins and the reprovision waits for approval, or the reprovision wins
    and the assignment is refused. Never both accepted with the reprovision running.
    """
    outcomes: dict[str, int] = {
        "assigned, reprovision awaits approval": 0,
        "reprovision runs, assign refused": 0,
    }

    async def race(host: str) -> str:
        # The entity exists and is idle, so both updates reach the same run.
        await _create_idle_entity(client, worker, host)
        assign, reprovision = await asyncio.gather(
            _assign(client, worker, host, "i-race"),
            _request(client, worker, host, REQUEST_REPROVISION_UPDATE),
            return_exceptions=True,
        )
        status = await host_status(client, host)
        if isinstance(assign, OperatorAnswer):
            assert isinstance(reprovision, OperationAccepted) and reprovision.awaiting_approval, reprovision
            assert status.instance == "i-race" and status.phase == "awaiting-approval"
            with pytest.raises(RPCError):
                await client.get_workflow_handle(reprovision.workflow_id).describe()
            return "assigned, reprovision awaits approval"
        assert isinstance(assign, HostRequestError) and "reprovision is in flight" in str(assign), assign
        assert isinstance(reprovision, OperationAccepted) and not reprovision.awaiting_approval
        assert status.instance is None and status.phase == "running reprovision"
        await _finish(client, reprovision.workflow_id)
        return "reprovision runs, assign refused"

    for result in await asyncio.gather(*(race(_host()) for _ in range(24))):
        outcomes[result] += 1
    assert sum(outcomes.values()) == 24, outcomes


async def _create_idle_entity(client: Client, queue: str, host: str) -> None:
    """Create the idle entity (a harmless request: approve is refused when nothing awaits)."""
    with pytest.raises(HostRequestError, match="nothing awaits approval"):
        await _approve(client, queue, host)


async def test_the_entity_continues_as_new_when_idle_and_keeps_its_state(client: Client, worker: str) -> None:
    host = _host()
    entity = {"max_history_events": 40, "instance": None}
    first = await _request(client, worker, host, REQUEST_PROVISION_UPDATE, **entity)
    handle = client.get_workflow_handle(names.host_workflow_id(host))
    first_run = (await handle.describe()).run_id
    await _finish(client, first.workflow_id)
    await _settled(client, host, lambda s: s.current is None)
    for _ in range(4):
        await _request(client, worker, host, REQUEST_REBOOT_UPDATE, **entity)
        await _settled(client, host, lambda s: s.current is None)
    status = await _settled(client, host, lambda s: s.current is None and s.boot_generation == 5)
    assert (await handle.describe()).run_id != first_run
    assert [r.operation for r in status.recent] == ["provision", "reboot", "reboot", "reboot", "reboot"]
    assert status.phase == "idle"
    assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING


async def test_ensure_says_whether_this_call_started_the_entity(client: Client, worker: str) -> None:
    """`host monitor` says "started its entity" only when it did: the start's answer, read through
    the SDK's public API (a refused second start), not a private field of the handle."""
    host = _host()
    entities = HostEntityClient(client, worker)
    assert await entities.ensure(HostWorkflowInput(host_id=host)) is True
    assert await entities.ensure(HostWorkflowInput(host_id=host)) is False  # it runs: nothing started
    handle = client.get_workflow_handle(names.host_workflow_id(host))
    first_run = (await handle.describe()).run_id
    await handle.terminate("test: an entity ended by hand")
    assert await entities.ensure(HostWorkflowInput(host_id=host)) is True  # a closed entity's id is reused
    assert (await handle.describe()).run_id != first_run
