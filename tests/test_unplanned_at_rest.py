"""Power actions nobody here took, noticed at rest (issue 39): what the entity's power watch
(workflows/host/power_watch.py, its period 1 s here) reads besides the host's own power.

- A DPU reset by hand (the simulated DPU BMC's `reset` fault: someone's `ForceRestart` at its
  BMC, `LastResetTime` moves; simulators/redfish/BEHAVIOUR.md B9) while no operation runs: the
  watch reads each DPU BMC's reset mark and tells the reset in the entity's status, its memo and
  one `UnplannedPower` Warning Event naming the DPU. Before, nothing read a DPU BMC at rest and
  DPF's phase did not change: never told.
- A DPU reset of ours (`host reset --dpu`, through the entity): never told (the operation forgets
  the marks; its next reading is the new baseline).
- `metalflow bmc power HOST off`, then `on` (the OFF WARNING's own advice): an operator's power
  action through metalflow's own CLI is planned; the command tells the entity (signal
  `power_set`) and the watch takes it as its baseline. Before, the next reading told it as
  `unplanned power: HOST went On -> Off ... metalflow did not cause it`.
- `metalflow approve` of a request that awaited approval since before `host maintenance on`:
  refused naming the maintenance, unless `approve --in-maintenance` (recorded with the operation
  and in its `OperationStarted` Event), as any disruptive request. Before, it started.

One site and one worker (with the Event emitter) for the module (tests/module_site_support.py).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from cli_support import run_metalflow
from events_support import emitting_worker, events_v1
from host_operation_support import reset_by_hand
from module_site_support import ModuleSite
from sim_support import RunningSim, sim_http
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from contracts.host_entity import HostEntityClient
from contracts.models.host import (
    HostStatus,
    HostWorkflowInput,
    MaintenanceRequest,
    OperationPolicy,
    OperationRequest,
    ResetRequest,
    ResetTarget,
)
from contracts.workflow_api import HostWorkflow

PREFIX = f"uar{uuid.uuid4().hex[:5]}"
SITE = ModuleSite(PREFIX, hosts=7, worker=emitting_worker, timing={"dpu_boot_seconds": 0.2})
sim, queue = SITE.fixtures()
DPU_BY_HAND, DPU_OURS, APPROVED = f"{PREFIX}-001", f"{PREFIX}-002", f"{PREFIX}-003"
RESET_AFTER_OURS = f"{PREFIX}-004"  # etag-required: PowerCycle and LastResetTime
IN_MAINTENANCE = f"{PREFIX}-006"  # powercycle
BY_OUR_CLI = f"{PREFIX}-007"  # no-powercycle


def _dpu(host: str) -> str:
    return f"{host}-dpu-0"


def _unplanned_events(sim: RunningSim, host: str) -> list[str]:
    return [e["note"] for e in events_v1(sim, f"regarding.name=node-{host},reason=UnplannedPower")]


async def _dpu_reads_done(handle: WorkflowHandle[Any, Any]) -> int:
    """`read_dpu_system` activities the entity's history shows completed."""
    events = (await handle.fetch_history()).events
    reads = {
        e.event_id
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "read_dpu_system"
    }
    return sum(
        1
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
        and e.activity_task_completed_event_attributes.scheduled_event_id in reads
    )


async def _reads_after(handle: WorkflowHandle[Any, Any], more: int) -> None:
    """Until `more` DPU reads completed beyond those done now."""
    target = await _dpu_reads_done(handle) + more
    for _ in range(200):
        if await _dpu_reads_done(handle) >= target:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the power watch did not read the DPU BMC {more} more times")


async def _status(entities: HostEntityClient, host: str) -> HostStatus:
    status = await entities.status(host)
    assert status is not None
    return status


async def test_a_dpu_reset_by_hand_at_rest_is_told_once_naming_the_dpu(
    client: Client, queue: str, sim: RunningSim
) -> None:
    entities = HostEntityClient(client, queue)
    await entities.ensure(HostWorkflowInput(host_id=DPU_BY_HAND, power_watch_seconds=1.0))
    handle = entities.handle(DPU_BY_HAND)
    await _reads_after(handle, 2)  # a baseline, and a reading compared with it
    assert (await _status(entities, DPU_BY_HAND)).unplanned_power == ""
    await asyncio.sleep(1.1)  # the marks are written to the second: the reset's is a new one
    sim_http().post(f"{sim.url}/sim/faults/dpu-bmcs/{_dpu(DPU_BY_HAND)}/reset").raise_for_status()
    for _ in range(150):
        status = await _status(entities, DPU_BY_HAND)
        if status.unplanned_power:
            break
        await asyncio.sleep(0.1)
    told = status.unplanned_power
    assert f"DPU {_dpu(DPU_BY_HAND)} of {DPU_BY_HAND} was reset" in told, status
    assert "no metalflow operation running" in told and "metalflow did not cause it" in told
    assert (await (await handle.describe()).memo()).get("unplanned_power") == told
    for _ in range(100):  # the Event is written in the background
        if _unplanned_events(sim, DPU_BY_HAND):
            break
        await asyncio.sleep(0.1)
    await _reads_after(handle, 2)  # once: later readings take the new mark as the baseline
    events = _unplanned_events(sim, DPU_BY_HAND)
    assert len(events) == 1 and _dpu(DPU_BY_HAND) in events[0], events
    await handle.terminate("test done")


