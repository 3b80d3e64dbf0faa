"""The host monitor records a DPU reset it did not cause while the host is at rest (issue 25 item 5)
and tells on-call with a Kubernetes Event `UnplannedReset` (issue 27), on the simulated DPF v26,
whose DPUs show their agent's start time (simulators/dpf/BEHAVIOUR.md A3: a host power cycle
restarts the agent of every DPU where it runs; the agent's own `agentStatus.lastStartupTime`
moves, DPF's copy `agentLastStartupTime` does not outside `DPU Config`).

What each test holds: a power cycle by hand of a host at rest is recorded once per DPU in the
monitor's status and memo, carried across continue-as-new and not recorded again, and written as
a Warning Event about the host's DPUNode; a reprovision under a running monitor (its DPU's own
phases, and the restart of its Ready sibling by the reprovision's power cycle) records nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from events_support import NS, api, emitting_worker, events_v1
from host_operation_support import cycle_by_hand, save_history
from monitor_support import STOP, start_monitor, status_of
from sim_support import RunningSim, prefixed_sim
from site_worker_support import FAST_POLICY, SiteView
from site_worker_support import eventually as eventually_within
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from contracts import names
from contracts.converter import DATA_CONVERTER
from contracts.events import PhaseChange
from contracts.models.dpf import DPF_VERSION, PROVISIONING_GROUP, DPUState
from contracts.models.host import (
    POOL_LABEL,
    REQUEST_REPROVISION_UPDATE,
    HostMonitorStatus,
    HostWorkflowInput,
    MonitorPolicy,
    OperationAccepted,
    OperationRequest,
    OwnerOperationInput,
)
from contracts.with_start import execute_update
from metalflow.hosts import send_update
from metalflow.runtime.events import describe
from workflows.monitor.workflow import reset_at_rest

PREFIX = "unp"


async def eventually(probe: Any, accept: Any) -> Any:
    """`eventually` with 90 s: each record waits for the monitor's entity check (an activity),
    which the full suite's load slowed past the usual 30 s once."""
    return await eventually_within(probe, accept, timeout=90)


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with prefixed_sim(tmp_path_factory.mktemp("unplanned-sim"), PREFIX, hosts=3, dpf_version="26") as running:
        yield running


@pytest.fixture
def view(sim: RunningSim) -> Iterator[SiteView]:
    site = SiteView(sim)
    yield site
    site.close()


def unplanned_events(sim: RunningSim, host: str) -> list[dict[str, Any]]:
    return [e for e in events_v1(sim, f"regarding.name=node-{host}") if e["reason"] == "UnplannedReset"]


def started_times(sim: RunningSim, host: str) -> list[str]:
    """Each DPU's `agentStatus.lastStartupTime` (the agent's own) as the API serves it ("" when it
    has none). Not `agentLastStartupTime`: DPF copies that only in `DPU Config` (BEHAVIOUR.md A3)."""
    found = []
    for index in (0, 1):
        name = f"node-{host}-device-{host}-dpu-{index}"
        response = api(sim, "GET", f"/apis/{PROVISIONING_GROUP}/{DPF_VERSION}/namespaces/{NS}/dpus/{name}")
        response.raise_for_status()
        agent = response.json().get("status", {}).get("agentStatus") or {}
        found.append(str(agent.get("lastStartupTime", "")))
    return found


async def owner_asked(handle: WorkflowHandle[Any, Any]) -> list[tuple[str, ...]]:
    """The DPUs of each `find_host_operation` the monitor ran (its inputs in its history)."""
    asked = []
    for event in (await handle.fetch_history()).events:
        attributes = event.activity_task_scheduled_event_attributes
        if (
            event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and attributes.activity_type.name == "find_host_operation"
        ):
            (payload,) = await DATA_CONVERTER.decode(attributes.input.payloads, [OwnerOperationInput])
            asked.append(payload.dpu_ids)
    return asked


