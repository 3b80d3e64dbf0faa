"""Abort means stop, everywhere (issue 9 item 8), through the real CLI against a real Temporal, a
worker with the real workflows and activities, and the simulated site's BMCs.

The hosts' BMCs (profile `no-powercycle`) cycle by ForceOff, the power-down wait, then On, so
with `--power-down-wait 3600` a host that is Off stays Off for an hour unless the stop works:
each test passes only if the host is back On within the test's limits. Each asserts the BMC's
power log (one Off, one On: never left off, never cycled twice), how the operation ended, and
that the simulator saw no protocol violation.
"""

from __future__ import annotations

import asyncio
import uuid

from dpf_activities_support import REBOOT, Api, annotation
from host_operation_support import aborted_run, save_history, until_powered_off
from module_site_support import ModuleSite
from sim_support import RunningSim
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from contracts import names
from contracts.wording import BY_ITS_CANCEL

PREFIX = f"abt{uuid.uuid4().hex[:5]}"
# Host i of a generated site gets DEFAULT_ROTATION[i % 5]: the 2nd and 7th are `no-powercycle`.
H_REPROVISION, H_REBOOT, H_TERMINATE = f"{PREFIX}-002", f"{PREFIX}-007", f"{PREFIX}-012"
LONG_WAIT = "3600"  # the largest power-down wait the CLI takes
SITE = ModuleSite(PREFIX, hosts=12)
sim, queue = SITE.fixtures()
cli, until_idle = SITE.cli, SITE.until_idle


def transitions(sim: RunningSim, host: str) -> list[str]:
    return [str(entry.get("to")) for entry in sim.power_log(host) if entry.get("to") in ("Off", "On")]


async def test_abort_during_the_power_down_wait_of_a_reprovision_powers_the_host_back_on(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    host = H_REPROVISION
    started = await cli(
        local_env, "host", "reprovision", host, "--power-down-wait", LONG_WAIT, "--task-queue", queue
    )
    assert started.status == 0, started.stderr
    await until_powered_off(sim, host)

    # The BMC is rebooting the host: a person's word is not awaited, and is refused saying so.
    told = await cli(local_env, "host-rebooted", host, "--task-queue", queue)
    assert told.status == 1, told.stdout + told.stderr
    operation_id = names.host_operation_workflow_id("reprovision", host)
    assert f"{operation_id} is not waiting for a reboot: it is rebooting-host" in told.stderr
    assert "(bmc)" in told.stderr and "Traceback" not in told.stderr

    aborted = await cli(local_env, "host", "abort", host, "--reason", "wrong host", "--task-queue", queue)
    assert aborted.status == 0, aborted.stderr
    assert "aborting at the next safe point (rebooting-host)" in aborted.stdout, aborted.stdout
    entity = await until_idle(local_env, host)
    operation = local_env.client.get_workflow_handle(operation_id)
    assert "aborted by" in await aborted_run(operation)  # Completed, Phase aborted: not Failed
    await save_history(operation, "host_operation_aborted_in_power_down_wait")
    reboot = names.host_reboot_workflow_id(host, entity["boot_generation"])
    await save_history(local_env.client.get_workflow_handle(reboot), "host_reboot_stopped_in_power_down_wait")

    last = entity["recent"][-1]
    assert last["operation"] == "reprovision" and "abort" in last["outcome"], last
    assert transitions(sim, host) == ["Off", "On"]  # back on at once, one cycle, never twice
    # The host was turned off and on: that is the reboot DPF asked for, and DPF is told so.
    assert annotation(Api(sim).must("DPUNode", f"node-{host}"), REBOOT) is None
    assert entity["boot_generation"] >= 1
    assert sim.violations() == []


async def test_abort_during_the_power_down_wait_of_a_host_reboot_powers_the_host_back_on(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    host = H_REBOOT
    started = await cli(
        local_env, "host", "reboot", host, "--power-down-wait", LONG_WAIT, "--task-queue", queue
    )
    assert started.status == 0, started.stderr
    await until_powered_off(sim, host)

    aborted = await cli(local_env, "host", "abort", host, "--task-queue", queue)
    assert aborted.status == 0, aborted.stderr
    assert "powered back on" in aborted.stdout, aborted.stdout
    entity = await until_idle(local_env, host)

    last = entity["recent"][-1]
    assert last["operation"] == "reboot", last
    reboot = local_env.client.get_workflow_handle(last["workflow_id"])
    assert "generation 1 reached" in await aborted_run(reboot)  # Completed, Phase aborted
    await save_history(reboot, "host_reboot_aborted")
    assert "aborted by" in last["outcome"] and "generation 1 reached" in last["outcome"], last
    assert entity["boot_generation"] == 1  # the host was cycled: the entity counts it
    assert transitions(sim, host) == ["Off", "On"]
    assert sim.violations() == []

    again = await cli(local_env, "host", "abort", host, "--task-queue", queue)
    assert again.status == 1 and f"no operation in flight on {host}" in again.stderr


async def test_terminating_the_entity_stops_its_reboot_and_powers_the_host_back_on(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    host = H_TERMINATE
    started = await cli(
        local_env, "host", "reboot", host, "--power-down-wait", LONG_WAIT, "--task-queue", queue
    )
    assert started.status == 0, started.stderr
    reboot_id = names.host_reboot_workflow_id(host, 1)
    await until_powered_off(sim, host)

    await local_env.client.get_workflow_handle(names.host_workflow_id(host)).terminate("gone wrong")
    reboot = local_env.client.get_workflow_handle(reboot_id)
    for _ in range(600):
        described = await reboot.describe()
        if described.status != WorkflowExecutionStatus.RUNNING:
            break
        await asyncio.sleep(0.2)
    # The reboot was cancelled with the entity: it sent On at once and ended, holding nothing.
    assert described.status == WorkflowExecutionStatus.COMPLETED, described.status
    await save_history(reboot, "host_reboot_cancelled_with_its_entity")
    result = await reboot.result()
    assert BY_ITS_CANCEL in result["method"], result  # a cancel (the entity's close), not an abort
    assert transitions(sim, host) == ["Off", "On"]
    assert sim.violations() == []
