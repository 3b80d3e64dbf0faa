"""HostMonitorWorkflow end to end (flow 5): the simulated DPF drops a Ready DPU to Node Effect and
back; the host leaves and rejoins the pool (label on its DPUNode, `PoolState` search attribute);
past the deadline the host's entity is asked for a reprovision, which then really runs."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import pytest
from host_operation_support import save_history
from monitor_support import STOP, start_monitor, status_of
from sim_support import RunningSim, prefixed_sim, sim_http
from site_worker_support import DPU, FAST_POLICY, SiteView, eventually, site_worker
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import CancelledError

from contracts import names
from contracts.models.host import (
    POOL_LABEL,
    HostStatus,
    HostWorkflowInput,
    MonitorPolicy,
)
from contracts.with_start import execute_update


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with prefixed_sim(tmp_path_factory.mktemp("monitor-sim"), "mon", hosts=8) as running:
        yield running


@pytest.fixture
def view(sim: RunningSim) -> Iterator[SiteView]:
    site = SiteView(sim)
    yield site
    site.close()


async def pool_attribute(handle: WorkflowHandle[Any, Any]) -> str | None:
    return (await handle.describe()).typed_search_attributes.get(names.POOL_STATE)


async def test_node_effect_takes_the_host_out_of_the_pool_and_recovery_puts_it_back(
    client: Client, task_queue: str, sim: RunningSim, view: SiteView
) -> None:
    host, dpu = "mon-001", "mon-001-dpu-0"
    # Few events per run: the monitor continues-as-new several times during the test.
    policy = MonitorPolicy(reprovision_after_seconds=3600, events_per_run=2)
    async with site_worker(client, task_queue, sim):
        handle = await start_monitor(client, task_queue, host, policy)
        await eventually(lambda: view.node_labels(host), lambda labels: labels.get(POOL_LABEL) == "in-pool")

        sim.inject(f"dpus/node-{host}-device-{dpu}/node-effect")
        labels = await eventually(
            lambda: view.node_labels(host), lambda ls: ls.get(POOL_LABEL) == "out-of-pool"
        )
        assert "critical DPU services down on " + dpu in str(await view.get_node_reason(host))
        assert await eventually(lambda: pool_attribute(handle), lambda v: v == "out-of-pool")
        degraded = await status_of(handle)
        assert [d.dpu_id for d in degraded.degraded] == [dpu] and degraded.pool_state == "out-of-pool"
        assert labels[POOL_LABEL] == "out-of-pool"
        # One time format (issue 29 item 8): `host monitor --status` shows this line as it is.
        assert re.search(r"reprovision deadline \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", degraded.waiting_for)

        sim.inject(f"dpus/node-{host}-device-{dpu}/recover")
        await eventually(lambda: view.node_labels(host), lambda ls: ls.get(POOL_LABEL) == "in-pool")
        assert await eventually(lambda: pool_attribute(handle), lambda v: v == "in-pool")
        status = await eventually(lambda: status_of(handle), lambda s: s.pool_state == "in-pool")

        assert status.runs >= 2, "the monitor continued-as-new"
        assert [c.state for c in status.history] == ["out-of-pool", "in-pool"], "history carried across runs"
        assert status.degraded == () and status.reprovisions_requested == 0

        await execute_update(handle, "abort", STOP)
        result = await handle.result()
        await save_history(handle, "monitor_recovery_last_run")
    assert result.pool_state == "in-pool" and result.runs == status.runs
    assert sim.violations() == []


async def test_an_aborted_monitor_leaves_the_pool_as_the_world_is_and_a_new_one_adopts_it(
    client: Client, task_queue: str, sim: RunningSim, view: SiteView
) -> None:
    host, dpu = "mon-002", "mon-002-dpu-1"
    policy = MonitorPolicy(reprovision_after_seconds=3600)
    async with site_worker(client, task_queue, sim):
        first = await start_monitor(client, task_queue, host, policy)
        await eventually(lambda: status_of(first), lambda s: len(s.dpus) == 2)
        sim.inject(f"dpus/node-{host}-device-{dpu}/node-effect")
        await eventually(lambda: view.node_labels(host), lambda ls: ls.get(POOL_LABEL) == "out-of-pool")
        await execute_update(first, "abort", STOP)
        stopped = await first.result()
        assert stopped.pool_state == "out-of-pool"
        assert (await view.node_labels(host))[POOL_LABEL] == "out-of-pool"  # the DPU is still down

        second = await start_monitor(client, task_queue, host, policy)
        adopted = await eventually(lambda: status_of(second), lambda s: bool(s.degraded))
        assert [d.dpu_id for d in adopted.degraded] == [dpu] and adopted.pool_state == "out-of-pool"
        sim.inject(f"dpus/node-{host}-device-{dpu}/recover")
        await eventually(lambda: view.node_labels(host), lambda ls: ls.get(POOL_LABEL) == "in-pool")
        await execute_update(second, "abort", STOP)
        assert (await second.result()).pool_state == "in-pool"


async def test_past_the_deadline_the_entity_is_asked_and_the_reprovision_really_runs(
    client: Client, task_queue: str, sim: RunningSim, view: SiteView
) -> None:
    host, dpu = "mon-003", "mon-003-dpu-1"
    dpu_name = f"node-{host}-device-{dpu}"
    before = await view.get(DPU, dpu_name)
    assert before is not None
    async with site_worker(client, task_queue, sim):
        entity = await client.start_workflow(
            "HostWorkflow",
            HostWorkflowInput(host_id=host, site="mon-site", policy=FAST_POLICY),
            id=names.host_workflow_id(host),
            task_queue=task_queue,
        )
        monitor = await start_monitor(client, task_queue, host, MonitorPolicy(reprovision_after_seconds=1.0))
        try:
            await eventually(lambda: status_of(monitor), lambda s: len(s.dpus) == 2)
            sim.inject(f"dpus/{dpu_name}/node-effect")
            await eventually(lambda: view.node_labels(host), lambda ls: ls.get(POOL_LABEL) == "out-of-pool")

            asked = await eventually(
                lambda: status_of(monitor),
                lambda s: s.reprovisions_requested == 1,
            )
            assert asked.requests[0] == f"{dpu}: accepted: {names.reprovision_workflow_id(host)}"
            entity_status = await entity.query("status", result_type=HostStatus)
            operations = [r.operation for r in ((entity_status.current,) if entity_status.current else ())]
            operations += [r.operation for r in entity_status.recent]
            assert "reprovision" in operations

            # The reprovision runs for real: the DPU is recreated, becomes Ready, the host rejoins.
            await eventually(lambda: view.node_labels(host), lambda ls: ls.get(POOL_LABEL) == "in-pool", 60)
            after = await view.get(DPU, dpu_name)
            assert after is not None and after["metadata"]["uid"] != before["metadata"]["uid"]
            assert await view.dpu_phase(host, dpu) == "Ready"
            reprovision = client.get_workflow_handle(names.reprovision_workflow_id(host))
            await reprovision.result()
            assert view.power_cycles(host) == 1
        finally:
            await execute_update(monitor, "abort", STOP)
            await monitor.result()
            await save_history(monitor, "monitor_reprovision_requested")
            await entity.terminate("test over")
    assert sim.violations() == []


async def test_an_abort_accepted_while_the_monitor_hands_over_to_its_next_run_still_stops_it(
    client: Client, task_queue: str, sim: RunningSim, view: SiteView
) -> None:
    host, dpu = "mon-004", "mon-004-dpu-0"
    policy = MonitorPolicy(reprovision_after_seconds=3600, events_per_run=1)
    async with site_worker(client, task_queue, sim):
        started = await start_monitor(client, task_queue, host, policy)
        # `started` follows the chain to its newest run; the first run is pinned by its id.
        first_run = client.get_workflow_handle(started.id, run_id=started.result_run_id)

        async def label_confirmed() -> list[Any]:
            # The run's first state (the read that joins the site watch) was handled: its label
            # write completed and the workflow task after it completed too.
            events = list((await first_run.fetch_history()).events)
            write = next(
                (
                    e.event_id
                    for e in events
                    if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                    and e.activity_task_scheduled_event_attributes.activity_type.name == "set_host_pool_state"
                ),
                None,
            )
            done = next(
                (
                    e.event_id
                    for e in events
                    if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
                    and e.activity_task_completed_event_attributes.scheduled_event_id == write
                ),
                None,
            )
            if done is None or not any(
                e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED and e.event_id > done
                for e in events
            ):
                return []
            return events

        events = await eventually(label_confirmed, bool, 60)
        # The read that joined is what the world is, not a change: one event per run does not
        # make the monitor hand over with nothing changing (it did, once a run, forever).
        assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW not in [e.event_type for e in events]

        sim.inject(f"dpus/node-{host}-device-{dpu}/node-effect")

        async def handed_over() -> bool:
            events = (await first_run.fetch_history()).events
            handed = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
            return any(e.event_type == handed for e in events)

        await eventually(handed_over, lambda handed: handed, 60)
        await execute_update(started, "abort", STOP)  # the newest run, which took over
        stopped = await asyncio.wait_for(started.result(), 60)
        await save_history(first_run, "monitor_first_run")
        await save_history(started, "monitor_last_run")
        sim.inject(f"dpus/node-{host}-device-{dpu}/recover")
    assert stopped.stopped_by == "test"
    assert stopped.pool_state == "out-of-pool" and stopped.events_seen >= 1
    assert stopped.runs == 2, "one hand-over for the one change; the second run's join was not counted"


async def test_a_cancelled_monitor_ends_cancelled_and_leaves_the_label_as_the_world_was(
    client: Client, task_queue: str, sim: RunningSim, view: SiteView
) -> None:
    host, dpu = "mon-005", "mon-005-dpu-1"
    async with site_worker(client, task_queue, sim):
        handle = await start_monitor(client, task_queue, host, MonitorPolicy(reprovision_after_seconds=3600))
        await eventually(lambda: status_of(handle), lambda s: len(s.dpus) == 2)
        sim.inject(f"dpus/node-{host}-device-{dpu}/node-effect")
        await eventually(lambda: view.node_labels(host), lambda ls: ls.get(POOL_LABEL) == "out-of-pool")
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        described = await handle.describe()
        await save_history(handle, "monitor_cancelled")
        sim.inject(f"dpus/node-{host}-device-{dpu}/recover")
    assert isinstance(failed.value.cause, CancelledError)
    assert described.typed_search_attributes.get(names.PHASE) == "cancelled"
    assert (await view.node_labels(host))[POOL_LABEL] == "out-of-pool"  # as the world was


async def test_an_abort_during_a_kubernetes_outage_cancels_the_retrying_label_write(
    client: Client, task_queue: str, sim: RunningSim, view: SiteView
) -> None:
    host, dpu = "mon-006", "mon-006-dpu-0"
    async with site_worker(client, task_queue, sim):
        handle = await start_monitor(client, task_queue, host, MonitorPolicy(reprovision_after_seconds=3600))
        await eventually(lambda: status_of(handle), lambda s: len(s.dpus) == 2)
        sim.inject("api/outage", {"down": True})  # the open watch still delivers; writes fail
        try:
            sim.inject(f"dpus/node-{host}-device-{dpu}/node-effect")

            async def label_write_retrying() -> bool:
                pending = (await handle.describe()).raw_description.pending_activities
                return any(p.activity_type.name == "set_host_pool_state" and p.attempt >= 2 for p in pending)

            await eventually(label_write_retrying, lambda retrying: retrying, 60)
            await execute_update(handle, "abort", STOP)

            async def write_cancelled() -> bool:
                events = (await handle.fetch_history()).events
                return any(
                    e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED for e in events
                )

            assert await eventually(write_cancelled, lambda cancelled: cancelled)
        finally:
            sim.inject("api/outage", {"down": False})
        stopped = await asyncio.wait_for(handle.result(), 60)
        label = (await view.node_labels(host)).get(POOL_LABEL)
        sim.inject(f"dpus/node-{host}-device-{dpu}/recover")
    # The final look, once the API is back, writes the label the world needs.
    assert stopped.stopped_by == "test" and stopped.pool_state == "out-of-pool"
    assert label == "out-of-pool"


async def test_an_abort_during_a_lasting_kubernetes_outage_stops_within_the_bound(
    client: Client, task_queue: str, sim: RunningSim, view: SiteView
) -> None:
    """The final look retries for at most `kube_call_timeout_seconds`: an abort is never stranded
    behind an outage that does not end, and the result says the label is left as last written."""
    host = "mon-007"
    policy = MonitorPolicy(reprovision_after_seconds=3600, kube_call_timeout_seconds=3)
    async with site_worker(client, task_queue, sim):
        handle = await start_monitor(client, task_queue, host, policy)
        await eventually(lambda: status_of(handle), lambda s: len(s.dpus) == 2 and s.pool_state == "in-pool")
        # The monitor has written the label once (its first look) before the API goes away.
        await eventually(lambda: view.node_labels(host), lambda labels: labels.get(POOL_LABEL) == "in-pool")
        sim.inject("api/outage", {"down": True})
        try:
            await execute_update(handle, "abort", STOP)
            stopped = await asyncio.wait_for(handle.result(), 60)
            described = await handle.describe()
        finally:
            sim.inject("api/outage", {"down": False})
    assert stopped.stopped_by == "test" and stopped.pool_state == "in-pool"
    assert (
        stopped.final_look_failed is not None
        and "the label is left as last written" in stopped.final_look_failed
    )
    assert described.typed_search_attributes.get(names.PHASE) == "stopped"
    assert (await view.node_labels(host)).get(POOL_LABEL) == "in-pool"


async def test_an_abort_while_the_label_write_hangs_waits_for_it_and_ends_with_no_call_pending(
    client: Client, task_queue: str, sim: RunningSim, view: SiteView
) -> None:
    """The API has accepted the out-of-pool write and not answered when the abort arrives: the
    monitor cancels the write and waits for it before its final look, so the two writes never
    race and the ended workflow shows no pending call (a cancel-requested activity on a closed
    workflow is what the UI showed as "Pending Activities")."""
    host, dpu = "mon-008", "mon-008-dpu-0"
    hold = f"{sim.url}/sim/faults/api/hold-writes"
    async with site_worker(client, task_queue, sim):
        handle = await start_monitor(client, task_queue, host, MonitorPolicy(reprovision_after_seconds=3600))
        await eventually(lambda: view.node_labels(host), lambda labels: labels.get(POOL_LABEL) == "in-pool")
        sim_http().post(hold, json={"next": 1}).raise_for_status()
        try:
            sim.inject(f"dpus/node-{host}-device-{dpu}/node-effect")

            async def write_held() -> bool:
                pending = (await handle.describe()).raw_description.pending_activities
                writing = any(p.activity_type.name == "set_host_pool_state" for p in pending)
                return writing and sim_http().get(hold).json()["held"] == 1

            await eventually(write_held, lambda held: held)
            await execute_update(handle, "abort", STOP)

            async def events() -> list[EventType.ValueType]:
                return [e.event_type for e in (await handle.fetch_history()).events]

            await eventually(events, lambda es: EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED in es)
            await asyncio.sleep(2)  # time enough for a final look that would not wait
            while_held = await handle.describe()
            scheduled_while_held = (await events()).count(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
        finally:
            sim_http().post(hold, json={"next": 0}).raise_for_status()
        stopped = await asyncio.wait_for(handle.result(), 60)
        ended = await handle.describe()
        history = await events()
        await save_history(handle, "monitor_abort_during_write")
        label = (await view.node_labels(host)).get(POOL_LABEL)
        sim.inject(f"dpus/node-{host}-device-{dpu}/recover")
    assert while_held.status == WorkflowExecutionStatus.RUNNING, "it waits for the write it cancelled"
    assert history.count(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED) > scheduled_while_held
    cancelled_at = history.index(EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED)
    answered = (
        EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED,
        EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
        EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED,
    )
    write_ended_at = next(i for i in range(cancelled_at, len(history)) if history[i] in answered)
    final_look_at = history.index(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, cancelled_at)
    assert write_ended_at < final_look_at, "the final look starts after the cancelled write ended"
    assert list(ended.raw_description.pending_activities) == []
    assert stopped.stopped_by == "test" and stopped.pool_state == "out-of-pool" and label == "out-of-pool"
    assert sim.violations() == []


def test_hold_writes_refuses_a_bad_count_and_changes_nothing(sim: RunningSim) -> None:
    hold = f"{sim.url}/sim/faults/api/hold-writes"
    for bad in ({"next": -1}, {"next": "2"}, {"next": True}, {"nothing": 1}):
        refused = sim_http().post(hold, json=bad)
        assert refused.status_code == 400 and "whole number" in refused.json()["error"], bad
    assert sim_http().get(hold).json() == {"held": 0, "to_hold": 0}
