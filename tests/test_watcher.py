"""The DPF watcher on a real worker, signalling a real workflow, against the simulated site:
a provisioning flow driven by the signals, changes that do not matter, dropped watches (the
`flaky` profile), an expired resourceVersion (410), the API going away, and latency."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sim_support import RunningSim, running_sim
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.testing import ActivityEnvironment
from test_dpf_activities_support import NS, Api, acked, power_cycle, settings_for
from test_watcher_support import RecorderInput, phases, recording

from activities.dpf import DPFActivities
from contracts.errors import MetalflowError
from contracts.models.dpf import (
    GroupSpec,
    HostDPFState,
    HostRef,
    RegisterHostInput,
    SiteSetupInput,
    WatchCheckpoint,
)
from drivers.inventory import Inventory
from drivers.kube import Kube

pytestmark = pytest.mark.slow

DPU0 = "node-host-001-device-host-001-dpu-0"


async def run_retrying(fn: Any, arg: Any) -> Any:
    """Run an activity, retrying its transient errors as Temporal's retry policy would."""
    for _ in range(30):
        try:
            return await ActivityEnvironment().run(fn, arg)
        except MetalflowError as err:
            if err.non_retryable:
                raise
            await asyncio.sleep(0.1)
    raise AssertionError("transient errors did not stop")


async def provision_with_signals(sim: RunningSim, client: Client, task_queue: str) -> list[HostDPFState]:
    """Flows 1-3 of host-001, each step taken when the watcher's signal says it is time."""
    settings = settings_for(sim)
    acts = DPFActivities(settings, Kube(settings))
    ref = HostRef(host_id="host-001")
    async with recording(client, task_queue, settings, RecorderInput(host_id="host-001")) as rec:
        first = await rec.wait_for(lambda s: True)
        assert first.state.sequence == 1 and first.state.node is None and first.state.dpus == ()
        await run_retrying(acts.create_site_objects, SiteSetupInput(groups=(GroupSpec(name="gpu-compute"),)))
        inventory = await Inventory(settings).resolve("host-001")
        await run_retrying(acts.register_host_dpus, RegisterHostInput(inventory=inventory))

        await rec.wait_for(
            lambda s: s.hold is not None and s.hold.holding and phases(s) == ["Node Effect"] * 2
        )
        await run_retrying(acts.release_node_effect_hold, ref)
        await rec.wait_for(
            lambda s: s.node is not None and s.node.waiting_for_reboot and phases(s) == ["Rebooting"] * 2
        )
        power_cycle(sim, "host-001")
        await run_retrying(acts.mark_dpu_node_rebooted, acked(ref))
        await rec.wait_for(lambda s: phases(s) == ["Ready", "Ready"] and all(d.ready for d in s.dpus))
        count = await rec.stop()  # the watcher is cancelled; the workflow completes
        seen = [s.state for s in await rec.signals()]
    assert count == len(seen)
    acts.kube.close()
    return seen


def assert_signals_are_changes(seen: list[HostDPFState]) -> None:
    assert [s.sequence for s in seen] == list(range(1, len(seen) + 1))
    for before, after in zip(seen, seen[1:], strict=False):
        assert before.content() != after.content(), f"signal {after.sequence} repeats {before.sequence}"


async def test_watcher_signals_drive_initial_provisioning(
    tmp_path: Path, client: Client, task_queue: str
) -> None:
    with running_sim(tmp_path / "sim", hosts=1, dpus_per_host=2) as sim:
        seen = await provision_with_signals(sim, client, task_queue)
        assert sim.violations() == []
    assert_signals_are_changes(seen)
    dpu0 = [s.dpu("host-001-dpu-0").phase for s in seen if s.dpu("host-001-dpu-0")]  # type: ignore[union-attr]
    order = [p for i, p in enumerate(dpu0) if i == 0 or dpu0[i - 1] != p]
    for expected in ("Node Effect", "Rebooting", "Ready"):
        assert expected in order
    assert order.index("Node Effect") < order.index("Rebooting") < order.index("Ready")
    holds = [s.hold.hold for s in seen if s.hold is not None]
    assert holds[0] == "true" and "false" in holds


async def test_watcher_keeps_following_through_dropped_watches(
    tmp_path: Path, client: Client, task_queue: str
) -> None:
    """`flaky`: API 503s and watch streams closed after random events; nothing is missed."""
    with running_sim(tmp_path / "sim", hosts=1, dpus_per_host=2, faults="flaky", seed=7) as sim:
        seen = await provision_with_signals(sim, client, task_queue)
        assert sim.violations() == []
    assert_signals_are_changes(seen)
    assert phases(seen[-1]) == ["Ready", "Ready"]


async def test_changes_that_do_not_matter_send_no_signal(
    tmp_path: Path, client: Client, task_queue: str
) -> None:
    with running_sim(tmp_path / "sim", hosts=1, dpus_per_host=2, initialised=True) as sim:
        api = Api(sim)
        async with recording(client, task_queue, settings_for(sim), RecorderInput(host_id="host-001")) as rec:
            first = await rec.wait_for(lambda s: phases(s) == ["Ready", "Ready"])
            rv_before = api.must("DPU", DPU0)["metadata"]["resourceVersion"]
            for i in range(10):
                api.patch(
                    "DPU", DPU0, {"metadata": {"annotations": {"ops/note": str(i)}, "labels": {"x": str(i)}}}
                )
                api.patch("DPUNode", "node-host-001", {"metadata": {"annotations": {"ops/note": str(i)}}})
            assert api.must("DPU", DPU0)["metadata"]["resourceVersion"] != rv_before
            await asyncio.sleep(1.5)  # three heartbeats of the watcher: time enough to (wrongly) signal
            assert len(await rec.signals()) == 1
            sim.inject(f"dpus/{DPU0}/node-effect")
            changed = await rec.wait_for(lambda s: s.dpu("host-001-dpu-0").phase == "Node Effect")  # type: ignore[union-attr]
            assert changed.state.sequence == first.state.sequence + 1
            await rec.stop()
        api.close()


