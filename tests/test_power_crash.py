"""The power cycle that can never happen twice: kill the worker (SIGKILL) at each step of a power
cycle, start a new one, and read the BMC's power log: exactly one Off and one On, always.

The activity runs in a separate worker process (`tests/power_worker.py`) that is killed when the
simulated BMC shows the step reached; the workflow (here, in the test's own worker) retries the
activity on a fresh worker after the 2 s heartbeat timeout. Demo timings: 0.5 s per transition.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from redfish_support import CyclePower, crash_options, cycle_worker, first_activity_started, wait_for
from sim_support import RunningSim, running_sim
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from worker_support import power_worker

from contracts.models.inventory import BMCAccess, CredentialRef
from contracts.models.redfish import PowerCycleInput, PowerCycleProgress


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with running_sim(tmp_path_factory.mktemp("sim"), hosts=5, dpus_per_host=0, timings="demo") as running:
        yield running


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


def state_is(state: str) -> Reached:
    return lambda sim, host_id, since: power_state(sim, host_id) == state


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
    tmp_path: Path,
) -> None:
    assert sim.host(host_id)["bmc"]["profile"] == profile
    client: Client = local_env.client
    queue, activity_queue = f"crash-{uuid.uuid4()}", f"crash-activities-{uuid.uuid4()}"
    since = len(sim.power_log(host_id))
    log_file = tmp_path / "power-worker.log"
    async with power_worker(client, activity_queue, log_file) as first:
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
                args=[request, crash_options(activity_queue)],
                id=f"crash-{uuid.uuid4()}",
                task_queue=queue,
            )
            # Generous: the worker is a fresh interpreter, slow to start on a loaded machine.
            await wait_for(lambda: first_activity_started(handle), timeout=120)
            if isinstance(reached, str):
                await wait_for(lambda: _step_recorded(client, handle, reached), timeout=120)
            else:
                await wait_for(lambda: asyncio.to_thread(reached, sim, host_id, since), timeout=120)
            first.kill()  # SIGKILL: no cleanup, no last heartbeat
            killed_state = await asyncio.to_thread(power_state, sim, host_id)
            killed_log = transitions(sim, host_id, since)
            async with power_worker(client, activity_queue, log_file):
                result = await asyncio.wait_for(handle.result(), timeout=90)
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
