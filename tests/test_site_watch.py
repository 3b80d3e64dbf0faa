"""The site's one DPF watch (`workflows.site_watch.workflow`, `activities.site_watch`) end to end against the
simulated site: host monitors get their first state at once with nothing changing, one watch
routes changes to two hosts' registered monitors, it relists after 410, survives an API server restarted on a
renumbered store (resourceVersions going backwards) and a SIGKILLed worker, and a finished
workflow leaves no pending activity."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from host_operation_support import save_history
from monitor_support import STOP, start_monitor, status_of
from sim_support import RunningSim, prefixed_sim, sim_http
from site_worker_support import DPUNODE, SiteView, all_workflows, eventually, settings_for, site_worker
from takeover_support import sticky_timeout
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError
from temporalio.worker import Worker
from worker_support import worker_env, worker_process

from activities import build_activities
from activities.handover import WORKER_STOPPING
from contracts import names
from contracts.converter import DATA_CONVERTER
from contracts.models.dpf import DPF_NAMESPACE, SiteWatchCheckpoint
from contracts.models.host import POOL_REASON_ANNOTATION, HostMonitorResult, HostMonitorStatus, MonitorPolicy
from contracts.with_start import execute_update

POLICY = MonitorPolicy(reprovision_after_seconds=3600)
Monitor = WorkflowHandle[Any, HostMonitorResult]
# The heartbeat timeout of the watch the SIGKILLed worker starts: its takeover time.
KILL_TAKEOVER_SECONDS = 4
SITE_STREAMS = {
    "dpus.provisioning.dpu.nvidia.com": 1,
    "dpunodes.provisioning.dpu.nvidia.com": 1,
    "dpunodemaintenances.provisioning.dpu.nvidia.com": 1,
}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with prefixed_sim(tmp_path_factory.mktemp("site-watch-sim"), "sw", hosts=4) as running:
        yield running


def open_watches(sim: RunningSim, baseline: dict[str, int] | None = None) -> dict[str, int]:
    """Watch streams open now, less `baseline` (the simulator's own controllers watch the store too)."""
    response = sim_http().get(f"{sim.url}/sim/kube/watches")
    response.raise_for_status()
    found: dict[str, int] = response.json()
    base = baseline or {}
    return {k: n - base.get(k, 0) for k, n in found.items() if n - base.get(k, 0)}


def control(sim: RunningSim, path: str) -> None:
    sim_http().post(f"{sim.url}/sim/faults/{path}").raise_for_status()


def phases(status: HostMonitorStatus) -> dict[str, str]:
    return {d.dpu_id: d.phase for d in status.dpus}


async def activities_scheduled(handle: WorkflowHandle[Any, Any]) -> list[str]:
    history = await handle.fetch_history()
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


async def watch_heartbeat_timeouts(watch: WorkflowHandle[Any, Any]) -> list[timedelta]:
    """The heartbeat timeout of each `watch_site_dpf` the site's watch scheduled."""
    history = await watch.fetch_history()
    return [
        e.activity_task_scheduled_event_attributes.heartbeat_timeout.ToTimedelta()
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "watch_site_dpf"
    ]


async def signals_received(handle: WorkflowHandle[Any, Any]) -> int:
    history = await handle.fetch_history()
    return sum(1 for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED)


async def stop(handle: WorkflowHandle[Any, HostMonitorResult]) -> HostMonitorResult:
    await execute_update(handle, "abort", STOP)
    result = await handle.result()
    description = await handle.describe()
    assert description.raw_description.pending_activities == [], "a finished monitor left a pending activity"
    return result


async def test_first_state_at_once_and_one_watch_routes_changes_of_two_hosts(
    client: Client, task_queue: str, sim: RunningSim
) -> None:
    a, b = "sw-001", "sw-002"
    baseline = open_watches(sim)
    async with site_worker(client, task_queue, sim):
        first = await start_monitor(client, task_queue, a, POLICY)
        second = await start_monitor(client, task_queue, b, POLICY)
        # Nothing changes on the site: each monitor still knows its DPUs at once (from its join).
        for handle, host in ((first, a), (second, b)):
            known = await eventually(lambda h=handle: status_of(h), lambda s: len(s.dpus) == 2)  # type: ignore[misc]
            assert set(phases(known).values()) == {"Ready"}, f"{host}: {known}"
        assert open_watches(sim, baseline) == SITE_STREAMS, "one watch per kind for the site, none per host"

        sim.inject(f"dpus/node-{a}-device-{a}-dpu-0/node-effect")
        sim.inject(f"dpus/node-{b}-device-{b}-dpu-1/node-effect")
        for handle, dpu in ((first, f"{a}-dpu-0"), (second, f"{b}-dpu-1")):
            out = await eventually(lambda h=handle: status_of(h), lambda s: s.pool_state == "out-of-pool")  # type: ignore[misc]
            assert [d.dpu_id for d in out.degraded] == [dpu]
        sim.inject(f"dpus/node-{a}-device-{a}-dpu-0/recover")
        sim.inject(f"dpus/node-{b}-device-{b}-dpu-1/recover")
        for handle in (first, second):
            await eventually(lambda h=handle: status_of(h), lambda s: s.pool_state == "in-pool")  # type: ignore[misc]
            assert (await stop(handle)).pool_state == "in-pool"
            scheduled = await activities_scheduled(handle)
            assert "join_site_dpf_watch" in scheduled
        await save_history(first, "monitor_site_watch")
        watch = client.get_workflow_handle(names.dpf_watch_workflow_id(DPF_NAMESPACE, task_queue))
        assert (await watch.describe()).status is not None
        await watch.terminate("test over")
        await save_history(watch, "site_dpf_watch")
    assert sim.violations() == []


async def test_a_compacted_history_is_listed_again_and_a_restarted_api_still_routes(
    client: Client, task_queue: str, sim: RunningSim
) -> None:
    host = "sw-003"
    async with site_worker(client, task_queue, sim):
        handle = await start_monitor(client, task_queue, host, POLICY)
        await eventually(lambda: status_of(handle), lambda s: len(s.dpus) == 2)

        control(sim, "api/compact")  # every resumed watch gets 410 Gone
        sim.inject(f"dpus/node-{host}-device-{host}-dpu-0/node-effect")
        await eventually(lambda: status_of(handle), lambda s: s.pool_state == "out-of-pool")
        sim.inject(f"dpus/node-{host}-device-{host}-dpu-0/recover")
        await eventually(lambda: status_of(handle), lambda s: s.pool_state == "in-pool")

        # The API restarts on a renumbered store: every resourceVersion the monitor holds is now
        # newer than any the API will hand out for a long time. The watch's new epoch must win.
        control(sim, "api/restart")
        sim.inject(f"dpus/node-{host}-device-{host}-dpu-1/node-effect")
        out = await eventually(lambda: status_of(handle), lambda s: s.pool_state == "out-of-pool")
        assert [d.dpu_id for d in out.degraded] == [f"{host}-dpu-1"]
        sim.inject(f"dpus/node-{host}-device-{host}-dpu-1/recover")
        await eventually(lambda: status_of(handle), lambda s: s.pool_state == "in-pool")
        assert (await stop(handle)).pool_state == "in-pool"
        watch = client.get_workflow_handle(names.dpf_watch_workflow_id(DPF_NAMESPACE, task_queue))
        assert await watch.query("epoch", result_type=int) == 1
        # The joins read it from the memo (a describe), never by a query to this one workflow.
        assert await (await watch.describe()).memo_value("epoch", type_hint=int) == 1
        await watch.terminate("test over")
    assert sim.violations() == []


async def test_a_sigkilled_worker_s_watch_resumes_from_its_checkpoint(
    client: Client, task_queue: str, sim: RunningSim, tmp_path: Path
) -> None:
    """The worker process running the site's watch is SIGKILLed (no last heartbeat): the watch's
    attempt times out on its heartbeat and the next worker's attempt resumes from the checkpoint.

    The killed worker starts the watch with a heartbeat timeout of 4 s and takes over its
    workflows' tasks after 1 s (settings a site may choose: `METALFLOW_SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS`,
    `METALFLOW_WORKER_TAKEOVER_SECONDS`), not the tests' 10 s and 3 s: the takeovers this test
    waits out one after the other (the watch's attempt, then the watch's and each monitor's next
    workflow task on the dead worker's sticky queue). The next worker is one in this process: the
    resume is what is proved, not a second interpreter's start (9 s on a loaded machine)."""
    changed, quiet = "sw-004", "sw-001"
    log = tmp_path / "worker.log"
    env = worker_env(
        client,
        sim,
        METALFLOW_SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS=str(KILL_TAKEOVER_SECONDS),
        METALFLOW_WORKER_TAKEOVER_SECONDS="1",
    )
    with worker_process(task_queue, env, log) as first_worker:
        handle, bystander, watch = await monitored_and_checkpointed(client, task_queue, sim, changed, quiet)
        first_worker.kill()
    assert await watch_heartbeat_timeouts(watch) == [timedelta(seconds=KILL_TAKEOVER_SECONDS)]
    signals_before = await signals_received(bystander)
    sim.inject(f"dpus/node-{changed}-device-{changed}-dpu-0/node-effect")  # while no worker runs
    async with site_worker(client, task_queue, sim):
        out = await eventually(
            lambda: status_once_polled(handle),
            lambda s: s is not None and s.pool_state == "out-of-pool",
            timeout=90,
        )
        assert out is not None and [d.dpu_id for d in out.degraded] == [f"{changed}-dpu-0"]
        # Resumed from the checkpoint, not listed afresh: the host that did not change got no signal.
        assert await signals_received(bystander) == signals_before
        sim.inject(f"dpus/node-{changed}-device-{changed}-dpu-0/recover")
        await eventually(lambda: status_of(handle), lambda s: s.pool_state == "in-pool", timeout=60)
        for h in (handle, bystander):
            assert (await stop(h)).pool_state == "in-pool"
        await watch.terminate("test over")
    assert sim.violations() == []


async def test_a_starting_worker_takes_a_sigkilled_worker_s_watch_over_before_its_heartbeat_timeout(
    client: Client, task_queue: str, sim: RunningSim, tmp_path: Path
) -> None:
    """Issue 38: a worker killed holding the watch, restarted at once, left DPF changes waiting for
    the watch's heartbeat timeout (150 s in the product; 90 s here, so a takeover by the timeout
    cannot pass). The starting worker signals the watch, which pings its attempt, takes the silent
    one for dead after `SITE_WATCH_PROBE_SECONDS`, and starts the next at once, from the dead
    attempt's last heartbeated checkpoint."""
    changed, quiet = "sw-003", "sw-001"
    log = tmp_path / "worker.log"
    env = worker_env(client, sim, METALFLOW_SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS="90")
    with worker_process(task_queue, env, log) as first_worker:
        handle, bystander, watch = await monitored_and_checkpointed(client, task_queue, sim, changed, quiet)
        first_worker.kill()
    signals_before = await signals_received(bystander)
    sim.inject(f"dpus/node-{changed}-device-{changed}-dpu-0/node-effect")  # while no worker runs
    with worker_process(task_queue, env, log) as second_worker:
        await second_worker.polling(client)
        out = await eventually(
            lambda: status_once_polled(handle),
            lambda s: s is not None and s.pool_state == "out-of-pool",
            timeout=30,  # the heartbeat timeout would take 90 s from the last beat before the kill
        )
        assert out is not None and [d.dpu_id for d in out.degraded] == [f"{changed}-dpu-0"]
        # A new attempt (a second activity scheduled), not a retry after the timeout.
        assert (await activities_scheduled(watch)).count("watch_site_dpf") == 2
        # Resumed from the dead attempt's heartbeated checkpoint: the quiet host got no signal.
        assert await signals_received(bystander) == signals_before
        sim.inject(f"dpus/node-{changed}-device-{changed}-dpu-0/recover")
        await eventually(lambda: status_of(handle), lambda s: s.pool_state == "in-pool", timeout=60)
        for h in (handle, bystander):
            assert (await stop(h)).pool_state == "in-pool"
        await watch.terminate("test over")
    assert sim.violations() == []


async def test_a_stopping_worker_hands_its_watch_over_at_once_and_the_next_resumes_from_its_checkpoint(
    client: Client, task_queue: str, sim: RunningSim
) -> None:
    """A worker stopping gracefully (SIGTERM, a rolling deploy) does not hold the site's watch for
    its graceful shutdown timeout (an hour here): the watch's attempt ends as the shutdown begins
    (`activities.handover`), and the next worker's attempt resumes from the checkpoint."""
    changed, quiet = "sw-002", "sw-001"
    first = Worker(
        client,
        task_queue=task_queue,
        workflows=all_workflows(),
        activities=build_activities(temporal_client=client, settings=settings_for(sim)),
        graceful_shutdown_timeout=timedelta(hours=1),
        sticky_queue_schedule_to_start_timeout=sticky_timeout(),
    )
    running = asyncio.create_task(first.run())
    try:
        handle, bystander, watch = await monitored_and_checkpointed(client, task_queue, sim, changed, quiet)
    finally:
        async with asyncio.timeout(120):  # the watch would hold it for the hour
            await first.shutdown()
            await running
    pending = (await watch.describe()).raw_description.pending_activities
    assert [p.last_failure.application_failure_info.type for p in pending] == [WORKER_STOPPING]
    signals_before = await signals_received(bystander)
    sim.inject(f"dpus/node-{changed}-device-{changed}-dpu-0/node-effect")  # while no worker runs
    async with site_worker(client, task_queue, sim):
        out = await eventually(lambda: status_of(handle), lambda s: s.pool_state == "out-of-pool", timeout=90)
        assert [d.dpu_id for d in out.degraded] == [f"{changed}-dpu-0"]
        # Resumed from the checkpoint, not listed afresh: the host that did not change got no signal.
        assert await signals_received(bystander) == signals_before
        sim.inject(f"dpus/node-{changed}-device-{changed}-dpu-0/recover")
        await eventually(lambda: status_of(handle), lambda s: s.pool_state == "in-pool", timeout=60)
        for h in (handle, bystander):
            assert (await stop(h)).pool_state == "in-pool"
        await watch.terminate("test over")
    assert sim.violations() == []


async def monitored_and_checkpointed(
    client: Client, task_queue: str, sim: RunningSim, changed: str, quiet: str
) -> tuple[Monitor, Monitor, WorkflowHandle[Any, Any]]:
    """Monitors of the hosts `changed` and `quiet`, once each knows its DPUs, and the site's watch
    on `task_queue`, once it has heartbeated a checkpoint (its activity shows heartbeat details)."""
    handle = await start_monitor(client, task_queue, changed, POLICY)
    bystander = await start_monitor(client, task_queue, quiet, POLICY)
    for h in (handle, bystander):
        await eventually(lambda h=h: status_of(h), lambda s: len(s.dpus) == 2, timeout=60)  # type: ignore[misc]
    # Each monitor writes its pool label on its DPUNode once (on a fresh site: the module's first
    # test wrote them otherwise): a change of the quiet host the resumed watch would rightly signal.
    written = await eventually(lambda: _labelled_nodes(sim, (changed, quiet)), lambda rv: rv > 0, timeout=60)
    watch = client.get_workflow_handle(names.dpf_watch_workflow_id(DPF_NAMESPACE, task_queue))
    await eventually(lambda: watch.describe(), lambda d: _heartbeated(d, node_after=written), timeout=60)
    return handle, bystander, watch


async def _labelled_nodes(sim: RunningSim, hosts: tuple[str, ...]) -> int:
    """The newest resourceVersion of the hosts' DPUNodes once each has its pool label (0 before)."""
    view = SiteView(sim)
    try:
        newest = 0
        for host in hosts:
            node = await view.get(DPUNODE, f"node-{host}")
            if node is None or POOL_REASON_ANNOTATION not in (node["metadata"].get("annotations") or {}):
                return 0
            newest = max(newest, int(node["metadata"]["resourceVersion"]))
        return newest
    finally:
        view.close()


async def status_once_polled(handle: WorkflowHandle[Any, Any]) -> HostMonitorStatus | None:
    """`status_of`, or None while the next worker has not polled yet: the server refuses a query
    of a queue nobody polled lately (seen on a loaded machine)."""
    try:
        return await status_of(handle)
    except RPCError as error:
        if "no poller seen" in error.message:
            return None
        raise


def _heartbeated(description: Any, registrations: int = 2, node_after: int = 0) -> bool:
    """The watch has heartbeated a checkpoint that covers the monitors' registrations (their
    welcome signals sent) and the DPUNodes up to `node_after`: a resumed attempt then owes none of
    them a signal."""
    for pending in description.raw_description.pending_activities:
        if pending.activity_type.name == "watch_site_dpf" and pending.HasField("heartbeat_details"):
            checkpoint = DATA_CONVERTER.payload_converter.from_payload(
                pending.heartbeat_details.payloads[0], SiteWatchCheckpoint
            )
            return (
                bool(checkpoint.resource_versions)
                and checkpoint.waiters_seq >= registrations
                and checkpoint.resource_versions.get("node", 0) >= node_after
            )
    return False


async def test_twenty_monitored_hosts_under_ids_of_any_form_hold_three_watch_streams(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The figure of the issue: a per-host watcher held 3 streams and 1 activity slot per host (60
    and 20 here); 20 monitors share the site's 3 streams and hold no activity, whatever their ids
    (half under the monitor's own id form, half under ids of no operation's form)."""
    count = 20
    with prefixed_sim(tmp_path, "tw", hosts=count) as sim20:
        baseline = open_watches(sim20)
        hosts = [f"tw-{i:03d}" for i in range(1, count + 1)]
        async with site_worker(client, task_queue, sim20):
            monitors = [
                await start_monitor(
                    client,
                    task_queue,
                    h,
                    POLICY,
                    workflow_id=None if i % 2 else f"{h}-watched-by-{task_queue}",
                )
                for i, h in enumerate(hosts)
            ]
            for h in monitors:
                await eventually(lambda h=h: status_of(h), lambda s: len(s.dpus) == 2, timeout=120)  # type: ignore[misc]
            streams = open_watches(sim20, baseline)
            slots = sum([len((await h.describe()).raw_description.pending_activities) for h in monitors])
            for h in monitors:
                await stop(h)
            await client.get_workflow_handle(
                names.dpf_watch_workflow_id(DPF_NAMESPACE, task_queue)
            ).terminate()
        print(f"20 monitored hosts: watch streams {sum(streams.values())}, monitors' activity slots {slots}")
    assert streams == SITE_STREAMS and slots == 0


async def _async(value: Any) -> Any:
    return value
