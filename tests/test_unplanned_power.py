"""Power actions nobody here took (issue 39 items 3-4): another actor with the host's power,
played by the simulated BMC (simulators/redfish/BEHAVIOUR.md F6, F7), is noticed and never fought.

- `power-on-during-power-down` (F6, the bare-metal manager's power manager of
  dsx-ai-factory/infra-controller#1958): the host turned On 1 s after each ForceOff took it Off.
  A reboot's ForceOff -> power-down wait -> On sends one ForceOff, says what happened and ends as
  done (the Off-On was the cycle; workflows/host_reboot/failure.py), with an `UnplannedPower`
  Warning Event on the host's DPUNode: both in `set_power`'s settle (a re-issued reboot's
  ForceOff then On) and in `power_cycle_host`'s durable power-down wait. Before, the re-issued
  reboot sent ForceOff again on every retry, and went to the manual wait.
- A ForceOff the BMC accepted twice, the host never seen Off and On again: `power_cycle_host`
  stops for a person (`PowerContested`) instead of a third ForceOff (the activity, in-process).
- `power-off-at-rest` (F7): the host turned Off while no operation runs. The entity's power watch
  (workflows/host/power_watch.py, its interval shortened to 1 s here) records it in its status, its
  memo and an `UnplannedPower` Event. Before, nothing read the host's power at rest.
- The same Off just before a reboot the entity starts (after the watch read the host On, before
  its next reading): the reboot's first read finds it Off and sends only On. Before, nobody
  compared that read with the entity's reading, and the reboot's end became the new baseline:
  never told. Now the entity's status, its memo and an `UnplannedPower` Event say it; and the
  same for an operation's reboot (`host reset --host`; a reprovision, provision and firmware run
  hand the reading the same way), which before was never handed the entity's reading.
- The same Off a moment after a reboot of ours ended: the reboot left the host On, as of its end,
  and that is the watch's baseline, so its next reading (Off) is told. Before, the first reading
  after the reboot became the baseline: an Off in between was never told.
- F6's On during a long power-down wait (300 s) that the reboot spends on its own timer: read
  every `power_down_read_seconds` (2 s here), the On ends the wait at once, decided as above.
  Before, the reboot said "Off, On in N s" until the single timer ended, 300 s later. Without
  another actor the reads say when they saw Off (`host status`), and a stop still cuts the wait.
  A re-issued reboot's ForceOff then On waits the same watched way (an On by hand after the
  ForceOff's settle); before, its wait was one timer with no read.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from events_support import emitting_worker, events_v1
from host_operation_support import FAST_POLICY, reset_by_hand, start_reboot
from sim_support import RunningSim, prefixed_sim, sim_http
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.redfish.power import PowerActivities
from contracts import names
from contracts.errors import PowerContested
from contracts.host_entity import HostEntityClient
from contracts.models.host import (
    HostRebootInput,
    HostRebootResult,
    HostWorkflowInput,
    OperationPolicy,
    OperationRequest,
    ResetRequest,
    ResetTarget,
)
from contracts.models.inventory import BMCAccess, CredentialRef
from contracts.models.redfish import PowerCycleInput, PowerCycleProgress
from contracts.workflow_api import HostWorkflow
from drivers.credentials import CredentialResolver
from drivers.redfish.client import RedfishClient
from metalflow.hosts import CANCELLED, follow_operation
from metalflow.operation_progress import operation_progress
from metalflow.progress import Progress

# Host ids of this module's own (the session's server is shared: entities, generations, leases).
HOST = "upw-002"  # DEFAULT_ROTATION[1]: `no-powercycle`, cycled by ForceOff, the wait, On
AT_REST = "upw-001"
FOUND = "upw-003"  # DEFAULT_ROTATION[2]: `task-monitor`; rebooted through its entity
FOUND_BY_RESET = "upw-004"  # DEFAULT_ROTATION[3]: `etag-required`; reset (`--host`) through its entity
AFTER_OURS = "upw-005"  # DEFAULT_ROTATION[4]: `reset-cooldown`; rebooted, then Off by hand at once
FOUND_BY_REPROVISION = "upw-006"  # DEFAULT_ROTATION[0]: `powercycle`; reprovisioned through its entity
POLICY = FAST_POLICY.model_copy(update={"power_down_wait_seconds": 5.0})  # > the 3 s hand-back


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with prefixed_sim(tmp_path_factory.mktemp("unplanned"), "upw", hosts=6, dpus_per_host=1) as sim:
        yield sim


def bmc_fault(sim: RunningSim, host: str, fault: str) -> httpx.Response:
    return sim_http().post(f"{sim.url}/sim/faults/bmcs/{host}/{fault}")


async def reboot_fought(
    client: Client,
    task_queue: str,
    sim: RunningSim,
    generation: int,
    *,
    force_off: bool,
    policy: OperationPolicy = POLICY,
    within: float = 30,
) -> tuple[HostRebootResult, list[tuple[str, str]]]:
    """Reboot HOST while F6's actor turns it On after each ForceOff: its result and power log
    (the reboot is terminated when it does not end `within` seconds)."""
    since, events_before = len(sim.power_log(HOST)), len(unplanned_events(sim))
    bmc_fault(sim, HOST, "power-on-during-power-down").raise_for_status()
    try:
        async with emitting_worker(client, task_queue, sim):
            reboot = await client.start_workflow(
                "HostRebootWorkflow",
                HostRebootInput(
                    host_id=HOST,
                    boot_generation=generation,
                    requested_by="test",
                    policy=policy,
                    force_off=force_off,
                ),
                id=f"{names.host_reboot_workflow_id(HOST, generation)}-{task_queue}",
                task_queue=task_queue,
                result_type=HostRebootResult,
            )
            # Fought, it would send ForceOff on each of 5 attempts, then wait for a person.
            result = await ended_and_told(reboot, within, sim, events_before)
    finally:
        bmc_fault(sim, HOST, "clear").raise_for_status()
    return result, [(e["from"], e["to"]) for e in sim.power_log(HOST)[since:]]


async def ended_and_told(
    reboot: WorkflowHandle[Any, HostRebootResult], within: float, sim: RunningSim, events_before: int
) -> HostRebootResult:
    """The reboot's result (terminated when it does not end `within` seconds), once the host has
    more than `events_before` `UnplannedPower` Events or 10 s went by (the Event is written in the
    background; a test that expects none asserts so)."""
    try:
        result = await asyncio.wait_for(reboot.result(), within)
    except TimeoutError:
        await reboot.terminate("test: the reboot did not end in time")
        raise
    for _ in range(100):  # the Event is written in the background
        if len(unplanned_events(sim)) > events_before:
            break
        await asyncio.sleep(0.1)
    return result


def unplanned_events(sim: RunningSim, host: str = HOST) -> list[str]:
    """The notes of the host's `UnplannedPower` Events."""
    return [e["note"] for e in events_v1(sim, f"regarding.name=node-{host},reason=UnplannedPower")]


