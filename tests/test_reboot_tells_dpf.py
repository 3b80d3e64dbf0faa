"""Issue 38, from an independent attack, through the real CLI against a real Temporal, a worker
and the simulated site:

- A `--wait` whose worker is killed after the entity accepted the request says the request stands
  (named), that only the following stopped, and how to see it again, exit 3: never "Nothing was
  changed: send the command again" (the request was recorded; sending it again is refused busy).
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from module_site_support import ModuleSite
from sim_support import RunningSim
from temporalio.testing import WorkflowEnvironment
from worker_support import worker_env, worker_process

from metalflow.hosts import host_status

PREFIX = f"rtd{uuid.uuid4().hex[:5]}"
H_FOLLOWED = f"{PREFIX}-001"
SITE = ModuleSite(PREFIX, hosts=2)
sim, queue = SITE.fixtures()
cli = SITE.cli


async def test_a_wait_whose_worker_dies_after_acceptance_says_the_request_stands(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str, tmp_path: Path
) -> None:
    host, client = H_FOLLOWED, local_env.client
    env = worker_env(client, sim)
    with worker_process(task_queue, env, tmp_path / "worker.log") as worker:
        await worker.polling(client)
        assigned = await cli(local_env, "host", "assign", host, "inst-1", "--task-queue", task_queue)
        assert assigned.status == 0, assigned.stderr
        waiting = asyncio.ensure_future(
            cli(local_env, "host", "reset", host, "--both", "--wait", "--task-queue", task_queue)
        )
        for _ in range(300):  # the assigned host holds the reset for an approval
            current = (await host_status(client, host)).current
            if current is not None and current.outcome == "awaiting-approval":
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"{host}'s reset never awaited approval: {current}")
        worker.kill()  # the follow's next query is not answered
    followed = await waiting
    said = followed.stdout + followed.stderr
    assert followed.status == 3, said  # could not follow (README's exit statuses)
    last = followed.stderr.strip().splitlines()[-1]
    assert "Nothing was changed" not in said, said
    assert last.startswith(f"metalflow: {host}: the request was accepted ("), said
    assert "and stands; following it stopped: " in last and f"host/{host} did not answer" in last, said
    assert f"it awaits approval: `metalflow approve {host} --wait` approves it and follows it" in last, said
    # What it said is true: the request stands, and sending it again is refused as busy.
    with worker_process(task_queue, env, tmp_path / "worker.log") as worker:
        await worker.polling(client)
        current = (await host_status(client, host)).current
        assert current is not None and current.outcome == "awaiting-approval", current
        assert f"({current.workflow_id})" in last, (current.workflow_id, last)
        again = await cli(local_env, "host", "reset", host, "--both", "--task-queue", task_queue)
        assert again.status == 1 and "busy" in again.stderr, again
        withdrawn = await cli(local_env, "host", "abort", host, "--task-queue", task_queue)
        assert withdrawn.status == 0, withdrawn.stderr