async def test_a_dpu_reset_of_ours_is_never_told(client: Client, queue: str, sim: RunningSim) -> None:
    entities = HostEntityClient(client, queue)
    await entities.ensure(HostWorkflowInput(host_id=DPU_OURS, power_watch_seconds=1.0))
    handle = entities.handle(DPU_OURS)
    await _reads_after(handle, 1)  # a baseline before our reset
    await asyncio.sleep(1.1)  # the marks are written to the second
    reset = ResetRequest(requested_by="test", target=ResetTarget.DPU, dpu_ids=(_dpu(DPU_OURS),))
    await entities.update(DPU_OURS, HostWorkflow.request_reset, reset)
    for _ in range(300):
        status = await _status(entities, DPU_OURS)
        if status.current is None and status.recent:
            break
        await asyncio.sleep(0.1)
    assert status.recent[-1].outcome == "completed", status
    await _reads_after(handle, 2)
    assert (await _status(entities, DPU_OURS)).unplanned_power == ""
    assert _unplanned_events(sim, DPU_OURS) == []
    await handle.terminate("test done")


async def test_an_approval_in_maintenance_of_a_request_made_before_it_needs_in_maintenance(
    local_env: WorkflowEnvironment, queue: str, sim: RunningSim
) -> None:
    on_queue = ("--task-queue", queue)
    assigned = await SITE.cli(local_env, "host", "assign", APPROVED, "inst-1", "--by", "x", *on_queue)
    assert assigned.status == 0, assigned.stderr
    asked = await SITE.cli(
        local_env, "host", "reboot", APPROVED, "--by", "carol", "--power-down-wait", "0", *on_queue
    )
    assert asked.status == 0 and "awaits approval" in asked.stdout, (asked.stdout, asked.stderr)
    held = await SITE.cli(
        local_env,
        "host",
        "maintenance",
        APPROVED,
        "on",
        "--reason",
        "replacing a fan",
        "--by",
        "alice",
        *on_queue,
    )
    assert held.status == 0, held.stderr
    assert "awaits approval and is not stopped by maintenance" in held.stdout, held.stdout
    assert f"its approval needs: metalflow approve {APPROVED} --in-maintenance" in held.stdout
    refused = await SITE.cli(local_env, "approve", APPROVED, "--by", "dave", *on_queue)
    assert refused.status != 0, refused.stdout
    assert "approval of reboot" in refused.stderr and "set by alice: replacing a fan" in refused.stderr
    assert f"metalflow approve {APPROVED} --in-maintenance" in refused.stderr, refused.stderr
    entity = HostEntityClient(local_env.client, queue)
    status = await _status(entity, APPROVED)
    assert status.current is not None and status.current.started_at is None  # still awaiting, unstarted
    started = await SITE.cli(
        local_env, "approve", APPROVED, "--by", "dave", "--in-maintenance", "--wait", *on_queue
    )
    assert started.status == 0, (started.stdout, started.stderr)
    shown = await SITE.until_idle(local_env, APPROVED)
    last = shown["recent"][-1]
    assert last["outcome"] == "completed" and "set by alice: replacing a fan" in last["in_maintenance"], last
    for _ in range(100):  # the Event is written in the background
        notes = [e["note"] for e in events_v1(sim, f"regarding.name=node-{APPROVED},reason=OperationStarted")]
        if notes:
            break
        await asyncio.sleep(0.1)
    assert any("asked with --in-maintenance while in maintenance since" in n for n in notes), notes
    await entity.handle(APPROVED).terminate("test done")


async def _until_ended(entities: HostEntityClient, host: str, runs: int) -> HostStatus:
    for _ in range(300):
        status = await _status(entities, host)
        if status.current is None and len(status.recent) >= runs:
            return status
        await asyncio.sleep(0.1)
    raise AssertionError(f"{host}: its operation did not end: {status}")