async def test_an_on_within_the_forceoffs_settle_is_the_cycle_not_a_retry(
    client: Client, task_queue: str, site: RunningSim
) -> None:
    result, log = await reboot_fought(client, task_queue, site, 1, force_off=True)
    assert log == [("On", "Off"), ("Off", "On")], log  # one ForceOff, their On, no fight
    assert result.method == "bmc:ForceOff, On by another actor" and result.reset_types == ("ForceOff",)
    assert "turned On by someone else" in result.unplanned_power, result
    assert "counted as the power cycle of generation 1" in result.unplanned_power
    notes = unplanned_events(site)
    assert any("turned On by someone else" in note for note in notes), notes


async def test_an_on_during_the_durable_power_down_wait_is_the_cycle(
    client: Client, task_queue: str, site: RunningSim
) -> None:
    before = len(unplanned_events(site))
    result, log = await reboot_fought(client, task_queue, site, 2, force_off=False)
    assert log == [("On", "Off"), ("Off", "On")], log
    assert result.reset_types == ("ForceOff",) and result.method.endswith("On by another actor"), result
    assert "during the power-down wait" in result.unplanned_power, result
    assert len(unplanned_events(site)) > before


async def readings(handle: WorkflowHandle[Any, Any]) -> int:
    """`read_power_state` activities the workflow scheduled (one at a time)."""
    return sum(
        1
        for e in (await handle.fetch_history()).events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "read_power_state"
    )


async def readings_done(handle: WorkflowHandle[Any, Any]) -> int:
    """`read_power_state` activities the workflow's history shows completed."""
    events = (await handle.fetch_history()).events
    reads = {
        e.event_id
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "read_power_state"
    }
    return sum(
        1
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
        and e.activity_task_completed_event_attributes.scheduled_event_id in reads
    )


