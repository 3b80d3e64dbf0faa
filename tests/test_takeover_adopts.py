"""Issue 40 (an independent attack): `temporal workflow terminate -w host/HOST` while its operation
runs, as an operator runs the CLI against a real Temporal, the product's worker and the simulated
site. README, "When a host's entity was terminated by hand". The pure rules:
tests/fast/test_takeover_adopts_rules.py.

- The terminated entity's operation keeps running (its children are abandoned). Before: `host
  status` said only "was terminated", `host list` omitted the host, and the next request started a
  new, idle entity that ran a second operation on the host (`host reboot` while the reset still
  ran), while `host abort`/`retry` said "no operation in flight". Now the new entity adopts it.
- A reboot cancelled with its terminated entity, failing with the host OFF, is recorded by the
  next entity (adopted while it still runs; found closed when it ended first:
  tests/fast/test_takeover_adopts_rules.py), and the OFF mark names it. Before: nothing said OFF.
- An operation terminated by hand while no entity ran (its entity terminated first) whose reboot
  left the host OFF: the next entity reads its reboots and the OFF mark names it. Before:
  `left_off_by ""` although the BMC said Off.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from cli_support import Result, metalflow, shown_state
from host_operation_support import reset_by_hand, worker_for
from module_site_support import ModuleSite
from sim_support import RunningSim, sim_http
from temporalio.testing import WorkflowEnvironment

from contracts import names
from contracts.models.host import HostWorkflowInput, OperationPolicy
from metalflow.hosts import ensure_entity
from metalflow.operation_progress import operation_progress

# Profile powercycle (host 1): a reset's ForceOff is its own; no-powercycle (host 2): a reboot is
# ForceOff, then On.
# adopt-007: no-powercycle too (the site's rotation: hosts 2, 7, ...), for a reprovision's reboot;
# adopt-012 (no-powercycle) for a `reset --host` whose reboot is ForceOff, then On.
RESET_HOST, REBOOT_HOST, CUT_HOST, RESET_AGAIN = "adopt-001", "adopt-002", "adopt-007", "adopt-012"
SITE = ModuleSite("adopt", hosts=12, for_metalflow=True, timing={"dpu_boot_seconds": 0.2})
sim = SITE.fixtures()[0]
POLICY = OperationPolicy(power_down_wait_seconds=1.0, power_on_retry_seconds=(0.5, 1.0))


def _fault(sim: RunningSim, bmc: str, fault: str) -> None:
    """`metalflow sim fault bmc BMC FAULT` (the endpoint it posts to)."""
    sim_http().post(f"{sim.url}/sim/faults/bmcs/{bmc}/{fault}").raise_for_status()


async def _cli(env: WorkflowEnvironment, *args: str) -> Result:
    return await metalflow(env, *args, site_file=SITE.site_file)


async def _asked(env: WorkflowEnvironment, task_queue: str, by: str, *args: str) -> Result:
    done = await _cli(env, *args, "--by", by, "--task-queue", task_queue)
    assert done.status == 0, done.stdout + done.stderr
    return done


async def _until(env: WorkflowEnvironment, host: str, done: Any, what: str, seconds: float = 20) -> Any:
    shown: Any = None
    for _ in range(int(seconds / 0.2)):
        try:
            shown = await shown_state(env, host)
        except Exception as err:  # noqa: BLE001 - a new entity starting: ask again
            shown = err
        else:
            if done(shown):
                return shown
        await asyncio.sleep(0.2)
    raise AssertionError(f"{host} never {what}: {shown}")


async def _reboot_says_off(env: WorkflowEnvironment, workflow_id: str, host: str) -> None:
    for _ in range(100):
        seen = await operation_progress(env.client, workflow_id, host)
        if seen is not None and seen.phase == "manual-intervention-required":
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{workflow_id} never handed the host over")


async def test_a_new_entity_adopts_the_reset_its_terminated_predecessor_left_running(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    host, env = RESET_HOST, local_env
    reset = names.host_operation_workflow_id("reset", host)
    _fault(sim, host, "rotate-after-forceoff")  # the On after the reset's ForceOff is refused
    try:
        async with worker_for(env.client, task_queue, sim):
            await ensure_entity(env.client, HostWorkflowInput(host_id=host, policy=POLICY), task_queue)
            await _asked(env, task_queue, "alice", "host", "reset", host, "--both")
            await _reboot_says_off(env, reset, host)  # manual-intervention-required, the host OFF
            await env.client.get_workflow_handle(names.host_workflow_id(host)).terminate(
                "as an operator might"
            )

            status = await _cli(env, "host", "status", host)
            assert "was terminated" in status.stderr, status.stderr
            # Issue 40 (B2'): before, "(manual-intervention-required) still runs", no word of the power.
            waits = f"{reset} (manual-intervention-required: the host {host} is OFF by its hand and it waits"
            assert f"its operation {waits}" in status.stderr, status.stderr
            assert f"`metalflow host retry {host}` powers it on) still runs" in status.stderr
            orphan = await _cli(env, "host", "list", "--json")  # before: the host was left out
            row = next(r for r in json.loads(orphan.stdout) if r["host"] == host)
            assert row["phase"] == "no entity" and row["operation"]["workflow_id"] == reset, row
            # Issue 38: the phase the column prints is one `--phase` takes (it was refused, exit 2).
            only = await _cli(env, "host", "list", "--json", "--phase", "no", "entity")
            assert only.status == 0, only.stderr
            rows = json.loads(only.stdout)
            assert host in [r["host"] for r in rows] and {r["phase"] for r in rows} == {"no entity"}, rows

            # The next request starts a new entity, which adopts the reset: refused, naming it.
            # Before: accepted, reboot/adopt-001/generation-1 started beside the running reset.
            refused = await _cli(env, "host", "reboot", host, "--by", "bob", "--task-queue", task_queue)
            assert refused.status != 0, refused.stdout
            assert f"busy: reset is in flight (workflow {reset}, requested by alice)" in refused.stderr
            assert not await _runs(env, names.host_reboot_workflow_id(host, 1))
            shown = (await shown_state(env, host))["host"]
            assert shown["current"]["workflow_id"] == reset and shown["current"]["outcome"] == "running"
            assert f"adopted {reset}, still running" in shown["taken_over"], shown
            listed = await _cli(env, "host", "list", "--json")
            row = next(r for r in json.loads(listed.stdout) if r["host"] == host)
            assert row["phase"] == "running reset" and row["operation"]["workflow_id"] == reset, row

            _fault(sim, host, "clear")  # the secrets store caught up: `host retry` reaches the reset
            retried = await _asked(env, task_queue, "bob", "host", "retry", host)
            assert f"{host}: {reset}: " in retried.stdout, retried.stdout
            idle = await _until(env, host, lambda s: s["host"]["current"] is None, "ended the reset")
        ended = idle["host"]
        last = ended["recent"][-1]
        assert last["workflow_id"] == reset and last["outcome"].endswith("the host is on"), last
        assert ended["left_off_by"] == "" and ended["taken_over"] == "", ended  # the take-over is past
    finally:
        _fault(sim, host, "clear")
        await reset_by_hand(sim, host, "On")


async def test_a_reboot_that_ended_off_after_its_entity_was_terminated_is_the_off_mark(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    host, env = REBOOT_HOST, local_env
    reboot = names.host_reboot_workflow_id(host, 1)
    _fault(sim, host, "rotate-after-forceoff")
    try:
        async with worker_for(env.client, task_queue, sim):
            await ensure_entity(env.client, HostWorkflowInput(host_id=host, policy=POLICY), task_queue)
            await _asked(env, task_queue, "alice", "host", "reboot", host)
            await _reboot_says_off(env, reboot, host)
            # The reboot is cancelled with its entity; its On is refused again: it ends OFF.
            await env.client.get_workflow_handle(names.host_workflow_id(host)).terminate(
                "as an operator might"
            )
            await _closed(env, reboot)
            # No entity runs: `host status` says the mark the next entity takes (before: only
            # "was terminated", nothing of OFF, until a request started an entity).
            status = await _cli(env, "host", "status", host)
            assert status.status == 1 and "was terminated" in status.stderr, status.stderr
            assert f"the host {host} may be OFF as {reboot} left it: power it on" in status.stderr
            # The dead entity's last view shows the reboot in flight: `host abort` answered it
            # (closed) with Temporal's raw NOT_FOUND. Now it starts the entity, which records
            # the reboot's end, and says nothing is in flight.
            aborted = await _cli(env, "host", "abort", host, "--by", "dave", "--task-queue", task_queue)
            assert aborted.status == 1, aborted.stdout + aborted.stderr
            assert "NOT_FOUND" not in aborted.stderr, aborted.stderr
            assert f"no operation in flight on {host}" in aborted.stderr, aborted.stderr
            entity = await env.client.get_workflow_handle(names.host_workflow_id(host)).describe()
            assert entity.close_time is None, entity.status  # started again
            await _asked(env, task_queue, "carol", "host", "maintenance", host, "on", "--reason", "look")
            idle = await _until(env, host, lambda s: s["host"]["current"] is None, "recorded the reboot")
            text = await _cli(env, "host", "status", host)
        shown = idle["host"]
        assert shown["left_off_by"] == reboot, shown  # before: "" (nothing said the host is OFF)
        assert shown["recent"][-1]["workflow_id"] == reboot and "is OFF" in shown["recent"][-1]["outcome"]
        assert f"WARNING          the host is OFF as far as {reboot} knows" in text.stdout, text.stdout

        # The idle entity holding the mark is terminated: `host list` still lists the host, as
        # `host status` says it (before: it dropped out of the list and of `--phase "no entity"`).
        await env.client.get_workflow_handle(names.host_workflow_id(host)).terminate("as an operator might")
        for _ in range(50):  # visibility lists the closed run a moment after the terminate
            listed = await _cli(env, "host", "list", "--json", "--phase", "no", "entity")
            rows = [r for r in json.loads(listed.stdout) if r["host"] == host]
            if rows:
                break
            await asyncio.sleep(0.2)
        assert rows and rows[0]["phase"] == "no entity" and rows[0]["left_off_by"] == reboot, listed.stdout
        assert rows[0]["operation"] is None, rows
        table = await _cli(env, "host", "list")
        row = next(line for line in table.stdout.splitlines() if line.startswith(f"{host} "))
        assert " no entity (host may be OFF) " in row, table.stdout
        assert "(host may be OFF) with no entity running" in table.stderr, table.stderr
        status = await _cli(env, "host", "status", host)
        assert f"the host {host} may be OFF as {reboot} left it" in status.stderr, status.stderr
    finally:
        _fault(sim, host, "clear")
        await reset_by_hand(sim, host, "On")


async def test_an_operation_terminated_while_no_entity_ran_whose_reboot_left_the_host_off_is_the_mark(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    """The re-attack (B2): a reprovision waiting for a person with the host OFF (its reboot's On
    refused: the BMC's password rotated right after ForceOff), `temporal workflow terminate` of
    `host/HOST`, then of the reprovision; the next request starts a new entity."""
    host, env = CUT_HOST, local_env
    reprovision = names.host_operation_workflow_id("reprovision", host)
    _fault(sim, host, "rotate-after-forceoff")
    try:
        async with worker_for(env.client, task_queue, sim):
            await ensure_entity(env.client, HostWorkflowInput(host_id=host, policy=POLICY), task_queue)
            await _asked(env, task_queue, "alice", "host", "reprovision", host)
            await _reboot_says_off(env, reprovision, host)
            for cut in (names.host_workflow_id(host), reprovision):
                await env.client.get_workflow_handle(cut).terminate("as an operator might")
            await _asked(env, task_queue, "carol", "host", "maintenance", host, "on", "--reason", "look")
            idle = await _until(env, host, lambda s: s["host"]["maintenance"] is not None, "took the request")
            text = await _cli(env, "host", "status", host)
        shown = idle["host"]
        assert shown["left_off_by"] == reprovision, shown  # before: "" although the BMC said Off
        last = shown["recent"][-1]
        assert last["workflow_id"] == reprovision, last
        assert last["outcome"].startswith("terminated after its reboot reboot/adopt-007/generation-1 "), last
        assert f"WARNING          the host is OFF as far as {reprovision} knows" in text.stdout, text.stdout
        assert sim.power_log(host)[-1]["to"] == "Off"  # as the mark says
    finally:
        _fault(sim, host, "clear")
        await reset_by_hand(sim, host, "On")


async def test_a_later_run_of_the_same_reset_that_completed_after_its_entity_was_terminated_clears_the_mark(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    """Re-attack (issue 40, item 1 of the last stop): `reset/HOST` terminated waiting for a
    person with the host OFF (the mark names it); `metalflow bmc power HOST on`; `host reset HOST
    --host` again (the same workflow id); `host/HOST` terminated in its reboot's power-down wait;
    the reset completes, the host On. Before: `host status` said the host "may be OFF as
    reset/HOST left it" (the older run's mark: the completed run's result, its boot generation,
    was not read), while the next entity cleared it."""
    host, env = RESET_AGAIN, local_env
    reset = names.host_operation_workflow_id("reset", host)
    _fault(sim, host, "rotate-after-forceoff")  # the On after its reboot's ForceOff is refused
    try:
        async with worker_for(env.client, task_queue, sim):
            await ensure_entity(env.client, HostWorkflowInput(host_id=host, policy=POLICY), task_queue)
            await _asked(env, task_queue, "alice", "host", "reset", host, "--host")
            await _reboot_says_off(env, reset, host)
            await env.client.get_workflow_handle(reset).terminate("as an operator might")
            marked = await _until(env, host, lambda s: s["host"]["current"] is None, "recorded the reset")
            assert marked["host"]["left_off_by"] == reset, marked["host"]
            _fault(sim, host, "clear")
            on = await _cli(env, "bmc", "power", host, "on", "--settle", "0")  # the WARNING's advice
            assert on.status == 0, on.stdout + on.stderr
            # ... clears the mark at once (no power watch here); before: only at the next reading On
            await _until(env, host, lambda s: s["host"]["left_off_by"] == "", "cleared the mark", seconds=5)
            seen = len(sim.power_log(host))
            await _asked(env, task_queue, "bob", "host", "reset", host, "--host", "--power-down-wait", "3")
            for _ in range(100):  # its reboot turned the host off and waits to turn it on
                if any(e["to"] == "Off" for e in sim.power_log(host)[seen:]):
                    break
                await asyncio.sleep(0.1)
            assert sim.power_log(host)[-1]["to"] == "Off", sim.power_log(host)[seen:]
            await env.client.get_workflow_handle(names.host_workflow_id(host)).terminate(
                "as an operator might"
            )
            await _closed(env, reset)
            assert (await env.client.get_workflow_handle(reset).describe()).status.name == "COMPLETED"
            assert sim.power_log(host)[-1]["to"] == "On"
            status = await _cli(env, "host", "status", host)
            assert status.status == 1 and "was terminated" in status.stderr, status.stderr
            assert "may be OFF" not in status.stderr, status.stderr  # before: "as reset/HOST left it"
            # The next entity takes over as the status said: no mark.
            await _asked(env, task_queue, "carol", "host", "maintenance", host, "on", "--reason", "look")
            shown = await _until(env, host, lambda s: s["host"]["maintenance"] is not None, "took it")
        assert shown["host"]["left_off_by"] == "" and shown["host"]["boot_generation"] == 1, shown["host"]
    finally:
        _fault(sim, host, "clear")
        await reset_by_hand(sim, host, "On")


async def _runs(env: WorkflowEnvironment, workflow_id: str) -> bool:
    try:
        await env.client.get_workflow_handle(workflow_id).describe()
    except Exception:  # noqa: BLE001 - no such workflow
        return False
    return True


async def _closed(env: WorkflowEnvironment, workflow_id: str) -> None:
    for _ in range(100):
        described = await env.client.get_workflow_handle(workflow_id).describe()
        if described.close_time is not None:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{workflow_id} never closed")


async def test_a_request_awaiting_approval_outlives_its_entitys_terminate(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    """Re-attack item 2: a reprovision awaiting approval (an assigned host) vanished with its
    entity's terminate: `approve` started a new entity that answered "nothing awaits approval",
    and nothing recorded the request. Now the new entity holds it awaiting: `approve` starts it."""
    host, env = "adopt-003", local_env
    async with worker_for(env.client, task_queue, sim):
        await ensure_entity(env.client, HostWorkflowInput(host_id=host, policy=POLICY), task_queue)
        await _asked(env, task_queue, "alice", "host", "assign", host, "inst-1")
        held = await _asked(env, task_queue, "alice", "host", "reprovision", host)
        assert "awaits approval" in held.stdout, held.stdout
        await env.client.get_workflow_handle(names.host_workflow_id(host)).terminate("as an operator might")
        approved = await _asked(env, task_queue, "carol", "approve", host)
        assert f"started reprovision/{host}" in approved.stdout, approved.stdout
        shown = (await shown_state(env, host))["host"]
        # Approved: no longer "still awaiting approval" (before: the line said so while it ran).
        assert (
            "reprovision requested by alice, awaiting approval then: approved by carol" in shown["taken_over"]
        )
        idle = await _until(env, host, lambda s: s["host"]["current"] is None, "ended the reprovision", 30)
    last = idle["host"]["recent"][-1]
    assert last["workflow_id"] == f"reprovision/{host}" and last["requested_by"] == "alice", last
    assert last["approved_by"] == "carol", last


async def test_a_request_awaiting_approval_is_withdrawn_at_the_first_abort_after_its_entitys_terminate(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    """Task B4: `host reboot` of an assigned host awaits approval; its entity is terminated. Before:
    `host status` (no entity) said nothing of the request; the first `host abort` answered "no
    operation in flight ... and no request awaits approval: nothing to abort" (exit 1) while the
    new entity still took it over, and after the second abort withdrew it the "taken over" line
    still said "still awaiting approval". Now the first abort withdraws it, once the new entity
    took it over, and the line says it was withdrawn."""
    host, env = "adopt-004", local_env
    async with worker_for(env.client, task_queue, sim):
        await ensure_entity(env.client, HostWorkflowInput(host_id=host, policy=POLICY), task_queue)
        await _asked(env, task_queue, "alice", "host", "assign", host, "t3")
        held = await _asked(env, task_queue, "alice", "host", "reboot", host, "--reason", "kernel")
        assert "awaits approval" in held.stdout, held.stdout
        await env.client.get_workflow_handle(names.host_workflow_id(host)).terminate("as an operator might")
        status = await _cli(env, "host", "status", host)
        assert status.status == 1 and "was terminated" in status.stderr, status.stderr
        assert "(reboot requested by alice: kernel) awaits approval" in status.stderr, status.stderr
        aborted = await _cli(env, "host", "abort", host, "--json", "--by", "bob", "--task-queue", task_queue)
        assert aborted.status == 0, aborted.stdout + aborted.stderr
        answer = json.loads(aborted.stdout)
        assert answer["accepted"] and "withdrawn by bob" in answer["message"], answer
        shown = (await shown_state(env, host))["host"]
    assert shown["current"] is None, shown
    assert shown["recent"][-1]["outcome"].startswith("withdrawn by bob"), shown["recent"][-1]
    assert "reboot requested by alice, awaiting approval then: withdrawn by bob" in shown["taken_over"], shown
    assert "still awaiting" not in shown["taken_over"], shown
