"""What an operator meets when no worker answers, or nobody reads the output (issue 38, "what an
independent attack broke"): a request no worker takes ends in bounded time, exit 3, saying it may
still run (`metalflow host reboot host-001` to a stopped worker printed nothing for 90 s and more,
then the reboot ran when the worker resumed); a status nobody answers is exit 3 in one wording;
the reader of stdout gone is exit 141 from every command family.

Against the session's real Temporal dev server, on task queues no worker polls: the server then
holds an update exactly as for a stopped worker (admitted, no workflow task taking it). The waits
are shortened to 1 s (10 s in the product), so each case costs about 1 s; before the bound, each
call waited for ever (cut here at 8 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import sys
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
from metalflow import cli, hosts
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


class _ReaderGone(io.TextIOBase):
    """stdout whose reader went away (`| true`): every write fails as a closed pipe's does. Its
    file descriptor is a pipe of its own: `reader_gone` points it at /dev/null."""

    def __init__(self) -> None:
        self.read_end, self.fd = os.pipe()

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        return None

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd

    def close_fds(self) -> None:
        os.close(self.read_end)
        os.close(self.fd)


def _exit_status(argv: list[str]) -> int:
    """`metalflow ARGV` in this process, its stdout a closed pipe; the command's exit status (its
    `os._exit` raised as SystemExit here)."""
    stdout, saved = _ReaderGone(), sys.stdout
    sys.stdout = stdout
    try:
        return cli.main(argv)
    except SystemExit as ended:
        return int(ended.code or 0)
    finally:
        sys.stdout = saved
        stdout.close_fds()


async def test_every_command_family_exits_141_when_the_reader_of_stdout_is_gone(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`metalflow host list | true`, `host list --json | true` exited 1 with `metalflow: failed:
    BrokenPipeError` (the host commands' catch-all took it for a failure), while the campaign
    and rollout commands exited 141: the rule is now `metalflow.cli.main`'s, for every command.
    In process, against the session's server (a few connects, ~1 s each)."""

    def exit_raises(status: int) -> None:
        raise SystemExit(status)

    monkeypatch.setattr(os, "_exit", exit_raises)
    monkeypatch.setenv("TEMPORAL_ADDRESS", client.service_client.config.target_host)
    monkeypatch.setenv("TEMPORAL_NAMESPACE", client.namespace)
    commands = [
        ["host", "list"],  # the host family's runner
        ["host", "list", "--json"],
        ["campaign", "list"],  # the campaign and rollout families' runner
        ["--help"],  # argparse's own output
    ]
    for argv in commands:
        assert await asyncio.to_thread(_exit_status, argv) == exits.BROKEN_PIPE, argv
