"""A restarted simulated site keeps its hosts' power and its DPUs' firmware (issue 40): restarting
`metalflow dev` on the same state dir brought every host back On and every DPU at its generated
firmware, so a reboot in its power-down wait recorded an unplanned power On nobody made, and a
host left Off read On. A BMC's power state and firmware survive a restart of its management
client (redfish BEHAVIOUR.md L2); the simulator keeps them in its snapshot (`--persist`)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
from sim_support import RunningSim, running_sim

from metalflow.devstack.stack import reset_state

HOST, DPU = "host-001", "host-001-dpu-0"  # the `powercycle` profile
SYSTEM = "/redfish/v1/Systems/System.Embedded.1"
FIRST, SECOND = "32.45.1020", "32.46.1100"


def bmc(sim: RunningSim, bmc_id: str) -> httpx.Client:
    """A basic-auth client of the BMC, from what the simulator wrote (site.yaml, credentials/)."""
    systems = [*sim.site["hosts"], *(dpu for host in sim.site["hosts"] for dpu in host["dpus"])]
    entry = next(system["bmc"] for system in systems if system["id"] == bmc_id)
    account = json.loads(Path(entry["credentials"]["file"]).read_text())
    auth = (account["username"], account["password"])
    return httpx.Client(base_url=entry["endpoint"], auth=auth, timeout=10)


def until(read: Any, expected: Any) -> Any:
    """Poll `read()` until it returns `expected` (generous deadline); the last value read."""
    deadline = time.monotonic() + 30
    while (value := read()) != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    return value


def reset(client: httpx.Client, reset_type: str) -> None:
    answer = client.post(f"{SYSTEM}/Actions/ComputerSystem.Reset", json={"ResetType": reset_type})
    assert answer.status_code < 300, answer.text


def stage(client: httpx.Client, version: str) -> None:
    body = {"ImageURI": f"http://repo.example/bf-fw-{version}.bfb"}
    answer = client.post("/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate", json=body)
    assert answer.status_code == 202, answer.text
    assert until(lambda: pending(client), version) == version


def firmware(client: httpx.Client, item: str) -> str | None:
    answer = client.get(f"/redfish/v1/UpdateService/FirmwareInventory/{item}")
    return str(answer.json()["Version"]) if answer.status_code == 200 else None


def pending(client: httpx.Client) -> str | None:
    return firmware(client, "DPU_NIC_Pending")


def power(client: httpx.Client, system: str = SYSTEM) -> str:
    return str(client.get(system).json()["PowerState"])


def site_as_read(sim: RunningSim) -> tuple[str, str | None, str | None, str]:
    """Host PowerState, DPU_NIC running and pending, the DPU's Arm PowerState."""
    with bmc(sim, HOST) as host, bmc(sim, DPU) as dpu:
        arm = power(dpu, "/redfish/v1/Systems/Bluefield")
        return power(host), firmware(dpu, "DPU_NIC"), pending(dpu), arm


def test_a_restarted_simulator_keeps_host_power_and_dpu_firmware(tmp_path: Path) -> None:
    state = tmp_path / "sim"
    with running_sim(state, hosts=1, dpus_per_host=1, extra=("--persist",)) as sim:
        generated = sim.site["hosts"][0]["dpus"][0]["firmware"]
        assert site_as_read(sim) == ("On", generated, None, "On")
        with bmc(sim, HOST) as host, bmc(sim, DPU) as dpu:
            stage(dpu, FIRST)
            reset(host, "PowerCycle")  # activates FIRST
            assert until(lambda: firmware(dpu, "DPU_NIC"), FIRST) == FIRST
            assert until(lambda: power(host), "On") == "On"
            stage(dpu, SECOND)  # staged, waiting for the next power cycle
            reset(host, "ForceOff")
            assert until(lambda: power(host), "Off") == "Off"
        before = sim.power_log(HOST)
    with running_sim(state, hosts=1, dpus_per_host=1, extra=("--persist",)) as sim:
        assert site_as_read(sim) == ("Off", FIRST, SECOND, "Off")
        # The log kept (attack 40f: it started empty), and nothing added: the restart is no transition.
        assert [e["to"] for e in before] == ["Off", "On", "Off"] and sim.power_log(HOST) == before
    reset_state(state)  # what `metalflow dev --reset` does
    with running_sim(state, hosts=1, dpus_per_host=1, extra=("--persist",)) as sim:
        assert site_as_read(sim) == ("On", generated, None, "On")


def test_a_power_transition_in_flight_at_the_restart_completes_after_it(tmp_path: Path) -> None:
    state = tmp_path / "sim"
    slow = {"power_transition_seconds": 600.0}
    with running_sim(state, hosts=1, dpus_per_host=0, timing=slow, extra=("--persist",)) as sim:
        with bmc(sim, HOST) as host:
            reset(host, "ForceOff")
            assert power(host) == "PoweringOff"
    with running_sim(state, hosts=1, dpus_per_host=0, extra=("--persist",)) as sim:
        with bmc(sim, HOST) as host:
            assert until(lambda: power(host), "Off") == "Off"
        log = [(e["from"], e["to"], e["reset_type"]) for e in sim.power_log(HOST)]
        assert log == [("On", "Off", "ForceOff")]  # the ForceOff accepted before the restart
