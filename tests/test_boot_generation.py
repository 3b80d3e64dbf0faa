"""The boot generation moves exactly once per power cycle the BMC accepted (README, "Host
operations"; the rule: `workflows.host.state.generation_after`), whoever's operation it was and
however it ended; never for a cycle the BMC refused or nobody sent. The `PowerCycleIssued` Event,
`host status` and the operation's result agree. Through the real CLI, on the simulated site, with
the worker's Event emitter (a worker process where it is killed).

- a `host reset --host` aborted in its power-down wait after its worker was SIGKILLed: one
  cycle, one generation, in the Event, the status and the reset's result (a regression guard:
  this sequence passes on the code before issue 38's fix too; the fix is for a reboot that took
  its cycle and then ended cancelled, which the reset then did not count);
- a reprovision whose power cycle the BMC refused (wrong credentials), aborted: no generation
  used up; the next reboot takes the very next one;
- a `host reset --both`: its ForceOff ... On around the DPU resets is a power cycle: one
  generation, one Event, one `metalflow_power_cycles` sample (method ForceOff+On);
- a `host reset --host` cancelled (`temporal workflow cancel`) in its power-down wait: its reboot
  is cut short and completes, the reset ends cancelled with no result, and the entity reads the
  reboot to count its generation.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

from events_support import emitting_worker, events_v1
from host_operation_support import until_powered_off
from module_site_support import ModuleSite
from sim_support import RunningSim
from temporalio.client import Client
from temporalio.runtime import MetricBuffer, Runtime, TelemetryConfig
from temporalio.testing import WorkflowEnvironment
from worker_support import worker_env, worker_process

from contracts import names
from contracts.wording import CANCELLED_OUTCOME

PREFIX = f"gen{uuid.uuid4().hex[:5]}"
# Host i of a generated site gets DEFAULT_ROTATION[i % 5]: the 2nd is `no-powercycle` (ForceOff,
# the power-down wait on a durable timer, On).
H_KILLED, H_REFUSED, H_BOTH, H_CANCELLED = f"{PREFIX}-002", f"{PREFIX}-001", f"{PREFIX}-003", f"{PREFIX}-007"
SITE = ModuleSite(PREFIX, hosts=7, worker=emitting_worker)
sim, queue = SITE.fixtures()
cli, until_idle = SITE.cli, SITE.until_idle


def cycles(sim: RunningSim, host: str) -> int:
    return sum(1 for entry in sim.power_log(host) if entry.get("to") == "Off")


async def issued(sim: RunningSim, host: str, expected: int) -> list[str]:
    """The host's `PowerCycleIssued` Events' notes (one per series occurrence), once `expected`
    are written (the emitter writes in the background), and half a second more for a duplicate."""
    for _ in range(100):
        if len(_issued(sim, host)) >= expected:
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)
    return _issued(sim, host)


async def one_cycle_told_once(sim: RunningSim, host: str) -> None:
    """The BMC saw one power cycle of the host; one `PowerCycleIssued` Event tells it, for generation 1."""
    assert cycles(sim, host) == 1, sim.power_log(host)
    notes = await issued(sim, host, 1)
    assert len(notes) == 1 and "generation 1" in notes[0], notes


def _issued(sim: RunningSim, host: str) -> list[str]:
    notes: list[str] = []
    for event in events_v1(sim, f"regarding.name=node-{host}"):
        if event["reason"] == "PowerCycleIssued":
            notes += [event.get("note", "")] * (event.get("series") or {}).get("count", 1)
    return notes


async def result_of(env: WorkflowEnvironment, workflow_id: str) -> dict[str, Any]:
    ended: dict[str, Any] = await env.client.get_workflow_handle(workflow_id).result()
    return ended


async def test_a_host_reset_aborted_in_its_wait_after_a_worker_kill_counts_its_one_cycle(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str, tmp_path: Path
) -> None:
    """The worker is SIGKILLed while the reboot waits out its power-down wait (the host Off, a
    durable timer); a new worker takes over and `host abort` stops the reset: the reboot's On is
    sent at once, and that one cycle is the host's next generation everywhere. (The new worker runs
    in this process, as `run_worker` runs it: only the killed one needs a process of its own.)"""
    host, log = H_KILLED, tmp_path / "worker.log"
    env = worker_env(local_env.client, sim)
    with worker_process(task_queue, env, log) as worker:
        await worker.polling(local_env.client)
        started = await cli(
            local_env,
            "host",
            "reset",
            host,
            "--host",
            "--power-down-wait",
            "3600",
            "--task-queue",
            task_queue,
        )
        assert started.status == 0, started.stdout + started.stderr
        await until_powered_off(sim, host)  # the reboot waits out its power-down wait on a durable timer
        await asyncio.sleep(0.5)
        worker.kill()
    async with emitting_worker(local_env.client, task_queue, sim):
        aborted = await cli(
            local_env, "host", "abort", host, "--reason", "wrong host", "--task-queue", task_queue
        )
        assert aborted.status == 0, aborted.stdout + aborted.stderr
        entity = await until_idle(local_env, host)
        notes = await issued(sim, host, 1)
    reset = await result_of(local_env, names.host_operation_workflow_id("reset", host))
    assert cycles(sim, host) == 1, sim.power_log(host)
    assert len(notes) == 1 and "generation 1" in notes[0], notes
    assert (entity["boot_generation"], reset["boot_generation"]) == (1, 1), (entity, reset)


async def test_a_refused_power_cycle_of_an_aborted_reprovision_uses_no_generation_up(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    host = H_REFUSED
    sim.inject(f"bmcs/{host}/wrong-credentials")
    started = await cli(local_env, "host", "reprovision", host, "--task-queue", queue)
    assert started.status == 0, started.stdout + started.stderr
    for _ in range(600):  # the reprovision asks a person: its reboot's BMC refused the cycle
        shown = await cli(local_env, "host", "status", host, "--json")
        operation = json.loads(shown.stdout).get("operation") or {}
        if operation.get("phase") == "manual-intervention-required":
            break
        await asyncio.sleep(0.2)
    else:
        raise AssertionError(f"the reprovision of {host} never asked a person: {shown.stdout}")
    aborted = await cli(local_env, "host", "abort", host, "--reason", "rehearsal", "--task-queue", queue)
    assert aborted.status == 0, aborted.stdout + aborted.stderr
    assert (await until_idle(local_env, host))["boot_generation"] == 0
    sim.inject(f"bmcs/{host}/clear")
    rebooted = await cli(local_env, "host", "reboot", host, "--wait", "--task-queue", queue)
    assert rebooted.status == 0, rebooted.stdout + rebooted.stderr
    entity = await until_idle(local_env, host)
    assert entity["recent"][-1]["workflow_id"] == names.host_reboot_workflow_id(host, 1), entity["recent"]
    assert entity["boot_generation"] == 1, entity
    await one_cycle_told_once(sim, host)


async def test_a_reset_of_the_host_and_its_dpus_moves_the_generation_once(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    """One generation, one `PowerCycleIssued` Event, and one `metalflow_power_cycles` sample
    (method ForceOff+On): the Event was told and no sample counted it (issue 38). The module's
    worker, on a runtime whose metrics the test reads (a `MetricBuffer`)."""
    host, buffer = H_BOTH, MetricBuffer(10_000)
    metered = await Client.connect(
        local_env.client.service_client.config.target_host, namespace=local_env.client.namespace,
        data_converter=local_env.client.data_converter,
        runtime=Runtime(telemetry=TelemetryConfig(metrics=buffer)),
    )  # fmt: skip
    async with emitting_worker(metered, task_queue, sim):
        done = await cli(local_env, "host", "reset", host, "--both", "--wait", "--task-queue", task_queue)
        assert done.status == 0, done.stdout + done.stderr
        entity = await until_idle(local_env, host)
        reset = await result_of(local_env, names.host_operation_workflow_id("reset", host))
        assert (entity["boot_generation"], reset["boot_generation"]) == (1, 1), (entity, reset)
        await one_cycle_told_once(sim, host)
    counted = [
        (u.value, dict(u.attributes)) for u in buffer.retrieve_updates()
        if u.metric.name == "metalflow_power_cycles"
    ]  # fmt: skip
    assert [(v, a["method"]) for v, a in counted] == [(1, "ForceOff+On")], counted


async def test_a_host_reset_cancelled_in_its_wait_counts_its_one_cycle(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    host = H_CANCELLED
    started = await cli(
        local_env, "host", "reset", host, "--host", "--power-down-wait", "3600", "--task-queue", queue
    )
    assert started.status == 0, started.stdout + started.stderr
    await until_powered_off(sim, host)
    await local_env.client.get_workflow_handle(names.host_operation_workflow_id("reset", host)).cancel()
    entity = await until_idle(local_env, host)
    outcome = entity["recent"][-1]["outcome"]  # cancelled: no result kept, its own final words read
    assert outcome.startswith(f"{CANCELLED_OUTCOME}. ") and outcome.endswith("the host is on"), outcome
    assert entity["boot_generation"] == 1, entity
    await one_cycle_told_once(sim, host)
