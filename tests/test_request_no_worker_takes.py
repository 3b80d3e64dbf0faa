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
from temporalio.service import RPCError, RPCStatusCode

from contracts import names
from contracts.host_entity import HostEntityClient
from contracts.models.control import ABORT_UPDATE, OperatorAnswer, OperatorRequest
from contracts.models.host import (
    REQUEST_REBOOT_UPDATE,
    HostStatus,
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


# Temporal's refusal of a query when no worker polled the task queue lately (its matching service;
# seen on the dev server ~70 s after the last worker stopped, too long to wait for here).
NO_POLLER = RPCError(
    "no poller seen for task queue recently, worker may be down", RPCStatusCode.FAILED_PRECONDITION, b""
)


async def test_a_status_no_worker_answers_exits_3_in_one_wording(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`host status` said "Temporal refused the request (FAILED_PRECONDITION: no poller seen...)"
    (exit 1), `host status --json` "did not answer within 10 s" (exit 3), `campaign status` and
    `rollout status` exit 1 (or waited: their query had no bound). Each query path now says one
    thing, exit 3: "<id> does not answer: no worker serves its task queue" when Temporal says no
    poller was seen, "<id> did not answer within N s" when none answered in time."""
    monkeypatch.setattr(hosts, "QUERY_TIMEOUT", timedelta(seconds=1))
    monkeypatch.setattr(workflow_commands, "QUERY_TIMEOUT", timedelta(seconds=1))
    host, queue = f"nq-{uuid.uuid4().hex[:8]}", f"nobody-{uuid.uuid4()}"
    handle = await client.start_workflow(
        "HostWorkflow", HostWorkflowInput(host_id=host), id=names.host_workflow_id(host), task_queue=queue
    )
    try:
        # `campaign status`, `rollout status`: a query nobody answers is bounded, exit 3
        with pytest.raises(workflow_commands.CommandError) as unanswered:
            await asyncio.wait_for(workflow_commands.query(handle, "status", HostStatus, "campaign"), CUT)
        assert unanswered.value.status == exits.UNREACHABLE
        assert f"host/{host} did not answer within 1 s: the workers of task queue {queue!r}" in str(
            unanswered.value
        )

        # Temporal's "no poller seen": the same words from every query path, exit 3
        said = f"host/{host} does not answer: no worker serves its task queue {queue!r}"
        answer = await hosts.unanswered_query(handle, NO_POLLER)
        assert answer is not None and answer.status == exits.UNREACHABLE and said in str(answer)

        async def refused(*_: object, **__: object) -> None:
            raise NO_POLLER

        monkeypatch.setattr(HostEntityClient, "status", refused)
        with pytest.raises(HostRequestError) as raised:  # `host status`, `host abort`, `approve`, ...
            await asyncio.wait_for(hosts.host_status(client, host), CUT)
        assert raised.value.status == exits.UNREACHABLE and said in str(raised.value)
    finally:
        with contextlib.suppress(RPCError):
            await handle.terminate("the test is over")