async def test_a_reset_at_rest_is_recorded_once_and_told_as_an_event(
    client: Client, task_queue: str, sim: RunningSim, view: SiteView
) -> None:
    host = f"{PREFIX}-001"
    dpus = [f"{host}-dpu-0", f"{host}-dpu-1"]
    # Few events per run: the record must survive continue-as-new, and not be made again there.
    policy = MonitorPolicy(reprovision_after_seconds=3600, events_per_run=2)
    # The simulator's initialised DPUs carry no agent start time until their first reset (one
    # whose agent ran has one): a first cycle, before the monitor, gives them one.
    await cycle_by_hand(sim, host)
    await eventually(lambda: _async(started_times(sim, host)), lambda ts: all(ts))
    async with emitting_worker(client, task_queue, sim):
        handle = await start_monitor(client, task_queue, host, policy, site="mon-site")
        await eventually(lambda: status_of(handle), lambda s: [d.phase for d in s.dpus] == ["Ready"] * 2)

        # The agent's start time has one-second resolution: a cycle within the second of the
        # first shows no restart (a clean clone on a quiet machine was that quick; a real DPU
        # boots for minutes). So the second cycle comes in a later second.
        await _after_the_second_of(max(started_times(sim, host)))
        await cycle_by_hand(sim, host)  # not by metalflow: no entity, no operation
        status = await eventually(lambda: status_of(handle), lambda s: s.unplanned_total == 2)
        assert sorted(r.dpu_id for r in status.unplanned_resets) == dpus, status.unplanned_resets
        for reset in status.unplanned_resets:
            assert reset.change.startswith("restarted (agentStatus.lastStartupTime "), reset
            assert reset.change.endswith(" in Ready") and reset.at <= datetime.now(UTC)
        memo = await (await handle.describe()).memo_value("unplanned_resets")
        assert memo == [r.line() for r in status.unplanned_resets] and all(
            "not by metalflow" in m for m in memo
        )

        told = await eventually(lambda: _async(unplanned_events(sim, host)), lambda es: len(es) >= 1)
        assert all(e["type"] == "Warning" and e["action"] == "Monitor" for e in told)
        assert all(e["regarding"]["kind"] == "DPUNode" for e in told)
        notes = " ".join(e["note"] for e in told)
        assert all(dpu in notes for dpu in dpus) and names.monitor_workflow_id(host) in notes

        # More DPF changes: the monitor continues-as-new; the reset stays recorded, once.
        sim.inject(f"dpus/node-{host}-device-{dpus[0]}/node-effect")
        await eventually(lambda: view.node_labels(host), lambda ls: ls.get(POOL_LABEL) == "out-of-pool")
        sim.inject(f"dpus/node-{host}-device-{dpus[0]}/recover")
        await eventually(lambda: view.node_labels(host), lambda ls: ls.get(POOL_LABEL) == "in-pool")
        later: HostMonitorStatus = await eventually(
            lambda: status_of(handle), lambda s: s.pool_state == "in-pool" and s.runs >= 2
        )
        assert later.unplanned_total == 2 and later.unplanned_resets == status.unplanned_resets
        # The next run starts with the memo: the Temporal UI still shows the resets.
        assert await (await handle.describe()).memo_value("unplanned_resets") == memo
        assert len(unplanned_events(sim, host)) == len(told)  # a Node Effect is no reset

        await execute_update(handle, "abort", STOP)
        await handle.result()
        await save_history(handle, "monitor_unplanned_reset")
    assert sim.violations() == []


