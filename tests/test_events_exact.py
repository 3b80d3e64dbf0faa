"""Events exact (issue 38 item 3): one start and one end Event per operation, whatever its kind and
however it ends; one Event per fact (a power cycle the BMC refused is no `PowerCycleIssued`); one
abort, one `OperationAborted`. Through the real CLI, a worker with its Event emitter, and the
Events the simulated site's API keeps (what `kubectl describe dpunode` shows)."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

import pytest
from events_support import emitting_worker, events_v1
from module_site_support import ModuleSite
from sim_support import RunningSim
from temporalio.testing import WorkflowEnvironment

PREFIX = f"exa{uuid.uuid4().hex[:5]}"
# Host i of a generated site gets DEFAULT_ROTATION[i % 5]: the 2nd and 7th are `no-powercycle`.
H_ABORT, H_REFUSED, H_RESTART = f"{PREFIX}-002", f"{PREFIX}-003", f"{PREFIX}-007"
RESET_HOSTS = {"--all-dpus": f"{PREFIX}-001", "--host": f"{PREFIX}-004"}
SITE = ModuleSite(PREFIX, hosts=7, worker=emitting_worker)
sim, queue = SITE.fixtures()
cli, until_idle = SITE.cli, SITE.until_idle


def reasons(sim: RunningSim, host: str) -> Counter[str]:
    """Each reason of the host's Events, counted as `kubectl describe` counts them (a series' count)."""
    counted: Counter[str] = Counter()
    for event in events_v1(sim, f"regarding.name=node-{host}"):
        counted[event["reason"]] += (event.get("series") or {}).get("count", 1)
    return counted


async def settled(sim: RunningSim, host: str, expected: dict[str, int]) -> Counter[str]:
    """The host's Events once `expected` are all written (the emitter writes in the background)."""
    for _ in range(100):
        seen = reasons(sim, host)
        if all(seen[reason] >= count for reason, count in expected.items()):
            await asyncio.sleep(0.5)  # a duplicate would be written by now
            return reasons(sim, host)
        await asyncio.sleep(0.1)
    return reasons(sim, host)


@pytest.mark.parametrize("target", ["--all-dpus", "--host"])
async def test_a_reset_tells_its_start_and_its_end(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str, target: str
) -> None:
    host = RESET_HOSTS[target]
    done = await cli(local_env, "host", "reset", host, target, "--wait", "--task-queue", queue)
    assert done.status == 0, done.stdout + done.stderr
    await until_idle(local_env, host)
    seen = await settled(sim, host, {"OperationSucceeded": 1})
    cycles = 1 if target == "--host" else 0  # `--host` is one reboot of the host
    assert seen == Counter({"OperationStarted": 1, "OperationSucceeded": 1, "PowerCycleIssued": cycles}), seen


async def test_one_abort_is_one_operation_aborted(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    started = await cli(
        local_env, "host", "reprovision", H_ABORT, "--power-down-wait", "3600", "--task-queue", queue
    )
    assert started.status == 0, started.stderr
    for _ in range(600):
        if any(entry.get("to") == "Off" for entry in sim.power_log(H_ABORT)):
            break
        await asyncio.sleep(0.1)
    aborted = await cli(local_env, "host", "abort", H_ABORT, "--reason", "wrong host", "--task-queue", queue)
    assert aborted.status == 0, aborted.stderr
    await until_idle(local_env, H_ABORT)
    seen = await settled(sim, H_ABORT, {"OperationAborted": 1})
    assert seen == Counter({"OperationStarted": 1, "PowerCycleIssued": 1, "OperationAborted": 1}), seen


async def test_a_power_cycle_the_bmc_refused_is_not_issued(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    sim.inject(f"bmcs/{H_REFUSED}/wrong-credentials")
    started = await cli(local_env, "host", "reboot", H_REFUSED, "--task-queue", queue)
    assert started.status == 0, started.stderr
    await settled(sim, H_REFUSED, {"ManualRebootRequired": 1})
    aborted = await cli(local_env, "host", "abort", H_REFUSED, "--reason", "rehearsal", "--task-queue", queue)
    assert aborted.status == 0, aborted.stderr
    await until_idle(local_env, H_REFUSED)
    seen = await settled(sim, H_REFUSED, {"OperationAborted": 1})
    assert seen == Counter({"OperationStarted": 1, "ManualRebootRequired": 1, "OperationAborted": 1}), seen


async def test_a_worker_restarted_midway_tells_each_fact_once(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    """A reprovision whose worker stops during the power-down wait (the host Off, a durable timer
    running) and a new worker finishes: one start, one power cycle, one success, as the histories
    say (one operation, one reboot)."""
    host = H_RESTART
    async with emitting_worker(local_env.client, task_queue, sim):
        started = await cli(
            local_env, "host", "reprovision", host, "--power-down-wait", "4", "--task-queue", task_queue
        )
        assert started.status == 0, started.stderr
        for _ in range(600):
            if any(entry.get("to") == "Off" for entry in sim.power_log(host)):
                break
            await asyncio.sleep(0.1)
    async with emitting_worker(local_env.client, task_queue, sim):  # a new worker: replays, then goes on
        entity = await until_idle(local_env, host)
        seen = await settled(sim, host, {"OperationSucceeded": 1})
    assert entity["recent"][-1]["outcome"] == "completed", entity
    assert [entry["to"] for entry in sim.power_log(host) if entry.get("to") in ("Off", "On")] == ["Off", "On"]
    assert seen == Counter({"OperationStarted": 1, "PowerCycleIssued": 1, "OperationSucceeded": 1}), seen
