"""The fleet-wide per-BMC limit (workflows/bmc_lease/workflow.py), on a real dev server and the simulated
site as a separate process: three hosts behind ONE multi-system BMC, rebooted at once.

- Two `worker.py` processes with `METALFLOW_BMC_MAX_IN_FLIGHT=1`; the worker running the first
  power cycle is SIGKILLed mid-cycle. The BMC's own record shows never more than one System away
  from On and never more than one request at once, every host is cycled exactly once, and the
  simulator saw no protocol violation. Its run starts with the module (`killed_run`: its own
  site, task queue and lease) and goes on beside the other tests.
- A run that holds a slot and one that waits for it are terminated (they never release): the
  lease takes both slots back and a real reboot behind them completes.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from bmc_lease_support import (
    HOSTS,
    HoldBMCLeaseForever,
    lease_of,
    lease_status,
    one_slot_held,
    shared_bmc_sim,
    stop_reboot,
)
from cli_support import metalflow
from host_operation_support import (
    aborted_run,
    eventually,
    power_cycles,
    save_history,
    start_reboot,
    wait_for_query,
)
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import CancelledError
from temporalio.testing import WorkflowEnvironment
from worker_support import worker_env, worker_processes

from contracts import names
from contracts.models.bmc_lease import BMCLeaseStatus
from contracts.models.host import HostRebootResult, HostStatus
from drivers.settings import Settings


async def cycling_worker(handles: list[WorkflowHandle[object, HostRebootResult]]) -> int | None:
    """The pid of the worker running a `power_cycle_host` attempt right now, if any."""
    for handle in handles:
        described = await handle.describe()
        for pending in described.raw_description.pending_activities:
            if pending.activity_type.name == "power_cycle_host" and pending.last_worker_identity:
                return int(str(pending.last_worker_identity).split("@")[0])
    return None


@dataclass
class KilledRun:
    """What the kill test's run saw at its end (`_two_workers_one_killed`)."""

    results: list[HostRebootResult]
    lease: BMCLeaseStatus
    lease_events: int
    reboot_events: list[int]
    logs: dict[str, list[dict[str, Any]]]
    load: dict[str, int]
    violations: list[Any]


async def _two_workers_one_killed(client: Client, tmp_path: Path) -> KilledRun:
    """Three hosts of one BMC rebooted at once by two worker processes (one slot); the worker
    running a power cycle is SIGKILLed mid-cycle."""
    task_queue = f"test-{uuid.uuid4()}"
    with shared_bmc_sim(tmp_path, HOSTS, timings="demo") as sim:
        env = worker_env(client, sim, METALFLOW_BMC_MAX_IN_FLIGHT="1")
        with worker_processes(task_queue, env, sim.state_dir, count=2) as processes:
            by_pid = {p.pid: p for p in processes}
            handles = [await start_reboot(client, task_queue, host) for host in HOSTS]
            victim: list[int] = []

            async def found_victim() -> bool:
                pid = await cycling_worker(handles)
                victim[:] = [] if pid is None else [pid]
                return pid is not None

            await eventually(found_victim, timeout=120, what="a power cycle in flight")
            assert by_pid[victim[0]].kill() == -signal.SIGKILL
            results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 300)
            survivor = next(p for pid, p in by_pid.items() if pid != victim[0])
            assert survivor.returncode is None, "the other worker kept running"
            lease_handle = lease_of(client, sim, HOSTS[0], task_queue)
            # Idle now, its last run has ended with its status as result.
            lease = await lease_handle.result()
            lease_events = len((await lease_handle.fetch_history()).events)
            reboot_events = [len((await h.fetch_history()).events) for h in handles]
        logs = {host: await asyncio.to_thread(sim.power_log, host) for host in HOSTS}
        load = await asyncio.to_thread(sim.bmc_load, HOSTS[0])
        violations = await asyncio.to_thread(sim.violations)
    return KilledRun(list(results), lease, lease_events, reboot_events, logs, load, violations)


