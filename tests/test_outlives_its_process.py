"""Issue 40: what a host's entity knows outlives the process holding it (a run terminated by
hand, a monitor stopped and started again), as an operator runs the CLI against a real Temporal,
the product's worker and the simulated site (one site and worker for the module).

- `temporal workflow terminate` of `host/<id>`: the next entity takes over what its predecessor's
  memo carried (the host left OFF, the boot generation, maintenance) and says so; before, it
  started idle, generation 0, no warning, no maintenance.
- An operator's abort of the monitor's reprovision holds automation back in the entity: a monitor
  stopped and started again meets the hold, asks nothing that starts, until `host retry`; before,
  the new monitor reprovisioned the host seconds later.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httpx
from cli_support import shown_state
from host_operation_support import reset_by_hand
from module_site_support import ModuleSite
from monitor_support import status_of
from sim_support import RunningSim, sim_http
from site_worker_support import FAST_POLICY, eventually
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from contracts import names
from contracts.models.host import HostStatus, HostWorkflowInput, OperationPolicy, RebootMethod
from metalflow.hosts import ensure_entity
from metalflow.operation_progress import operation_progress

# Profile no-powercycle (the site gives it to hosts 2, 7, ...): a reboot is ForceOff, then On.
LEFT_OFF_HOST, MONITORED_HOST, CUT_HOST, CUT_REPROVISION = "out-002", "out-003", "out-007", "out-012"
SITE = ModuleSite("out", hosts=12, for_metalflow=True, timing={"dpu_boot_seconds": 0.2})
sim, queue = SITE.fixtures()
cli = SITE.cli
# The entities of the tests whose On is refused: one retry after 0.5 s, not the policy's 2 s and 4 s
# (these tests are about what the entity knows once the attempts are spent, not the backoff).
REFUSED_ON_ONCE = OperationPolicy(power_down_wait_seconds=0.0, power_on_retry_seconds=(0.5,))


async def _ok(env: WorkflowEnvironment, task_queue: str, by: str, *args: str) -> str:
    done = await cli(env, *args, "--by", by, "--task-queue", task_queue)
    assert done.status == 0, done.stdout + done.stderr
    return done.stdout


def _fault(sim: RunningSim, bmc: str, fault: str) -> None:
    """`metalflow sim fault bmc BMC FAULT` (the endpoint it posts to)."""
    sim_http().post(f"{sim.url}/sim/faults/bmcs/{bmc}/{fault}").raise_for_status()


async def _idle(env: WorkflowEnvironment, host: str) -> dict[str, Any]:
    """What `host status HOST --json` shows of the entity once no operation is in flight (read in
    this process: `cli_support.shown_state`)."""
    shown = await eventually(lambda: shown_state(env, host), lambda s: s["host"]["current"] is None)
    entity: dict[str, Any] = shown["host"]
    return entity


async def _status(entity: WorkflowHandle[Any, Any]) -> HostStatus:
    status: HostStatus = await entity.query("status", result_type=HostStatus)
    return status


async def test_a_terminated_entitys_successor_takes_over_the_host_off_generation_and_maintenance(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    """Before: the new entity started idle, generation 0, no warning, and took a reboot of a
    host in maintenance. Now it reads its predecessor's memo once and carries all three."""
    host, env = LEFT_OFF_HOST, local_env
    fast = ("--power-down-wait", "0")
    # The entity's policy (no --power-down-wait: a request's policy would replace it whole).
    await ensure_entity(env.client, HostWorkflowInput(host_id=host, policy=REFUSED_ON_ONCE), queue)
    await _ok(env, queue, "alice", "host", "reboot", host)  # generation 1
    assert (await _idle(env, host))["boot_generation"] == 1
    _fault(sim, host, "rotate-after-forceoff")  # the On after its ForceOff is refused
    try:
        await _ok(env, queue, "alice", "host", "reboot", host)
        reboot = names.host_reboot_workflow_id(host, 2)
        await eventually(
            lambda: operation_progress(env.client, reboot, host),
            lambda seen: seen is not None and "is OFF" in seen.details and seen.phase != "powering",
        )
        await _ok(env, queue, "bob", "host", "abort", host)
        before = await _idle(env, host)
    finally:
        _fault(sim, host, "clear")
    assert before["left_off_by"] == reboot, before
    await _ok(env, queue, "carol", "host", "assign", host, "tenant-3")
    await _ok(env, queue, "carol", "host", "maintenance", host, "on", "--reason", "cabling")

    await env.client.get_workflow_handle(names.host_workflow_id(host)).terminate("as an operator might")
    # The next request starts a new entity: it is decided on what the terminated one left.
    refused = await cli(env, "host", "reboot", host, *fast, "--by", "alice", "--task-queue", queue)
    assert refused.status != 0, refused.stdout
    assert "maintenance" in refused.stderr and "carol" in refused.stderr, refused.stderr
    entity = (await shown_state(env, host))["host"]  # what `host status --json` shows of it
    assert entity["boot_generation"] == 1, entity  # never back (boot_generation.py)
    assert entity["left_off_by"] == reboot, entity
    assert entity["maintenance"]["by"] == "carol" and entity["maintenance"]["reason"] == "cabling", entity
    assert entity["instance"] == "tenant-3", entity  # before: none
    assert entity["taken_over"].startswith("took over from run "), entity
    assert "(terminated at " in entity["taken_over"] and ") at " in entity["taken_over"], entity  # when
    text = await cli(env, "host", "status", host)
    assert "taken over       took over from run " in text.stdout, text.stdout
    assert f"WARNING          the host is OFF as far as {reboot} knows" in text.stdout, text.stdout
    listed = await cli(env, "host", "list")
    row = next(line for line in listed.stdout.splitlines() if line.startswith(f"{host} "))
    assert " idle (host OFF) " in row, listed.stdout
    await _ok(env, queue, "carol", "host", "maintenance", host, "off")
    await _ok(env, queue, "carol", "host", "release", host, "tenant-3")
    await reset_by_hand(sim, host, "On")
    # A later operation completes: what the takeover reported is past, and the line goes (issue 40)
    await _ok(env, queue, "alice", "host", "reboot", host, *fast)
    after = await _idle(env, host)
    assert after["recent"][-1]["outcome"] == "completed" and after["taken_over"] == "", after
    text = await cli(env, "host", "status", host)
    assert "taken over" not in text.stdout, text.stdout


