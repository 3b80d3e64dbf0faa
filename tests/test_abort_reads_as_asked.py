"""An operator's abort reads as an abort, not a failure (issue 38 item 4), through the real CLI
against a real Temporal, a worker and the simulated site: `host reprovision --wait` cut short by
`host abort` ends `<id> aborted by <who>: <reason>; ...` with exit status 4 (`exits.ABORTED`),
never `failed: OperationAborted` and 1. (The rollout's `status` after an abort:
tests/test_cli_rollout.py.)"""

from __future__ import annotations

import asyncio
import uuid

from module_site_support import ModuleSite
from sim_support import RunningSim
from temporalio.testing import WorkflowEnvironment

from contracts import names
from metalflow.cli import exits

PREFIX = f"ask{uuid.uuid4().hex[:5]}"
HOST = f"{PREFIX}-002"  # the 2nd host of a generated site is `no-powercycle`: ForceOff, wait, On
SITE = ModuleSite(PREFIX, hosts=2)
sim, queue = SITE.fixtures()
cli = SITE.cli


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
