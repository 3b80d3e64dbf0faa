"""The power cycle that can never happen twice: kill the worker (SIGKILL) at each step of a power
cycle, start a new one, and read the BMC's power log: exactly one Off and one On, always.

The activity runs in a separate worker process (`tests/power_worker.py`) that is killed when the
simulated BMC shows the step reached; the workflow (here, in the test's own worker) retries the
activity on a fresh worker after the 2 s heartbeat timeout. Demo timings: 0.5 s per transition.

The fresh worker is the next case's worker to kill, already polling when that case begins: one
interpreter's start per case, not two (`PowerWorkers`); unless the kill waits for a state of half
a second, it starts as soon as the first attempt has (its start overlaps the wait for the kill point).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from redfish_support import CyclePower, crash_options, cycle_worker, first_activity_started, wait_for
from sim_support import RunningSim, running_sim
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from worker_support import POWER_WORKER, WorkerProcess, worker_env, worker_process

from contracts.models.inventory import BMCAccess, CredentialRef
from contracts.models.redfish import PowerCycleInput, PowerCycleProgress


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with running_sim(tmp_path_factory.mktemp("sim"), hosts=5, dpus_per_host=0, timings="demo") as running:
        yield running


class PowerWorkers:
    """The module's power workers (`tests/power_worker.py`), on one activity queue: the current one
    runs a case's first attempt and is SIGKILLed; the one started to take the attempt over is the
    next case's current one."""

    def __init__(self, client: Client, log_dir: Path, stack: contextlib.ExitStack) -> None:
        self.client, self.log_dir, self.stack = client, log_dir, stack
        self.queue = f"crash-activities-{uuid.uuid4()}"
        self.started: list[WorkerProcess] = []

    def start(self) -> WorkerProcess:
        """One more worker on the queue (it polls seconds later); killed at the module's end."""
        log = self.log_dir / f"power-worker-{len(self.started) + 1}.log"
        worker = self.stack.enter_context(
            worker_process(self.queue, worker_env(self.client), log, script=POWER_WORKER)
        )
        self.started.append(worker)
        return worker

    async def current(self) -> WorkerProcess:
        """The one live worker, polling: any other still running (a case failed before its kill)
        is SIGKILLed first, so a case's first attempt can go to this one only."""
        live = [w for w in self.started if w.returncode is None] or [self.start()]
        for stale in live[:-1]:
            stale.kill()
        await live[-1].polling(self.client, workflows=False)
        return live[-1]