async def test_expired_resource_version_is_relisted(tmp_path: Path, client: Client, task_queue: str) -> None:
    """A watcher resuming from a resourceVersion the server no longer keeps (410 Gone) lists again
    and signals the state as it now is."""
    with running_sim(tmp_path / "sim", hosts=1, dpus_per_host=2, initialised=True) as sim:
        api = Api(sim)
        first_rv = api.must("DPU", DPU0)["metadata"]["resourceVersion"]
        stale = HostDPFState(host_id="host-001", sequence=4)  # what an old attempt last signalled
        await churn(sim, writes=20_100)  # more writes than the API server's watch history holds
        checkpoint = WatchCheckpoint(
            resource_versions={"dpus": first_rv, "node": first_rv, "hold": first_rv}, state=stale
        )
        request = RecorderInput(host_id="host-001", resume_from=checkpoint)
        async with recording(client, task_queue, settings_for(sim), request) as rec:
            seen = await rec.wait_for(lambda s: phases(s) == ["Ready", "Ready"])
            assert seen.state.sequence == 5  # resumed: continues the old attempt's numbering
            assert seen.state.node is not None and not seen.state.node.waiting_for_reboot
            details = await heartbeat_details(rec.handle)
            assert details.relists >= 2  # the DPU and DPUNode streams both met 410
            await rec.stop()
        api.close()


async def churn(sim: RunningSim, writes: int) -> None:
    """`writes` writes to one Secret, as fast as the API takes them (aiohttp: httpx is too slow
    a client to make 20,000 writes in a test's time)."""
    base = f"{sim.url}/api/v1/namespaces/{NS}/secrets"
    async with aiohttp.ClientSession(headers=sim.headers) as http:
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "churn"}}
        async with http.post(base, json=secret) as response:
            response.raise_for_status()
        queue = iter(range(writes))

        async def writer() -> None:
            for i in queue:
                body = json.dumps({"metadata": {"annotations": {"n": str(i)}}})
                headers = {"Content-Type": "application/merge-patch+json"}
                async with http.patch(f"{base}/churn", data=body, headers=headers) as response:
                    response.raise_for_status()

        await asyncio.gather(*(writer() for _ in range(16)))


async def heartbeat_details(handle: Any) -> WatchCheckpoint:
    from temporalio.contrib.pydantic import pydantic_data_converter

    for _ in range(50):
        described = await handle.describe()
        pending = described.raw_description.pending_activities
        if pending and pending[0].heartbeat_details.payloads:
            values = await pydantic_data_converter.decode(pending[0].heartbeat_details.payloads)
            return WatchCheckpoint.model_validate(values[0])
        await asyncio.sleep(0.2)
    raise AssertionError("the watcher never heartbeat")


async def test_api_down_fails_the_watcher_retryably_and_the_workflow_keeps_its_state(
    tmp_path: Path, client: Client, task_queue: str
) -> None:
    with running_sim(tmp_path / "sim", hosts=1, dpus_per_host=2, initialised=True) as sim:
        request = RecorderInput(host_id="host-001", max_attempts=1)
        async with recording(client, task_queue, settings_for(sim), request) as rec:
            await rec.wait_for(lambda s: phases(s) == ["Ready", "Ready"])
            sim.process.terminate()
            sim.process.wait(timeout=15)
            with pytest.raises(WorkflowFailureError) as caught:
                await asyncio.wait_for(rec.handle.result(), 60)
            activity_error = caught.value.cause
            assert isinstance(activity_error, ActivityError)
            failure = activity_error.cause
            assert isinstance(failure, ApplicationError)
            assert failure.type == "KubernetesUnavailable" and not failure.non_retryable
            assert "cannot keep the watch" in failure.message
            kept = await rec.signals()  # the workflow's own state survives the watcher
            assert phases(kept[-1].state) == ["Ready", "Ready"]


async def test_signal_latency_from_phase_change(tmp_path: Path, client: Client, task_queue: str) -> None:
    """From a DPU phase change in the API to the workflow holding the signal, over 50 changes."""
    latencies: list[float] = []
    with running_sim(tmp_path / "sim", hosts=1, dpus_per_host=2, initialised=True) as sim:
        async with recording(client, task_queue, settings_for(sim), RecorderInput(host_id="host-001")) as rec:
            await rec.wait_for(lambda s: phases(s) == ["Ready", "Ready"])
            for i in range(50):
                fault, target = ("node-effect", "Node Effect") if i % 2 == 0 else ("recover", "Ready")
                count = len(await rec.signals())
                t0 = time.time()
                sim.inject(f"dpus/{DPU0}/{fault}")
                deadline = time.monotonic() + 10
                while True:
                    fresh = (await rec.signals())[count:]
                    hit = next((s for s in fresh if s.state.dpu("host-001-dpu-0").phase == target), None)  # type: ignore[union-attr]
                    if hit is not None:
                        latencies.append(hit.at.timestamp() - t0)
                        break
                    assert time.monotonic() < deadline, f"change {i} to {target} never signalled"
                    await asyncio.sleep(0.02)
            await rec.stop()
    p50, worst = statistics.median(latencies), max(latencies)
    figures = f"p50 {p50 * 1000:.0f} ms, max {worst * 1000:.0f} ms"
    print(f"\nwatcher signal latency over {len(latencies)} changes: {figures}")
    assert p50 < 1.0 and worst < 2.0
