"""Issue 40, Done-when: "a host is never found off after any run ends unless its status says so in
words". A run that can power the host off (reboot, reset with the host, firmware, a (re)provision's
reboot) ended by `temporal workflow terminate` while the host was Off by its hand says nothing of
the host's power (no code of the run ran after it). The entity then reads the host's power once
(README, "A run cut while the host is off"): Off -> the OFF mark naming the run, `host list`'s
`(host OFF)` and the status WARNING, as for a run that ended saying so.

B1: `host reboot --power-down-wait` on a BMC without PowerCycle, terminated after its ForceOff.
B2: `host reset --both` terminated in `resetting-dpu` (its DPU's BMC stops answering, so the phase
lasts): no reboot child is left to power the host on.
Before: idle, `warnings: []`, no `left_off_by`, `host list` `idle`; the BMC said Off.
B3: a reboot terminated after its ForceOff while its host's BMC does not answer: the read at its end
is not answered ("may be OFF"). Before, that doubt was said only inside `recent` (`host list`
`idle`, no WARNING) and lasted until the power watch's next reading at rest (600 s here); now
`idle (host may be OFF)`, a WARNING naming the run, and a re-read soon after the BMC answers again
(`power_rest.next_reading`) marks the host OFF by that run.
B2' (the entity `host/HOST` terminated while its `reset --both` waits in manual-intervention-required
with the host OFF: `host status` named the reset and not that the host is OFF) is asserted where
that case already runs: tests/test_takeover_adopts.py.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from cli_support import metalflow, shown_state
from host_operation_support import reset_by_hand, worker_for
from module_site_support import ModuleSite
from sim_support import RunningSim, sim_http
from temporalio.testing import WorkflowEnvironment

from contracts.host_entity import HostEntityClient
from contracts.models.host import HostWorkflowInput, OperationPolicy, OperationRequest
from contracts.workflow_api import HostWorkflow
from metalflow.cli.host_list import fleet
from metalflow.hosts import ensure_entity
from metalflow.operation_progress import operation_progress

# A power transition takes 1 s: the window between the host's ForceOff and its DPU's PowerCycle in
# which B2 makes the DPU's BMC unreachable (after the reset's own read of it, before its reset).
TIMING = {"dpu_boot_seconds": 0.2, "power_transition_seconds": 1.0}
SITE = ModuleSite("cutoff", hosts=7, for_metalflow=True, timing=TIMING)
sim = SITE.fixtures()[0]
RESET_HOST, REBOOT_HOST = "cutoff-001", "cutoff-002"  # -002: profile no-powercycle (ForceOff, wait, On)
UNREAD_HOST = "cutoff-007"  # no-powercycle, as -002 (-003 to -006 unused: the rotation of profiles)
POLICY = OperationPolicy(power_down_wait_seconds=1.0, power_on_retry_seconds=(0.5, 1.0))


def _fault(sim: RunningSim, bmc: str, fault: str) -> None:
    sim_http().post(f"{sim.url}/sim/faults/bmcs/{bmc}/{fault}").raise_for_status()


async def _ask(env: WorkflowEnvironment, task_queue: str, *args: str) -> None:
    await ensure_entity(env.client, HostWorkflowInput(host_id=args[2], policy=POLICY), task_queue)
    done = await metalflow(env, *args, "--by", "alice@test", "--task-queue", task_queue)
    assert done.status == 0, done.stdout + done.stderr


async def _until(
    env: WorkflowEnvironment, host: str, done: Any, what: str, tries: int = 150
) -> dict[str, Any]:
    shown: dict[str, Any] = {}
    for _ in range(tries):
        shown = await shown_state(env, host)
        if done(shown):
            return shown
        await asyncio.sleep(0.1)
    raise AssertionError(f"{host} never {what}: {shown}")


async def _until_off(sim: RunningSim, host: str) -> None:
    """Until the host's power log shows metalflow's ForceOff."""
    for _ in range(200):
        if sim.power_log(host) and sim.power_log(host)[-1]["to"] == "Off":
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{host} never Off: {sim.power_log(host)}")


async def _says_off(env: WorkflowEnvironment, host: str, run: str) -> None:
    """What every surface says once the entity recorded the cut run: the mark, the WARNING, the list."""
    shown = await _until(env, host, lambda s: s["host"]["current"] is None, "recorded the end")
    status = shown["host"]
    assert status["left_off_by"] == run, status  # before: ""
    last = status["recent"][-1]
    assert last["workflow_id"] == run and last["outcome"].startswith("terminated"), last
    assert f"the host {host} is OFF: power it on (`metalflow bmc power {host} on`)" in last["outcome"], last
    text = await metalflow(env, "host", "status", host, "--json")
    warnings = json.loads(text.stdout)["warnings"]
    assert warnings and f"is OFF as far as {run} knows" in warnings[0], warnings
    listed = await metalflow(env, "host", "list")
    row = next(line for line in listed.stdout.splitlines() if line.startswith(host))
    assert "idle (host OFF)" in row, listed.stdout


async def test_a_reboot_terminated_after_its_forceoff_leaves_the_host_marked_off(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    host, env = REBOOT_HOST, local_env
    try:
        async with worker_for(env.client, task_queue, sim):
            await _ask(env, task_queue, "host", "reboot", host, "--power-down-wait", "30")
            shown = await _until(env, host, lambda s: s["host"]["current"] is not None, "started")
            run = shown["host"]["current"]["workflow_id"]
            await _until_off(sim, host)
            await env.client.get_workflow_handle(run).terminate("as an operator might")
            await _says_off(env, host, run)
        assert sim.power_log(host)[-1]["to"] == "Off"  # as the mark says
    finally:
        await reset_by_hand(sim, host, "On")


async def test_a_full_reset_terminated_while_resetting_its_dpu_leaves_the_host_marked_off(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    host, env = RESET_HOST, local_env
    dpu = f"{host}-dpu-0"  # the site's one DPU of the host (`site_file_with_prefix`)
    try:
        async with worker_for(env.client, task_queue, sim):
            await _ask(env, task_queue, "host", "reset", host, "--both")
            shown = await _until(env, host, lambda s: s["host"]["current"] is not None, "started")
            run = shown["host"]["current"]["workflow_id"]
            await _until_off(sim, host)  # the host's ForceOff sent, settling for 1 s
            _fault(sim, dpu, "unreachable")  # its PowerCycle is retried: `resetting-dpu` lasts
            for _ in range(100):
                seen = await operation_progress(env.client, run, host)
                if seen is not None and seen.phase == "resetting-dpu":
                    break
                await asyncio.sleep(0.1)
            assert seen is not None and seen.phase == "resetting-dpu", seen
            assert sim.power_log(host)[-1]["to"] == "Off", sim.power_log(host)
            await env.client.get_workflow_handle(run).terminate("as an operator might")
            await _says_off(env, host, run)
        assert sim.power_log(host)[-1]["to"] == "Off"
    finally:
        _fault(sim, dpu, "clear")
        await reset_by_hand(sim, host, "On")


async def _phase_listed(env: WorkflowEnvironment, host: str) -> str:
    rows, _ = await fleet(env.client)  # what `host list` prints, read in this process
    return next(row.shown_phase for row in rows if row.host == host)


async def test_a_reboot_cut_while_its_bmc_does_not_answer_says_may_be_off_and_is_read_again_soon(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    host, env = UNREAD_HOST, local_env
    # The watch's period is far beyond the test: only the doubt's re-read (0.5 s, doubling) can decide.
    entity = HostWorkflowInput(host_id=host, power_watch_seconds=600, power_doubt_seconds=0.5)
    reboot = OperationRequest(
        requested_by="alice", policy=POLICY.model_copy(update={"power_down_wait_seconds": 30})
    )
    try:
        async with worker_for(env.client, task_queue, sim):
            entities = HostEntityClient(env.client, task_queue)
            await entities.ensure(entity)
            run = (await entities.update(host, HostWorkflow.request_reboot, reboot)).workflow_id
            await _until_off(sim, host)
            _fault(sim, host, "unreachable")
            await env.client.get_workflow_handle(run).terminate("as an operator might")
            shown = await _until(env, host, lambda s: s["host"]["maybe_off_after"], "recorded an unread end")
            status = shown["host"]  # before: only inside `recent`
            assert status["maybe_off_after"] == run and status["left_off_by"] == "", status
            assert f"may be OFF after {run} (its power not read" in status["recent"][-1]["outcome"], status
            assert await _phase_listed(env, host) == "idle (host may be OFF)"
            text = await metalflow(env, "host", "status", host, "--json")
            warnings = json.loads(text.stdout)["warnings"]
            said = f"the host {host} may be OFF: {run} ended without saying its power"
            assert warnings and warnings[0].startswith(said) and "metalflow reads it again at" in warnings[0]
            _fault(sim, host, "clear")  # the BMC answers again: the next re-read decides (Off)
            shown = await _until(env, host, lambda s: s["host"]["left_off_by"], "read again", tries=300)
            assert shown["host"]["left_off_by"] == run and shown["host"]["maybe_off_after"] == "", shown
            assert await _phase_listed(env, host) == "idle (host OFF)"
        assert sim.power_log(host)[-1]["to"] == "Off"
    finally:
        _fault(sim, host, "clear")
        await reset_by_hand(sim, host, "On")
