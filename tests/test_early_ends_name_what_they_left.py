"""Issue 40, Deliver 2 ("the status of every early end names what was done and what was left: each
DPU and the host"), as a user runs the CLI against a real Temporal, the product's worker and the
simulated site (one site for the module: `module_site_support`).

- A DPU BMC's credentials rotated during `host reset --all-dpus --full` (the named fault
  `wrong-credentials`, simulators/redfish/BEHAVIOUR.md F1, set once the reset read every DPU's BMC
  and while its host's ForceOff settles): before, the end said "Done: HOST-dpu-0: PowerCycle; the
  host is on" and nothing of the second DPU. Now the status, the result and the ending Event name
  it as not reset, and why.
- The same reset aborted (`host abort`) right after its ForceOff, the first DPU's PowerCycle in
  flight: the host was powered on again, a power cycle (generation 0 -> 1), and the end said
  `Done: nothing was reset; the host is on` (attack M2). Now it says the host was power-cycled,
  what that did to each DPU, and each DPU not reset.
- A reprovision cancelled (`temporal workflow cancel`) while its reboot had left the host OFF (the
  named fault `rotate-after-forceoff`, F2) and waited for a person, its BMC fixed meanwhile:
  before, it ended saying the host is OFF and sent no On. Now a cancel asks nobody, as the
  reset's (`PowerCustody.cancelled`): the reboot runs again once, which powers the host on.
- A firmware run asked (as a script asks, not through the CLI, which refuses it) for a host one
  of whose DPUs was removed from DPF (`host remove --dpus`): it stages, then ends `DPUsNotInDPF`
  before its power cycle. Before, its failure said nothing of the images staged; now it names
  each DPU whose BMC holds the image, and that it activates at the host's next power cycle. A
  firmware campaign's plan (its admission, the same decision `host firmware` refuses by:
  `contracts/dpf_presence.py`) leaves that host out up front, naming the DPU; before, it ran it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from cli_support import metalflow, shown_state
from events_support import emitting_worker, events_v1
from host_operation_support import worker_for
from module_site_support import ModuleSite
from sim_support import RunningSim, sim_http
from site_worker_support import FAST_POLICY
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from contracts.models.host import FirmwareInput, FirmwareResult, HostWorkflowInput, OperationPolicy
from metalflow.hosts import ensure_entity

FULL_RESET = "left-001"  # profile powercycle: the reset's ForceOff is its own
CANCELLED_REPROVISION = "left-002"  # profile no-powercycle: a reboot is ForceOff, then On
FIRMWARE_HOST = "left-003"
ABORTED_RESET = "left-004"  # profile etag-required
FIRST_HOST = "left-001"
TARGET = "32.45.1020"
REFUSED_ON = OperationPolicy(power_down_wait_seconds=0.0, power_on_retry_seconds=(0.5,))

SITE = ModuleSite("left", hosts=4, dpus_per_host=2, for_metalflow=True, timing={"dpu_boot_seconds": 0.2})
sim = SITE.fixtures()[0]  # each test runs the worker itself, around what it asks


def _fault(sim: RunningSim, bmc: str, fault: str) -> None:
    """`metalflow sim fault bmc BMC FAULT` (the endpoint it posts to)."""
    sim_http().post(f"{sim.url}/sim/faults/bmcs/{bmc}/{fault}").raise_for_status()


async def _until_phase(env: WorkflowEnvironment, host: str, phase: str, seconds: float = 20) -> None:
    shown: dict[str, Any] = {}
    for _ in range(int(seconds / 0.05)):
        shown = await shown_state(env, host)
        if (shown["operation"] or {}).get("phase") == phase:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{host} never reached {phase}: {shown}")


async def _until_idle(env: WorkflowEnvironment, host: str, seconds: float = 30) -> dict[str, Any]:
    """The entity as `host status --json` shows it once its operation ended (read in this process)."""
    for _ in range(int(seconds / 0.1)):
        entity: dict[str, Any] = (await shown_state(env, host))["host"]
        if entity["current"] is None:
            return entity
        await asyncio.sleep(0.1)
    raise AssertionError(f"{host} never ended its operation: {entity}")


async def _until_handed_over(env: WorkflowEnvironment, host: str, seconds: float = 60) -> dict[str, Any]:
    """Until the operation waits for a person saying the host is OFF."""
    shown: dict[str, Any] = {}
    for _ in range(int(seconds / 0.2)):
        shown = await shown_state(env, host)
        operation = shown["operation"] or {}
        if operation.get("phase") == "manual-intervention-required" and "is OFF" in str(operation):
            return shown
        await asyncio.sleep(0.2)
    raise AssertionError(f"{host} never waited for a person saying the host is OFF: {shown}")


async def _events(sim: RunningSim, host: str, reason: str) -> list[dict[str, Any]]:
    """The host's Events of `reason`, once one is written (the emitter writes in the background)."""
    for _ in range(100):
        found = [e for e in events_v1(sim, f"regarding.name=node-{host}") if e["reason"] == reason]
        if found:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"no {reason} Event of {host}: {events_v1(sim, f'regarding.name=node-{host}')}")


