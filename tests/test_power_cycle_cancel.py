"""`power_cycle_host` under a cancel (a reboot's abort or cancel, attack 41a HIGH-1): it stops only
while it has sent no reset (`stopped_only_before_a_reset`, `PowerCycle.sent_nothing`), else it
holds the cancel off and finishes the cycle: never a ForceOff without its On, and a cancel that
comes as a reset's request goes out is never taken for "nothing sent". Against the simulated
site's BMCs through `ActivityEnvironment` (its `cancel` is the SDK's cancel of a running activity);
the reboot end to end: tests/test_abort_before_a_reset.py."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sim_support import RunningSim, running_sim, sim_http
from test_power_activities import access, environment, log_since

from activities.redfish.power import PowerActivities
from contracts.models.redfish import PowerCycleInput, PowerCycleProgress
from drivers.credentials import CredentialResolver
from drivers.redfish.client import RedfishClient

HOSTS = {
    "host-001": ("cycle_requested", ("PowerCycle", "PowerCycle")),
    "host-002": ("off_requested", ("ForceOff", "On")),
}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with running_sim(tmp_path_factory.mktemp("sim"), hosts=2, dpus_per_host=0, timings="zero") as running:
        yield running


@pytest.fixture
async def client() -> AsyncIterator[RedfishClient]:
    redfish = RedfishClient(CredentialResolver())
    yield redfish
    await redfish.aclose()


def _request(sim: RunningSim, host_id: str) -> PowerCycleInput:
    return PowerCycleInput(
        bmc=access(sim, host_id),
        boot_generation=1,
        requested_at=datetime.now(UTC),
        power_down_wait_seconds=0.2,
    )


def _fault(sim: RunningSim, host_id: str, fault: str) -> None:
    sim_http().post(f"{sim.url}/sim/faults/bmcs/{host_id}/{fault}").raise_for_status()


@pytest.mark.parametrize("host_id", sorted(HOSTS))
async def test_a_cancel_as_a_reset_goes_out_is_held_and_the_cycle_finishes(
    sim: RunningSim, client: RedfishClient, host_id: str
) -> None:
    requested, logged = HOSTS[host_id]
    since = len(sim.power_log(host_id))
    env = environment()

    def beat(*details: Any) -> None:
        # The step is recorded just before its reset is sent, with no await between: a cancel
        # now lands on the reset's own request.
        if (
            details
            and details[0] is not None
            and PowerCycleProgress.model_validate(details[0]).step == requested
        ):
            env.cancel()

    env.on_heartbeat = beat
    result = await env.run(PowerActivities(client).power_cycle_host, _request(sim, host_id))
    assert not result.stopped_before_any_reset and result.steps[-1] == "done", result
    off, on = logged
    assert log_since(sim, host_id, since) == [("On", "Off", off), ("Off", "On", on)]
    assert sim.violations() == []


@pytest.mark.parametrize("attempt", [1, 2])
async def test_a_cancel_while_the_bmc_does_not_answer_stops_a_first_attempt_only(
    sim: RunningSim, client: RedfishClient, attempt: int
) -> None:
    host_id = "host-002"
    since = len(sim.power_log(host_id))
    silent = asyncio.Event()
    env = environment()
    env.info = dataclasses.replace(env.info, attempt=attempt)

    def beat(*details: Any) -> None:
        if details and details[0] is not None and PowerCycleProgress.model_validate(details[0]).bmc_problem:
            silent.set()

    env.on_heartbeat = beat
    _fault(sim, host_id, "unreachable")
    try:
        cycling = asyncio.ensure_future(
            env.run(PowerActivities(client).power_cycle_host, _request(sim, host_id))
        )
        await asyncio.wait_for(silent.wait(), 60)  # riding out the silent BMC, nothing sent
        env.cancel()
        if attempt == 1:  # nothing can have been sent by any attempt: it stops
            result = await asyncio.wait_for(cycling, 60)
            assert result.stopped_before_any_reset and result.reset_types == (), result
        await asyncio.sleep(0.2)  # a held cancel: still riding it out
        _fault(sim, host_id, "clear")
        if attempt == 2:  # an earlier attempt may have sent a ForceOff unrecorded: it finishes
            result = await asyncio.wait_for(cycling, 60)
            assert not result.stopped_before_any_reset and result.steps[-1] == "done", result
            assert log_since(sim, host_id, since) == [("On", "Off", "ForceOff"), ("Off", "On", "On")]
        else:
            assert log_since(sim, host_id, since) == []
    finally:
        _fault(sim, host_id, "clear")
    assert sim.violations() == []
