"""An update-with-start whose call fails leaves no "Future exception was never retrieved" behind
(contracts/with_start.py). Seen under load: the CLI's one-line "lost Temporal" error followed by
asyncio's traceback of the SDK's unread start outcome (tests/test_cli_input_bounds.py). One dev
server, stopped before the calls: each call then fails as a CLI's does when Temporal goes away."""

from __future__ import annotations

import asyncio
import gc
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sim_support import start_dev_server
from temporalio import workflow
from temporalio.client import Client, WithStartWorkflowOperation, WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RetryConfig, RPCError

from contracts.with_start import execute_update_with_start

QUICK = timedelta(seconds=1)  # the SDK's own wait for a server that is gone is ~8 s


@workflow.defn
class _Nobody:
    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.update
    def ask(self, _: str) -> str:
        return "never"


@pytest.fixture(scope="module")
async def gone_ones(lifeline_bin: Path) -> list[Client]:
    """Clients whose Temporal has gone away, one per test (a client that failed once waits out its
    reconnect back-off on its next call)."""
    env = await start_dev_server(lifeline_bin)
    target = env.client.service_client.config.target_host
    clients = [await Client.connect(target, retry_config=RetryConfig(max_retries=0)) for _ in range(2)]
    await env.shutdown()
    return clients


@pytest.fixture
def gone(gone_ones: list[Client]) -> Client:
    return gone_ones.pop()


async def _unread_after_a_failed_call(client: Client, call: Any) -> list[str]:
    """What asyncio reports as never retrieved once a failed update-with-start is collected."""
    loop = asyncio.get_running_loop()
    reported: list[str] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(str(context.get("message"))))
    start = WithStartWorkflowOperation(
        _Nobody.run,
        id="nobody",
        task_queue="nobody",
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
    with pytest.raises((RPCError, WorkflowUpdateRPCTimeoutOrCancelledError)):
        await call(client, start)
    del start
    gc.collect()
    return reported


async def test_a_failed_update_with_start_leaves_no_unread_start_outcome(gone: Client) -> None:
    async def ours(client: Client, start: WithStartWorkflowOperation[Any, Any]) -> Any:
        return await execute_update_with_start(client, _Nobody.ask, "x", start=start, rpc_timeout=QUICK)

    assert await _unread_after_a_failed_call(gone, ours) == []


async def test_the_sdks_own_call_leaves_one_so_the_first_test_can_fail(gone: Client) -> None:
    """The same call straight through the SDK: asyncio reports the unread outcome (what
    `execute_update_with_start` prevents). Should the SDK read it itself one day, this fails and
    contracts/with_start.py can go."""

    async def sdk(client: Client, start: WithStartWorkflowOperation[Any, Any]) -> Any:
        return await client.execute_update_with_start_workflow(
            _Nobody.ask, "x", start_workflow_operation=start, rpc_timeout=QUICK
        )

    assert await _unread_after_a_failed_call(gone, sdk) == ["Future exception was never retrieved"]
