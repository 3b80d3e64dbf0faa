"""Scale-out as deploy/ runs it: two `worker.py` processes on one task queue reprovision two
hosts; the worker running the site's DPF watch is SIGKILLed mid-operation, while both operations
wait on DPF for the reboot request (registered with the watch, no power cycle yet). The other
worker takes the work over (the watch after its heartbeat timeout, 4 s here, resuming from its
checkpoint with the registry of waiting operations; the workflow tasks after the sticky queue's
timeout) and both operations finish with exactly one power cycle per reboot DPF asked for, and
no protocol violation.

The kill waits for that wait: killed as soon as the watch had started, the operations were still
in their first activity (the inventory's read) on the killed worker, and the test waited out that
activity's timeout (then its 30 s start-to-close, now a 10 s heartbeat timeout) instead of the
takeover it is about. DPF moves a DPU on
after 0.5 s here (the `zero` profile moves at once), so the wait on DPF lasts long enough to be
seen."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from host_operation_support import power_cycles, start_operation, status_of, wait_for_status
from sim_support import running_sim
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError
from worker_support import worker_env, worker_processes

from contracts import names
from contracts.models.dpf import DPF_NAMESPACE
from contracts.models.host import HostOperationKind, HostOperationStatus

WATCH_TAKEOVER_SECONDS = "4"  # METALFLOW_SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS of the workers


def waiting_on_dpf(status: HostOperationStatus) -> bool:
    """Waiting for DPF's reboot request, before any power cycle: blocked on the watch's news."""
    return status.phase == "waiting-for-reboot-request" and status.power_cycles_issued == 0


async def watcher_holder(handle: WorkflowHandle[object, object]) -> str | None:
    """The identity (`pid@host`) of the worker running the site's DPF watch (which routes the
    operations' changes), if any (None too while the workers have not started it yet)."""
    try:
        described = await handle.describe()
    except RPCError:
        return None
    for pending in described.raw_description.pending_activities:
        if pending.activity_type.name == "watch_site_dpf" and pending.last_worker_identity:
            return str(pending.last_worker_identity)
    return None


async def test_two_workers_one_killed_mid_operation_one_power_cycle_per_reboot_request(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    with running_sim(
        tmp_path / "sim", hosts=2, dpus_per_host=2, timings="zero", timing={"dpu_phase_seconds": 0.5},
        initialised=True,
    ) as sim:  # fmt: skip
        env = worker_env(client, sim, METALFLOW_SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS=WATCH_TAKEOVER_SECONDS)
        with worker_processes(task_queue, env, sim.state_dir, count=2) as (first, second):
            by_pid = {first.pid: first, second.pid: second}
            handles = [
                await start_operation(
                    client, task_queue, host, HostOperationKind.REPROVISION, id_suffix=f"-{task_queue}"
                )
                for host in ("host-001", "host-002")
            ]
            site_watch = client.get_workflow_handle(names.dpf_watch_workflow_id(DPF_NAMESPACE, task_queue))
            holder = None
            for _ in range(600):
                holder = await watcher_holder(site_watch)
                if holder is not None:
                    break
                await asyncio.sleep(0.1)
            assert holder is not None, "the site's DPF watch never started"
            for handle in handles:
                await wait_for_status(handle, waiting_on_dpf, "waiting on DPF for the reboot request", 90)
            holder = await watcher_holder(site_watch)
            assert holder is not None, "the site's DPF watch stopped"
            victim = by_pid[int(holder.split("@")[0])]
            assert victim.kill() == -signal.SIGKILL
            still = await handles[0].describe()
            assert still.status == WorkflowExecutionStatus.RUNNING, "killed mid-operation, not after"
            results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 240)
            statuses = [await status_of(h) for h in handles]
            survivor = second if victim is first else first
            assert survivor.returncode is None, "the other worker kept running"
        logs = [sim.power_log(host) for host in ("host-001", "host-002")]
        violations = sim.violations()

    for result, status, log in zip(results, statuses, logs, strict=True):
        assert status.phase == "completed"
        assert result.reboots == status.reboots_requested == power_cycles(log) >= 1
    assert violations == []
