"""What a new site watch signals: one welcome per registration, then one signal per change of a
registered host, and nothing for the site's other hosts, however the watch was started (by the
worker or a join with the API server's resourceVersions, `ensure_site_watch`, or without them:
a fresh listing finds every host, and still only the waiters are signalled).

Before the registry, a fresh listing signalled every host of the site to its 5 guessed ids, most
of them workflows that did not exist (~50,000 signal RPCs at 10,000 hosts). The signals are
counted as the watch's Temporal client sends them (a client interceptor).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from dpf_waiter_support import record, waiting_worker
from sim_support import prefixed_sim
from site_worker_support import eventually, settings_for
from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.client import (
    Client,
    Interceptor,
    OutboundInterceptor,
    SignalWorkflowInput,
    WorkflowFailureError,
    WorkflowHandle,
)

from activities.site_watch.start import ensure_site_watch
from contracts import names, workflow_api
from contracts.models.dpf import (
    DPF_NAMESPACE,
    DPF_STATE_CHANGED_SIGNAL,
    SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS,
    SiteWatchInput,
)
from drivers.kube import load_configuration

HOSTS = [f"ss-{i:03d}" for i in range(1, 13)]


class CountSignals(Interceptor):
    """Records the workflow id of every DPF state signal the client sends."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        sent = self.sent

        class Outbound(OutboundInterceptor):
            async def signal_workflow(self, input: SignalWorkflowInput) -> None:
                if input.signal == DPF_STATE_CHANGED_SIGNAL:
                    sent.append(input.id)
                await super().signal_workflow(input)

        return Outbound(next)


async def test_a_new_watch_signals_its_waiters_and_no_other_host(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    with prefixed_sim(tmp_path, "ss", hosts=len(HOSTS), dpus_per_host=1) as sim:
        counter = CountSignals()
        counting = Client(**{**client.config(), "interceptors": [counter]})
        watch_id = names.dpf_watch_workflow_id(DPF_NAMESPACE, task_queue)
        configuration = load_configuration(settings_for(sim))

        async def waiters_signalled(changed: str, quiet: str, other: str) -> None:
            """Two waiters: each gets its welcome; a change of one's host reaches it, a change of
            a host nobody waits on reaches no one."""
            first = await record(counting, task_queue, changed)
            second = await record(counting, task_queue, quiet)
            for rec in (first, second):
                await rec.wait_for(lambda s: len(s.dpus) == 1)
            ids = (first.handle.id, second.handle.id)

            async def signalled() -> Counter[str]:
                return Counter(counter.sent)

            await eventually(signalled, lambda c: all(c[i] == 1 for i in ids))
            sim.inject(f"dpus/node-{changed}-device-{changed}-dpu-0/node-effect")
            sim.inject(f"dpus/node-{other}-device-{other}-dpu-0/node-effect")  # nobody waits on it
            await eventually(signalled, lambda c: c[ids[0]] == 2)
            await asyncio.sleep(1.0)  # time enough for a wrong signal to go out
            assert Counter(counter.sent) == {ids[0]: 2, ids[1]: 1}
            for rec in (first, second):
                await rec.stop()
            counter.sent.clear()

        async with waiting_worker(counting, task_queue, sim):
            # Started without resourceVersions: its fresh listing finds every host.
            await counting.start_workflow(
                workflow_api.SiteDPFWatchWorkflow.run,
                SiteWatchInput(namespace=DPF_NAMESPACE),
                id=watch_id,
                task_queue=task_queue,
            )
            await waiters_signalled("ss-003", "ss-007", "ss-011")
            await counting.get_workflow_handle(watch_id).terminate("the first way, counted")

            # Started as the worker (and a join) start it: from the resourceVersions now.
            assert await ensure_site_watch(counting, configuration, DPF_NAMESPACE, task_queue) == 0
            await waiters_signalled("ss-005", "ss-009", "ss-010")
            # A second ask (another worker's start) finds the watch running and starts nothing; it
            # pings the running attempt, which answers (the probe's timer is cancelled), so the
            # attempt is kept: one watch activity scheduled, not a second.
            watch = counting.get_workflow_handle(watch_id)
            await eventually(lambda: _watch_started(watch), lambda started: started)
            run = (await watch.describe()).run_id
            assert await ensure_site_watch(counting, configuration, DPF_NAMESPACE, task_queue) == 0
            assert (await watch.describe()).run_id == run
            events = await eventually(lambda: _event_types(watch), lambda e: "TIMER_CANCELED" in e)
            assert events.count("TIMER_STARTED") == 1  # one probe: the worker start's
            assert events.count("ACTIVITY_TASK_SCHEDULED") == 1
            await counting.get_workflow_handle(watch_id).terminate("test over")
        assert sim.violations() == []


async def test_a_cancelled_watch_with_the_product_heartbeat_timeout_ends_within_seconds(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """An idle watch heartbeats once per 50 s (a third of its 150 s heartbeat timeout), and a
    cancel reaches an activity only in a heartbeat's answer: the workflow's cancel answers the
    pending registry poll with `handover`, so the activity beats at once and ends, not up to an
    idle beat later."""
    with prefixed_sim(tmp_path, "sc", hosts=2, dpus_per_host=1) as sim:
        configuration = load_configuration(settings_for(sim))
        async with waiting_worker(client, task_queue, sim):
            await ensure_site_watch(
                client, configuration, DPF_NAMESPACE, task_queue, SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS
            )
            handle = client.get_workflow_handle(names.dpf_watch_workflow_id(DPF_NAMESPACE, task_queue))

            async def running() -> bool:
                pending = (await handle.describe()).raw_description.pending_activities
                return any(p.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED for p in pending)

            await eventually(running, lambda started: started)
            await asyncio.sleep(2.0)  # its first beat is out: it waits for the next idle beat
            began = time.monotonic()
            await handle.cancel()
            with pytest.raises(WorkflowFailureError):
                async with asyncio.timeout(20):
                    await handle.result()
            assert time.monotonic() - began < 20
            assert (await handle.describe()).raw_description.pending_activities == []
            scheduled = [
                e.activity_task_scheduled_event_attributes
                async for e in handle.fetch_history_events()
                if e.HasField("activity_task_scheduled_event_attributes")
            ]
            assert [s.heartbeat_timeout.ToTimedelta() for s in scheduled] == [
                timedelta(seconds=SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS)
            ]
        assert sim.violations() == []


async def _watch_started(watch: WorkflowHandle[Any, Any]) -> bool:
    pending = (await watch.describe()).raw_description.pending_activities
    return any(p.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED for p in pending)


async def _event_types(watch: WorkflowHandle[Any, Any]) -> list[str]:
    return [
        EventType.Name(e.event_type).removeprefix("EVENT_TYPE_") async for e in watch.fetch_history_events()
    ]