async def test_a_full_reset_whose_second_dpu_bmc_rotated_names_that_dpu_as_not_reset(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    host = FULL_RESET
    first, second = f"{host}-dpu-0", f"{host}-dpu-1"
    try:
        async with emitting_worker(local_env.client, task_queue, sim):
            asked = await metalflow(
                local_env, "host", "reset", host, "--all-dpus", "--full", "--by", "alice@test",
                "--task-queue", task_queue,
            )  # fmt: skip
            assert asked.status == 0, asked.stdout + asked.stderr
            # Every DPU's BMC was read (the reset's check); its host's ForceOff settles now.
            await _until_phase(local_env, host, "powering-host-off")
            _fault(sim, second, "wrong-credentials")
            entity = await _until_idle(local_env, host)
            shown = await SITE.cli(local_env, "host", "status", host)
            ended = await _events(sim, host, "OperationFailed")
    finally:
        _fault(sim, second, "clear")
    outcome = entity["recent"][-1]["outcome"]
    # The host's ForceOff and On (the power log below) were a power cycle: said, with what it did
    # to the DPUs (attack M2: before, the words went from the DPUs' resets to `the host is on`).
    cycled = f"host {host} power-cycled (this run's ForceOff, then On): generation 1 reached, which rebooted"
    said = (
        f"Done: {first}: PowerCycle; {cycled} each DPU's Arm with it (a BlueField's Arm has power only "
        "while its host is on; its NIC is reset only by its own PowerCycle); "
        f"not reset: {second} (its PowerCycle failed: BMCAuthenticationFailed)"
    )
    assert outcome.startswith("failed: BMCAuthenticationFailed: "), outcome
    assert said in outcome and outcome.endswith("; the host is on"), outcome
    assert said in shown.stdout, shown.stdout
    assert said in ended[-1]["note"], ended
    power = [(e["to"], e["reset_type"]) for e in sim.power_log(host)]
    assert power == [("Off", "ForceOff"), ("On", "On")], power  # as the status says: the host is on


async def test_a_full_reset_aborted_after_its_forceoff_says_the_host_was_power_cycled(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    host = ABORTED_RESET
    stuck, second = f"{host}-dpu-0", f"{host}-dpu-1"
    try:
        async with worker_for(local_env.client, task_queue, sim):
            asked = await metalflow(
                local_env, "host", "reset", host, "--all-dpus", "--full", "--by", "alice@test",
                "--task-queue", task_queue,
            )  # fmt: skip
            assert asked.status == 0, asked.stdout + asked.stderr
            await _until_phase(local_env, host, "powering-host-off")
            _fault(sim, stuck, "unreachable")  # its PowerCycle call retries: the reset stays there
            await _until_phase(local_env, host, "resetting-dpu")
            aborted = await metalflow(
                local_env, "host", "abort", host, "--by", "bob@test", "--reason", "wrong host",
                "--task-queue", task_queue,
            )  # fmt: skip
            assert aborted.status == 0, aborted.stdout + aborted.stderr
            entity = await _until_idle(local_env, host, seconds=60)
    finally:
        _fault(sim, stuck, "clear")
    outcome = entity["recent"][-1]["outcome"]
    assert outcome.startswith("aborted by bob@test: wrong host"), outcome
    cycled = f"Done: host {host} power-cycled (this run's ForceOff, then On): generation 1 reached"
    assert cycled in outcome and "rebooted each DPU's Arm with it" in outcome, outcome
    assert f"not reset: {stuck} (its PowerCycle was stopped in flight: it may have been sent), " in outcome
    assert f"{second} (not reached: the reset ended first); the host is on" in outcome, outcome
    assert "nothing was reset" not in outcome and entity["boot_generation"] == 1, entity
    power = [(e["to"], e["reset_type"]) for e in sim.power_log(host)]
    assert power == [("Off", "ForceOff"), ("On", "On")], power  # one power cycle, as the words say


async def test_a_reprovision_cancelled_while_its_reboot_left_the_host_off_powers_it_on_afresh(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    host = CANCELLED_REPROVISION
    _fault(sim, host, "rotate-after-forceoff")
    try:
        async with worker_for(local_env.client, task_queue, sim):
            # The entity's policy: no power-down wait, the refused On tried again once after 0.5 s
            # (a request's --power-down-wait would bring the default 2 s and 4 s backoff with it).
            await ensure_entity(
                local_env.client, HostWorkflowInput(host_id=host, policy=REFUSED_ON), task_queue
            )
            asked = await metalflow(
                local_env, "host", "reprovision", host, "--by", "alice@test", "--task-queue", task_queue
            )
            assert asked.status == 0, asked.stdout + asked.stderr
            shown = await _until_handed_over(local_env, host)
            _fault(sim, host, "clear")  # the BMC takes the credentials again; nobody says retry
            await local_env.client.get_workflow_handle(shown["host"]["current"]["workflow_id"]).cancel()
            entity = await _until_idle(local_env, host, seconds=60)
    finally:
        _fault(sim, host, "clear")
    outcome = entity["recent"][-1]["outcome"]
    assert "is OFF" not in outcome and "HostLeftOff" not in outcome, outcome
    assert entity.get("left_off_by", "") == "", entity  # `host list` shows it plain idle, not "(host OFF)"
    power = [(e["to"], e["reset_type"]) for e in sim.power_log(host)]
    assert power[-2:] == [("Off", "ForceOff"), ("On", "On")] and power.count(("On", "On")) == 1, power


async def test_a_firmware_run_on_a_host_with_a_removed_dpu_names_the_images_it_left_staged(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    host, removed = FIRMWARE_HOST, f"{FIRMWARE_HOST}-dpu-1"
    request = FirmwareInput(
        host_id=host, target_version=TARGET, image_uri=f"http://firmware.example.test/bf-fw-{TARGET}.bfb",
        requested_by="campaign/test", policy=FAST_POLICY,
    )  # fmt: skip
    async with worker_for(local_env.client, task_queue, sim):
        gone = await metalflow(
            local_env, "host", "remove", host, "--dpus", removed, "--wait", "--by", "alice@test",
            "--task-queue", task_queue,
        )  # fmt: skip
        assert gone.status == 0, gone.stdout + gone.stderr
        handle = await local_env.client.start_workflow(
            "FirmwareWorkflow",
            request,
            id=f"firmware/{host}",
            task_queue=task_queue,
            result_type=FirmwareResult,
        )
        try:
            await asyncio.wait_for(handle.result(), timeout=30)
        except WorkflowFailureError as failed:
            cause = failed.cause
        else:
            raise AssertionError("the firmware run on a removed DPU completed")
        # A firmware campaign's admission decides as `host firmware` refuses: left out up front.
        planned = await metalflow(
            local_env, "campaign", "plan", "fw-left", "--hosts", f"{FIRST_HOST},{host}", "--firmware", TARGET,
            "--image", request.image_uri, "--task-queue", task_queue,
        )  # fmt: skip
    assert isinstance(cause, ApplicationError) and cause.type == "DPUsNotInDPF", cause
    assert f"DPF has no DPU object of {removed} of host {host}" in cause.message, cause.message
    assert cause.message.endswith(
        f"Left behind: staged on {host}-dpu-0, {removed} ({TARGET} held by each DPU's BMC, not running: "
        "it activates at the host's next power cycle, whoever causes it)"
    ), cause.message
    assert sim.power_log(host) == []  # nothing rebooted, as it says
    assert planned.status == 0, planned.stdout + planned.stderr
    said = f"left out (1): DPF has no DPU {removed} (removed, or never provisioned): "
    assert said in planned.stdout and f"`metalflow host provision {host}`): {host}\n" in planned.stdout, (
        planned.stdout
    )
    assert f"canary (1): {FIRST_HOST}\n" in planned.stdout, planned.stdout
