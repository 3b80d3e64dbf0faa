"""DPU BMCs over real HTTP: SimpleUpdate staging, FirmwareInventory, activation at a host power cycle."""

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

STAGE = 0.3
DPU = "host-001-dpu-0"
SIBLING = "host-001-dpu-1"
IMAGE = "http://repo.example/firmware/bf-fw-32.45.1020.bfb"


@pytest.fixture
async def sim() -> AsyncIterator[RunningBMCs]:
    timings = timings_for("zero", firmware_stage_seconds=STAGE, power_transition_seconds=0.05)
    async with serve_bmcs(default_site(1, 2), timings=timings) as running:
        yield running


async def inventory(sim: RunningBMCs, client: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
    """FirmwareInventory as a client reads it: every member followed, keyed by Id."""
    collection = (await client.get("/redfish/v1/UpdateService/FirmwareInventory")).json()
    items = {}
    for member in collection["Members"]:
        item = (await client.get(member["@odata.id"])).json()
        items[item["Id"]] = item
    return items


async def simple_update(client: httpx.AsyncClient, sim: RunningBMCs, body: dict[str, Any]) -> httpx.Response:
    root = (await client.get("/redfish/v1/")).json()
    service = (await client.get(root["UpdateService"]["@odata.id"])).json()
    target = service["Actions"]["#UpdateService.SimpleUpdate"]["target"]
    return await client.post(target, json=body)


async def wait_task(client: httpx.AsyncClient, sim: RunningBMCs, monitor: str) -> dict[str, Any]:
    for _ in range(100):
        response = await client.get(monitor)
        if response.status_code != 202:
            assert response.status_code == 200
            return dict(response.json())
        await asyncio.sleep(0.05)
    raise AssertionError("the task never finished")


async def test_staged_firmware_shows_pending_and_runs_after_the_host_power_cycles(sim: RunningBMCs) -> None:
    async with basic_client(sim, DPU) as client:
        before = await inventory(sim, client)
        assert set(before) == {"BMC_Firmware", "DPU_NIC"}
        assert before["DPU_NIC"]["Version"] == "32.43.1014"
        assert before["DPU_NIC"]["@odata.type"].startswith("#SoftwareInventory.v1_")

        response = await simple_update(client, sim, {"ImageURI": IMAGE, "TransferProtocol": "HTTP"})
        assert response.status_code == 202
        monitor = response.headers["Location"]
        assert monitor.startswith("/redfish/v1/TaskService/Tasks/")
        assert "Retry-After" in response.headers
        running = await client.get(monitor)
        assert running.status_code == 202 and running.json()["TaskState"] == "Running"
        again = await simple_update(client, sim, {"ImageURI": IMAGE})
        assert again.status_code == 409

        task = await wait_task(client, sim, monitor)
        assert task["TaskState"] == "Completed" and task["TaskStatus"] == "OK"
        staged = await inventory(sim, client)
        assert staged["DPU_NIC"]["Version"] == "32.43.1014"
        assert staged["DPU_NIC_Pending"]["Version"] == "32.45.1020"
        assert staged["DPU_NIC_Pending"]["Status"]["State"] == "StandbyOffline"

        # ForceOff alone activates nothing; the host coming back On does.
        await reset_the_host(sim, ("ForceOff",))
        assert (await inventory(sim, client))["DPU_NIC_Pending"]["Version"] == "32.45.1020"
        await reset_the_host(sim, ("On",))
        after = await inventory(sim, client)
        assert set(after) == {"BMC_Firmware", "DPU_NIC"}
        assert after["DPU_NIC"]["Version"] == "32.45.1020"
        gone = await client.get("/redfish/v1/UpdateService/FirmwareInventory/DPU_NIC_Pending")
        assert gone.status_code == 404
    assert sim.bmcs.dpu_firmware(SIBLING) == {"running": "32.43.1014", "staged": None}


async def test_power_cycle_reset_type_activates_staged_firmware(sim: RunningBMCs) -> None:
    async with basic_client(sim, SIBLING) as client:
        response = await simple_update(client, sim, {"ImageURI": "https://repo/bf/fw-32.46.0001.bfb"})
        await wait_task(client, sim, response.headers["Location"])
    assert sim.bmcs.dpu_firmware(SIBLING) == {"running": "32.43.1014", "staged": "32.46.0001"}
    await reset_the_host(sim, ("PowerCycle",))
    for _ in range(50):
        if sim.bmcs.power_state("host-001") == "On":
            break
        await asyncio.sleep(0.02)
    assert sim.bmcs.dpu_firmware(SIBLING) == {"running": "32.46.0001", "staged": None}


@pytest.mark.parametrize(
    "image_uri",
    [
        "repo.example/bf-fw-32.45.1020.bfb",
        "http://repo.example/firmware/latest.bfb",
        "ftp://h/bf-fw-1.2.3.bfb",
    ],
)
async def test_a_malformed_image_uri_ends_the_task_in_exception(sim: RunningBMCs, image_uri: str) -> None:
    async with basic_client(sim, DPU) as client:
        response = await simple_update(client, sim, {"ImageURI": image_uri})
        assert response.status_code == 202
        task = await wait_task(client, sim, response.headers["Location"])
        assert task["TaskState"] == "Exception" and task["TaskStatus"] == "Critical"
        assert image_uri in task["Messages"][0]["Message"]
        assert set(await inventory(sim, client)) == {"BMC_Firmware", "DPU_NIC"}


async def test_an_injected_update_failure_and_bad_requests(sim: RunningBMCs) -> None:
    sim.bmcs.inject_update_failure(DPU, "Firmware image signature verification failed.")
    async with basic_client(sim, DPU) as client:
        response = await simple_update(client, sim, {"ImageURI": IMAGE})
        task = await wait_task(client, sim, response.headers["Location"])
        assert task["TaskState"] == "Exception"
        assert task["Messages"][0]["Message"] == "Firmware image signature verification failed."
        assert sim.bmcs.dpu_firmware(DPU)["staged"] is None
        missing = await simple_update(client, sim, {"TransferProtocol": "HTTP"})
        assert missing.status_code == 400
        assert missing.json()["error"]["@Message.ExtendedInfo"][0]["MessageId"].endswith(
            "ActionParameterMissing"
        )
        protocol = await simple_update(client, sim, {"ImageURI": IMAGE, "TransferProtocol": "TFTP"})
        assert protocol.status_code == 400
        # A retry after the failure stages normally.
        retry = await simple_update(client, sim, {"ImageURI": IMAGE})
        assert (await wait_task(client, sim, retry.headers["Location"]))["TaskState"] == "Completed"
        # The DPU's own system is powered by its host.
        system = (await client.get("/redfish/v1/Systems/Bluefield")).json()
        assert system["PowerState"] == "On"
    async with httpx.AsyncClient(base_url=sim.base("host-001"), auth=sim.credentials["host-001"]) as host:
        # A host BMC's UpdateService (BEHAVIOUR.md H1) only reads: no SimpleUpdate on a host.
        assert "Actions" not in (await host.get("/redfish/v1/UpdateService")).json()
        action = "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"
        assert (await host.post(action, json={"ImageURI": IMAGE})).status_code == 404


async def _system(client: httpx.AsyncClient) -> dict[str, Any]:
    return dict((await client.get("/redfish/v1/Systems/Bluefield")).json())


async def test_a_running_arm_reports_the_dmtf_boot_progress_value(sim: RunningBMCs) -> None:
    """BEHAVIOUR.md B8 (issue 36 re-audit): `BootProgress.LastState` takes DMTF's
    `BootProgressTypes` value `OSRunning` (DSP8010 ComputerSystem), next to NVIDIA's
    `OemLastState` `OsIsRunning`; the simulator served the misspelt `OsRunning` before."""
    async with basic_client(sim, DPU) as client:
        running = await _system(client)
        assert running["BootProgress"]["OemLastState"] == "OsIsRunning"
        assert running["BootProgress"]["LastState"] == "OSRunning"


async def test_the_arm_has_no_power_while_its_host_is_off_and_boots_with_it(sim: RunningBMCs) -> None:
    """BEHAVIOUR.md B10, B12: no running Arm while the host is off (PowerState Off, BootProgress
    None; a ForceRestart is accepted and does nothing; a PowerCycle takes effect, the NIC reset);
    at the host's On the Arm boots from BootRom."""
    await reset_the_host(sim, ("ForceOff",))
    async with basic_client(sim, DPU) as client:
        off = await _system(client)
        assert (off["PowerState"], off["BootProgress"]["LastState"]) == ("Off", "None")
        assert "OemLastState" not in off["BootProgress"]
        target = off["Actions"]["#ComputerSystem.Reset"]["target"]
        assert (await client.post(target, json={"ResetType": "ForceRestart"})).status_code == 200
        assert (await client.post(target, json={"ResetType": "PowerCycle"})).status_code == 200
        state = sim.bmcs.dpu_state(DPU)
        assert (state["powered"], state["nic_resets"], state["arm"]) == (False, 1, "None")
        assert (await _system(client))["PowerState"] == "Off"  # reset, yet no Arm to boot
        await reset_the_host(sim, ("On",))
        booting = await _system(client)
        assert booting["PowerState"] == "On"
        assert booting["BootProgress"]["OemLastState"] in ("BootRom", "UEFI", "OsIsRunning")


async def test_a_bmc_without_power_cycle_neither_advertises_nor_takes_it(sim: RunningBMCs) -> None:
    """BEHAVIOUR.md B13 (fault `no-powercycle`)."""
    sim.bmcs.dpu_fault(DPU, "no-powercycle")
    async with basic_client(sim, DPU) as client:
        action = (await _system(client))["Actions"]["#ComputerSystem.Reset"]
        assert "PowerCycle" not in action["ResetType@Redfish.AllowableValues"]
        info = (await client.get(action["@Redfish.ActionInfo"])).json()
        assert "PowerCycle" not in info["Parameters"][0]["AllowableValues"]
        refused = await client.post(action["target"], json={"ResetType": "PowerCycle"})
        assert refused.status_code == 400
    assert sim.bmcs.dpu_state(DPU)["resets"] == {}
