"""Power actions nobody here took (issue 39 items 3-4): another actor with the host's power,
played by the simulated BMC (simulators/redfish/BEHAVIOUR.md F6, F7), is noticed and never fought.

- `power-on-during-power-down` (F6, the bare-metal manager's power manager of
  dsx-ai-factory/infra-controller#1958): the host turned On 1 s after each ForceOff took it Off.
  A reboot's ForceOff -> power-down wait -> On sends one ForceOff, says what happened and ends as
  done (the Off-On was the cycle; workflows/host_reboot/failure.py), with an `UnplannedPower`
  Warning Event on the host's DPUNode: both in `set_power`'s settle (a re-issued reboot's
  ForceOff then On) and in `power_cycle_host`'s durable power-down wait. Before, the re-issued
  reboot sent ForceOff again on every retry, and went to the manual wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest
from events_support import emitting_worker, events_v1
from host_operation_support import FAST_POLICY
from sim_support import RunningSim, running_sim
from temporalio.client import Client

from contracts import names
from contracts.models.host import HostRebootInput, HostRebootResult

HOST = "host-002"  # DEFAULT_ROTATION[1]: `no-powercycle`, cycled by ForceOff, the wait, On
POLICY = FAST_POLICY.model_copy(update={"power_down_wait_seconds": 5.0})  # > the 3 s hand-back


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with running_sim(
        tmp_path_factory.mktemp("unplanned"), hosts=2, dpus_per_host=1, timings="zero", initialised=True
    ) as sim:
        yield sim


def bmc_fault(sim: RunningSim, host: str, fault: str) -> httpx.Response:
    return httpx.post(f"{sim.url}/sim/faults/bmcs/{host}/{fault}", timeout=10)


async def reboot_fought(
    client: Client, task_queue: str, sim: RunningSim, generation: int, *, force_off: bool
) -> tuple[HostRebootResult, list[tuple[str, str]]]:
    """Reboot HOST while F6's actor turns it On after each ForceOff: its result and power log."""
    since, events_before = len(sim.power_log(HOST)), len(unplanned_events(sim))
    bmc_fault(sim, HOST, "power-on-during-power-down").raise_for_status()
    try:
        async with emitting_worker(client, task_queue, sim):
            reboot = await client.start_workflow(
                "HostRebootWorkflow",
                HostRebootInput(
                    host_id=HOST,
                    boot_generation=generation,
                    requested_by="test",
                    policy=POLICY,
                    force_off=force_off,
                ),
                id=f"{names.host_reboot_workflow_id(HOST, generation)}-{task_queue}",
                task_queue=task_queue,
                result_type=HostRebootResult,
            )
            # Fought, it would send ForceOff on each of 5 attempts, then wait for a person.
            result = await asyncio.wait_for(reboot.result(), 30)
            for _ in range(100):  # the Event is written in the background
                if len(unplanned_events(sim)) > events_before:
                    break
                await asyncio.sleep(0.1)
    finally:
        bmc_fault(sim, HOST, "clear").raise_for_status()
    return result, [(e["from"], e["to"]) for e in sim.power_log(HOST)[since:]]


def unplanned_events(sim: RunningSim) -> list[str]:
    """The notes of HOST's `UnplannedPower` Events."""
    return [e["note"] for e in events_v1(sim, f"regarding.name=node-{HOST},reason=UnplannedPower")]


async def test_an_on_within_the_forceoffs_settle_is_the_cycle_not_a_retry(
    client: Client, task_queue: str, site: RunningSim
) -> None:
    result, log = await reboot_fought(client, task_queue, site, 1, force_off=True)
    assert log == [("On", "Off"), ("Off", "On")], log  # one ForceOff, their On, no fight
    assert result.method == "bmc:ForceOff, On by another actor" and result.reset_types == ("ForceOff",)
    assert "turned On by someone else" in result.unplanned_power, result
    assert "counted as the power cycle of generation 1" in result.unplanned_power
    notes = unplanned_events(site)
    assert any("turned On by someone else" in note for note in notes), notes


async def test_an_on_during_the_durable_power_down_wait_is_the_cycle(
    client: Client, task_queue: str, site: RunningSim
) -> None:
    before = len(unplanned_events(site))
    result, log = await reboot_fought(client, task_queue, site, 2, force_off=False)
    assert log == [("On", "Off"), ("Off", "On")], log
    assert result.reset_types == ("ForceOff",) and result.method.endswith("On by another actor"), result
    assert "during the power-down wait" in result.unplanned_power, result
    assert len(unplanned_events(site)) > before
