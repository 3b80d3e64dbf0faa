"""Heartbeats that match the work (issue 15 item 7) and BMC fixes that take effect (issue 9 item 7),
through a real worker and the Temporal dev server against simulated BMCs over HTTP.

A BMC that answers a reset after longer than the activity's heartbeat timeout must not make
Temporal start a second attempt alongside the first: the power log shows exactly one cycle. The
two hosts' slow cycles (`slow_cycles`) run at once, their 12 s waits side by side.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from redfish_support import CycleOptions, CyclePower, credentials_env, cycle_worker, env_access
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from activities.redfish.power import PowerActivities
from contracts.models.redfish import PowerCycleInput, PowerCycleResult, ReadPowerStateInput
from drivers.credentials import CredentialResolver
from drivers.inventory import Inventory
from drivers.redfish.client import RedfishClient
from drivers.settings import Settings
from simulators.redfish.standalone import RunningBMCs, serve_bmcs
from simulators.site import BMC, Host, Site
from simulators.timings import timings_for
from workflows.parts.power_cycle_options import POWER_CYCLE_HEARTBEAT

# The product's own power-cycle heartbeat timeout (4 s): 2 s was shorter than what a loaded
# 2-core run (4 xdist workers, the BMCs in this process) can keep, and the attempt was declared
# dead while its heartbeats waited for the event loop, not for the BMC.
HEARTBEAT_TIMEOUT = POWER_CYCLE_HEARTBEAT
SHORT_HEARTBEAT = CycleOptions(
    heartbeat=HEARTBEAT_TIMEOUT, retry_initial=timedelta(milliseconds=200), retry_maximum=timedelta(seconds=1)
)
SLOW_ANSWER_SECONDS = 12.0  # > heartbeat timeout + retry + the 5 s settle window of a retry


@pytest.fixture(scope="module")
async def sim() -> AsyncIterator[RunningBMCs]:
    site = Site(
        hosts=[
            Host(id="native", bmc=BMC(profile="powercycle")),
            Host(id="forceoff", bmc=BMC(profile="no-powercycle")),
            Host(id="moved", bmc=BMC(profile="no-powercycle")),
        ]
    )
    async with serve_bmcs(site, timings=timings_for("demo", power_transition_seconds=0.2)) as running:
        yield running


SLOW_HOSTS = ("native", "forceoff")
Transition = tuple[str | None, str | None, str | None]  # (from, to, reset type) of the power log


async def _cycle_answered_slowly(
    env: WorkflowEnvironment, sim: RunningBMCs, host_id: str
) -> tuple[list[Transition], PowerCycleResult]:
    """One power cycle of `host_id` whose reset is answered after `SLOW_ANSWER_SECONDS`: the
    host's power log since, and the result."""
    since = len(sim.bmcs.power_log(host_id))
    sim.bmcs.delay_next_reset(host_id, SLOW_ANSWER_SECONDS)
    redfish = RedfishClient(CredentialResolver(env=credentials_env(sim)))
    request = PowerCycleInput(
        bmc=env_access(sim, host_id), boot_generation=1, requested_at=datetime.now(UTC),
        power_down_wait_seconds=0.5, timeout_seconds=60,
    )  # fmt: skip
    task_queue = f"slow-reset-{uuid.uuid4()}"
    try:
        async with cycle_worker(env.client, task_queue, redfish):
            result = await env.client.execute_workflow(
                CyclePower.run,
                args=[request, SHORT_HEARTBEAT],
                id=f"slow-reset-{uuid.uuid4()}",
                task_queue=task_queue,
            )
    finally:
        await redfish.aclose()
    return [(e["from"], e["to"], e["reset_type"]) for e in sim.bmcs.power_log(host_id)[since:]], result


@pytest.fixture(scope="module")
async def slow_cycles(
    local_env: WorkflowEnvironment, sim: RunningBMCs
) -> AsyncIterator[dict[str, asyncio.Task[tuple[list[Transition], PowerCycleResult]]]]:
    """Both hosts' slow cycles, at once (their 12 s answers waited side by side); each case's
    test awaits its own."""
    tasks = {host: asyncio.create_task(_cycle_answered_slowly(local_env, sim, host)) for host in SLOW_HOSTS}
    yield tasks
    for task in tasks.values():
        task.cancel()
    await asyncio.gather(*tasks.values(), return_exceptions=True)


@pytest.mark.parametrize("host_id", SLOW_HOSTS)
async def test_a_reset_answered_after_the_heartbeat_timeout_still_happens_once(
    slow_cycles: dict[str, asyncio.Task[tuple[list[Transition], PowerCycleResult]]], host_id: str
) -> None:
    log, result = await slow_cycles[host_id]
    first = "PowerCycle" if host_id == "native" else "ForceOff"
    second = "PowerCycle" if host_id == "native" else "On"
    assert log == [("On", "Off", first), ("Off", "On", second)]
    assert result.attempts == 1  # never declared dead while the slow request was in flight


async def test_a_corrected_site_file_takes_effect_for_the_next_attempt(
    sim: RunningBMCs, tmp_path: Path
) -> None:
    site_file = tmp_path / "site.yaml"
    wrong = "http://127.0.0.1:9"  # discard port: nothing answers
    ref = {"env": {"username": "U_moved", "password": "P_moved"}}

    def write(endpoint: str) -> None:
        hosts = [{"id": "moved", "bmc": {"endpoint": endpoint, "credentials": ref}}]
        site_file.write_text(yaml.safe_dump({"name": "t", "hosts": hosts}))

    write(sim.base("moved"))  # an operator fixed the file after the workflow read the old one
    settings = Settings.from_env().model_copy(update={"site_file": site_file, "inventory": "site"})
    redfish = RedfishClient(CredentialResolver(env=credentials_env(sim)))
    activities = PowerActivities(redfish, Inventory(settings))
    try:
        stale = ReadPowerStateInput(bmc=env_access(sim, "moved", endpoint=wrong))
        power = await ActivityEnvironment().run(activities.read_power_state, stale)
        assert power.power_state == "On" and power.bmc_id == "moved"
        write(wrong)  # and a file broken again is used as it is: the error names the new endpoint
        with pytest.raises(Exception, match="127.0.0.1:9"):
            await ActivityEnvironment().run(
                activities.read_power_state, ReadPowerStateInput(bmc=env_access(sim, "moved"))
            )
    finally:
        await redfish.aclose()
