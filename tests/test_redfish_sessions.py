"""BMC authentication over real HTTP: basic auth, sessions, the session cap, leaked sessions."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from redfish_support import credentials_env, env_access

from drivers.credentials import CredentialResolver
from drivers.redfish.client import RedfishClient
from drivers.redfish.power import read_power
from simulators.redfish import SESSION_CAP
from simulators.redfish.standalone import RunningBMCs, serve_bmcs
from simulators.site import default_site
from simulators.timings import timings_for
from simulators.violations import BMC_SESSION_EXPIRED

SESSION_TIMEOUT = 0.4
# DMTF Base registry 1.16.0 (DMTF/Redfish-Publications registries/Base.1.16.0.json), whose
# MessageIds the simulated BMCs answer with.
SESSION_LIMIT_MESSAGE = (
    "The session establishment failed due to the number of simultaneous sessions exceeding the "
    "limit of the implementation."
)
SESSION_LIMIT_RESOLUTION = (
    "Reduce the number of other sessions before trying to establish the session or increase the "
    "limit of simultaneous sessions, if supported."
)


@pytest.fixture
async def sim() -> AsyncIterator[RunningBMCs]:
    async with serve_bmcs(
        default_site(2, 1), timings=timings_for("zero", session_timeout_seconds=SESSION_TIMEOUT)
    ) as running:
        yield running


def message_id(response: httpx.Response) -> str:
    return str(response.json()["error"]["@Message.ExtendedInfo"][0]["MessageId"]).rsplit(".", 1)[-1]


async def login(client: httpx.AsyncClient, sim: RunningBMCs, bmc_id: str) -> httpx.Response:
    user, password = sim.credentials[bmc_id]
    return await client.post(
        "/redfish/v1/SessionService/Sessions", json={"UserName": user, "Password": password}
    )


async def test_service_root_is_open_and_everything_else_needs_credentials(sim: RunningBMCs) -> None:
    async with httpx.AsyncClient(base_url=sim.base("host-001"), timeout=10) as client:
        root = await client.get("/redfish/v1/")
        assert root.status_code == 200
        assert root.json()["Links"]["Sessions"]["@odata.id"] == "/redfish/v1/SessionService/Sessions"
        for path in ("/redfish/v1/Systems", "/redfish/v1/SessionService", "/redfish/v1/Nowhere"):
            response = await client.get(path)
            assert response.status_code == 401, path
            assert response.json()["error"]["code"].endswith("GeneralError")
            assert message_id(response) == "NoValidSession"
        wrong = await client.get("/redfish/v1/Systems", auth=("admin", "guess"))
        assert wrong.status_code == 401
        # Another BMC's password does not open this one.
        other = await client.get("/redfish/v1/Systems", auth=sim.credentials["host-002"])
        assert other.status_code == 401
        assert (await client.get("/redfish/v1/Systems", auth=sim.credentials["host-001"])).status_code == 200
        bogus = await client.get("/redfish/v1/Systems", headers={"X-Auth-Token": "0" * 32})
        assert bogus.status_code == 401
        # Each BMC is at the root of its own address: no other BMC's paths exist here.
        assert (await client.get("/bmc/host-002/redfish/v1/")).status_code == 404


async def test_session_is_created_used_and_deleted(sim: RunningBMCs) -> None:
    async with httpx.AsyncClient(base_url=sim.base("host-001"), timeout=10) as client:
        created = await login(client, sim, "host-001")
        assert created.status_code == 201
        token = created.headers["X-Auth-Token"]
        location = created.headers["Location"]
        assert location.startswith("/redfish/v1/SessionService/Sessions/")
        assert created.json()["@odata.id"] == location and created.json()["UserName"] == "admin"
        assert token not in created.text
        assert sim.bmcs.open_sessions("host-001") == 1
        headers = {"X-Auth-Token": token}
        assert (await client.get("/redfish/v1/Systems", headers=headers)).status_code == 200
        listing = (await client.get("/redfish/v1/SessionService/Sessions", headers=headers)).json()
        assert listing["Members"] == [{"@odata.id": location}]
        assert (await client.delete(location, headers=headers)).status_code == 204
        assert sim.bmcs.open_sessions("host-001") == 0
        assert (await client.get("/redfish/v1/Systems", headers=headers)).status_code == 401
        assert (await client.delete(location, auth=sim.credentials["host-001"])).status_code == 404
        bad = await client.post(
            "/redfish/v1/SessionService/Sessions", json={"UserName": "admin", "Password": "x"}
        )
        assert bad.status_code == 401
        missing = await client.post("/redfish/v1/SessionService/Sessions", json={"UserName": "admin"})
        assert missing.status_code == 400 and message_id(missing) == "PropertyMissing"
    await asyncio.sleep(SESSION_TIMEOUT * 1.5)
    assert len(sim.violations) == 0


async def test_session_cap_refuses_one_more_until_one_is_deleted(sim: RunningBMCs) -> None:
    bmc_id = "host-001-dpu-0"  # DPU BMCs share the session code
    async with httpx.AsyncClient(base_url=sim.base(bmc_id), timeout=10) as client:
        locations = []
        for _ in range(SESSION_CAP):
            response = await login(client, sim, bmc_id)
            assert response.status_code == 201
            locations.append((response.headers["Location"], response.headers["X-Auth-Token"]))
        refused = await login(client, sim, bmc_id)
        assert refused.status_code == 503
        assert message_id(refused) == "SessionLimitExceeded"
        # The message as DMTF's Base registry 1.16.0 words it (BEHAVIOUR.md S2).
        info = refused.json()["error"]["@Message.ExtendedInfo"][0]
        assert info["Message"] == SESSION_LIMIT_MESSAGE
        assert info["Resolution"] == SESSION_LIMIT_RESOLUTION
        assert int(refused.headers["Retry-After"]) >= 1
        assert sim.bmcs.open_sessions(bmc_id) == SESSION_CAP
        location, token = locations.pop()
        assert (await client.delete(location, headers={"X-Auth-Token": token})).status_code == 204
        again = await login(client, sim, bmc_id)
        assert again.status_code == 201
        locations.append((again.headers["Location"], again.headers["X-Auth-Token"]))
        for location, token in locations:
            assert (await client.delete(location, headers={"X-Auth-Token": token})).status_code == 204
    assert sim.bmcs.open_sessions(bmc_id) == 0


async def test_a_session_left_to_expire_is_a_violation(sim: RunningBMCs) -> None:
    async with httpx.AsyncClient(base_url=sim.base("host-002"), timeout=10) as client:
        leaked = await login(client, sim, "host-002")
        kept = await login(client, sim, "host-002")
        leaked_headers = {"X-Auth-Token": leaked.headers["X-Auth-Token"]}
        kept_headers = {"X-Auth-Token": kept.headers["X-Auth-Token"]}
        assert (await client.get("/redfish/v1/Systems", headers=leaked_headers)).status_code == 200
        # The kept session is used more often than the timeout, so it stays open.
        for _ in range(8):
            await asyncio.sleep(SESSION_TIMEOUT / 4)
            assert (await client.get("/redfish/v1/Systems", headers=kept_headers)).status_code == 200
        assert (await client.get("/redfish/v1/Systems", headers=leaked_headers)).status_code == 401
        assert sim.bmcs.open_sessions("host-002") == 1
        deleted = await client.delete(kept.headers["Location"], headers=kept_headers)
        assert deleted.status_code == 204
    await asyncio.sleep(SESSION_TIMEOUT * 1.5)
    found = sim.violations.as_json()
    assert [(v["kind"], v["subject"]) for v in found] == [(BMC_SESSION_EXPIRED, "host-002")]
    assert "expired instead of being deleted" in found[0]["detail"]
    assert sim.credentials["host-002"][1] not in found[0]["detail"]


async def test_a_killed_clients_session_expires_by_the_bmcs_timeout_without_a_violation(
    sim: RunningBMCs,
) -> None:
    """Issue 40: a worker killed mid-operation left its session open and the simulator called its
    expiry a violation. Nothing can delete a killed process's session; DSP8010's SessionTimeout
    (seconds of inactivity before the service closes a session) is how a BMC reclaims it. Only a
    client that kept using the BMC while its session expired leaked it (the test above)."""
    resolver = CredentialResolver(env=credentials_env(sim))
    access = env_access(sim, "host-001")
    killed = RedfishClient(resolver)
    opened = killed.connect(access)
    connection = await opened.__aenter__()  # the operation in flight ...
    await read_power(connection)
    assert sim.bmcs.open_sessions("host-001") == 1
    await killed._http.aclose()  # ... and the process gone: its session never deleted
    restarted = RedfishClient(resolver)  # the new worker: another client, as its User-Agent says
    assert restarted.user_agent != killed.user_agent
    assert restarted.user_agent.startswith("metalflow-redfish (client ")
    try:
        for _ in range(6):  # it keeps working past the dead one's SessionTimeout
            async with restarted.connect(access) as fresh:
                await read_power(fresh)
            await asyncio.sleep(SESSION_TIMEOUT / 3)
    finally:
        await restarted.aclose()
    await asyncio.sleep(SESSION_TIMEOUT * 1.5)
    assert sim.bmcs.open_sessions("host-001") == 0  # the BMC closed the killed client's
    assert sim.violations.as_json() == []
