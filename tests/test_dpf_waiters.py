"""A workflow waiting on a host's DPF objects through the site's watch (`DPFWatch`, under an id of
no operation's form), on a real worker against the simulated site: a provisioning flow driven by
the signals, dropped watches (the `flaky` profile), changes that do not matter, and latency.
(Relisting after 410, an API server restart and a killed worker are in tests/test_site_watch.py.)"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

from dpf_activities_support import Api, acked, power_cycle, settings_for
from dpf_waiter_support import phases, record, waiting_worker
from sim_support import RunningSim, running_sim
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from activities.dpf import DPFActivities
from contracts.errors import MetalflowError
from contracts.models.dpf import GroupSpec, HostDPFState, HostRef, RegisterHostInput, SiteSetupInput
from drivers.inventory import Inventory
from drivers.kube import Kube

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
    """Flows 1-3 of host-001, each step taken when the watch's signal says it is time."""
    settings = settings_for(sim)
    acts = DPFActivities(settings, Kube(settings))
    ref = HostRef(host_id="host-001")
    async with waiting_worker(client, task_queue, sim):
        rec = await record(client, task_queue, "host-001")
        first = await rec.wait_for(lambda s: True)
        assert first.state.node is None and first.state.dpus == ()  # the join's read: nothing yet
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
        count = await rec.stop()  # the workflow completes
        seen = [s.state for s in await rec.taken()]
    assert count == len(seen)
    acts.kube.close()
    return seen


def assert_states_are_changes(seen: list[HostDPFState]) -> None:
    for before, after in zip(seen, seen[1:], strict=False):
        assert before.content() != after.content(), f"state {after} repeats {before}"


async def test_signals_drive_initial_provisioning(tmp_path: Path, client: Client, task_queue: str) -> None:
    with running_sim(tmp_path / "sim", hosts=1, dpus_per_host=2) as sim:
        seen = await provision_with_signals(sim, client, task_queue)
        assert sim.violations() == []
    assert_states_are_changes(seen)
    dpu0 = [s.dpu("host-001-dpu-0").phase for s in seen if s.dpu("host-001-dpu-0")]  # type: ignore[union-attr]
    order = [p for i, p in enumerate(dpu0) if i == 0 or dpu0[i - 1] != p]
    for expected in ("Node Effect", "Rebooting", "Ready"):
        assert expected in order
    assert order.index("Node Effect") < order.index("Rebooting") < order.index("Ready")
    holds = [s.hold.hold for s in seen if s.hold is not None]
    assert holds[0] == "true" and "false" in holds


async def test_the_watch_keeps_following_through_dropped_watches(
    tmp_path: Path, client: Client, task_queue: str
) -> None:
    """`flaky`: API 503s and watch streams closed after random events; nothing is missed."""
    with running_sim(tmp_path / "sim", hosts=1, dpus_per_host=2, faults="flaky", seed=7) as sim:
        seen = await provision_with_signals(sim, client, task_queue)
        assert sim.violations() == []
    assert_states_are_changes(seen)
    assert phases(seen[-1]) == ["Ready", "Ready"]


async def test_changes_that_do_not_matter_are_not_taken(
    tmp_path: Path, client: Client, task_queue: str
) -> None:
    with running_sim(tmp_path / "sim", hosts=1, dpus_per_host=2, initialised=True) as sim:
        api = Api(sim)
        async with waiting_worker(client, task_queue, sim):
            rec = await record(client, task_queue, "host-001")
            await rec.wait_for(lambda s: phases(s) == ["Ready", "Ready"])
            rv_before = api.must("DPU", DPU0)["metadata"]["resourceVersion"]
            for i in range(10):
                api.patch(
                    "DPU", DPU0, {"metadata": {"annotations": {"ops/note": str(i)}, "labels": {"x": str(i)}}}
                )
                api.patch("DPUNode", "node-host-001", {"metadata": {"annotations": {"ops/note": str(i)}}})
            assert api.must("DPU", DPU0)["metadata"]["resourceVersion"] != rv_before
            await asyncio.sleep(1.5)  # time enough to (wrongly) signal
            assert len(await rec.taken()) == 1
            assert len(await rec.received()) <= 1  # at most the welcome, as the read says
            sim.inject(f"dpus/{DPU0}/node-effect")
            await rec.wait_for(lambda s: s.dpu("host-001-dpu-0").phase == "Node Effect")  # type: ignore[union-attr]
            assert len(await rec.taken()) == 2
            await rec.stop()
        api.close()


async def test_signal_latency_from_phase_change(tmp_path: Path, client: Client, task_queue: str) -> None:
    """From a DPU phase change in the API to the workflow holding the signal, over 50 changes."""
    latencies: list[float] = []
    with running_sim(tmp_path / "sim", hosts=1, dpus_per_host=2, initialised=True) as sim:
        async with waiting_worker(client, task_queue, sim):
            rec = await record(client, task_queue, "host-001")
            await rec.wait_for(lambda s: phases(s) == ["Ready", "Ready"])
            await asyncio.sleep(0.5)  # past the welcome
            for i in range(50):
                fault, target = ("node-effect", "Node Effect") if i % 2 == 0 else ("recover", "Ready")
                count = len(await rec.received())
                t0 = time.time()
                sim.inject(f"dpus/{DPU0}/{fault}")
                deadline = time.monotonic() + 10
                while True:
                    fresh = (await rec.received())[count:]
                    hit = next((s for s in fresh if s.state.dpu("host-001-dpu-0").phase == target), None)  # type: ignore[union-attr]
                    if hit is not None:
                        latencies.append(hit.at.timestamp() - t0)
                        break
                    assert time.monotonic() < deadline, f"change {i} to {target} never signalled"
                    await asyncio.sleep(0.02)
            await rec.stop()
    p50, worst = statistics.median(latencies), max(latencies)
    figures = f"p50 {p50 * 1000:.0f} ms, max {worst * 1000:.0f} ms"
    print(f"\nsite watch signal latency over {len(latencies)} changes: {figures}")
    assert p50 < 1.0 and worst < 2.0