async def test_a_power_off_at_rest_is_recorded_as_unplanned_power(
    client: Client, task_queue: str, site: RunningSim
) -> None:
    entities = HostEntityClient(client, task_queue)
    async with emitting_worker(client, task_queue, site):
        await entities.ensure(HostWorkflowInput(host_id=AT_REST, power_watch_seconds=1.0))
        handle = entities.handle(AT_REST)
        for _ in range(200):  # a second reading scheduled: the first (the baseline) is done
            if await readings(handle) >= 2:
                break
            await asyncio.sleep(0.1)
        status = await entities.status(AT_REST)
        assert status is not None and status.unplanned_power == "", status  # nothing changed yet
        bmc_fault(site, AT_REST, "power-off-at-rest").raise_for_status()
        for _ in range(200):
            status = await entities.status(AT_REST)
            if status is not None and status.unplanned_power:
                break
            await asyncio.sleep(0.1)
        assert status is not None and f"{AT_REST} went On -> Off" in status.unplanned_power, status
        assert "no metalflow operation running" in status.unplanned_power
        memo = await (await handle.describe()).memo()
        assert memo.get("unplanned_power") == status.unplanned_power
        for _ in range(100):
            if unplanned_events(site, AT_REST):
                break
            await asyncio.sleep(0.1)
        assert any("went On -> Off" in note for note in unplanned_events(site, AT_REST))
        await handle.terminate("test done")


async def test_two_forceoffs_never_seen_off_stop_for_a_person_not_a_third(site: RunningSim) -> None:
    host = site.host(HOST)["bmc"]
    bmc = BMCAccess(bmc_id=HOST, endpoint=host["endpoint"], credentials=CredentialRef(**host["credentials"]))
    # Where a previous attempt left the cycle: two ForceOffs accepted, Off never read; the host On.
    fought = PowerCycleProgress(
        step="off_requested", method="ForceOff+On", reset_types=("ForceOff", "ForceOff"),
        steps=("off_requested", "off_requested"), started_at=datetime.now(UTC),
    )  # fmt: skip
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info, heartbeat_timeout=timedelta(seconds=1), heartbeat_details=[fought.model_dump(mode="json")]
    )
    since = len(site.power_log(HOST))
    request = PowerCycleInput(
        bmc=bmc, boot_generation=9, requested_at=datetime.now(UTC), power_down_wait_seconds=0
    )
    redfish = RedfishClient(CredentialResolver())
    try:
        with pytest.raises(ApplicationError) as caught:
            await env.run(PowerActivities(redfish).power_cycle_host, request)
    finally:
        await redfish.aclose()
    assert caught.value.type == PowerContested.__name__ and caught.value.non_retryable  # a person decides
    assert "On again after 2 ForceOffs the BMC accepted, never seen Off" in caught.value.message
    assert site.power_log(HOST)[since:] == []  # nothing sent


async def found_off_before(
    client: Client,
    task_queue: str,
    site: RunningSim,
    host: str,
    ask: Callable[[HostEntityClient], Awaitable[Any]],
) -> str:
    """Someone else turns `host` Off after its entity's power watch read it On, then `ask` has the
    entity start an operation that reboots it: what the entity shows once it ended (its status,
    the same in its memo), after checking our part of the power log (On only) and the Event."""
    entities = HostEntityClient(client, task_queue)
    async with emitting_worker(client, task_queue, site):
        # A reading every 4 s: the Off and the request both land between two readings.
        await entities.ensure(HostWorkflowInput(host_id=host, power_watch_seconds=4.0, policy=POLICY))
        handle = entities.handle(host)
        for _ in range(150):  # the first reading (the baseline: On) is done
            if await readings_done(handle) >= 1:
                break
            await asyncio.sleep(0.05)
        since = len(site.power_log(host))
        bmc_fault(site, host, "power-off-at-rest").raise_for_status()  # someone else's Off, now
        await ask(entities)
        for _ in range(600):
            status = await entities.status(host)
            if status is not None and status.current is None and status.recent:
                break
            await asyncio.sleep(0.05)
        assert status is not None and status.recent[-1].outcome == "completed", status
        # Their Off, then our On only: the reboot's first read found the host Off.
        assert [(e["from"], e["to"]) for e in site.power_log(host)[since:]] == [("On", "Off"), ("Off", "On")]
        told = status.unplanned_power
        assert f"{host} was found Off by someone else before reboot generation 1 began" in told, status
        assert "its entity read it On at" in told and "metalflow did not send that Off" in told
        assert (await (await handle.describe()).memo()).get("unplanned_power") == told
        for _ in range(100):  # the Event is written in the background
            if any("found Off by someone else" in note for note in unplanned_events(site, host)):
                break
            await asyncio.sleep(0.1)
        assert any("found Off by someone else" in note for note in unplanned_events(site, host))
        await handle.terminate("test done")
    return told


