"""The reboot's one step before its power cycle (`lease_host_bmc` in workflows/host_reboot/workflow.py),
on a real dev server and the simulated site as its own process:

- A free BMC: the slot comes back in the step's result. The reboot's history has no inventory
  activity, no `request_bmc_lease`, no grant signal and no wait timer; the host is cycled once
  and the lease ends idle with one grant.
- A cancel or an abort while the step runs: the slot it got is given back, nothing is sent.
- A BMC that serves one host only: no lease at all, once the host's previous reboot has ended.
- A worker SIGKILLed right after the lease granted the step its slot, before the result reached
  Temporal: the retried step (on a new worker) is answered "granted" again for the same request,
  the host is cycled exactly once, and the slot is given back (nothing left to reclaim). Its run
  starts with the module (`killed_run`, its own site and task queue), so its 10 s wait for the
  lost attempt's heartbeat timeout runs beside the other tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from bmc_lease_support import HOSTS, lease_of, lease_status, shared_bmc_sim, stop_reboot
from host_operation_support import (
    FAST_POLICY,
    aborted_run,
    power_cycles,
    save_history,
    start_reboot,
    wait_for_query,
)
from takeover_support import sticky_timeout
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHistory
from temporalio.exceptions import CancelledError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from worker_support import LEASE_STEP_WORKER, worker_env, worker_process

import workflows
from activities import build_activities
from activities.heartbeat import beats_while_running
from contracts import names
from contracts.models.bmc_lease import BMCLeaseStatus, LeaseHostBMCInput, LeaseHostBMCResult
from contracts.models.control import OperatorRequest
from contracts.models.host import HOST_REBOOTED_SIGNAL, HostRebootInput, HostRebootResult, RebootMethod
from drivers.settings import Settings


def activity_attempts(history: WorkflowHistory) -> dict[str, int]:
    """Attempts started per activity type (the highest attempt number seen)."""
    scheduled: dict[int, str] = {}
    attempts: dict[str, int] = {}
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled[event.event_id] = event.activity_task_scheduled_event_attributes.activity_type.name
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started = event.activity_task_started_event_attributes
            name = scheduled[started.scheduled_event_id]
            attempts[name] = max(attempts.get(name, 0), started.attempt)
    return attempts


def activity_name(function: object) -> str:
    # Every metalflow activity is registered under its method's name (`activities/`, `@activity.defn`).
    return str(getattr(function, "__name__", ""))


def signals(history: WorkflowHistory) -> list[str]:
    return [
        e.workflow_execution_signaled_event_attributes.signal_name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    ]


def timers(history: WorkflowHistory) -> int:
    return sum(1 for e in history.events if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED)


def worker_for(client: Client, task_queue: str, settings: Settings) -> Worker:
    return Worker(
        client,
        task_queue=task_queue,
        workflows=workflows.ALL,
        activities=build_activities(temporal_client=client, settings=settings),
        sticky_queue_schedule_to_start_timeout=sticky_timeout(),
    )


async def test_a_free_bmc_is_granted_in_the_steps_result(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    host = HOSTS[0]
    with shared_bmc_sim(tmp_path, HOSTS[:2], timings="zero") as sim:
        settings = Settings(site_file=sim.site_file, kubeconfig=sim.kubeconfig, bmc_max_in_flight=1)
        async with worker_for(client, task_queue, settings):
            reboot = await start_reboot(client, task_queue, host)
            result = await asyncio.wait_for(reboot.result(), 120)
            lease_handle = lease_of(client, sim, host, task_queue)
            lease = await asyncio.wait_for(lease_handle.result(), 60)  # idle: it ended
            history = await reboot.fetch_history()
            await save_history(reboot, "host_reboot_bmc_lease_one_step")
            await save_history(lease_handle, "bmc_lease_one_step")
        log = sim.power_log(host)

    assert result.method == "bmc:PowerCycle"
    assert power_cycles(log) == 1
    assert activity_attempts(history) == {"lease_host_bmc": 1, "power_cycle_host": 1}
    assert signals(history) == [] and timers(history) == 0  # no grant signal, no wait for one
    assert (lease.granted, lease.holders, lease.waiting, lease.reclaimed) == (1, (), (), 0)
    # The cost the docstrings state.
    assert len(history.events) <= 27, len(history.events)


@dataclass
class KilledRun:
    """What the kill test's run saw at its end (`_killed_after_the_grant`)."""

    result: HostRebootResult
    lease: BMCLeaseStatus
    history: WorkflowHistory
    log: list[dict[str, Any]]
    violations: list[Any]


