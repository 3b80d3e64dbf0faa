"""Ids that do not repeat the word (`provision/h1`, not `provision/host-h1`), without stranding
an entity that started on the old ones.

The old code is the new code with `workflows.common.short_ids` answering False without calling
`workflow.patched` (so no marker: the commands the old code sent). A worker running it starts an
entity and its operation; a worker with the real code then takes the entity over: the entity
finishes the operation it started under its old id and keeps the old form for the rest of its
run, while a new entity uses the short ids.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

with workflow.unsafe.imports_passed_through():
    from test_host_entity import StandInOperation, StandInReboot

    import workflows.common
    from contracts.models.host import (
        REQUEST_PROVISION_UPDATE,
        REQUEST_REBOOT_UPDATE,
        HostStatus,
        HostWorkflowInput,
        OperationAccepted,
        OperationRequest,
    )
    from metalflow.hosts import host_status, send_update
    from workflows.host import HostWorkflow

WORKFLOWS = [HostWorkflow, StandInOperation, StandInReboot]


async def _request(client: Client, queue: str, host: str, update: str) -> OperationAccepted:
    return await send_update(
        client, HostWorkflowInput(host_id=host), update, OperationRequest(requested_by="alice"),
        OperationAccepted, queue,
    )  # fmt: skip


async def _idle(client: Client, host: str) -> HostStatus:
    for _ in range(150):
        status = await host_status(client, host)
        if status.current is None:
            return status
        await asyncio.sleep(0.1)
    raise AssertionError(f"{host} never went idle: {status}")


async def test_an_entity_started_on_the_old_ids_finishes_its_operation_and_keeps_them(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    old_host, new_host = f"h{uuid.uuid4().hex[:8]}", f"h{uuid.uuid4().hex[:8]}"
    # The old code: `workflows.common` passed through the sandbox, so the stand-in reaches it.
    monkeypatch.setattr(workflows.common, "short_ids", lambda: False)
    old_runner = SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules("workflows.common")
    )
    async with Worker(client, task_queue=task_queue, workflows=WORKFLOWS, workflow_runner=old_runner):
        started = await _request(client, task_queue, old_host, REQUEST_PROVISION_UPDATE)
        assert started.workflow_id == f"provision/host-{old_host}"
    monkeypatch.undo()

    # The new code takes over the running entity (it replays its history without the marker).
    async with Worker(client, task_queue=task_queue, workflows=WORKFLOWS):
        operation = client.get_workflow_handle(started.workflow_id)
        await operation.signal("finish", "ok")
        await operation.result()
        status = await _idle(client, old_host)
        assert [(r.workflow_id, r.outcome) for r in status.recent] == [
            (f"provision/host-{old_host}", "completed")
        ]
        # The same run keeps the old form to its end: its children are where it looks for them.
        reboot = await _request(client, task_queue, old_host, REQUEST_REBOOT_UPDATE)
        assert reboot.workflow_id == f"reboot/host-{old_host}/generation-2"
        assert (await _idle(client, old_host)).boot_generation == 2

        # A new entity names its children without repeating the word.
        fresh = await _request(client, task_queue, new_host, REQUEST_PROVISION_UPDATE)
        assert fresh.workflow_id == f"provision/{new_host}"
        await client.get_workflow_handle(fresh.workflow_id).signal("finish", "ok")
        await _idle(client, new_host)
        reboot = await _request(client, task_queue, new_host, REQUEST_REBOOT_UPDATE)
        assert reboot.workflow_id == f"reboot/{new_host}/generation-2"

    patches = [
        b"".join(
            payload.data for payload in event.marker_recorded_event_attributes.details["patch_data"].payloads
        )
        async for event in client.get_workflow_handle(f"host/{old_host}").fetch_history_events()
        if event.HasField("marker_recorded_event_attributes")
    ]
    assert patches and not any(workflows.common.SHORT_IDS_PATCH.encode() in p for p in patches), patches
