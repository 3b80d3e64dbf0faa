"""A person's request that no worker takes ends in bounded time, exit 3, saying it may still run
(issue 38: `metalflow host reboot host-001` to a stopped worker printed nothing for 90 s and more,
then the reboot ran when the worker resumed).

Against the session's real Temporal dev server, on a task queue no worker polls: the server then
holds the update exactly as for a stopped worker (admitted, no workflow task taking it). The wait
is shortened to 1 s (`ACCEPT_WITHIN`, 10 s in the product), so each case costs about 1 s; before
the bound, each call waited for ever (cut here at 8 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import timedelta

import pytest
from temporalio.client import Client
from temporalio.service import RPCError

from contracts import names
from contracts.models.control import ABORT_UPDATE, OperatorAnswer, OperatorRequest
from contracts.models.host import (
    REQUEST_REBOOT_UPDATE,
    HostWorkflowInput,
    OperationAccepted,
    OperationRequest,
)
from metalflow import hosts
from metalflow.cli import exits, workflow_commands
from metalflow.hosts import HostRequestError, send_update

CUT = 8.0  # before the bound: the call never ended


@pytest.fixture
def short_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hosts, "ACCEPT_WITHIN", timedelta(seconds=1))
    monkeypatch.setattr(workflow_commands, "ACCEPT_WITHIN", timedelta(seconds=1))


async def test_a_request_no_worker_takes_exits_3_saying_it_may_still_run(
    client: Client, short_wait: None
) -> None:
    host, queue = f"nw-{uuid.uuid4().hex[:8]}", f"nobody-{uuid.uuid4()}"
    request = OperationRequest(requested_by="test", reason="no worker takes it")
    try:
        with pytest.raises(HostRequestError) as raised:
            await asyncio.wait_for(
                send_update(
                    client,
                    HostWorkflowInput(host_id=host),
                    REQUEST_REBOOT_UPDATE,
                    request,
                    OperationAccepted,
                    queue,
                ),
                CUT,
            )
        said = str(raised.value)
        assert raised.value.status == exits.UNREACHABLE
        assert f"no worker answered `metalflow host reboot {host}` (host/{host}) within 1 s" in said
        assert "may still run when a worker comes back" in said
        assert f"metalflow host status {host}" in said and "Nothing was changed" not in said

        # An operator's update to a running workflow (the campaign's and rollout's commands, and
        # `host abort`'s to an operation): the same bound, exit 3, the same truth.
        handle = client.get_workflow_handle(names.host_workflow_id(host))
        with pytest.raises(workflow_commands.CommandError) as refused:
            await asyncio.wait_for(
                workflow_commands.send(
                    handle, ABORT_UPDATE, OperatorRequest(requested_by="test"), OperatorAnswer, "no {id}",
                    command="abort",
                ),
                CUT,
            )  # fmt: skip
        assert refused.value.status == exits.UNREACHABLE
        assert f"no worker answered `abort` to host/{host} within 1 s" in str(refused.value)
        assert "may still be applied when a worker comes back" in str(refused.value)
    finally:
        with contextlib.suppress(RPCError):
            await client.get_workflow_handle(names.host_workflow_id(host)).terminate("the test is over")
