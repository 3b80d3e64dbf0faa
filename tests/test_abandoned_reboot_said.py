"""Issue 40, an attack's finding: a firmware run terminated by hand (`temporal workflow
terminate`) abandons its reboot (`reboot/HOST/generation-N`, parent close policy ABANDON: a
reboot is never stopped halfway), which may go on to wait for a person with the host OFF. Its
way out (`temporal workflow cancel --workflow-id reboot/HOST/generation-N`) was said only in the
refusal of a later request: the entity records the firmware run's end once, and when the reboot
still powered the host then, its outcome could not say it. `host status` of the idle host now
reads that reboot (one describe) and says it, with the way out, as a WARNING.

A real Temporal, the product's worker, the simulated site; the host's BMC rotates its password
right after metalflow's ForceOff (the named fault `rotate-after-forceoff`), so the reboot's On
attempts fail and it hands the host to a person.
"""

from __future__ import annotations

import asyncio

from cli_support import metalflow, shown_state
from host_operation_support import worker_for
from module_site_support import ModuleSite
from sim_support import RunningSim, sim_http
from temporalio.client import WorkflowFailureError
from temporalio.testing import WorkflowEnvironment

from contracts.models.host import MANUAL_INTERVENTION_REQUIRED, HostWorkflowInput, OperationPolicy
from metalflow.hosts import ensure_entity
from metalflow.operation_progress import operation_progress

HOST = "cut-002"  # profile no-powercycle: a reboot is ForceOff, then On
SITE = ModuleSite(
    "cut", hosts=2, for_metalflow=True, timing={"dpu_boot_seconds": 0.2, "firmware_stage_seconds": 0.2}
)
sim = SITE.fixtures()[0]
TARGET = "32.45.1020"
IMAGE = f"http://firmware.example.test/bf-fw-{TARGET}.bfb"
# Its On attempts 1 s apart: the firmware run is terminated while its reboot still tries On,
# before the reboot hands the host to a person (the entity then cannot know it will).
POLICY = OperationPolicy(power_down_wait_seconds=1.0, power_on_retry_seconds=(1.0, 1.0))


def _fault(sim: RunningSim, bmc: str, fault: str) -> None:
    sim_http().post(f"{sim.url}/sim/faults/bmcs/{bmc}/{fault}").raise_for_status()


async def _phase(env: WorkflowEnvironment, workflow_id: str, until: set[str]) -> str:
    seen = None
    for _ in range(300):
        seen = await operation_progress(env.client, workflow_id, HOST)
        if seen is not None and seen.phase in until:
            return seen.phase
        await asyncio.sleep(0.1)
    raise AssertionError(f"{workflow_id} never in {until}: {seen}")


async def test_host_status_says_the_reboot_a_terminated_firmware_run_left_waiting_and_its_way_out(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    reboot = f"reboot/{HOST}/generation-1"
    _fault(sim, HOST, "rotate-after-forceoff")
    try:
        async with worker_for(local_env.client, task_queue, sim):
            await ensure_entity(local_env.client, HostWorkflowInput(host_id=HOST, policy=POLICY), task_queue)
            asked = await metalflow(
                local_env, "host", "firmware", HOST, "--version", TARGET, "--image", IMAGE,
                "--by", "alice@test", "--task-queue", task_queue,
            )  # fmt: skip
            assert asked.status == 0, asked.stdout + asked.stderr
            await _phase(local_env, reboot, {"powering"})  # its reboot runs
            await local_env.client.get_workflow_handle(f"firmware/{HOST}").terminate("as an operator might")
            for _ in range(300):
                if (await shown_state(local_env, HOST))["host"]["current"] is None:
                    break
                await asyncio.sleep(0.1)
            await _phase(local_env, reboot, {MANUAL_INTERVENTION_REQUIRED})  # it waits, for nobody
            status = await metalflow(local_env, "host", "status", HOST)
            waiting = local_env.client.get_workflow_handle(reboot)
            await waiting.cancel()  # the way out the status names (its On is refused again: OFF)
            try:
                await waiting.result()
            except WorkflowFailureError:
                pass  # it ends failed saying the host is OFF
    finally:
        _fault(sim, HOST, "clear")
    assert status.status == 0, status.stdout + status.stderr
    assert "idle" in status.stdout, status.stdout
    assert f"WARNING          {reboot} still runs and waits for a person" in status.stdout, status.stdout
    assert f"`temporal workflow cancel --workflow-id {reboot}`" in status.stdout, status.stdout
