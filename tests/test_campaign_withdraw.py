"""The withdrawal of a request awaiting approval, which a campaign aborted with `cancel_running`
sends through `abort_campaign_hosts`: the entity's `withdraw` refuses another operation's id
(nothing changes), and a request approved just before the withdrawal arrives is aborted instead,
so neither way is anything left running or pending. (The plain withdrawal, end to end:
test_campaign_control.py's cancel-running abort.)

Real: the host entity, the campaign activity (run through `ActivityEnvironment` with the worker's
client), the dev server. Stand-in: the operation (`GatedOperation`: runs until aborted).
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from campaign_support import GatedOperation, campaign_worker, write_site
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from activities.campaign import CampaignActivities
from contracts import names, workflow_api
from contracts.models.campaign import AbortHostsInput, CampaignHost, InFlight
from contracts.models.control import STATUS_QUERY, OperatorAnswer, OperatorRequest
from contracts.models.host import (
    APPROVE_UPDATE,
    ASSIGN_INSTANCE_UPDATE,
    REQUEST_REPROVISION_UPDATE,
    WITHDRAW_UPDATE,
    AssignInstanceRequest,
    HostStatus,
    HostWorkflowInput,
    OperationAccepted,
    OperationRequest,
    WithdrawRequest,
)
from contracts.with_start import execute_update
from drivers.inventory import Inventory
from drivers.kube import Kube
from drivers.settings import Settings


async def _awaiting(client: Client, queue: str, host: str) -> OperationAccepted:
    """The host assigned to an instance, and a campaign's reprovision request awaiting approval."""
    entity = await client.start_workflow(
        workflow_api.HostWorkflow.run,
        HostWorkflowInput(host_id=host),
        id=names.host_workflow_id(host),
        task_queue=queue,
    )
    assign = AssignInstanceRequest(instance=f"vm-{host}", requested_by="tenant-admin")
    await execute_update(entity, ASSIGN_INSTANCE_UPDATE, assign, result_type=OperatorAnswer)
    ask = OperationRequest(requested_by="campaign c (test)", campaign="c")
    accepted = await execute_update(entity, REQUEST_REPROVISION_UPDATE, ask, result_type=OperationAccepted)
    assert accepted.awaiting_approval
    return accepted


async def _entity(client: Client, host: str) -> HostStatus:
    handle = client.get_workflow_handle(names.host_workflow_id(host))
    status: HostStatus = await handle.query(STATUS_QUERY, result_type=HostStatus)
    return status


async def test_withdraw_refuses_another_operation_and_an_approved_one_is_aborted(
    local_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    client = local_env.client
    wrong_id, raced = f"cwd{uuid.uuid4().hex[:4]}-a", f"cwd{uuid.uuid4().hex[:4]}-b"
    queue = f"test-campaign-withdraw-{uuid.uuid4()}"
    site = write_site(tmp_path, [wrong_id, raced])
    async with campaign_worker(client, queue, site, [GatedOperation]):
        waiting = await _awaiting(client, queue, wrong_id)
        entity = client.get_workflow_handle(names.host_workflow_id(wrong_id))
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await execute_update(
                entity,
                WITHDRAW_UPDATE,
                WithdrawRequest(requested_by="test", workflow_id="reprovision/someone-else"),
                result_type=OperatorAnswer,
            )
        assert "reprovision/someone-else does not await approval" in str(refused.value.cause)
        untouched = await _entity(client, wrong_id)
        assert untouched.current is not None and untouched.current.workflow_id == waiting.workflow_id
        assert untouched.phase == "awaiting-approval" and untouched.recent == ()

        # The campaign saw `raced` awaiting approval; an operator approves it before the abort lands.
        asked = await _awaiting(client, queue, raced)
        approve = OperatorRequest(requested_by="tenant-admin")
        await execute_update(
            client.get_workflow_handle(names.host_workflow_id(raced)),
            APPROVE_UPDATE,
            approve,
            result_type=OperatorAnswer,
        )
        settings = Settings(site_file=site, inventory="site")
        kube = Kube(settings)
        activities = CampaignActivities(Inventory(settings, kube), kube, client)
        flight = InFlight(
            host=CampaignHost(host_id=raced),
            workflow_id=asked.workflow_id,
            started_at=await local_env.get_current_time(),
            awaiting_approval=True,
        )
        await ActivityEnvironment(client).run(
            activities.abort_campaign_hosts,
            AbortHostsInput(workflow_ids=(), requested_by="test", reason="abort", withdraw=(flight,)),
        )
        # Bounded: a request left running (not aborted) would otherwise hang the test.
        ended = await asyncio.wait_for(client.get_workflow_handle(asked.workflow_id).result(), timeout=120)
        assert "aborted by test" in ended["aborted"]  # completed: an abort is asked for
        for _ in range(100):  # the entity records the end once its child's close reaches it
            ended = await _entity(client, raced)
            if ended.current is None:
                break
            await asyncio.sleep(0.1)
        assert ended.current is None and len(ended.recent) == 1, ended
        assert ended.recent[0].outcome.startswith("aborted by test"), ended.recent[0]  # not "failed"