async def test_a_reprovision_under_the_monitor_records_no_unplanned_reset(
    client: Client, task_queue: str, sim: RunningSim, view: SiteView
) -> None:
    """The reprovised DPU passes its phases again (recreated, its agent restarted by the power
    cycle in Rebooting); its Ready sibling's agent is restarted by that power cycle too: the
    monitor asks the entity, which ran the reprovision, and records nothing."""
    host = f"{PREFIX}-002"
    dpu = f"{host}-dpu-0"
    entity = HostWorkflowInput(host_id=host, site="mon-site", policy=FAST_POLICY)
    await cycle_by_hand(sim, host)  # agent start times, as in the test above
    await eventually(lambda: _async(started_times(sim, host)), lambda ts: all(ts))
    async with emitting_worker(client, task_queue, sim):
        monitor = await start_monitor(
            client, task_queue, host, MonitorPolicy(reprovision_after_seconds=3600), site="mon-site"
        )
        try:
            await eventually(lambda: status_of(monitor), lambda s: [d.phase for d in s.dpus] == ["Ready"] * 2)
            accepted = await send_update(
                client,
                entity,
                REQUEST_REPROVISION_UPDATE,
                OperationRequest(requested_by="alice", reason="BFB", dpu_ids=(dpu,)),
                OperationAccepted,
                task_queue,
            )
            await client.get_workflow_handle(accepted.workflow_id).result()
            assert view.power_cycles(host) == 2  # the one by hand, the reprovision's
            status = await eventually(
                lambda: status_of(monitor), lambda s: [d.phase for d in s.dpus] == ["Ready"] * 2
            )
            # The sibling's restart was seen and explained by the entity's reprovision; the
            # reprovisioned DPU (recreated, then never Ready before its restart) was never asked about.
            asked = await owner_asked(monitor)
            assert asked and all(dpus == (f"{host}-dpu-1",) for dpus in asked), asked
            assert status.unplanned_resets == () and status.unplanned_total == 0
            assert unplanned_events(sim, host) == []
        finally:
            await execute_update(monitor, "abort", STOP)
            await monitor.result()
            await save_history(monitor, "monitor_reprovision_not_unplanned")
            await client.get_workflow_handle(names.host_workflow_id(host)).terminate("test over")
    assert sim.violations() == []


def test_the_monitors_unplanned_reset_is_a_warning_about_the_dpunode() -> None:
    change = PhaseChange(
        workflow_id="monitor/host-h1",
        run_id="r",
        workflow_type="HostMonitorWorkflow",
        phase="unplanned-reset",
        details="DPU d0 restarted",
        at=datetime.now(UTC),
        history_length=9,
    )
    spec = describe(change, "dpf-operator-system")
    assert spec is not None
    assert (spec.reason, spec.type, spec.action) == ("UnplannedReset", "Warning", "Monitor")
    assert spec.regarding is not None and (spec.regarding.kind, spec.regarding.name) == ("DPUNode", "node-h1")
    assert spec.note == "DPU d0 restarted (monitor/host-h1)"


async def _async(value: Any) -> Any:
    return value


async def _after_the_second_of(stamp: str) -> None:
    """Wait until the clock is past the second of `stamp` (RFC 3339, whole seconds)."""
    later = datetime.fromisoformat(stamp.replace("Z", "+00:00")) + timedelta(seconds=1)
    while datetime.now(UTC) < later:
        await asyncio.sleep(0.05)


def test_only_a_ready_dpu_of_the_same_object_counts() -> None:
    """The monitor's rule on consecutive states of one DPU (uid, phase, agent start time as last
    seen): a DPU that was `Ready` and restarted or went back counts; a DPU metalflow (or DPF) is
    still moving, a recreated one, a fall to `Node Effect` (the pool's business) and an unknown
    start time do not."""

    def seen(
        before: tuple[str, str, str] | None, phase: str, started: str = "t1", uid: str = "u0"
    ) -> str | None:
        return reset_at_rest(
            before, DPUState(name="n", uid=uid, dpu_id="d0", phase=phase, agent_started_at=started)
        )

    ready = ("u0", "Ready", "t1")
    assert seen(None, "Ready") is None  # first sight
    assert seen(ready, "Ready", "t2") == "restarted (agentStatus.lastStartupTime t1 -> t2) in Ready"
    assert seen(ready, "OS Installing", "t2") == "went back from Ready to OS Installing"
    assert seen(ready, "Node Effect", "t1") is None  # flow 5: the pool's, not a reset (DPF's own move)
    restarted = "restarted (agentStatus.lastStartupTime t1 -> t2) in Node Effect"
    assert seen(ready, "Node Effect", "t2") == restarted
    assert seen(ready, "Ready", "") is None  # a state without the start time says nothing
    assert seen(ready, "Ready", "t2", uid="u1") is None  # recreated (reprovisioned): a new object
    # Not at rest: a provision's or reprovision's DPU restarted by its power cycle, or sent back.
    assert seen(("u0", "Rebooting", "t1"), "Rebooting", "t2") is None
    assert seen(("u0", "Service Readiness", "t1"), "Initializing", "t1") is None
    assert seen(("u0", "Node Effect", "t1"), "Node Effect", "t2") is None