async def _killed_after_the_grant(client: Client, tmp_path: Path) -> KilledRun:
    """A reboot whose `lease_host_bmc` worker dies right after the lease granted it the slot
    (`tests/lease_step_worker.py`), then a worker of this process takes it over."""
    host = HOSTS[0]
    task_queue = f"test-{uuid.uuid4()}"
    with shared_bmc_sim(tmp_path, HOSTS[:2], timings="zero") as sim:
        settings = Settings(site_file=sim.site_file, kubeconfig=sim.kubeconfig, bmc_max_in_flight=1)
        env = worker_env(client, sim, METALFLOW_BMC_MAX_IN_FLIGHT="1")
        with worker_process(
            task_queue, env, tmp_path / "dying-worker.log", script=LEASE_STEP_WORKER
        ) as dying:
            await dying.polling(client)
            reboot = await start_reboot(client, task_queue, host)
            status = await dying.exited(timeout=120)
            said = dying.output()
            assert status == -9, said
        assert "answered granted=True: dying" in said, said
        lease_handle = lease_of(client, sim, host, task_queue)
        assert power_cycles(await asyncio.to_thread(sim.power_log, host)) == 0
        async with worker_for(client, task_queue, settings):
            # The slot is the reboot's, though its run never heard of it (a query needs a worker;
            # the lost attempt is retried only after its 10 s heartbeat timeout, `CALL_HEARTBEAT`).
            held = await lease_status(lease_handle)
            assert held is not None and [h.workflow_id for h in held.holders] == [reboot.id], held
            # The step's attempt times out (10 s heartbeat timeout: it sent none) and is retried here.
            result = await asyncio.wait_for(reboot.result(), 240)
            lease = await asyncio.wait_for(lease_handle.result(), 60)
            history = await reboot.fetch_history()
        log = await asyncio.to_thread(sim.power_log, host)
        violations = await asyncio.to_thread(sim.violations)
    return KilledRun(result, lease, history, log, violations)


