"""Crash safety: the worker is a separate process, SIGKILLed at several steps of a reprovision
(after the hold release, with the power cycle in flight, after the annotation's removal) and
started again each time. The operation must still end with exactly the power cycles DPF asked
for in the BMC's power log, and no violation recorded by the simulated site."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from host_operation_support import (
    FAST_POLICY,
    power_cycles,
    save_history,
    start_operation,
    wait_for_phase,
    wait_for_status,
)
from sim_support import running_sim
from temporalio.client import Client
from worker_support import worker_env, worker_process

from contracts.models.host import HostOperationKind, HostOperationStatus

# The operation waits on DPF across two of the kills: the killed worker's site watch moves to the
# next after its heartbeat timeout, 4 s here (as test_site_watch's kill test), not the tests' 10 s.
WATCH_TAKEOVER_SECONDS = "4"
# DPF moves a DPU on after 0.5 s, not the demo profile's 1 s: the four install phases the first
# kill is found in still last 2 s together; the power transitions (0.5 s) are left as they are.
SITE_TIMING = {"dpu_phase_seconds": 0.5, "dpu_registration_seconds": 0.5}


async def test_reprovision_survives_worker_kills_at_every_step(client: Client, tmp_path: Path) -> None:
    task_queue = f"crash-{uuid.uuid4()}"
    log = tmp_path / "worker.log"
    with running_sim(
        tmp_path / "sim", hosts=1, dpus_per_host=2, timings="demo", timing=SITE_TIMING, initialised=True
    ) as sim:
        env = worker_env(client, sim, METALFLOW_SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS=WATCH_TAKEOVER_SECONDS)
        with worker_process(task_queue, env, log):
            handle = await start_operation(client, task_queue, "host-001", HostOperationKind.REPROVISION,
                                           policy=FAST_POLICY)  # fmt: skip
            await wait_for_status(handle, lambda s: _installing(s), "the DPUs installing", timeout=90)
        # killed after the hold release (the DPUs are installing)
        with worker_process(task_queue, env, log):
            await wait_for_phase(handle, "rebooting-host", timeout=90)
            await asyncio.sleep(0.3)  # the child's power cycle is under way (demo: 0.5 s per transition)
        # killed with the reboot child (and its power cycle) in flight
        with worker_process(task_queue, env, log):
            await wait_for_status(handle, _acknowledged, "the annotation removed", timeout=90)
        # killed right after the annotation's removal
        with worker_process(task_queue, env, log):
            result = await handle.result()
            await save_history(handle, "host_operation_reprovision_crashed")
        assert result.reboots == 1
        assert power_cycles(sim.power_log("host-001")) == 1, sim.power_log("host-001")
        assert sim.violations() == []


def _installing(status: HostOperationStatus) -> bool:
    return status.phase == "waiting-for-reboot-request" and any(
        d.phase in ("Initialize Interface", "Config FW Parameters", "Prepare BFB", "OS Installing")
        for d in status.dpus
    )


def _acknowledged(status: HostOperationStatus) -> bool:
    # after the reboot, from the annotation's removal on (the next phase may already be reached)
    return status.power_cycles_issued == 1 and status.phase in (
        "waiting-for-dpf-after-reboot",
        "waiting-for-reboot-request",
        "completed",
    )
