"""Kubernetes Events end to end: a real worker's operations on the simulated site, read back with
the real kubectl the way on-call reads them (`kubectl describe dpunode`, `kubectl get events
--field-selector reason=...`), and the emitter's promises: a repeat is a series, not a flood, and
an API that fails or hangs never slows a workflow."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from events_support import NS, emitting_worker, events_v1
from host_operation_support import FAST_POLICY, eventually
from pydantic import BaseModel
from sim_support import RunningSim, prefixed_sim
from temporalio.client import Client

from contracts import events as feed
from contracts import names
from contracts.events import PhaseChange
from contracts.models.control import OperatorAnswer, OperatorRequest
from contracts.models.host import (
    APPROVE_UPDATE,
    REQUEST_REPROVISION_UPDATE,
    HostWorkflowInput,
    OperationAccepted,
    OperationRequest,
)
from drivers.settings import Settings
from metalflow.hosts import host_status, send_update
from metalflow.runtime import events as emitting
from metalflow.runtime.events import Emitter, EventSpec, Regarding


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[RunningSim, str]]:
    prefix = f"ev{uuid.uuid4().hex[:6]}"
    with prefixed_sim(tmp_path, prefix, hosts=2) as sim:
        yield sim, prefix


def kubectl(sim: RunningSim, *args: str) -> str:
    home = sim.state_dir / "home"
    home.mkdir(exist_ok=True)  # kubectl's discovery cache
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(sim.kubeconfig), *args],
        capture_output=True, text=True, timeout=60, env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_an_operation_tells_on_call_through_kubectl(
    client: Client, task_queue: str, site: tuple[RunningSim, str]
) -> None:
    """Needs approval, started, power cycle, succeeded: on the host's DPUNode, in order, once each;
    `kubectl describe` and `kubectl get events --field-selector` show them."""
    sim, prefix = site
    host = f"{prefix}-001"
    entity = HostWorkflowInput(host_id=host, instance="i-tenant", policy=FAST_POLICY)

    async def update(name: str, request: BaseModel, result_type: type[Any]) -> Any:
        return await send_update(client, entity, name, request, result_type, task_queue)

    async with emitting_worker(client, task_queue, sim) as emitter:
        held = await update(REQUEST_REPROVISION_UPDATE, OperationRequest(requested_by="alice", reason="BFB"),
                            OperationAccepted)  # fmt: skip
        assert held.awaiting_approval
        await update(APPROVE_UPDATE, OperatorRequest(requested_by="carol"), OperatorAnswer)

        async def ended() -> bool:
            return (await host_status(client, host)).current is None and any(
                e["reason"] == "OperationSucceeded" for e in events_v1(sim, f"regarding.name=node-{host}")
            )

        await eventually(ended, timeout=90, what="the reprovision to end and its Event to be written")
        await client.get_workflow_handle(names.host_workflow_id(host)).terminate("test over")
        stats = emitter.stats

    node = json.loads(kubectl(sim, "get", "dpunode", f"node-{host}", "-n", NS, "-o", "json"))
    mine = events_v1(sim, f"regarding.name=node-{host}")
    assert [e["reason"] for e in sorted(mine, key=lambda e: e["eventTime"])] == [
        "NeedsApproval", "OperationStarted", "PowerCycleIssued", "OperationSucceeded",
    ]  # fmt: skip
    for event in mine:
        assert event["reportingController"] == "metalflow" and event["reportingInstance"].startswith(
            "metalflow-"
        )
        assert event["regarding"] == {
            "apiVersion": "provisioning.dpu.nvidia.com/v1alpha1", "kind": "DPUNode", "namespace": NS,
            "name": f"node-{host}", "uid": node["metadata"]["uid"],
        }  # fmt: skip
        assert event["type"] == "Normal" and event["action"] in ("Approve", "Reprovision", "PowerCycle")
    started = next(e for e in mine if e["reason"] == "OperationStarted")
    assert started["note"].startswith(f"reprovision (reprovision/{host}) requested by alice")
    assert stats.created >= 4 and stats.failed == 0 and stats.dropped == 0

    described = kubectl(sim, "describe", "dpunode", f"node-{host}", "-n", NS)
    lines = described[described.index("Events:") :].splitlines()
    shown = [line.split()[1] for line in lines[3:] if line.strip()]
    assert shown == ["NeedsApproval", "OperationStarted", "PowerCycleIssued", "OperationSucceeded"], described
    assert all(line.split()[3] == "metalflow" for line in lines[3:] if line.strip())  # the From column

    table = kubectl(
        sim, "get", "events", "-n", NS, "--field-selector", "reason=PowerCycleIssued"
    ).splitlines()
    assert table[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    rows = [row for row in table[1:] if f"dpunode/node-{host}" in row]
    assert len(rows) == 1 and "PowerCycleIssued" in rows[0] and f"reboot/{host}/generation-1" in rows[0]


async def test_a_repeated_event_is_one_series_not_a_flood(site: tuple[RunningSim, str]) -> None:
    """50 identical Events in a burst: one Event, its series counted to 50, a handful of writes;
    another reason (a different note) is an Event of its own."""
    sim, prefix = site
    emitter = Emitter(Settings(site_file=sim.site_file, kubeconfig=sim.kubeconfig))
    await emitter.start()
    node = Regarding("provisioning.dpu.nvidia.com/v1alpha1", "DPUNode", NS, f"node-{prefix}-002")
    stuck = EventSpec(NS, "ManualInterventionRequired", "Warning", "Reprovision", "nothing changed for 300 s",
                      node, f"{prefix}-002")  # fmt: skip
    start = datetime.now(UTC)
    for i in range(50):
        await emitter.emit(stuck, start + timedelta(seconds=i))
    await emitter.emit(_other(stuck), start)
    await emitter.stop()  # writes the count not yet patched
    assert emitter.stats.created == 2 and emitter.stats.deduplicated == 49
    assert emitter.stats.series_patched <= 3  # 50 observations, 1 create + at most a few patches
    mine = events_v1(sim, f"regarding.name=node-{prefix}-002,reason=ManualInterventionRequired")
    counts = sorted((e.get("series") or {}).get("count", 1) for e in mine)
    assert counts == [1, 50], mine
    wide = kubectl(sim, "get", "events", "-n", NS, "-o", "wide", "--field-selector",
                   f"involvedObject.name=node-{prefix}-002")  # fmt: skip
    header = wide.splitlines()[0].split()
    assert header[-2:] == ["COUNT", "NAME"]
    assert sorted(line.split()[-2] for line in wide.splitlines()[1:]) == ["1", "50"]


async def test_two_runs_of_one_operation_ending_alike_are_two_events(site: tuple[RunningSim, str]) -> None:
    """An attack saw two reprovisions of one host (one by hand, one by a campaign, a minute apart)
    end as one `OperationSucceeded` with `COUNT 2`: the same words, counted into one series. An
    operation's end (and start) is one Event per run."""
    sim, prefix = site
    emitter = Emitter(Settings(site_file=sim.site_file, kubeconfig=sim.kubeconfig))
    await emitter.start()
    host, at = f"{prefix}-003", datetime.now(UTC)
    for i, run in enumerate(("run-by-hand", "run-by-campaign")):
        await emitter.record(
            PhaseChange(
                f"reprovision/{host}",
                run,
                "HostOperationWorkflow",
                "completed",
                "completed: every DPU Ready",
                at + timedelta(seconds=60 * i),
                40,
                host,
            )  # fmt: skip
        )
    await emitter.stop()
    ended = events_v1(sim, f"regarding.name=node-{host},reason=OperationSucceeded")
    assert len(ended) == 2 and emitter.stats.deduplicated == 0, ended