async def test_a_host_found_off_just_before_a_reboot_is_told_as_someone_elses_off(
    client: Client, task_queue: str, site: RunningSim
) -> None:
    async def reboot(entities: HostEntityClient) -> None:
        await entities.update(FOUND, HostWorkflow.request_reboot, OperationRequest(requested_by="test"))

    await found_off_before(client, task_queue, site, FOUND, reboot)


async def test_a_host_found_off_just_before_an_operations_reboot_is_told_too(
    client: Client, task_queue: str, site: RunningSim
) -> None:
    """The same Off before `host reset --host`: the entity hands its reading to the reset, which
    hands it to its reboot (as a reprovision, provision and firmware run do to their first one).
    Before, only `host reboot` was handed it: the reset's reboot sent On, and nobody was told."""

    async def reset(entities: HostEntityClient) -> None:
        request = ResetRequest(requested_by="test", target=ResetTarget.HOST, policy=POLICY)
        await entities.update(FOUND_BY_RESET, HostWorkflow.request_reset, request)

    told = await found_off_before(client, task_queue, site, FOUND_BY_RESET, reset)
    assert "no power action of metalflow since" in told, told


async def test_an_off_just_after_our_reboot_ended_is_told_not_taken_as_the_baseline(
    client: Client, task_queue: str, site: RunningSim
) -> None:
    entities = HostEntityClient(client, task_queue)
    async with emitting_worker(client, task_queue, site):
        # Readings 6 s apart: the Off lands after the reboot's end, before the next reading.
        await entities.ensure(
            HostWorkflowInput(host_id=AFTER_OURS, power_watch_seconds=6.0, policy=FAST_POLICY)
        )
        handle = entities.handle(AFTER_OURS)
        await entities.update(AFTER_OURS, HostWorkflow.request_reboot, OperationRequest(requested_by="test"))
        for _ in range(600):
            status = await entities.status(AFTER_OURS)
            if status is not None and status.current is None and status.recent:
                break
            await asyncio.sleep(0.05)
        assert status is not None and status.recent[-1].outcome == "completed", status
        for _ in range(100):  # a ForceOff by hand, now (once the host is out of its transition)
            if bmc_fault(site, AFTER_OURS, "power-off-at-rest").is_success:
                break
            await asyncio.sleep(0.05)
        for _ in range(150):
            status = await entities.status(AFTER_OURS)
            if status is not None and status.unplanned_power:
                break
            await asyncio.sleep(0.1)
        assert status is not None and f"{AFTER_OURS} went On -> Off" in status.unplanned_power, status
        assert (await (await handle.describe()).memo()).get("unplanned_power") == status.unplanned_power
        for _ in range(100):  # the Event is written in the background
            if any("went On -> Off" in note for note in unplanned_events(site, AFTER_OURS)):
                break
            await asyncio.sleep(0.1)
        assert any("went On -> Off" in note for note in unplanned_events(site, AFTER_OURS))
        await handle.terminate("test done")


async def test_a_host_found_off_just_before_a_reprovisions_reboot_is_told(
    client: Client, task_queue: str, site: RunningSim
) -> None:
    """The issue's own case: someone turned the host Off while the reprovision was about to
    reboot it. Before, the reprovision's reboot sent On, and nobody was told."""

    async def reprovision(entities: HostEntityClient) -> None:
        request = OperationRequest(requested_by="test", policy=POLICY)
        await entities.update(FOUND_BY_REPROVISION, HostWorkflow.request_reprovision, request)

    await found_off_before(client, task_queue, site, FOUND_BY_REPROVISION, reprovision)


async def test_an_on_early_in_a_long_power_down_wait_ends_it_at_its_next_read(
    client: Client, task_queue: str, site: RunningSim
) -> None:
    before = len(unplanned_events(site))
    policy = POLICY.model_copy(update={"power_down_wait_seconds": 300.0, "power_down_read_seconds": 2.0})
    result, log = await reboot_fought(client, task_queue, site, 3, force_off=False, policy=policy, within=20)
    assert log == [("On", "Off"), ("Off", "On")], log  # one ForceOff, their On; no On of ours
    assert result.reset_types == ("ForceOff",) and result.method.endswith("On by another actor"), result
    assert "s into our power-down wait of 300 s, before our On" in result.unplanned_power, result
    assert "(On (seen by our read at 20" in result.unplanned_power and "On at" not in result.unplanned_power
    assert "counted as the power cycle of generation 3" in result.unplanned_power
    assert len(unplanned_events(site)) > before
    reboot = client.get_workflow_handle(f"{names.host_reboot_workflow_id(HOST, 3)}-{task_queue}")
    assert await readings(reboot) == 1  # the cost: one read per interval, the first saw their On


