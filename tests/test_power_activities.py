"""The Redfish activities against the simulated site, every host BMC profile and the DPU BMC:
what the BMC's power log and FirmwareInventory show after each activity, through
`ActivityEnvironment` and through a real worker on the `flaky` fault profile."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sim_support import RunningSim, running_sim
from takeover_support import sticky_timeout
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.redfish import power_activities
from activities.redfish.firmware import FirmwareActivities
from activities.redfish.power import PowerActivities
from contracts.errors import BMCAuthenticationFailed, BMCRequestRejected, ResetTypeNotSupported
from contracts.models.inventory import BMCAccess, CredentialRef
from contracts.models.redfish import (
    GracefulShutdownInput,
    PowerCycleInput,
    PowerCycleProgress,
    PowerCycleResult,
    ReadFirmwareInput,
    ReadPowerStateInput,
    SetPowerInput,
    StageFirmwareInput,
)
from drivers.credentials import CredentialResolver
from drivers.redfish.client import RedfishClient

PROFILES = {
    "host-001": ("powercycle", "System.Embedded.1", "PowerCycle"),
    "host-002": ("no-powercycle", "1", "ForceOff+On"),
    "host-003": ("task-monitor", "Self", "PowerCycle"),
    "host-004": ("etag-required", "1", "PowerCycle"),
    "host-005": ("reset-cooldown", "1", "ForceOff+On"),
}
LOG_OF = {"PowerCycle": ("PowerCycle", "PowerCycle"), "ForceOff+On": ("ForceOff", "On")}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with running_sim(tmp_path_factory.mktemp("sim"), hosts=5, dpus_per_host=1, timings="zero") as running:
        yield running


@pytest.fixture
async def client() -> AsyncIterator[RedfishClient]:
    redfish = RedfishClient(CredentialResolver())
    yield redfish
    await redfish.aclose()


def access(sim: RunningSim, bmc_id: str) -> BMCAccess:
    host = sim.host(bmc_id.split("-dpu-")[0])
    bmc = host["bmc"] if "-dpu-" not in bmc_id else next(d["bmc"] for d in host["dpus"] if d["id"] == bmc_id)
    return BMCAccess(bmc_id=bmc_id, endpoint=bmc["endpoint"], credentials=CredentialRef(**bmc["credentials"]))


# The heartbeat timeout of the activities run here without a server: the power cycle waits its
# throttle (0.8 x this) plus 1 s after each recorded step, as nothing can read the step back
# (`heartbeat_flush_seconds`); 0.25 s, not 1 s, so that wait is 1.2 s, not 1.8 s, per step.
HEARTBEAT_TIMEOUT = timedelta(seconds=0.25)
# How long a power change the tests make is watched before it counts: none when the test only
# sets a host up for what it asserts, 0.5 s (not the default 3 s) where the result is asserted.
SET_UP_SETTLE = 0.0
SETTLE = 0.5


def environment(heartbeats: list[Any] | None = None, details: list[Any] | None = None) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info, heartbeat_timeout=HEARTBEAT_TIMEOUT, heartbeat_details=details or []
    )
    if heartbeats is not None:
        env.on_heartbeat = lambda *args: heartbeats.append(args[0] if args else None)
    return env


def log_since(sim: RunningSim, host_id: str, since: int) -> list[tuple[str, str, str]]:
    return [(e["from"], e["to"], e["reset_type"]) for e in sim.power_log(host_id)[since:]]


@pytest.mark.parametrize("host_id", sorted(PROFILES))
async def test_read_power_state_every_profile(sim: RunningSim, client: RedfishClient, host_id: str) -> None:
    profile, system_id, method = PROFILES[host_id]
    power = await environment().run(
        PowerActivities(client).read_power_state, ReadPowerStateInput(bmc=access(sim, host_id))
    )
    assert power.system == f"/redfish/v1/Systems/{system_id}"
    assert power.power_state == "On"
    assert power.power_cycle_method == method
    assert ("PowerCycle" in power.allowed_reset_types) == (profile != "no-powercycle")
    assert (power.last_reset_time is not None) == (method == "PowerCycle")


@pytest.mark.parametrize("host_id", sorted(PROFILES))
async def test_power_cycle_every_profile_is_one_off_and_one_on(
    sim: RunningSim, client: RedfishClient, host_id: str
) -> None:
    _, _, method = PROFILES[host_id]
    since = len(sim.power_log(host_id))
    heartbeats: list[Any] = []
    request = PowerCycleInput(
        bmc=access(sim, host_id),
        boot_generation=1,
        requested_at=datetime.now(UTC),
        power_down_wait_seconds=0.2,
    )
    result = await environment(heartbeats).run(PowerActivities(client).power_cycle_host, request)
    off, on = LOG_OF[method]
    assert log_since(sim, host_id, since) == [("On", "Off", off), ("Off", "On", on)]
    assert result.method == method
    assert result.reset_types == ((off,) if method == "PowerCycle" else (off, on))
    assert result.steps[-1] == "done" and not result.already_done
    steps = {PowerCycleProgress.model_validate(h).step for h in heartbeats if h is not None}
    assert steps >= (
        {"cycle_requested"} if method == "PowerCycle" else {"off_requested", "off_reached", "on_requested"}
    )
    assert sim.violations() == []


async def test_power_cycle_of_a_host_that_is_off_just_turns_it_on(
    sim: RunningSim, client: RedfishClient
) -> None:
    activities = PowerActivities(client)
    bmc = access(sim, "host-001")
    await environment().run(
        activities.set_power_state,
        SetPowerInput(bmc=bmc, reset_type="ForceOff", settle_seconds=SET_UP_SETTLE),
    )
    since = len(sim.power_log("host-001"))
    request = PowerCycleInput(
        bmc=bmc, boot_generation=2, requested_at=datetime.now(UTC), power_down_wait_seconds=0
    )
    result = await environment().run(activities.power_cycle_host, request)
    assert log_since(sim, "host-001", since) == [("Off", "On", "On")]
    assert (result.method, result.reset_types) == ("On", ("On",))


async def test_a_cycle_already_seen_in_last_reset_time_is_not_repeated(
    sim: RunningSim, client: RedfishClient
) -> None:
    activities = PowerActivities(client)
    bmc = access(sim, "host-004")
    asked = datetime.now(UTC)
    first = await environment().run(
        activities.power_cycle_host, PowerCycleInput(bmc=bmc, boot_generation=3, requested_at=asked)
    )
    since = len(sim.power_log("host-004"))
    # The same generation again, as a new activity without heartbeat details (e.g. after a failed one).
    again = await environment().run(
        activities.power_cycle_host, PowerCycleInput(bmc=bmc, boot_generation=3, requested_at=asked)
    )
    assert not first.already_done and again.already_done
    assert again.reset_types == () and log_since(sim, "host-004", since) == []


async def test_resuming_after_off_reached_sends_only_on(sim: RunningSim, client: RedfishClient) -> None:
    activities = PowerActivities(client)
    bmc = access(sim, "host-002")
    await environment().run(
        activities.set_power_state,
        SetPowerInput(bmc=bmc, reset_type="ForceOff", settle_seconds=SET_UP_SETTLE),
    )
    since = len(sim.power_log("host-002"))
    progress = PowerCycleProgress(
        step="off_reached",
        method="ForceOff+On",
        off_reached_at=datetime.now(UTC),
        steps=("off_requested", "off_reached"),
        reset_types=("ForceOff",),
    )
    env = environment(details=[progress.model_dump(mode="json")])
    request = PowerCycleInput(
        bmc=bmc, boot_generation=4, requested_at=datetime.now(UTC), power_down_wait_seconds=0
    )
    result = await env.run(activities.power_cycle_host, request)
    assert log_since(sim, "host-002", since) == [("Off", "On", "On")]
    assert result.reset_types == ("ForceOff", "On")
    # Resumed at on_requested with the host On: the On was taken; nothing is sent.
    done = PowerCycleProgress(step="on_requested", method="ForceOff+On", reset_types=("ForceOff", "On"))
    again = await environment(details=[done.model_dump(mode="json")]).run(
        activities.power_cycle_host, request
    )
    assert again.reset_types == ("ForceOff", "On") and len(sim.power_log("host-002")) == since + 1


async def test_set_power_skips_what_holds_and_turns_a_restart_of_an_off_host_into_on(
    sim: RunningSim, client: RedfishClient
) -> None:
    activities = PowerActivities(client)
    bmc = access(sim, "host-003")
    since = len(sim.power_log("host-003"))
    off = await environment().run(
        activities.set_power_state, SetPowerInput(bmc=bmc, reset_type="ForceOff", settle_seconds=SETTLE)
    )
    off_again = await environment().run(
        activities.set_power_state, SetPowerInput(bmc=bmc, reset_type="ForceOff", settle_seconds=SETTLE)
    )
    restart = await environment().run(
        activities.set_power_state, SetPowerInput(bmc=bmc, reset_type="ForceRestart", settle_seconds=SETTLE)
    )
    assert (off.sent, off.power_state, off_again.sent) == ("ForceOff", "Off", None)
    assert (restart.sent, restart.power_state) == ("On", "On")
    assert log_since(sim, "host-003", since) == [("On", "Off", "ForceOff"), ("Off", "On", "On")]
    with pytest.raises(ResetTypeNotSupported, match="PowerCycle"):
        await environment().run(
            activities.set_power_state, SetPowerInput(bmc=access(sim, "host-002"), reset_type="PowerCycle")
        )


async def test_graceful_shutdown(sim: RunningSim, client: RedfishClient) -> None:
    activities = PowerActivities(client)
    bmc = access(sim, "host-005")
    since = len(sim.power_log("host-005"))
    result = await environment().run(
        activities.shut_down_host_gracefully, GracefulShutdownInput(bmc=bmc, grace_seconds=5)
    )
    assert (result.reset_types, result.forced, result.power_state) == (("GracefulShutdown",), False, "Off")
    assert log_since(sim, "host-005", since) == [("On", "Off", "GracefulShutdown")]
    await environment().run(
        activities.set_power_state, SetPowerInput(bmc=bmc, reset_type="On", settle_seconds=SET_UP_SETTLE)
    )


async def test_wrong_credentials_are_a_permanent_error_without_the_secret(
    sim: RunningSim, client: RedfishClient, tmp_path: Path
) -> None:
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"username": "admin", "password": "not-the-password"}')
    bmc = access(sim, "host-001").model_copy(update={"credentials": CredentialRef(file=str(wrong))})
    with pytest.raises(BMCAuthenticationFailed) as caught:
        await environment().run(PowerActivities(client).read_power_state, ReadPowerStateInput(bmc=bmc))
    assert "401" in caught.value.message and str(wrong) in caught.value.message
    assert "not-the-password" not in caught.value.message


async def test_stage_dpu_firmware_then_skip_then_activate_by_power_cycle(
    sim: RunningSim, client: RedfishClient
) -> None:
    firmware = FirmwareActivities(client)
    dpu = access(sim, "host-004-dpu-0")
    before = await environment().run(firmware.read_dpu_firmware_versions, ReadFirmwareInput(bmc=dpu))
    assert before.running == "32.43.1014" and before.staged is None
    request = StageFirmwareInput(
        bmc=dpu, image_uri="http://repo.local/bf-fw-32.45.1020.bfb", version="32.45.1020"
    )
    staged = await environment().run(firmware.stage_dpu_firmware, request)
    assert (staged.outcome, staged.staged, staged.running, staged.task_state) == (
        "staged",
        "32.45.1020",
        "32.43.1014",
        "Completed",
    )
    again = await environment().run(firmware.stage_dpu_firmware, request)
    assert again.outcome == "already_staged"
    cycle = PowerCycleInput(bmc=access(sim, "host-004"), boot_generation=9, requested_at=datetime.now(UTC))
    await environment().run(PowerActivities(client).power_cycle_host, cycle)
    after = await environment().run(firmware.read_dpu_firmware_versions, ReadFirmwareInput(bmc=dpu))
    assert (after.running, after.staged) == ("32.45.1020", None)
    assert (await environment().run(firmware.stage_dpu_firmware, request)).outcome == "already_running"
    bad = StageFirmwareInput(bmc=dpu, image_uri="http://repo.local/no-version.bfb", version="33.0.1")
    with pytest.raises(BMCRequestRejected, match="ended Exception"):
        await environment().run(firmware.stage_dpu_firmware, bad)


@workflow.defn(sandboxed=False)
class CycleAll:
    """Power cycles each host once through the real activity, as host workflows will."""

    @workflow.run
    async def run(self, requests: list[PowerCycleInput]) -> list[PowerCycleResult]:
        results = []
        for request in requests:
            results.append(
                await workflow.execute_activity(
                    "power_cycle_host",
                    request,
                    result_type=PowerCycleResult,
                    start_to_close_timeout=timedelta(minutes=2),
                    heartbeat_timeout=timedelta(seconds=2),
                    retry_policy=RetryPolicy(
                        initial_interval=timedelta(milliseconds=100), maximum_interval=timedelta(seconds=1)
                    ),
                )
            )
        return results


async def test_flaky_bmcs_through_a_real_worker_still_cycle_each_host_once(
    local_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    with running_sim(
        tmp_path / "sim", hosts=5, dpus_per_host=0, faults="flaky", seed=7, timings="zero"
    ) as sim:
        redfish = RedfishClient(CredentialResolver())
        requests = [
            PowerCycleInput(bmc=access(sim, host_id), boot_generation=1, requested_at=datetime.now(UTC),
                            power_down_wait_seconds=0.2)
            for host_id in sorted(PROFILES)
        ]  # fmt: skip
        async with Worker(
            local_env.client,
            task_queue=task_queue,
            workflows=[CycleAll],
            activities=power_activities(PowerActivities(redfish)),
            workflow_runner=UnsandboxedWorkflowRunner(),
            sticky_queue_schedule_to_start_timeout=sticky_timeout(),
        ):
            results = await local_env.client.execute_workflow(
                CycleAll.run, requests, id=f"flaky-{uuid.uuid4()}", task_queue=task_queue
            )
        await redfish.aclose()
        for host_id, result in zip(sorted(PROFILES), results, strict=True):
            off, on = LOG_OF[PROFILES[host_id][2]]
            assert log_since(sim, host_id, 0) == [("On", "Off", off), ("Off", "On", on)], host_id
            print(host_id, result.method, result.attempts, result.requests, result.steps)
        assert sim.violations() == []