@pytest.fixture(scope="module")
async def power_workers(
    local_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[PowerWorkers]:
    with contextlib.ExitStack() as stack:
        yield PowerWorkers(local_env.client, tmp_path_factory.mktemp("power-workers"), stack)


def access(sim: RunningSim, host_id: str) -> BMCAccess:
    bmc = sim.host(host_id)["bmc"]
    return BMCAccess(
        bmc_id=host_id, endpoint=bmc["endpoint"], credentials=CredentialRef(**bmc["credentials"])
    )


def power_state(sim: RunningSim, host_id: str) -> str:
    """Read PowerState straight from the simulated BMC (basic auth), as an observer."""
    bmc = sim.host(host_id)["bmc"]
    pair = json.loads(Path(bmc["credentials"]["file"]).read_text())
    with httpx.Client(base_url=bmc["endpoint"], auth=(pair["username"], pair["password"]), timeout=5) as http:
        members = http.get("/redfish/v1/Systems").json()["Members"]
        return str(http.get(members[0]["@odata.id"]).json()["PowerState"])


def transitions(sim: RunningSim, host_id: str, since: int) -> list[tuple[str, str, str]]:
    return [(e["from"], e["to"], e["reset_type"]) for e in sim.power_log(host_id)[since:]]


Reached = Callable[[RunningSim, str, int], bool]


def after_off_logged(sim: RunningSim, host_id: str, since: int) -> bool:
    return len(sim.power_log(host_id)) > since


_SETTLES_IN = {"PoweringOff": "Off", "PoweringOn": "On"}


def state_is(state: str) -> Reached:
    """The host shows `state`, or already settled past it (its settled entry is logged since):
    a poll that missed the 0.5 s window under load kills at the next moment, not never (a full
    run at load 10 waited its 120 s out on `PoweringOn`); a kill after the settle must not cycle
    twice either."""
    settled = _SETTLES_IN[state]

    def reached(sim: RunningSim, host_id: str, since: int) -> bool:
        if power_state(sim, host_id) == state:
            return True
        return any(entry["to"] == settled for entry in sim.power_log(host_id)[since:])

    return reached


def activity_started(sim: RunningSim, host_id: str, since: int) -> bool:
    return True  # checked right after the activity was reported started: before any reset settles


CASES = [
    # (host, profile, kill point, when to kill, expected reset types in the log)
    ("host-002", "no-powercycle", "before anything settled", activity_started, ("ForceOff", "On")),
    ("host-002", "no-powercycle", "right after the Off entry", after_off_logged, ("ForceOff", "On")),
    ("host-002", "no-powercycle", "while PoweringOn", state_is("PoweringOn"), ("ForceOff", "On")),
    ("host-005", "reset-cooldown", "right after the Off entry", after_off_logged, ("ForceOff", "On")),
    ("host-001", "powercycle", "while PoweringOff", state_is("PoweringOff"), ("PowerCycle", "PowerCycle")),
    ("host-001", "powercycle", "while PoweringOn", state_is("PoweringOn"), ("PowerCycle", "PowerCycle")),
    ("host-003", "task-monitor", "while PoweringOff", state_is("PoweringOff"), ("PowerCycle", "PowerCycle")),
    (
        "host-004",
        "etag-required",
        "right after the Off entry",
        after_off_logged,
        ("PowerCycle", "PowerCycle"),
    ),
    # Killed the moment Temporal shows a step recorded: with the worker's short heartbeat
    # throttle the reset follows its confirmed step within milliseconds, so these land on either
    # side of the reset that the step guards.
    ("host-002", "no-powercycle", "once off_reached is recorded", "off_reached", ("ForceOff", "On")),
    ("host-002", "no-powercycle", "once on_requested is recorded", "on_requested", ("ForceOff", "On")),
    ("host-001", "powercycle", "once cycle_requested is recorded", "cycle_requested", ("PowerCycle",) * 2),
    ("host-003", "task-monitor", "once cycle_requested is recorded", "cycle_requested", ("PowerCycle",) * 2),
]


@pytest.mark.parametrize(("host_id", "profile", "point", "reached", "expected"), CASES,
                         ids=[f"{c[1]}-{c[2].replace(' ', '-')}" for c in CASES])  # fmt: skip
async def test_killed_worker_never_cycles_twice(
    local_env: WorkflowEnvironment,
    sim: RunningSim,
    host_id: str,
    profile: str,
    point: str,
    reached: Reached | str,
    expected: tuple[str, str],
    power_workers: PowerWorkers,
) -> None:
    assert sim.host(host_id)["bmc"]["profile"] == profile
    client: Client = local_env.client
    queue = f"crash-{uuid.uuid4()}"
    since = len(sim.power_log(host_id))
    first = await power_workers.current()
    async with cycle_worker(client, queue):
        request = PowerCycleInput(
            bmc=access(sim, host_id),
            boot_generation=since // 2 + 1,
            requested_at=datetime.now(UTC),
            power_down_wait_seconds=1.0,
            timeout_seconds=60,
        )
        handle = await client.start_workflow(
            CyclePower.run,
            args=[request, crash_options(power_workers.queue)],
            id=f"crash-{uuid.uuid4()}",
            task_queue=queue,
        )
        await wait_for(lambda: first_activity_started(handle), timeout=120)
        transient = not isinstance(reached, str) and reached not in (activity_started, after_off_logged)
        if not transient:
            # The attempt is the first worker's: the next may poll from now on, and takes the
            # attempt over once the first is killed (its start overlaps the wait for the kill point).
            power_workers.start()
        if isinstance(reached, str):
            await wait_for(lambda: _step_recorded(client, handle, reached), timeout=120)
        else:
            await wait_for(lambda: asyncio.to_thread(reached, sim, host_id, since), timeout=120)
        first.kill()  # SIGKILL: no cleanup, no last heartbeat
        if transient:
            # Started only now: its interpreter's start slowed the polls that catch a state of
            # half a second (PoweringOff) on a loaded machine, and they missed it.
            power_workers.start()
        killed_state = await asyncio.to_thread(power_state, sim, host_id)
        killed_log = transitions(sim, host_id, since)
        result = await asyncio.wait_for(handle.result(), timeout=120)
    log = transitions(sim, host_id, since)
    print(f"{profile} killed {point}: state {killed_state}, log then {killed_log}; result {result.steps}")
    assert log == [("On", "Off", expected[0]), ("Off", "On", expected[1])], (
        point,
        killed_state,
        killed_log,
        log,
    )
    assert result.attempts >= 2
    assert result.steps[-1] == "done"
    assert power_state(sim, host_id) == "On"


async def _step_recorded(client: Client, handle: Any, step: str) -> bool:
    """Whether Temporal shows the power cycle's heartbeat details at `step` (or past it)."""
    description = await handle.describe()
    pending = description.raw_description.pending_activities
    if not pending or not pending[0].heartbeat_details.payloads:
        return False
    (progress,) = await client.data_converter.decode(
        pending[0].heartbeat_details.payloads, [PowerCycleProgress]
    )
    return step in progress.steps
