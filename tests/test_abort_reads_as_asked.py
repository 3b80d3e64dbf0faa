"""An operator's abort reads as an abort, not a failure (issue 38 item 4), through the real CLI
against a real Temporal, a worker and the simulated site: `host reprovision --wait` cut short by
`host abort` ends `<id> aborted by <who>: <reason>; ...` with exit status 4 (`exits.ABORTED`),
never `failed: OperationAborted` and 1. (The rollout's `status` after an abort:
tests/test_cli_rollout.py.)"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import metalflow
from host_operation_support import worker_for
from sim_support import RunningSim, prefixed_sim
from temporalio.testing import WorkflowEnvironment

from contracts import names
from metalflow.cli import exits

PREFIX = f"ask{uuid.uuid4().hex[:5]}"
HOST = f"{PREFIX}-002"  # the 2nd host of a generated site is `no-powercycle`: ForceOff, wait, On
SITE: dict[str, Path] = {}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with prefixed_sim(tmp_path_factory.mktemp("sim"), PREFIX, hosts=2, dpus_per_host=1) as running:
        SITE["path"] = running.site_file
        yield running


@pytest.fixture
async def queue(local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str) -> AsyncIterator[str]:
    async with worker_for(local_env.client, task_queue, sim):
        yield task_queue


async def cli(env: WorkflowEnvironment, *args: str) -> Any:
    return await metalflow(env, *args, site_file=SITE["path"])


async def test_a_followed_operation_an_operator_aborts_says_who_and_exits_4(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    waiting = asyncio.ensure_future(
        cli(
            local_env,
            "host",
            "reprovision",
            HOST,
            "--power-down-wait",
            "3600",
            "--wait",
            "--task-queue",
            queue,
        )
    )
    for _ in range(600):  # the host is off: the operation waits out its power-down wait
        if any(entry.get("to") == "Off" for entry in sim.power_log(HOST)):
            break
        await asyncio.sleep(0.1)
    aborted = await cli(
        local_env, "host", "abort", HOST, "--by", "alice", "--reason", "wrong host", "--task-queue", queue
    )
    assert aborted.status == 0, aborted.stderr
    followed = await waiting
    said = followed.stdout + followed.stderr
    operation = names.host_operation_workflow_id("reprovision", HOST)
    assert followed.status == exits.ABORTED, said
    assert f"{operation} aborted by alice: wrong host" in said, said
    assert "failed" not in said and "OperationAborted" not in said, said
