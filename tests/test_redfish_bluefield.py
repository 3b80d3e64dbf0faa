"""The BlueField BMC profile of the simulated DPU BMC (simulators/redfish/BEHAVIOUR.md), over real
HTTP: what each reset type does to the Arm and the NIC, PowerCycle held until the host is off,
SOC.ForceReset, the Paused state, BootProgress and LastResetTime."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from redfish_support import basic_client, reset_the_host

from simulators.redfish.standalone import RunningBMCs, serve_bmcs
from simulators.site import default_site
from simulators.timings import timings_for

DPU = "host-001-dpu-0"
SYSTEM = "/redfish/v1/Systems/Bluefield"


@pytest.fixture
async def sim() -> AsyncIterator[RunningBMCs]:
    timings = timings_for("zero", dpu_boot_seconds=0.2, power_transition_seconds=0.05)
    async with serve_bmcs(default_site(1, 1), timings=timings) as running:
        yield running


async def reset(client: httpx.AsyncClient, reset_type: str) -> httpx.Response:
    return await client.post(f"{SYSTEM}/Actions/ComputerSystem.Reset", json={"ResetType": reset_type})


async def system(client: httpx.AsyncClient) -> dict[str, Any]:
    return dict((await client.get(SYSTEM)).json())


async def booted(client: httpx.AsyncClient) -> dict[str, Any]:
    for _ in range(100):
        body = await system(client)
        if body["BootProgress"]["OemLastState"] == "OsIsRunning":
            return body
        await asyncio.sleep(0.02)
    raise AssertionError(f"the Arm never reached OsIsRunning: {body}")


async def test_force_restart_resets_the_arm_only_and_boots_it_again(sim: RunningBMCs) -> None:
    async with basic_client(sim, DPU) as client:
        answer = await reset(client, "ForceRestart")
        assert answer.status_code == 200
        assert answer.json()["@Message.ExtendedInfo"][0]["MessageId"].endswith("Success")
        body = await system(client)
        assert body["BootProgress"]["OemLastState"] == "BootRom" and body["LastResetTime"]
        assert (await booted(client))["PowerState"] == "On"
    assert sim.bmcs.dpu_state(DPU)["nic_resets"] == 0
    assert sim.bmcs.power_state("host-001") == "On"  # the host is not touched


async def test_power_cycle_is_accepted_and_held_until_the_host_is_off(sim: RunningBMCs) -> None:
    """No source gives an error for a PowerCycle with the host on: the documented answer is the
    generic success, and the reset "does not take effect" until PERST/All_STANDBY (host off)."""
    async with basic_client(sim, DPU) as client:
        assert (await reset(client, "PowerCycle")).status_code == 200
        await asyncio.sleep(0.1)
        held = sim.bmcs.dpu_state(DPU)
        assert held["latched"] and held["nic_resets"] == 0 and "LastResetTime" not in await system(client)
        await reset_the_host(sim, ("ForceOff",))
        state = sim.bmcs.dpu_state(DPU)
        assert not state["latched"] and state["nic_resets"] == 1
        assert (await system(client))["PowerState"] == "Off"  # no Arm while the host is off (B10)
        await reset_the_host(sim, ("On",))
        await booted(client)  # the Arm boots with its host (B12)


async def test_soc_force_reset_resets_arm_and_nic_at_once(sim: RunningBMCs) -> None:
    async with basic_client(sim, DPU) as client:
        oem = (await client.get(f"{SYSTEM}/Oem/Nvidia")).json()
        target = oem["Actions"]["#SOC.ForceReset"]["target"]
        assert (await client.post(target)).status_code == 200  # no body, as the doc's curl
        assert sim.bmcs.dpu_state(DPU)["nic_resets"] == 1
        await booted(client)


async def test_a_paused_dpu_ignores_on_and_force_restart_recovers_it(sim: RunningBMCs) -> None:
    sim.bmcs.dpu_fault(DPU, "paused")
    async with basic_client(sim, DPU) as client:
        body = await system(client)
        assert (body["PowerState"], body["Status"]["State"]) == ("Paused", "StandbyOffline")
        assert body["BootProgress"]["OemLastState"] == "UEFI"
        assert (await reset(client, "On")).status_code == 200
        await asyncio.sleep(0.1)
        assert (await system(client))["PowerState"] == "Paused"  # accepted, nothing changed
        assert (await reset(client, "ForceRestart")).status_code == 200
        assert (await booted(client))["PowerState"] == "On"


async def test_graceful_shutdown_leaves_the_arm_in_standby_and_other_types_are_refused(
    sim: RunningBMCs,
) -> None:
    async with basic_client(sim, DPU) as client:
        assert (await reset(client, "GracefulShutdown")).status_code == 200
        body = await system(client)
        assert (body["PowerState"], body["BootProgress"]["OemLastState"]) == ("Paused", "LowPowerStandby")
        refused = await reset(client, "ForceOff")
        assert refused.status_code == 400
        assert refused.json()["error"]["@Message.ExtendedInfo"][0]["MessageId"].endswith(
            "ActionParameterNotSupported"
        )
        assert sim.bmcs.dpu_state(DPU)["resets"] == {"GracefulShutdown": 1}