@pytest.fixture(scope="module", autouse=True)
async def killed_run(
    local_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[asyncio.Task[KilledRun]]:
    """The kill test's run, started with the module (its own site, task queue and lease): its
    two worker processes and its takeover run beside the other tests; the kill test awaits it."""
    run = asyncio.create_task(_two_workers_one_killed(local_env.client, tmp_path_factory.mktemp("killed")))
    yield run
    run.cancel()
    with contextlib.suppress(BaseException):
        await run


async def test_slots_of_runs_that_closed_without_releasing_are_reclaimed(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    host = HOSTS[0]
    with shared_bmc_sim(tmp_path, HOSTS[:2], timings="zero") as sim:
        # Closed runs are looked for every second, not every 30 s.
        async with one_slot_held(client, task_queue, sim, bmc_lease_reclaim_seconds=1.0) as held:
            lease, holder = held.lease, held.holder
            waiter = await client.start_workflow(
                HoldBMCLeaseForever.run, held.bmc, id=f"wait-{task_queue}", task_queue=task_queue
            )
            await wait_for_query(
                lambda: lease_status(lease), lambda s: s is not None and len(s.waiting) == 1, "a waiter", 60
            )
            # A real reboot queues behind both before they die, so one lease run sees it all (asked
            # after they died, it could meet a lease that already reclaimed, idled and ended).
            reboot = await start_reboot(client, task_queue, host)
            await wait_for_query(
                lambda: lease_status(lease),
                lambda s: s is not None and len(s.waiting) == 2,
                "the reboot queued",
                60,
            )
            await holder.terminate("the run died holding its slot")
            await waiter.terminate("the run died waiting for a slot")
            result = await asyncio.wait_for(reboot.result(), 120)
            status = await lease.result()  # it ended once idle
            await save_history(reboot, "host_reboot_bmc_leased")
            await save_history(lease, "bmc_lease_reclaimed")
        log = sim.power_log(host)

    assert result.method == "bmc:PowerCycle"
    assert power_cycles(log) == 1
    # The holder by the check of closed runs, the waiter when its grant could not be delivered.
    assert (status.reclaimed, status.granted, status.waiting) == (2, 3, ())


async def test_a_reboot_stopped_while_queued_for_the_lease_sends_nothing_and_gives_its_place_back(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Abort (the reboot's update) and cancel (its parent's abort) while the reboot waits for a
    slot: before the fix it waited for the slot, then cycled the host anyway."""
    host = HOSTS[0]
    with shared_bmc_sim(tmp_path, HOSTS[:2], timings="zero") as sim:
        async with one_slot_held(client, task_queue, sim) as held:
            lease, holder = held.lease, held.holder
            outcomes: list[Any] = []
            for generation, stop in ((1, "abort"), (2, "cancel")):
                reboot = await start_reboot(client, task_queue, host, generation)
                await wait_for_query(
                    lambda: lease_status(lease),
                    lambda s: s is not None and len(s.waiting) == 1,
                    f"generation {generation} queued",
                    60,
                )
                await stop_reboot(reboot, stop)
                if stop == "abort":  # completes: an abort is asked for, no failure
                    outcomes.append(await aborted_run(reboot))
                else:
                    with pytest.raises(WorkflowFailureError) as ended:
                        await asyncio.wait_for(reboot.result(), 60)
                    outcomes.append(ended.value.cause)
                await save_history(reboot, f"host_reboot_lease_queue_{stop}")
                # Its place is given back at once: the queue is empty, the holder still holds.
                after = await wait_for_query(
                    lambda: lease_status(lease),
                    lambda s: s is not None and not s.waiting,
                    "the queued place given back",
                    60,
                )
                assert after is not None and len(after.holders) == 1 and after.granted == 1, after
            await holder.terminate("test done")
        log = sim.power_log(host)

    aborted, cancelled = outcomes
    assert "the host was not rebooted by metalflow" in aborted, aborted
    assert isinstance(cancelled, CancelledError), cancelled
    assert power_cycles(log) == 0 and not [e for e in log if e.get("to")], log  # nothing sent


async def test_host_abort_withdraws_a_reboot_queued_for_the_bmc_lease(
    local_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Issue 40: every pending request, queued for a lease included, can be withdrawn from the
    CLI. A `host reboot` queued behind the BMC's one slot is the entity's operation in flight:
    `host abort` reaches it as it reaches any, and the queued reboot ends sending nothing."""
    host = HOSTS[0]
    with shared_bmc_sim(tmp_path, HOSTS[:2], timings="zero") as sim:
        async with one_slot_held(client, task_queue, sim) as held:
            site = ("--task-queue", task_queue)
            asked = await metalflow(local_env, "host", "reboot", host, *site, site_file=sim.site_file)
            assert asked.status == 0, asked.stdout + asked.stderr
            await wait_for_query(
                lambda: lease_status(held.lease),
                lambda s: s is not None and len(s.waiting) == 1,
                "the reboot queued",
                60,
            )
            shown = await metalflow(local_env, "host", "status", host, site_file=sim.site_file)
            lease_id = held.lease.id
            assert (
                f"waiting for    a slot of the BMC's lease {lease_id} (queued: nothing sent to the BMC "
                f"yet; `metalflow host abort {host}` withdraws it)"
            ) in shown.stdout, shown.stdout
            aborted = await metalflow(
                local_env, "host", "abort", host, "--by", "alice", "--reason", "not now", *site,
                site_file=sim.site_file,
            )  # fmt: skip
            assert aborted.status == 0, aborted.stdout + aborted.stderr
            # Attack 40f (LOW): the answer said "a power cycle in flight is cut short"; none was.
            assert (
                f"the reboot queued for a slot of the BMC's lease {lease_id} is withdrawn (its place "
                "given back): no power action was sent to the BMC"
            ) in aborted.stdout, aborted.stdout
            assert "cut short" not in aborted.stdout, aborted.stdout
            entity = client.get_workflow_handle(names.host_workflow_id(host))
            idle = await wait_for_query(
                lambda: entity.query("status", result_type=HostStatus),
                lambda s: s.current is None,
                "the entity idle again",
                60,
            )
            assert idle is not None and idle.recent[-1].outcome.startswith("aborted by alice: not now")
            after = await wait_for_query(
                lambda: lease_status(held.lease), lambda s: s is not None and not s.waiting, "no queue", 60
            )
            assert after is not None and len(after.holders) == 1
            await held.holder.terminate("test done")
            await entity.terminate("test done")
        log = sim.power_log(host)
    assert power_cycles(log) == 0 and not [e for e in log if e.get("to")], log  # nothing sent


def test_lease_ids_hide_the_endpoint_and_join_hosts_of_one_bmc() -> None:
    one = names.bmc_lease_workflow_id("https://admin@BMC-7.example:443/redfish/v1", "metalflow")
    assert one == names.bmc_lease_workflow_id("https://bmc-7.example", "metalflow")
    assert one != names.bmc_lease_workflow_id("https://bmc-7.example", "other-queue")
    assert one != names.bmc_lease_workflow_id("http://bmc-7.example", "metalflow")
    assert "bmc-7" not in one and "admin" not in one and one.startswith("bmc-lease/")
    for bad in ("bmc-7.example", "ftp://bmc-7", "https://bmc:99999", "https://"):
        with pytest.raises(ValueError, match="invalid BMC endpoint"):
            names.bmc_lease_workflow_id(bad, "metalflow")


def test_reclaim_period_setting_is_checked() -> None:
    env = {"KUBECONFIG": "/nonexistent/kubeconfig"}
    assert Settings.from_env(env).bmc_lease_reclaim_seconds == 30.0
    assert (
        Settings.from_env(env | {"METALFLOW_BMC_LEASE_RECLAIM_SECONDS": "5"}).bmc_lease_reclaim_seconds == 5.0
    )
    for bad in ("soon", "0", "-1", "7200"):
        with pytest.raises(ValueError, match="bmc_lease_reclaim_seconds|METALFLOW_BMC_LEASE_RECLAIM_SECONDS"):
            Settings.from_env(env | {"METALFLOW_BMC_LEASE_RECLAIM_SECONDS": bad})


# Last in the module: its run (`killed_run`) went on while the tests above ran.
async def test_two_workers_limit_one_one_killed_mid_cycle_one_cycle_at_a_time_each_host_once(
    killed_run: asyncio.Task[KilledRun],
) -> None:
    run = await killed_run  # the victim's death and the survivor's life: asserted as the run went
    results, lease, lease_events, reboot_events = run.results, run.lease, run.lease_events, run.reboot_events
    logs, load, violations = run.logs, run.load, run.violations

    assert [r.method for r in results] == ["bmc:PowerCycle"] * len(HOSTS)
    assert {host: power_cycles(log) for host, log in logs.items()} == dict.fromkeys(HOSTS, 1)
    assert (load["systems_off_peak"], load["requests_in_flight_peak"]) == (1, 1), load
    # Ended idle (a run of its own per burst: how many grants the last run made depends on timing).
    assert (lease.limit, lease.holders, lease.waiting, lease.reclaimed) == (1, (), (), 0)
    # The cost the docstrings state: bounded per cycle on both sides (a retried attempt included).
    assert 1 <= lease.granted <= len(HOSTS)
    assert lease_events <= 20 * lease.granted, lease_events
    assert max(reboot_events) <= 50, reboot_events
    assert violations == []
