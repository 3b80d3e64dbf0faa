"""Issue 38, from an independent attack, through the real CLI against a real Temporal, a worker
and the simulated site:

- `host reboot` of a host whose DPUs an aborted reprovision left waiting in DPF's `Rebooting` for
  an external reboot tells DPF the host was rebooted, as the reprovision would have, so the DPUs
  move on and `host status`'s warning (which names this very command) goes.
- A `--wait` whose worker is killed after the entity accepted the request says the request stands
  (named), that only the following stopped, and how to see it again, exit 3: never "Nothing was
  changed: send the command again" (the request was recorded; sending it again is refused busy).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

from cli_support import rebooting, until_shown
from host_operation_support import worker_for
from module_site_support import ModuleSite
from sim_support import RunningSim
from temporalio.testing import WorkflowEnvironment
from worker_support import worker_env, worker_process

from metalflow.hosts import host_status

PREFIX = f"rtd{uuid.uuid4().hex[:5]}"
H_LEFT = f"{PREFIX}-001"  # a BMC with PowerCycle: the reboot is one quick cycle
H_FOLLOWED = f"{PREFIX}-003"
SITE = ModuleSite(PREFIX, hosts=3)
sim, queue = SITE.fixtures()
cli, until_idle = SITE.cli, SITE.until_idle
WAITS = "is Rebooting: DPF waits for a reboot of"


async def test_host_reboot_is_the_reboot_dpf_waits_for_after_an_aborted_reprovision(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    host = H_LEFT
    started = await cli(local_env, "host", "reprovision", host, "--manual-reboot", "--task-queue", queue)
    assert started.status == 0, started.stderr
    await until_shown(local_env, host, rebooting, "waited for its manual reboot")  # DPF asked
    aborted = await cli(local_env, "host", "abort", host, "--reason", "attack", "--task-queue", queue)
    assert aborted.status == 0, aborted.stderr
    await until_idle(local_env, host)
    status = await cli(local_env, "host", "status", host)
    warning = (
        f"(`metalflow host reboot {host}` reboots it and tells DPF, or `metalflow host reprovision {host}`)"
    )
    assert WAITS in status.stdout and warning in status.stdout, status.stdout

    rebooted = await cli(local_env, "host", "reboot", host, "--wait", "--task-queue", queue)
    assert rebooted.status == 0, rebooted.stdout + rebooted.stderr
    warnings: list[str] = []
    for _ in range(100):  # DPF moves the DPU on once told, to Ready (the simulated site at zero timings)
        shown = await cli(local_env, "host", "status", host, "--json")
        warnings = json.loads(shown.stdout)["warnings"]
        if not warnings:
            break
        await asyncio.sleep(0.2)
    assert warnings == [], warnings
    said = rebooted.stdout + rebooted.stderr
    assert f"DPF told node-{host} was rebooted (removed)" in said, said
    status = await cli(local_env, "host", "status", host)
    assert WAITS not in status.stdout, status.stdout


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
    # What it said is true: the request stands, and sending it again is refused as busy. (Any
    # worker shows it: this one runs in the test's process, sparing a second interpreter's start.)
    async with worker_for(client, task_queue, sim):
        current = (await host_status(client, host)).current
        assert current is not None and current.outcome == "awaiting-approval", current
        assert f"({current.workflow_id})" in last, (current.workflow_id, last)
        again = await cli(local_env, "host", "reset", host, "--both", "--task-queue", task_queue)
        assert again.status == 1 and "busy" in again.stderr, again
        withdrawn = await cli(local_env, "host", "abort", host, "--task-queue", task_queue)
        assert withdrawn.status == 0, withdrawn.stderr