async def test_a_watched_power_down_wait_says_when_it_read_off_and_a_stop_still_cuts_it(
    client: Client, task_queue: str, site: RunningSim
) -> None:
    """No other actor: the reads see Off, the details say when (what `host status` shows), and a
    stop (a cancel) between reads cuts the 300 s wait: On at once, one cycle."""
    since = len(site.power_log(HOST))
    policy = POLICY.model_copy(update={"power_down_wait_seconds": 300.0, "power_down_read_seconds": 1.0})
    async with emitting_worker(client, task_queue, site):
        reboot = await start_reboot(client, task_queue, HOST, 4, policy)
        for _ in range(150):
            if await readings(reboot) >= 2:
                break
            await asyncio.sleep(0.1)
        seen = await operation_progress(client, reboot.id, HOST)
        assert seen is not None and seen.waiting_for.startswith(f"power-down wait: {HOST} is Off since "), (
            seen
        )
        assert "; its power read every 1 s)" in seen.waiting_for
        await reboot.cancel()
        result = await asyncio.wait_for(reboot.result(), 15)
    # Attack L6: before, `bmc:ForceOff+On, cut short: On sent at once`, the cancel unsaid.
    assert result.method == "bmc:ForceOff+On (On sent by its cancel)" and result.unplanned_power == "", result
    assert result.cancelled == "cancelled in Temporal after its ForceOff; its cancel sent On", result
    assert [(e["from"], e["to"]) for e in site.power_log(HOST)[since:]] == [("On", "Off"), ("Off", "On")]
    # Attack 41b: `host reboot --wait` said `completed`, exit 0, for this cancel: it stays a cancel.
    ending, words = await follow_operation(client, reboot.id, Progress(write=lambda _: None), HOST, HOST)
    assert ending == CANCELLED, (ending, words)
    assert words.startswith("cancelled in Temporal") and "its cancel sent On" in words, words
    assert "boot_generation 4" in words, words


async def power_on_by_hand(sim: RunningSim, host_id: str) -> None:
    """Another actor: On at the host's BMC (Redfish), as a person or a power manager would."""
    (await reset_by_hand(sim, host_id, "On")).raise_for_status()


async def test_an_on_during_a_reissued_reboots_power_down_wait_ends_it_at_its_next_read(
    client: Client, task_queue: str, site: RunningSim
) -> None:
    """A re-issued reboot (`force_off`: ForceOff, the wait, On) waits as the handed-back wait does:
    read every `power_down_read_seconds`, an On by someone else well after the ForceOff's settle
    ends it at the next read, decided once (the Off-On is the cycle; no On of ours). Before, its
    wait was one timer with no read: the 300 s went by, "Off" all along."""
    before, since = len(unplanned_events(site)), len(site.power_log(HOST))
    policy = POLICY.model_copy(update={"power_down_wait_seconds": 300.0, "power_down_read_seconds": 2.0})
    async with emitting_worker(client, task_queue, site):
        reboot = await client.start_workflow(
            "HostRebootWorkflow",
            HostRebootInput(
                host_id=HOST, boot_generation=5, requested_by="test", policy=policy, force_off=True
            ),
            id=f"{names.host_reboot_workflow_id(HOST, 5)}-{task_queue}",
            task_queue=task_queue,
            result_type=HostRebootResult,
        )
        for _ in range(150):  # our ForceOff took it Off
            if [(e["from"], e["to"]) for e in site.power_log(HOST)[since:]] == [("On", "Off")]:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(4)  # past the ForceOff's settle (3 s): into the power-down wait
        await power_on_by_hand(site, HOST)
        result = await ended_and_told(reboot, 15, site, before)
    assert [(e["from"], e["to"]) for e in site.power_log(HOST)[since:]] == [("On", "Off"), ("Off", "On")]
    assert result.method == "bmc:ForceOff, On by another actor" and result.reset_types == ("ForceOff",), (
        result
    )
    assert "s into our power-down wait of 300 s, before our On" in result.unplanned_power, result
    assert "counted as the power cycle of generation 5" in result.unplanned_power
    assert len(unplanned_events(site)) > before
