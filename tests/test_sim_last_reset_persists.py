"""A simulated BMC's `LastResetTime` is its host's last reset, not the simulator's start (issue 38):
restarting `metalflow dev` on the same state dir made every host read as reset at the restart,
and each host's power watch reported an `UnplannedPower` reset nobody made. A real BMC keeps the
mark across its own restart (redfish BEHAVIOUR.md L1); the simulator keeps it in its snapshot."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from sim_support import RunningSim, running_sim
from site_worker_support import settings_for

from activities.redfish import build_redfish_client
from drivers.inventory import host_from_site_file
from drivers.redfish.system import system_uri

HOST = "host-001"  # the `powercycle` profile: it serves LastResetTime


async def last_reset_time(sim: RunningSim, host_id: str, *, turn_on: bool = False) -> str:
    """The host's `LastResetTime`; with `turn_on`, once an `On` sent first has taken effect."""
    inventory = host_from_site_file(sim.site_file, host_id, "dpf-operator-system")
    assert inventory.bmc is not None
    async with build_redfish_client(settings_for(sim)).connect(inventory.bmc) as connection:
        uri = await system_uri(connection)
        if turn_on:
            answer = await connection.post(f"{uri}/Actions/ComputerSystem.Reset", {"ResetType": "On"})
            assert answer.status_code < 300, answer.text
        while (system := await connection.get(uri))["PowerState"] != "On":
            await asyncio.sleep(0.05)
    return str(system["LastResetTime"])


def test_a_restarted_simulator_keeps_each_host_s_last_reset_time(tmp_path: Path) -> None:
    state = tmp_path / "sim"
    with running_sim(state, hosts=1, extra=("--persist",)) as sim:
        started = asyncio.run(last_reset_time(sim, HOST))
        time.sleep(1.1)  # the mark has whole seconds
        sim.inject(f"bmcs/{HOST}/power-off-at-rest")  # someone turns the host off, and on again
        reset = asyncio.run(last_reset_time(sim, HOST, turn_on=True))
        assert reset > started
        before = sim.power_log(HOST)
    time.sleep(1.1)  # a restart's own time would differ
    with running_sim(state, hosts=1, extra=("--persist",)) as sim:
        assert asyncio.run(last_reset_time(sim, HOST)) == reset
        assert sim.power_log(HOST) == before  # the log kept, nothing added: nothing reset it since