@pytest.fixture(scope="module", autouse=True)
async def killed_run(
    local_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[asyncio.Task[KilledRun]]:
    """The kill test's run, started with the module: its wait for the lost attempt's 10 s
    heartbeat timeout runs beside the other tests (its own site, task queue and lease); the kill
    test awaits it."""
    run = asyncio.create_task(_killed_after_the_grant(local_env.client, tmp_path_factory.mktemp("killed")))
    yield run
    run.cancel()
    with contextlib.suppress(BaseException):
        await run


async def test_a_busy_bmc_queues_the_step_and_grants_by_signal(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Two reboots on one BMC with one slot: the second step answers queued at once (no
    activity slot held while it waits) and the grant comes as the signal once the first ends."""
    with shared_bmc_sim(tmp_path, HOSTS[:2], timings="demo") as sim:
        settings = Settings(site_file=sim.site_file, kubeconfig=sim.kubeconfig, bmc_max_in_flight=1)
        async with worker_for(client, task_queue, settings):
            lease_handle = lease_of(client, sim, HOSTS[0], task_queue)
            first = await start_reboot(client, task_queue, HOSTS[0])
            await wait_for_query(
                lambda: lease_status(lease_handle),
                lambda s: s is not None and len(s.holders) == 1,
                "the first reboot holding the slot",
                60,
            )
            second = await start_reboot(client, task_queue, HOSTS[1])
            queued = await wait_for_query(
                lambda: lease_status(lease_handle),
                lambda s: s is not None and len(s.waiting) == 1,
                "the second reboot queued",
                60,
            )
            results = await asyncio.wait_for(asyncio.gather(first.result(), second.result()), 180)
            lease = await asyncio.wait_for(lease_handle.result(), 60)
            first_history, second_history = [await h.fetch_history() for h in (first, second)]
        logs = [sim.power_log(h) for h in HOSTS[:2]]
        load = sim.bmc_load(HOSTS[0])

    assert queued is not None and queued.waiting[0].workflow_id == second.id
    assert [r.method for r in results] == ["bmc:PowerCycle"] * 2
    assert [power_cycles(log) for log in logs] == [1, 1]
    assert load["systems_off_peak"] == 1  # never both at once
    assert signals(first_history) == [] and signals(second_history) == ["bmc_lease_granted"]
    assert activity_attempts(second_history)["lease_host_bmc"] == 1
    assert (lease.holders, lease.waiting, lease.reclaimed) == ((), (), 0)


async def test_a_reboot_stopped_during_the_step_gives_back_the_slot_it_got(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Cancel and abort while `lease_host_bmc` runs: the step is not cut (it may already hold the
    slot), its answer is taken, the slot given back at once, and nothing is sent to the BMC.
    The real activity runs, held back until the stop is in (its timing cannot be caught else)."""
    host = HOSTS[0]
    with shared_bmc_sim(tmp_path, HOSTS[:2], timings="zero") as sim:
        settings = Settings(site_file=sim.site_file, kubeconfig=sim.kubeconfig, bmc_max_in_flight=1)
        every = build_activities(temporal_client=client, settings=settings)
        real = next(f for f in every if activity_name(f) == "lease_host_bmc")
        step_started, stop_sent = asyncio.Event(), asyncio.Event()
        granted: list[bool] = []

        @activity.defn(name="lease_host_bmc")
        @beats_while_running  # as the real one: held back, it is not cut by its heartbeat timeout
        async def held_back(request: LeaseHostBMCInput) -> LeaseHostBMCResult:
            step_started.set()
            await stop_sent.wait()
            result: LeaseHostBMCResult = await real(request)
            granted.append(result.lease.granted)
            return result

        others = [f for f in every if activity_name(f) != "lease_host_bmc"]
        lease_handle = lease_of(client, sim, host, task_queue)
        outcomes: list[Any] = []
        activities = [*others, held_back]
        worker = Worker(
            client,
            task_queue=task_queue,
            workflows=workflows.ALL,
            activities=activities,
            sticky_queue_schedule_to_start_timeout=sticky_timeout(),
        )
        async with worker:
            for generation, stop in ((1, "abort"), (2, "cancel")):
                step_started.clear()
                stop_sent.clear()
                reboot = await start_reboot(client, task_queue, host, generation)
                await asyncio.wait_for(step_started.wait(), 60)
                await stop_reboot(reboot, stop)
                stop_sent.set()
                if stop == "abort":  # completes: an abort is asked for, no failure
                    outcomes.append(await aborted_run(reboot))
                else:
                    with pytest.raises(WorkflowFailureError) as ended:
                        await asyncio.wait_for(reboot.result(), 60)
                    outcomes.append(ended.value.cause)
                lease = await asyncio.wait_for(lease_handle.result(), 60)  # idle again: it ended
                assert (lease.granted, lease.holders, lease.waiting, lease.reclaimed) == (1, (), (), 0)
        log = sim.power_log(host)

    assert granted == [True, True]  # each step got the slot before the run gave it back
    aborted, cancelled = outcomes
    assert "the host was not rebooted by metalflow" in aborted, aborted
    assert isinstance(cancelled, CancelledError), cancelled
    assert power_cycles(log) == 0 and not [e for e in log if e.get("to")], log  # nothing sent


async def test_a_bmc_of_one_host_takes_no_lease_and_waits_for_the_hosts_previous_reboot(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A BMC that serves one host only: no lease workflow at all (the host's own lock keeps its
    reboots apart) and no release signal; but a reboot waits, before touching the BMC, for the
    host's previous generation to end (here a manual one still waiting for a person), so two
    reboots of one host never meet at its BMC. The same BMC serving two hosts takes its lease
    (the tests above)."""
    host = f"solo-{task_queue[-6:]}"
    with shared_bmc_sim(tmp_path, (host,), timings="zero") as sim:
        settings = Settings(site_file=sim.site_file, kubeconfig=sim.kubeconfig, bmc_max_in_flight=1)
        async with worker_for(client, task_queue, settings):
            manual = FAST_POLICY.model_copy(update={"reboot_method": RebootMethod.MANUAL})
            first = await client.start_workflow(
                "HostRebootWorkflow",
                HostRebootInput(host_id=host, boot_generation=1, requested_by="test", policy=manual),
                id=names.host_reboot_workflow_id(host, 1),
                task_queue=task_queue,
                result_type=HostRebootResult,
            )
            second = await client.start_workflow(
                "HostRebootWorkflow",
                HostRebootInput(host_id=host, boot_generation=2, requested_by="test", policy=FAST_POLICY),
                id=names.host_reboot_workflow_id(host, 2),
                task_queue=task_queue,
                result_type=HostRebootResult,
            )
            await asyncio.sleep(3)
            held_back = power_cycles(sim.power_log(host))
            await first.signal(HOST_REBOOTED_SIGNAL, OperatorRequest(requested_by="test", reason="by hand"))
            await asyncio.wait_for(first.result(), 60)
            result = await asyncio.wait_for(second.result(), 120)
            history = await second.fetch_history()
            lease = await lease_status(lease_of(client, sim, host, task_queue))
        log = sim.power_log(host)

    assert held_back == 0  # not while the previous reboot of the host ran
    assert result.method == "bmc:PowerCycle" and power_cycles(log) == 1
    assert lease is None  # no lease workflow was ever started for this BMC
    assert activity_attempts(history)["power_cycle_host"] == 1
    assert signals(history) == [] and timers(history) == 0
    released = EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED
    assert not [e for e in history.events if e.event_type == released]  # nothing to release


# Last in the module: its run (`killed_run`) went on while the tests above ran.
async def test_a_worker_killed_after_the_grant_still_cycles_once_and_gives_the_slot_back(
    killed_run: asyncio.Task[KilledRun],
) -> None:
    run = await killed_run  # its worker's death, the slot then held: asserted as the run went
    assert run.result.method == "bmc:PowerCycle"
    assert power_cycles(run.log) == 1
    assert activity_attempts(run.history) == {"lease_host_bmc": 2, "power_cycle_host": 1}
    assert signals(run.history) == []  # the retry was answered "granted": no wait for a signal
    # One grant (the retry found its request holding the slot), released, none reclaimed.
    lease = run.lease
    assert (lease.granted, lease.holders, lease.waiting, lease.reclaimed) == (1, (), (), 0)
    assert run.violations == []