async def test_an_operators_abort_of_the_monitors_reprovision_outlives_the_monitor(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    """Before: `host monitor --stop`, then start, dropped the hold-back, and the new monitor
    reprovisioned the host seconds later. Now the entity keeps the hold and refuses the new
    monitor's request naming it, until `host retry`."""
    host, env = MONITORED_HOST, local_env
    dpu, monitor_id = f"{host}-dpu-0", names.monitor_workflow_id(host)
    device = f"dpus/node-{host}-device-{dpu}"
    # Reboots by hand (never sent here): the reprovision cannot end before the abort.
    slow = FAST_POLICY.model_copy(update={"reboot_method": RebootMethod.MANUAL})
    entity = await env.client.start_workflow(
        "HostWorkflow",
        HostWorkflowInput(host_id=host, policy=slow),
        id=names.host_workflow_id(host),
        task_queue=queue,
    )
    watch = ("--reprovision-after", "1")
    await _ok(env, queue, "ops", "host", "monitor", host, *watch)
    try:
        await asyncio.sleep(1)  # the monitor's first look: the DPU Ready
        sim.inject(f"{device}/node-effect")
        first = await eventually(lambda: _status(entity), lambda s: s.current is not None, timeout=20)
        assert first.current is not None and first.current.requested_by == monitor_id
        why = "do not reprovision, debugging"
        await _ok(env, queue, "alice", "host", "abort", host, "--reason", why)
        await eventually(lambda: _status(entity), lambda s: s.current is None)
        with contextlib.suppress(httpx.HTTPStatusError):  # recreated by then: it falls again
            sim.inject(f"{device}/node-effect")
        await _ok(env, queue, "ops", "host", "monitor", host, "--stop")
        await _ok(env, queue, "ops", "host", "monitor", host, *watch)
        # The new monitor's request once its 1 s deadline passed, refused naming the hold (before:
        # accepted, and the host reprovisioned): waited for, not slept on.
        monitor = await eventually(
            lambda: status_of(env.client.get_workflow_handle(monitor_id)),
            lambda m: bool(m.requests) and "automation held back" in m.requests[-1],
            timeout=20,
        )
        held = await _status(entity)
        assert held.current is None, held.current
        assert [r.operation for r in held.recent] == ["reprovision"], held.recent
        assert held.automation_held_back is not None and held.automation_held_back.by == "alice", held
        shown = await cli(env, "host", "status", host)
        words = f"automation       automation held back by alice: {why} (since "
        assert words in shown.stdout, shown.stdout
        assert f"until metalflow host retry {host}, or an operator's own request" in shown.stdout
        assert "automation held back by alice" in monitor.requests[-1], monitor.requests  # its refusal

        # No running entity (terminated by hand): `host retry` starts one, as every request does,
        # which takes the hold over and ends it. Before: Temporal's raw NOT_FOUND, exit 1.
        await entity.terminate("as an operator might")
        entity = env.client.get_workflow_handle(names.host_workflow_id(host))
        resumed = await _ok(env, queue, "alice", "host", "retry", host, "--reason", "done")
        assert f"{host}: automation no longer held back: host retry by alice" in resumed, resumed
        again = await eventually(lambda: _status(entity), lambda s: s.current is not None, timeout=20)
        assert again.current is not None and again.current.requested_by == monitor_id
    finally:
        with contextlib.suppress(RPCError):
            await env.client.get_workflow_handle(f"reprovision/{host}").terminate("test over")
        await cli(env, "host", "monitor", host, "--stop", "--task-queue", queue)
        with contextlib.suppress(httpx.HTTPStatusError):
            sim.inject(f"{device}/recover")
        await entity.terminate("test over")


async def test_a_reboot_terminated_while_the_host_is_off_leaves_it_marked_off(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    """Before: `temporal workflow terminate` of a reboot in manual-intervention-required (the
    host OFF by its hand) left the entity idle, `left_off_by` empty, no WARNING. Now its last
    Phase is read and the host is marked OFF as a run that ended saying so."""
    host, env = CUT_HOST, local_env
    # The entity's policy (no --power-down-wait: a request's policy would replace it whole).
    await ensure_entity(env.client, HostWorkflowInput(host_id=host, policy=REFUSED_ON_ONCE), queue)
    await _ok(env, queue, "alice", "host", "reboot", host)  # reaches its generation: not OFF
    assert (await _idle(env, host))["left_off_by"] == ""
    _fault(sim, host, "rotate-after-forceoff")  # the On after its ForceOff is refused
    try:
        await _ok(env, queue, "alice", "host", "reboot", host)
        reboot = (await shown_state(env, host))["host"]["current"]["workflow_id"]
        await eventually(
            lambda: operation_progress(env.client, reboot, host),
            lambda seen: seen is not None and seen.phase == "manual-intervention-required",
        )
        await env.client.get_workflow_handle(reboot).terminate("as an operator might")
        after = await _idle(env, host)
    finally:
        _fault(sim, host, "clear")
    assert after["left_off_by"] == reboot, after
    assert after["recent"][-1]["outcome"].startswith("terminated while the host was OFF"), after["recent"]
    text = await cli(env, "host", "status", host)
    assert f"WARNING          the host is OFF as far as {reboot} knows" in text.stdout, text.stdout
    await reset_by_hand(sim, host, "On")


async def test_a_reprovision_terminated_while_its_reboot_left_the_host_off_leaves_it_marked_off(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    """Before: `temporal workflow terminate` of a reprovision waiting for a person because its
    reboot left the host OFF (the password rotated after the ForceOff) left the entity idle,
    `left_off_by` empty, no WARNING: only a reboot's or reset's own Phase was read. Its reboot
    child had already ended (it escalates: failed `BMCRebootFailed`, saying the host is OFF), so
    the terminate's parent-close policy reaches nothing; the entity reads that child's end."""
    host, env = CUT_REPROVISION, local_env
    await ensure_entity(env.client, HostWorkflowInput(host_id=host, policy=REFUSED_ON_ONCE), queue)
    _fault(sim, host, "rotate-after-forceoff")  # the On after its ForceOff is refused
    try:
        await _ok(env, queue, "alice", "host", "reprovision", host)
        cut = (await shown_state(env, host))["host"]["current"]["workflow_id"]
        await eventually(
            lambda: operation_progress(env.client, cut, host),
            lambda seen: seen is not None and seen.phase == "manual-intervention-required",
            timeout=45,
        )
        reboot = env.client.get_workflow_handle(names.host_reboot_workflow_id(host, 1))
        assert (await reboot.describe()).status == WorkflowExecutionStatus.FAILED  # it escalated
        await env.client.get_workflow_handle(cut).terminate("as an operator might")
        after = await _idle(env, host)
    finally:
        _fault(sim, host, "clear")
    assert after["left_off_by"] == cut, after
    outcome = after["recent"][-1]["outcome"]
    assert outcome.startswith(f"terminated after its reboot {reboot.id} failed leaving the host OFF"), outcome
    # ... and what it had done, from its state replayed (one query): its DPUs deleted from DPF, the host
    said = outcome.split("; as the run stood when terminated: ", 1)[-1]  # before: not said at all
    assert said != outcome and f"Each DPU: {host}-dpu-0 deleted (uid " in said, outcome
    assert "The host: " in said, outcome
    text = await cli(env, "host", "status", host)
    assert f"WARNING          the host is OFF as far as {cut} knows" in text.stdout, text.stdout
    await reset_by_hand(sim, host, "On")