def _other(spec: EventSpec) -> EventSpec:
    return EventSpec(spec.namespace, spec.reason, spec.type, spec.action, "the BMC refused the credentials",
                     spec.regarding, spec.host_id)  # fmt: skip


async def test_an_api_that_hangs_or_fails_never_slows_a_workflow(site: tuple[RunningSim, str]) -> None:
    """Writes held by the API (no answer) and then refused: handing a change over stays in the
    microseconds, the queue stays bounded (drops counted), and failed writes are counted."""
    sim, prefix = site
    emitter = Emitter(Settings(site_file=sim.site_file, kubeconfig=sim.kubeconfig))
    await emitter.start()
    sim.inject("api/hold-writes", {"next": 1000})
    try:
        changes = [
            PhaseChange(
                f"reboot/{prefix}-001/generation-{i}",
                f"run-{i}",
                "HostRebootWorkflow",
                "power-cycled",
                f"power cycle to generation {i}",
                datetime.now(UTC),
                10,
                f"{prefix}-001",
            )  # fmt: skip
            for i in range(emitting.QUEUE_SIZE + 50)
        ]
        started = time.perf_counter()
        for change in changes:
            emitter.offer(change)
        handed_over = (time.perf_counter() - started) / len(changes)
        await asyncio.sleep(0.5)
        assert handed_over < 0.001, f"{handed_over * 1e6:.0f} µs per hand-off"
        assert emitter.stats.dropped >= 49  # the queue holds QUEUE_SIZE, the rest is dropped
    finally:
        sim.inject("api/hold-writes", {"next": 0})
    sim.inject("api/outage", {"down": True})
    try:
        await eventually(_true_when(lambda: emitter.stats.failed >= 1), timeout=30, what="a failed write")
        stopping = time.perf_counter()
        await emitter.stop(grace=1.0)  # gives up on the queue: what is left is dropped
        assert time.perf_counter() - stopping < 10
    finally:
        sim.inject("api/outage", {"down": False})


def _true_when(predicate: Any) -> Any:
    async def check() -> bool:
        return bool(predicate())

    return check


def test_the_feed_is_off_on_replay_and_without_a_sink() -> None:
    """Outside a worker with an emitter the workflows' calls do nothing (a replayer, a test)."""
    feed.install(None)
    feed.workflow_phase_entered("powering", "x")  # outside a workflow, no sink: no error
    assert feed.wait_started("powering", 10.0) is None
