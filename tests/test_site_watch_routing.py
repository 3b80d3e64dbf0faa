"""The site watch routes each change of a host to the workflows registered for that host, whatever
their ids (`activities.site_watch`, `workflows.site_watch.workflow`), end to end against the simulated
site: a workflow under an arbitrary id gets its host's changes and no other host's; a change that
lands after the join's read and before the watch has learned the registration still reaches it
(the welcome signal); a closed workflow's entry is pruned from the registry; the site watch
continues as new carrying its registry and checkpoint; a new attempt of the watch activity
resumes with the registry."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from dpf_waiter_support import (
    DPFWaitRecorder,
    activities_for,
    phases,
    record,
    registry,
    site_watch,
    waiting_worker,
)
from sim_support import RunningSim, prefixed_sim
from site_worker_support import all_workflows, eventually, settings_for
from takeover_support import sticky_timeout
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Worker

from activities.handover import WORKER_STOPPING
from activities.site_watch import SiteWatchActivities
from activities.site_watch.start import SiteWatchHandle, positions_now
from contracts import names, workflow_api
from contracts.models.dpf import DPF_NAMESPACE, DPFWaiter, SiteWatchInput, WaiterNews, WaiterPoll
from drivers.kube import Kube, load_configuration
from metalflow.runtime.worker import HEARTBEAT_THROTTLE

LEARN_DELAY = 3.0  # seconds the slowed watch takes to learn a registration


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with prefixed_sim(tmp_path_factory.mktemp("site-watch-routing-sim"), "sr", hosts=8) as running:
        yield running


def node_effect(sim: RunningSim, host: str, dpu: int = 0) -> None:
    sim.inject(f"dpus/node-{host}-device-{host}-dpu-{dpu}/node-effect")


def recover(sim: RunningSim, host: str, dpu: int = 0) -> None:
    sim.inject(f"dpus/node-{host}-device-{host}-dpu-{dpu}/recover")


def fell(host: str, dpu: int = 0) -> Any:
    return lambda s: (d := s.dpu(f"{host}-dpu-{dpu}")) is not None and d.phase == "Node Effect"


async def test_a_workflow_under_any_id_gets_the_changes_of_its_host_and_of_no_other(
    client: Client, task_queue: str, sim: RunningSim
) -> None:
    a, b = "sr-001", "sr-002"
    async with waiting_worker(client, task_queue, sim):
        first = await record(client, task_queue, a)
        second = await record(client, task_queue, b)
        for rec in (first, second):
            known = await rec.wait_for(lambda s: len(s.dpus) == 2)
            assert phases(known.state) == ["Ready", "Ready"]
        found = await eventually(lambda: registry(client, task_queue), lambda w: len(w) == 2)
        assert {(w.host_id, w.workflow_id) for w in found} == {(a, first.handle.id), (b, second.handle.id)}

        node_effect(sim, a)
        await first.wait_for(fell(a))
        recover(sim, a)
        await eventually(lambda: first.taken(), lambda t: phases(t[-1].state) == ["Ready", "Ready"])
        await asyncio.sleep(1.0)  # time enough for a wrong route to arrive
        assert {s.state.host_id for s in await second.received()} <= {b}, "a signal of another host"
        assert len(await second.taken()) == 1, "only its own read: its host did not change"
        assert {s.state.host_id for s in await first.received()} == {a}
        for rec in (first, second):
            await rec.stop()
    assert sim.violations() == []


class SlowToLearn(SiteWatchActivities):
    """The watch activity, learning a registration for `host` `LEARN_DELAY` late: a change made
    right after that join's read lands in the watch's cache, and is flushed to nobody (no waiter
    known), before the watch knows its waiter."""

    def __init__(self, kube: Kube, temporal: Client, host: str) -> None:
        super().__init__(kube, temporal)
        self.host = host
        self.learned_at: list[float] = []

    async def _ask(self, own: SiteWatchHandle, poll: WaiterPoll) -> WaiterNews:
        news = await super()._ask(own, poll)
        if any(w.host_id == self.host for w in news.waiters):
            await asyncio.sleep(LEARN_DELAY)
            self.learned_at.append(time.monotonic())
        return news


async def test_a_change_between_the_join_s_read_and_the_watch_learning_the_registration_is_not_lost(
    client: Client, task_queue: str, sim: RunningSim
) -> None:
    host, other = "sr-003", "sr-005"
    kube = Kube(settings_for(sim))
    slow = SlowToLearn(kube, client, host)
    try:
        async with waiting_worker(client, task_queue, sim, replace={"watch_site_dpf": slow.watch_site_dpf}):
            # The watch runs and flushes (it knows a waiter of another host) before the race.
            early = await record(client, task_queue, other)
            await early.wait_for(lambda s: len(s.dpus) == 2)
            watch = site_watch(client, task_queue)
            await eventually(watch.describe, lambda d: _flushed_with(d, waiters_seq=1))  # it flushes
            rec = await record(client, task_queue, host)
            read = await rec.wait_for(lambda s: len(s.dpus) == 2)
            assert phases(read.state) == ["Ready", "Ready"], "the join read before the change"
            node_effect(sim, host)  # right after the read; the watch learns the waiter seconds later
            changed_at = time.monotonic()
            assert slow.learned_at == [], "the race is not real: the watch knew the waiter before the change"
            await rec.wait_for(fell(host), timeout=30)
            assert slow.learned_at and slow.learned_at[0] > changed_at
            # Nothing was signalled before the watch knew the waiter: the change came in its welcome.
            received = await rec.received()
            assert received and fell(host)(received[0].state), received
            recover(sim, host)
            await eventually(lambda: rec.taken(), lambda t: phases(t[-1].state) == ["Ready", "Ready"])
            for r in (rec, early):
                await r.stop()
    finally:
        kube.close()
    assert sim.violations() == []


async def test_a_closed_workflow_is_pruned_from_the_registry_at_its_host_s_next_change(
    client: Client, task_queue: str, sim: RunningSim
) -> None:
    host, other = "sr-004", "sr-005"
    async with waiting_worker(client, task_queue, sim):
        closing = await record(client, task_queue, host)
        staying = await record(client, task_queue, other)
        for rec in (closing, staying):
            await rec.wait_for(lambda s: len(s.dpus) == 2)
        await eventually(lambda: registry(client, task_queue), lambda w: len(w) == 2)
        await closing.stop()  # its DPFWatch.stop does not deregister
        assert {w.workflow_id for w in await registry(client, task_queue)} == {
            closing.handle.id,
            staying.handle.id,
        }
        node_effect(sim, host)  # the watch signals the closed workflow: NotFound
        left = await eventually(lambda: registry(client, task_queue), lambda w: len(w) == 1)
        assert [(w.host_id, w.workflow_id) for w in left] == [(other, staying.handle.id)]
        recover(sim, host)
        await staying.stop()
    assert sim.violations() == []


async def test_the_site_watch_continues_as_new_with_its_registry_and_its_waiters_still_get_changes(
    client: Client, task_queue: str, sim: RunningSim
) -> None:
    host, quiet = "sr-006", "sr-007"
    configuration = load_configuration(settings_for(sim))
    watch = await client.start_workflow(
        workflow_api.SiteDPFWatchWorkflow.run,
        SiteWatchInput(
            start_from=await positions_now(configuration, DPF_NAMESPACE), history_events_per_run=100
        ),
        id=names.dpf_watch_workflow_id(DPF_NAMESPACE, task_queue),
        task_queue=task_queue,
    )
    first_run = watch.first_execution_run_id
    assert first_run is not None
    async with waiting_worker(client, task_queue, sim):
        rec = await record(client, task_queue, host)
        bystander = await record(client, task_queue, quiet)
        for r in (rec, bystander):
            await r.wait_for(lambda s: len(s.dpus) == 2)
        # Grow the watch's history past its bound: registrations of ids no workflow has.
        for i in range(12):
            ghost = DPFWaiter(host_id="sr-008", workflow_id=f"ghost-{i}-{task_queue}", run_id="none")
            await watch.signal(workflow_api.SiteDPFWatchWorkflow.dpf_waiter, ghost)
            await asyncio.sleep(0.05)
        described = await eventually(lambda: watch.describe(), lambda d: d.run_id != first_run, timeout=60)
        first_history = await client.get_workflow_handle(watch.id, run_id=first_run).fetch_history()
        assert first_history.events[-1].event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
        carried = {w.workflow_id for w in await registry(client, task_queue)}
        assert {rec.handle.id, bystander.handle.id} <= carried, carried
        # The next run's activity resumes from the carried checkpoint: it is in its input.
        assert await _scheduled_with_checkpoint(client, watch.id, described.run_id)

        signals_before = len(await bystander.received())
        node_effect(sim, host)
        await rec.wait_for(fell(host), timeout=30)
        recover(sim, host)
        await eventually(lambda: rec.taken(), lambda t: phases(t[-1].state) == ["Ready", "Ready"])
        # Resumed from the checkpoint, not listed afresh: the host that did not change got nothing.
        assert len(await bystander.received()) == signals_before
        for r in (rec, bystander):
            await r.stop()
    assert sim.violations() == []


async def _scheduled_with_checkpoint(client: Client, workflow_id: str, run_id: str) -> bool:
    from temporalio.contrib.pydantic import pydantic_data_converter

    history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            payloads = event.activity_task_scheduled_event_attributes.input.payloads
            [value] = await pydantic_data_converter.decode(payloads, [SiteWatchInput])
            return isinstance(value, SiteWatchInput) and value.resume_from is not None and not value.waiters
    return False


async def test_a_new_attempt_of_the_watch_resumes_with_the_registry(
    client: Client, task_queue: str, sim: RunningSim
) -> None:
    """The worker running the watch stops (its attempt hands over at once, as after a crash but
    quicker); the next attempt, on another worker, fetches the registry before its first flush
    and resumes from the checkpoint: the waiter gets the change made while no worker ran, the
    bystander nothing."""
    host, quiet = "sr-001", "sr-002"
    first = Worker(
        client,
        task_queue=task_queue,
        workflows=[*all_workflows(), DPFWaitRecorder],
        activities=activities_for(client, sim),
        max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
        graceful_shutdown_timeout=timedelta(hours=1),
        sticky_queue_schedule_to_start_timeout=sticky_timeout(),
    )
    running = asyncio.create_task(first.run())
    try:
        rec = await record(client, task_queue, host)
        bystander = await record(client, task_queue, quiet)
        for r in (rec, bystander):
            await r.wait_for(lambda s: len(s.dpus) == 2)
        watch = site_watch(client, task_queue)
        await eventually(lambda: watch.describe(), lambda d: _flushed_with(d, waiters_seq=2))
        signals_before = len(await bystander.received())
    finally:
        async with asyncio.timeout(120):
            await first.shutdown()
            await running
    pending = (await watch.describe()).raw_description.pending_activities
    assert [p.last_failure.application_failure_info.type for p in pending] == [WORKER_STOPPING]
    node_effect(sim, host)  # while no worker runs
    async with waiting_worker(client, task_queue, sim):
        await rec.wait_for(fell(host), timeout=60)
        assert (await watch.describe()).raw_description.pending_activities[0].attempt >= 2
        recover(sim, host)
        await eventually(lambda: rec.taken(), lambda t: phases(t[-1].state) == ["Ready", "Ready"])
        assert len(await bystander.received()) == signals_before
        for r in (rec, bystander):
            await r.stop()
    assert sim.violations() == []


def _flushed_with(description: Any, waiters_seq: int) -> bool:
    """The watch heartbeated a checkpoint of a flush that knew `waiters_seq` registrations."""
    for p in description.raw_description.pending_activities:
        if p.activity_type.name == "watch_site_dpf" and p.HasField("heartbeat_details"):
            return f'"waiters_seq":{waiters_seq}'.encode() in p.heartbeat_details.payloads[0].data
    return False
