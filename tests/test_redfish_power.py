"""Host BMCs over real HTTP: every profile, asynchronous power transitions, the power log, Hub events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from redfish_support import basic_client

from simulators.events import PowerCycled, PowerTransition
from simulators.redfish.standalone import RunningBMCs, serve_bmcs
from simulators.site import default_site
from simulators.timings import timings_for

# default_site(5, k): host-001 powercycle, -002 no-powercycle, -003 task-monitor,
# -004 etag-required, -005 reset-cooldown.
TRANSITION = 0.2


@pytest.fixture
async def sim() -> AsyncIterator[RunningBMCs]:
    timings = timings_for("zero", power_transition_seconds=TRANSITION, reset_cooldown_seconds=0.8)
    async with serve_bmcs(default_site(5, 1), timings=timings) as running:
        yield running


async def system_of(sim: RunningBMCs, client: httpx.AsyncClient) -> tuple[str, dict[str, Any]]:
    """Find the system through the collection, as a client must (ids differ per vendor)."""
    collection = (await client.get("/redfish/v1/Systems")).json()
    assert collection["Members@odata.count"] == 1
    uri = collection["Members"][0]["@odata.id"]
    response = await client.get(uri)
    assert response.status_code == 200
    return uri, response.json()


async def reset(sim: RunningBMCs, client: httpx.AsyncClient, uri: str, reset_type: str) -> httpx.Response:
    return await client.post(f"{uri}/Actions/ComputerSystem.Reset", json={"ResetType": reset_type})


async def wait_power(sim: RunningBMCs, client: httpx.AsyncClient, uri: str, state: str) -> list[str]:
    """Poll PowerState until it reads `state`; the states seen on the way."""
    seen: list[str] = []
    for _ in range(200):
        power = (await client.get(uri)).json()["PowerState"]
        if not seen or seen[-1] != power:
            seen.append(power)
        if power == state:
            return seen
        await asyncio.sleep(0.02)
    raise AssertionError(f"PowerState never became {state}; saw {seen}")


def message_id(response: httpx.Response) -> str:
    info = response.json()["error"]["@Message.ExtendedInfo"]
    return str(info[0]["MessageId"]).rsplit(".", 1)[-1]


EXPECTED = {
    "host-001": ("System.Embedded.1", True, True),
    "host-002": ("1", False, False),
    "host-003": ("Self", True, True),
    "host-004": ("1", True, True),
    "host-005": ("1", True, False),
}


async def test_each_profile_advertises_its_reset_types_and_last_reset_time(sim: RunningBMCs) -> None:
    for host_id, (system_id, power_cycle, last_reset) in EXPECTED.items():
        async with basic_client(sim, host_id) as client:
            uri, system = await system_of(sim, client)
            assert uri == f"/redfish/v1/Systems/{system_id}"
            assert system["@odata.type"].startswith("#ComputerSystem.v1_")
            assert system["PowerState"] == "On"
            action = system["Actions"]["#ComputerSystem.Reset"]
            assert action["target"] == f"{uri}/Actions/ComputerSystem.Reset"
            allowed = action["ResetType@Redfish.AllowableValues"]
            assert {"On", "ForceOff", "ForceRestart"} <= set(allowed)
            assert ("PowerCycle" in allowed) is power_cycle
            assert ("GracefulRestart" in allowed) is power_cycle
            assert ("LastResetTime" in system) is last_reset
            info = (await client.get(action["@Redfish.ActionInfo"])).json()
            assert info["Parameters"][0]["AllowableValues"] == allowed


async def test_no_powercycle_profile_refuses_what_it_lacks_without_changing_power(sim: RunningBMCs) -> None:
    async with basic_client(sim, "host-002") as client:
        uri, _ = await system_of(sim, client)
        for reset_type in ("PowerCycle", "GracefulRestart", "Reboot"):
            response = await reset(sim, client, uri, reset_type)
            assert response.status_code == 400
            assert message_id(response) == "ActionParameterNotSupported"
        missing = await client.post(f"{uri}/Actions/ComputerSystem.Reset", json={})
        assert missing.status_code == 400 and message_id(missing) == "ActionParameterMissing"
        # What it has works, and answers 200 with a Success message (this vendor's style).
        response = await reset(sim, client, uri, "ForceRestart")
        assert response.status_code == 200
        assert response.json()["@Message.ExtendedInfo"][0]["MessageId"].endswith(".Success")
        await wait_power(sim, client, uri, "On")
        await asyncio.sleep(TRANSITION * 2.5)
    assert [(e["from"], e["to"], e["reset_type"]) for e in sim.bmcs.power_log("host-002")] == [
        ("On", "Off", "ForceRestart"),
        ("Off", "On", "ForceRestart"),
    ]


async def test_forceoff_then_on_is_asynchronous_logged_and_a_power_cycle(sim: RunningBMCs) -> None:
    async with basic_client(sim, "host-001") as client:
        uri, before = await system_of(sim, client)
        response = await reset(sim, client, uri, "ForceOff")
        assert response.status_code == 204
        # The reset answered before the power changed: the intermediate state is visible.
        assert sim.bmcs.power_state("host-001") == "PoweringOff"
        assert await wait_power(sim, client, uri, "Off") == ["PoweringOff", "Off"]
        assert not [e for e in sim.events if isinstance(e, PowerCycled)]
        response = await reset(sim, client, uri, "On")
        assert response.status_code == 204
        assert await wait_power(sim, client, uri, "On") == ["PoweringOn", "On"]
        _, after = await system_of(sim, client)
    log = sim.bmcs.power_log("host-001")
    assert [(e["from"], e["to"], e["reset_type"]) for e in log] == [
        ("On", "Off", "ForceOff"),
        ("Off", "On", "On"),
    ]
    assert all(str(e["time"]).endswith("Z") for e in log)
    transitions = [e for e in sim.events if isinstance(e, PowerTransition)]
    assert [(t.from_state, t.to_state, t.reset_type) for t in transitions] == [
        ("On", "Off", "ForceOff"),
        ("Off", "On", "On"),
    ]
    assert [e.host_id for e in sim.events if isinstance(e, PowerCycled)] == ["host-001"]
    assert after["LastResetTime"] >= before["LastResetTime"]


async def test_power_cycle_goes_through_off_and_publishes_power_cycled(sim: RunningBMCs) -> None:
    async with basic_client(sim, "host-001") as client:
        uri, _ = await system_of(sim, client)
        assert (await reset(sim, client, uri, "PowerCycle")).status_code == 204
        seen = await wait_power(sim, client, uri, "On")
        assert seen[0] == "PoweringOff" and "PoweringOn" in seen
    assert [(e["from"], e["to"], e["reset_type"]) for e in sim.bmcs.power_log("host-001")] == [
        ("On", "Off", "PowerCycle"),
        ("Off", "On", "PowerCycle"),
    ]
    assert [e.host_id for e in sim.events if isinstance(e, PowerCycled)] == ["host-001"]


async def test_resets_refused_during_a_transition_and_restart_of_an_off_host(sim: RunningBMCs) -> None:
    async with basic_client(sim, "host-001") as client:
        uri, _ = await system_of(sim, client)
        assert (await reset(sim, client, uri, "ForceOff")).status_code == 204
        busy = await reset(sim, client, uri, "On")
        assert busy.status_code == 409 and message_id(busy) == "ResourceInUse"
        await wait_power(sim, client, uri, "Off")
        # Off already: ForceOff changes nothing; a restart of an Off host is refused.
        assert (await reset(sim, client, uri, "ForceOff")).status_code == 204
        refused = await reset(sim, client, uri, "ForceRestart")
        assert refused.status_code == 400 and message_id(refused) == "ActionParameterValueConflict"
        # PowerCycle of an Off host powers it on.
        assert (await reset(sim, client, uri, "PowerCycle")).status_code == 204
        await wait_power(sim, client, uri, "On")
    assert [(e["to"], e["reset_type"]) for e in sim.bmcs.power_log("host-001")] == [
        ("Off", "ForceOff"),
        ("On", "PowerCycle"),
    ]


async def test_task_monitor_profile_answers_202_and_its_task_completes(sim: RunningBMCs) -> None:
    async with basic_client(sim, "host-003") as client:
        uri, _ = await system_of(sim, client)
        response = await reset(sim, client, uri, "ForceRestart")
        assert response.status_code == 202
        monitor = response.headers["Location"]
        assert monitor.startswith("/redfish/v1/TaskService/Tasks/")
        assert int(response.headers["Retry-After"]) >= 1
        running = await client.get(monitor)
        assert running.status_code == 202
        assert running.json()["TaskState"] == "Running"
        assert sim.bmcs.power_state("host-003") != "On"
        for _ in range(100):
            done = await client.get(monitor)
            if done.status_code != 202:
                break
            await asyncio.sleep(0.05)
        assert done.status_code == 200
        task = done.json()
        assert task["@odata.type"].startswith("#Task.v1_")
        assert task["TaskState"] == "Completed" and task["PercentComplete"] == 100
        assert sim.bmcs.power_state("host-003") == "On"
        tasks = (await client.get("/redfish/v1/TaskService/Tasks")).json()
        assert {"@odata.id": monitor} in tasks["Members"]
    assert [e["to"] for e in sim.bmcs.power_log("host-003")] == ["Off", "On"]


async def test_etag_required_profile_demands_a_current_if_match(sim: RunningBMCs) -> None:
    async with basic_client(sim, "host-004") as client:
        uri, _ = await system_of(sim, client)
        first = await client.get(uri)
        etag = first.headers["ETag"]
        missing = await client.patch(uri, json={"AssetTag": "rack7"})
        assert missing.status_code == 428 and message_id(missing) == "PreconditionRequired"
        ok = await client.patch(uri, json={"AssetTag": "rack7"}, headers={"If-Match": etag})
        assert ok.status_code == 200
        assert ok.json()["AssetTag"] == "rack7" and ok.headers["ETag"] != etag
        stale = await client.patch(
            uri, json={"Boot": {"BootSourceOverrideTarget": "Pxe"}}, headers={"If-Match": etag}
        )
        assert stale.status_code == 412 and message_id(stale) == "PreconditionFailed"
        current = (await client.get(uri)).headers["ETag"]
        boot = await client.patch(
            uri,
            json={"Boot": {"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Once"}},
            headers={"If-Match": current},
        )
        assert boot.status_code == 200
        assert boot.json()["Boot"]["BootSourceOverrideTarget"] == "Pxe"
        final = (await client.get(uri)).json()
        assert final["AssetTag"] == "rack7" and final["Boot"]["BootSourceOverrideEnabled"] == "Once"


async def test_other_profiles_patch_without_if_match_but_refuse_a_stale_one(sim: RunningBMCs) -> None:
    async with basic_client(sim, "host-001") as client:
        uri, _ = await system_of(sim, client)
        etag = (await client.get(uri)).headers["ETag"]
        assert (await client.patch(uri, json={"AssetTag": "a"})).status_code == 200
        stale = await client.patch(uri, json={"AssetTag": "b"}, headers={"If-Match": etag})
        assert stale.status_code == 412
        unknown = await client.patch(uri, json={"Colour": "red"})
        assert unknown.status_code == 400 and message_id(unknown) == "PropertyUnknown"
        read_only = await client.patch(uri, json={"PowerState": "Off"})
        assert read_only.status_code == 400 and message_id(read_only) == "PropertyNotWritable"
        bad = await client.patch(uri, json={"Boot": {"BootSourceOverrideTarget": "Floppy"}})
        assert bad.status_code == 400 and message_id(bad) == "PropertyValueNotInList"
        assert (await client.get(uri)).json()["AssetTag"] == "a"
    assert sim.bmcs.power_state("host-001") == "On"


async def test_reset_cooldown_profile_refuses_with_409_for_a_while_after_off(sim: RunningBMCs) -> None:
    async with basic_client(sim, "host-005") as client:
        uri, _ = await system_of(sim, client)
        assert (await reset(sim, client, uri, "ForceOff")).status_code == 204
        await wait_power(sim, client, uri, "Off")
        refused = await reset(sim, client, uri, "On")
        assert refused.status_code == 409
        assert message_id(refused) == "ResourceInUse"
        assert "powered off recently" in refused.json()["error"]["@Message.ExtendedInfo"][0]["Message"]
        assert int(refused.headers["Retry-After"]) >= 1
        assert sim.bmcs.power_state("host-005") == "Off"
        for _ in range(100):
            response = await reset(sim, client, uri, "On")
            if response.status_code != 409:
                break
            await asyncio.sleep(0.1)
        assert response.status_code == 204
        await wait_power(sim, client, uri, "On")
    assert [(e["to"], e["reset_type"]) for e in sim.bmcs.power_log("host-005")] == [
        ("Off", "ForceOff"),
        ("On", "On"),
    ]
