"""The Redfish client's edge cases that wait for real seconds, over `httpx.MockTransport`
(tests/fake_bmc_support.py): a task monitor followed until it ends (about a second a poll), and a
session kept open across an idle wait. The rest of its edge cases run in the fast tier
(tests/fast/test_redfish_client.py)."""

from __future__ import annotations

import json

import httpx
import pytest
from fake_bmc_support import ACCESS, RESET, FakeBMC, with_sessions

from contracts.errors import BMCRequestRejected
from contracts.models.redfish import SetPowerInput
from drivers.redfish.power import read_power, set_power


async def test_reset_202_task_monitor_is_followed_until_done() -> None:
    bmc = FakeBMC()
    polls: list[int] = []

    def reset(request: httpx.Request) -> httpx.Response:
        assert json.loads(request.content) == {"ResetType": "ForceOff"}
        bmc.power = "Off"
        return httpx.Response(
            202, headers={"Location": "/redfish/v1/TaskService/Tasks/9", "Retry-After": "0"}
        )

    def monitor(request: httpx.Request) -> httpx.Response:
        polls.append(1)
        if len(polls) < 3:
            return httpx.Response(202, json={"TaskState": "Running"}, headers={"Retry-After": "0"})
        return httpx.Response(200, json={"TaskState": "Completed"})

    bmc.routes[("POST", RESET)] = reset
    bmc.routes[("GET", "/redfish/v1/TaskService/Tasks/9")] = monitor
    client = bmc.client()
    async with client.connect(ACCESS) as connection:
        result = await set_power(connection, SetPowerInput(bmc=ACCESS, reset_type="ForceOff"))
    await client.aclose()
    assert len(polls) == 3
    assert (result.sent, result.power_state) == ("ForceOff", "Off")


async def test_task_that_ends_in_exception_is_rejected_with_its_message() -> None:
    bmc = FakeBMC()
    bmc.routes[("POST", RESET)] = lambda r: httpx.Response(202, headers={"Location": "/redfish/v1/Tasks/1"})
    bmc.routes[("GET", "/redfish/v1/Tasks/1")] = lambda r: httpx.Response(
        200, json={"TaskState": "Exception", "Messages": [{"Message": "PSU fault"}]}
    )
    client = bmc.client()
    async with client.connect(ACCESS) as connection:
        with pytest.raises(BMCRequestRejected, match="ended Exception: PSU fault"):
            await set_power(connection, SetPowerInput(bmc=ACCESS, reset_type="ForceOff"))
    await client.aclose()


async def test_a_short_wait_does_not_read_the_session_timeout_and_a_longer_one_keeps_the_session() -> None:
    """A wait as short as a PowerCycle's 1 s wait for a fresh LastResetTime costs no request; a
    wait idle past the floor learns the SessionTimeout once, then touches the session at a third
    of it (this BMC's 1.5 s is under Redfish's 30 s minimum: the floor still keeps it open)."""
    bmc = FakeBMC()
    with_sessions(bmc)
    bmc.routes[("GET", "/redfish/v1/SessionService")] = lambda r: httpx.Response(
        200, json={"SessionTimeout": 1.5}
    )
    bmc.routes[("GET", "/redfish/v1/SessionService/Sessions/t0")] = lambda r: httpx.Response(200, json={})
    client = bmc.client(auth="session")

    def count(path: str) -> int:
        return sum(1 for r in bmc.seen if r.method == "GET" and r.url.path == path)

    try:
        async with client.connect(ACCESS) as connection:
            await read_power(connection)
            await connection.sleep(1.0)
            assert count("/redfish/v1/SessionService") == 0
            await connection.sleep(0.8)  # idle 1.8 s: past the 1.5 s floor, before the timeout
            assert count("/redfish/v1/SessionService") == 1
            touched = count("/redfish/v1/SessionService/Sessions/t0")
            await connection.sleep(1.2)  # a third of 1.5 s: touched at least twice
            assert count("/redfish/v1/SessionService/Sessions/t0") - touched >= 2
            assert count("/redfish/v1/SessionService") == 1  # learnt once
    finally:
        await client.aclose()