async def test_a_persons_power_action_in_maintenance_is_never_told_after_it(
    client: Client, queue: str, sim: RunningSim
) -> None:
    """The attack: maintenance on, `host reboot --in-maintenance` completed, a ForceOff by hand,
    maintenance off: the first reading after it told the person's Off as unplanned (the reboot's
    end had set its On as the baseline). An operation that ends in maintenance sets none."""
    entities = HostEntityClient(client, queue)
    host = IN_MAINTENANCE
    await entities.ensure(HostWorkflowInput(host_id=host, power_watch_seconds=1.0))
    handle = entities.handle(host)
    await _reads_after(handle, 1)
    on = MaintenanceRequest(on=True, reason="fan", requested_by="bob")
    await entities.update(host, HostWorkflow.set_maintenance, on)
    fast = OperationPolicy(power_down_wait_seconds=0)
    reboot = OperationRequest(requested_by="bob", in_maintenance=True, policy=fast)
    await entities.update(host, HostWorkflow.request_reboot, reboot)
    assert (await _until_ended(entities, host, 1)).recent[-1].outcome == "completed"
    (await reset_by_hand(sim, host, "ForceOff")).raise_for_status()
    for _ in range(100):
        if sim.power_log(host)[-1]["to"] == "Off":
            break
        await asyncio.sleep(0.1)
    off = MaintenanceRequest(on=False, requested_by="bob")
    await entities.update(host, HostWorkflow.set_maintenance, off)
    await _reads_after(handle, 2)  # the first after maintenance: the baseline; one compared with it
    assert (await _status(entities, host)).unplanned_power == ""
    assert _unplanned_events(sim, host) == []
    await handle.terminate("test done")


async def _host_reads_done(handle: WorkflowHandle[Any, Any]) -> int:
    """`read_power_state` activities the entity's history shows scheduled (the watch's own)."""
    return sum(
        1
        for e in (await handle.fetch_history()).events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "read_power_state"
    )


async def test_a_reset_by_hand_right_after_our_reboot_is_told_once(
    client: Client, queue: str, sim: RunningSim
) -> None:
    """The attack: `host reboot` on a BMC with PowerCycle completed, then a ForceRestart by hand
    (the host stays On): the baseline the reboot left had no LastResetTime, so the next reading
    compared PowerState only and never told it. The reboot's result carries the mark its last
    read showed, and the first reading after it (6 s after the entity's start: the reboot and the
    reset come before it) tells the reset, once."""
    entities = HostEntityClient(client, queue)
    host = RESET_AFTER_OURS
    await entities.ensure(HostWorkflowInput(host_id=host, power_watch_seconds=6.0))
    handle = entities.handle(host)
    reboot = OperationRequest(requested_by="alice", policy=OperationPolicy(power_down_wait_seconds=0))
    await entities.update(host, HostWorkflow.request_reboot, reboot)
    ended = await _until_ended(entities, host, 1)
    assert ended.recent[-1].outcome == "completed", ended
    await asyncio.sleep(1.1)  # LastResetTime is written to the second: the reset's is a new one
    (await reset_by_hand(sim, host, "ForceRestart")).raise_for_status()
    assert await _host_reads_done(handle) == 0, "the watch read before the reset by hand: too slow a set-up"
    for _ in range(150):
        status = await _status(entities, host)
        if status.unplanned_power:
            break
        await asyncio.sleep(0.1)
    told = status.unplanned_power
    assert f"{host} was reset (LastResetTime" in told and "no metalflow operation running" in told, status
    await _reads_after(handle, 1)  # once: the next reading takes the new mark as the baseline
    for _ in range(50):  # the Event is written in the background
        if _unplanned_events(sim, host):
            break
        await asyncio.sleep(0.1)
    events = _unplanned_events(sim, host)
    assert len(events) == 1 and "was reset" in events[0], events
    await handle.terminate("test done")


async def test_a_power_action_through_our_own_cli_is_never_unplanned(
    client: Client, queue: str, sim: RunningSim
) -> None:
    """`metalflow bmc power HOST off` then `on` at rest: each tells the entity, and the readings
    after each (two each) tell nothing. Before, the first reading after `off` said `went On -> Off`."""
    entities = HostEntityClient(client, queue)
    host = BY_OUR_CLI
    await entities.ensure(HostWorkflowInput(host_id=host, power_watch_seconds=1.0))
    handle = entities.handle(host)
    temporal = ("--address", client.service_client.config.target_host, "--namespace", client.namespace)
    for _ in range(100):  # the first reading: the baseline (On)
        if await _host_reads_done(handle) >= 1:
            break
        await asyncio.sleep(0.1)
    for action in ("off", "on"):
        run = await asyncio.to_thread(
            run_metalflow, "bmc", "power", host, action, "--site", sim.site_file, "--settle", "0", *temporal
        )
        assert run.returncode == 0 and "was not told" not in run.stderr, run.stderr
        before = await _host_reads_done(handle)
        for _ in range(100):  # two readings after the command: the one under way, then a new one
            if await _host_reads_done(handle) >= before + 2:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)  # the last reading's decision
        status = await _status(entities, host)
        assert status.unplanned_power == "", (action, status.unplanned_power)
    assert _unplanned_events(sim, host) == []
    await handle.terminate("test done")
