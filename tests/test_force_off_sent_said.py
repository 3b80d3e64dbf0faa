"""Attack 41a MEDIUM-2, the ForceOff activity's side: `set_power_state` says in its error whether
a reset was sent (its `POWER_CYCLE_STEP` detail), so a full reset claims the host off only then
(`off_may_have_been_sent`, pure: tests/fast/test_force_off_sent.py). Against the simulated BMC,
through `ActivityEnvironment`: unreachable, nothing sent, no detail; an earlier attempt that sent
(its heartbeat) makes a later one's failure say so; a ForceOff sent whose power state never came
in time says so, and heartbeats it before it is sent."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import pytest
from sim_support import RunningSim, running_sim, sim_http
from temporalio.exceptions import ActivityError, ApplicationError, RetryState
from temporalio.testing import ActivityEnvironment

from activities.redfish.power import PowerActivities
from contracts.errors import activity_answer_details
from contracts.models.inventory import BMCAccess, CredentialRef
from contracts.models.redfish import POWER_CYCLE_STEP, SetPowerInput
from drivers.credentials import CredentialResolver
from drivers.redfish.client import RedfishClient
from workflows.parts.host_power import off_may_have_been_sent


def sent(err: BaseException) -> bool:
    return off_may_have_been_sent(activity_answer_details(err))


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with running_sim(
        tmp_path_factory.mktemp("sim"), hosts=2, dpus_per_host=0, timing={"power_transition_seconds": 30}
    ) as running:  # fmt: skip
        yield running


@pytest.fixture
async def client() -> AsyncIterator[RedfishClient]:
    redfish = RedfishClient(CredentialResolver())
    yield redfish
    await redfish.aclose()


def access(sim: RunningSim, host_id: str) -> BMCAccess:
    bmc = sim.host(host_id)["bmc"]
    return BMCAccess(
        bmc_id=host_id, endpoint=bmc["endpoint"], credentials=CredentialRef(**bmc["credentials"])
    )


def environment(details: list[Any], heartbeats: list[Any]) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info, heartbeat_timeout=timedelta(seconds=3), heartbeat_details=details
    )
    env.on_heartbeat = lambda *args: heartbeats.append(args[0] if args else None)
    return env


async def force_off_fails(
    sim: RunningSim, client: RedfishClient, host_id: str, details: list[Any], heartbeats: list[Any]
) -> ApplicationError:
    request = SetPowerInput(
        bmc=access(sim, host_id), reset_type="ForceOff", timeout_seconds=1, settle_seconds=0
    )
    with pytest.raises(ApplicationError) as raised:
        await environment(details, heartbeats).run(PowerActivities(client).set_power_state, request)
    return raised.value


def as_activity_failure(err: ApplicationError) -> ActivityError:
    failure = ActivityError(
        "Activity task failed", scheduled_event_id=1, started_event_id=2, identity="w",
        activity_type="set_power_state", activity_id="1", retry_state=RetryState.MAXIMUM_ATTEMPTS_REACHED,
    )  # fmt: skip
    failure.__cause__ = err
    return failure


def fault(sim: RunningSim, host_id: str, name: str) -> None:
    sim_http().post(f"{sim.url}/sim/faults/bmcs/{host_id}/{name}").raise_for_status()


async def test_an_unreachable_bmc_fails_the_force_off_saying_nothing_was_sent(
    sim: RunningSim, client: RedfishClient
) -> None:
    fault(sim, "host-001", "unreachable")
    try:
        err = await force_off_fails(sim, client, "host-001", [], [])
        assert err.type == "BMCUnavailable" and "cannot reach" in err.message, err
        assert not any(isinstance(d, dict) and POWER_CYCLE_STEP in d for d in err.details), err.details
        assert not sent(as_activity_failure(err))
        # An earlier attempt sent the ForceOff (its heartbeat says): this one's failure says so too.
        err = await force_off_fails(sim, client, "host-001", [{POWER_CYCLE_STEP: "off_requested"}], [])
        assert {POWER_CYCLE_STEP: "off_requested"} in err.details, err.details
        assert sent(as_activity_failure(err))
    finally:
        fault(sim, "host-001", "clear")
    assert sim.power_log("host-001") == []


async def test_a_force_off_sent_then_not_seen_in_time_says_it_was_sent(
    sim: RunningSim, client: RedfishClient
) -> None:
    heartbeats: list[Any] = []
    err = await force_off_fails(sim, client, "host-002", [], heartbeats)  # Off takes 30 s, 1 s allowed
    assert err.type == "PowerStateTimeout", err
    assert {POWER_CYCLE_STEP: "off_requested"} in err.details, err.details
    assert sent(as_activity_failure(err))
    assert {POWER_CYCLE_STEP: "off_requested"} in heartbeats  # a retry would know it
