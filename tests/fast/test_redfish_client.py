"""The Redfish client's edge cases, over `httpx.MockTransport` (tests/fake_bmc_support.py): what real
BMCs of other vendors do that the simulated site does not (malformed bodies, odd reset types,
redirects, Retry-After forms, sessions), and what every BMC must never see (credentials sent to
another host). The cases that wait for real seconds (task monitors, a session kept open) are in
tests/test_redfish_client_waits.py."""

from __future__ import annotations

import asyncio
import base64
import json
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import httpx
import pytest
from fake_bmc_support import (
    ACCESS,
    ENV,
    RESET,
    SECRET,
    SYSTEM,
    FakeBMC,
    read,
    system_body,
    with_sessions,
)

from contracts.errors import (
    BMCAuthenticationFailed,
    BMCRequestRejected,
    BMCUnavailable,
    CredentialsUnavailable,
    InvalidInput,
    ResetTypeNotSupported,
)
from contracts.models.inventory import CredentialRef
from contracts.models.redfish import SetPowerInput
from drivers.credentials import CredentialResolver
from drivers.redfish.client import RedfishClient
from drivers.redfish.power import read_power, set_power


async def test_reads_power_through_links_with_basic_auth() -> None:
    bmc = FakeBMC()
    power = await read(bmc)
    assert power.power_state == "On"
    assert power.system == SYSTEM
    assert power.power_cycle_method == "ForceOff+On"  # no PowerCycle, no LastResetTime
    expected = "Basic " + base64.b64encode(f"admin:{SECRET}".encode()).decode()
    assert bmc.seen[-1].headers["Authorization"] == expected
    # The Systems collection at its standard path: the service root is not read at all.
    assert [r.url.path for r in bmc.seen] == ["/redfish/v1/Systems", SYSTEM]


async def test_a_bmc_off_the_standard_paths_is_found_through_its_service_root() -> None:
    bmc = FakeBMC()
    events = with_sessions(bmc)
    # This BMC keeps its Systems and Sessions collections elsewhere and links them from the root.
    bmc.routes[("GET", "/redfish/v1/")] = lambda r: httpx.Response(
        200,
        json={
            "Systems": {"@odata.id": "/redfish/v1/Nodes"},
            "Links": {"Sessions": {"@odata.id": "/redfish/v1/Auth/Sessions"}},
        },
    )
    bmc.routes[("GET", "/redfish/v1/Nodes")] = bmc.routes.pop(("GET", "/redfish/v1/Systems"))
    standard = bmc.handle
    paths: list[str] = []

    def moved(request: httpx.Request) -> httpx.Response:
        paths.append(f"{request.method} {request.url.path}")
        if request.url.path == "/redfish/v1/SessionService/Sessions":
            return httpx.Response(404)
        if request.url.path == "/redfish/v1/Auth/Sessions":
            request.url = request.url.copy_with(path="/redfish/v1/SessionService/Sessions")
        return standard(request)

    bmc.handle = moved  # type: ignore[method-assign]
    client = bmc.client(auth="auto")
    try:
        async with client.connect(ACCESS) as connection:
            assert (await read_power(connection)).system == SYSTEM
            assert await connection.auth_mode() == "session"
        async with client.connect(ACCESS) as connection:
            await read_power(connection)  # learnt: straight to the System, after a new login
    finally:
        await client.aclose()
    assert events == ["create", "delete", "create", "delete"]
    assert paths[:6] == [
        "POST /redfish/v1/SessionService/Sessions",  # 404: not here
        "GET /redfish/v1/",
        "POST /redfish/v1/Auth/Sessions",  # the linked one
        "GET /redfish/v1/Systems",  # 404: not here either
        "GET /redfish/v1/Nodes",
        f"GET {SYSTEM}",
    ]
    assert paths.count("GET /redfish/v1/") == 1 and paths.count("GET /redfish/v1/Nodes") == 1


async def test_a_system_that_moved_is_looked_up_again() -> None:
    bmc = FakeBMC()
    client = bmc.client()
    moved = "/redfish/v1/Systems/Node1"
    try:
        async with client.connect(ACCESS) as connection:  # one activity
            assert (await read_power(connection)).system == SYSTEM  # learnt, kept by the worker
        # A firmware update renamed the System: the old one answers 404.
        bmc.routes[("GET", "/redfish/v1/Systems")] = lambda r: httpx.Response(
            200, json={"Members": [{"@odata.id": moved}]}
        )
        bmc.routes[("GET", moved)] = bmc.routes.pop(("GET", SYSTEM))
        with pytest.raises(BMCUnavailable, match="answered 404; looking it up again"):
            async with client.connect(ACCESS) as connection:  # the next activity
                await read_power(connection)  # transient: its next attempt finds it
        async with client.connect(ACCESS) as connection:
            assert (await read_power(connection)).system == moved
    finally:
        await client.aclose()
    assert [r.url.path for r in bmc.seen].count("/redfish/v1/Systems") == 2


async def read_named(bmc: FakeBMC, named: str, reads: int = 1) -> list[str]:
    """Read power `reads` times (one activity each) with the inventory naming the System."""
    client = bmc.client()
    access = ACCESS.model_copy(update={"system": named})
    systems: list[str] = []
    try:
        for _ in range(reads):
            async with client.connect(access) as connection:
                try:
                    systems.append((await read_power(connection)).system)
                except BMCUnavailable:  # the activity's next attempt looks it up
                    systems.append((await read_power(connection)).system)
    finally:
        await client.aclose()
    return systems


@pytest.mark.parametrize("named", ["Node0", SYSTEM, SYSTEM + "/"])
async def test_a_system_the_inventory_names_is_read_without_the_collection(named: str) -> None:
    bmc = FakeBMC()
    assert await read_named(bmc, named) == [SYSTEM]
    assert [r.url.path for r in bmc.seen] == [SYSTEM]  # no Systems collection, no service root


async def test_a_named_system_off_the_standard_path_is_looked_up_by_its_name_once() -> None:
    bmc = FakeBMC()
    old_style = "/redfish/v1/Systems/1/Node0"  # an older BMC: the Id is not the path's end alone
    bmc.routes[("GET", "/redfish/v1/Systems")] = lambda r: httpx.Response(
        200, json={"Members": [{"@odata.id": "/redfish/v1/Systems/1/Other"}, {"@odata.id": old_style}]}
    )
    bmc.routes[("GET", old_style)] = bmc.routes.pop(("GET", SYSTEM))
    assert await read_named(bmc, "Node0", reads=2) == [old_style, old_style]
    assert [r.url.path for r in bmc.seen] == [
        SYSTEM,  # 404: where DSP0266 puts System Node0
        "/redfish/v1/Systems",  # found there by its Id, and remembered by the worker
        old_style,
        old_style,  # the second activity goes straight to it
    ]


async def test_a_named_system_the_bmc_does_not_have_is_refused_naming_what_it_has() -> None:
    bmc = FakeBMC()
    with pytest.raises(InvalidInput, match=r"names System 'Node7', but .* has /redfish/v1/Systems/Node0"):
        await read_named(bmc, "Node7")
    assert [r.url.path for r in bmc.seen] == ["/redfish/v1/Systems/Node7", "/redfish/v1/Systems"]
    assert not [r for r in bmc.seen if r.method != "GET"]  # nothing was sent to any System


async def test_malformed_json_is_rejected_as_not_redfish() -> None:
    bmc = FakeBMC(lambda: httpx.Response(200, content=b"<html>login page</html>"))
    with pytest.raises(BMCRequestRejected, match="malformed JSON") as caught:
        await read(bmc)
    assert caught.value.non_retryable


async def test_missing_power_state_is_rejected() -> None:
    body = system_body()
    del body["PowerState"]
    with pytest.raises(BMCRequestRejected, match="PowerState missing"):
        await read(FakeBMC(body))
    with pytest.raises(BMCRequestRejected, match="PowerState 'Sleeping'"):
        await read(FakeBMC(system_body(PowerState="Sleeping")))


async def test_unknown_reset_type_values_are_shown_but_never_chosen() -> None:
    body = system_body()
    body["Actions"]["#ComputerSystem.Reset"]["ResetType@Redfish.AllowableValues"] = [
        "On", "ForceOff", "OemHardReset", 42, None,
    ]  # fmt: skip
    bmc = FakeBMC(body)
    power = await read(bmc)
    assert power.allowed_reset_types == ("On", "ForceOff", "OemHardReset")
    client = bmc.client()
    async with client.connect(ACCESS) as connection:
        with pytest.raises(ResetTypeNotSupported, match="OemHardReset") as caught:
            await set_power(connection, SetPowerInput(bmc=ACCESS, reset_type="OemHardReset"))
        with pytest.raises(ResetTypeNotSupported, match=r"takes: On, ForceOff\)$"):
            await set_power(connection, SetPowerInput(bmc=ACCESS, reset_type="PowerCycle"))
    await client.aclose()
    assert caught.value.non_retryable
    assert not [r for r in bmc.seen if r.method == "POST"]


async def test_reset_types_from_action_info_when_not_inline() -> None:
    body = system_body()
    body["Actions"]["#ComputerSystem.Reset"] = {"target": RESET, "@Redfish.ActionInfo": f"{SYSTEM}/ResetInfo"}
    bmc = FakeBMC(body)
    bmc.routes[("GET", f"{SYSTEM}/ResetInfo")] = lambda r: httpx.Response(
        200, json={"Parameters": [{"Name": "ResetType", "AllowableValues": ["On", "PowerCycle"]}]}
    )
    assert (await read(bmc)).allowed_reset_types == ("On", "PowerCycle")


async def test_same_origin_redirect_is_followed_and_cross_origin_refused() -> None:
    bmc = FakeBMC()
    bmc.routes[("GET", "/redfish/v1/Systems")] = lambda r: httpx.Response(
        308, headers={"Location": "/redfish/v1/Systems/"}
    )
    bmc.routes[("GET", "/redfish/v1/Systems/")] = lambda r: httpx.Response(
        200, json={"Members": [{"@odata.id": SYSTEM}]}
    )
    assert (await read(bmc)).power_state == "On"

    evil = FakeBMC()
    evil.routes[("GET", SYSTEM)] = lambda r: httpx.Response(
        302, headers={"Location": "https://elsewhere.example/x"}
    )
    with pytest.raises(BMCRequestRejected, match="another origin"):
        await read(evil)
    assert all(r.url.host == "bmc.example" for r in evil.seen)


async def test_retry_after_sets_next_retry_delay_in_both_forms() -> None:
    bmc = FakeBMC(
        lambda: httpx.Response(503, headers={"Retry-After": "7"}, json={"error": {"message": "busy"}})
    )
    with pytest.raises(BMCUnavailable) as caught:
        await read(bmc)
    assert caught.value.next_retry_delay == timedelta(seconds=7)
    assert not caught.value.non_retryable
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    bmc = FakeBMC(lambda: httpx.Response(409, headers={"Retry-After": when}))
    with pytest.raises(BMCUnavailable) as caught:
        await read(bmc)
    assert caught.value.next_retry_delay is not None
    assert 25 <= caught.value.next_retry_delay.total_seconds() <= 31


def _refused(status: int, text: str) -> httpx.Response:
    return httpx.Response(status, json={"error": {"@Message.ExtendedInfo": [
        {"MessageId": "Base.1.16.0.NoValidSession", "Message": text}]}})  # fmt: skip


async def test_authentication_failure_names_the_reference_never_the_secret() -> None:
    bmc = FakeBMC()
    bmc.routes[("GET", "/redfish/v1/Systems")] = lambda r: _refused(401, "bad login")
    with pytest.raises(BMCAuthenticationFailed) as caught:
        await read(bmc)
    message = str(caught.value)
    assert "NoValidSession" in message and "BMC_USER/BMC_PASS" in message
    assert SECRET not in message and "admin" not in message
    assert caught.value.non_retryable


async def test_a_forbidden_after_the_credentials_worked_is_not_called_bad_credentials() -> None:
    # The Systems collection was served with these credentials: a 403 on the System itself is
    # about that resource (privilege, DSP0266's 403), and the BMC's own words and the URL are kept.
    bmc = FakeBMC(lambda: _refused(403, "insufficient privilege"))
    with pytest.raises(BMCRequestRejected) as caught:
        await read(bmc)
    message = str(caught.value)
    assert f"{SYSTEM} answered 403" in message and "insufficient privilege" in message
    assert "check the credentials" not in message and caught.value.non_retryable


async def test_a_401_after_the_credentials_worked_says_they_changed_during_the_operation() -> None:
    """Issue 40: a BMC password rotated mid-operation read as a privilege error. DSP0266's 401 is
    "credentials missing or invalid": credentials accepted a moment ago and now refused changed."""
    bmc = FakeBMC(lambda: _refused(401, "The user name or password is not valid."))
    with pytest.raises(BMCAuthenticationFailed) as caught:
        await read(bmc)
    message = str(caught.value)
    assert f"{SYSTEM} answered 401" in message and "The user name or password is not valid." in message
    changed = "the BMC rejected the credentials it had accepted earlier in this operation: they changed"
    assert changed in message
    assert "BMC_USER/BMC_PASS" in message and SECRET not in message
    assert "privilege" not in message and caught.value.non_retryable


async def test_statuses_map_to_the_taxonomy() -> None:
    expected: list[tuple[int, type[Exception]]] = [
        (403, BMCRequestRejected), (400, BMCRequestRejected), (405, BMCRequestRejected),
        (404, BMCRequestRejected), (409, BMCUnavailable), (500, BMCUnavailable), (501, BMCRequestRejected),
    ]  # fmt: skip
    for status, error in expected:
        with pytest.raises(error):
            await read(FakeBMC(lambda status=status: httpx.Response(status)))  # type: ignore[misc]


async def test_connection_refused_and_timeout_are_transient() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    client = RedfishClient(CredentialResolver(env=ENV), transport=httpx.MockTransport(refuse))
    with pytest.raises(BMCUnavailable, match="cannot reach https://bmc.example"):
        async with client.connect(ACCESS) as connection:
            await read_power(connection)

    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    client = RedfishClient(CredentialResolver(env=ENV), transport=httpx.MockTransport(slow))
    with pytest.raises(BMCUnavailable, match="timed out"):
        async with client.connect(ACCESS) as connection:
            await read_power(connection)


async def test_one_session_shared_by_concurrent_activities_and_deleted_after() -> None:
    bmc = FakeBMC()
    events = with_sessions(bmc)
    client = bmc.client(auth="session")

    async def activity() -> str:
        async with client.connect(ACCESS) as connection:
            power = await read_power(connection)
            await asyncio.sleep(0.05)
            return power.power_state

    assert list(await asyncio.gather(activity(), activity(), activity())) == ["On", "On", "On"]
    assert events == ["create", "delete"]
    assert await activity() == "On"
    assert events == ["create", "delete", "create", "delete"]
    await client.aclose()


async def test_an_expired_session_is_opened_again_once() -> None:
    bmc = FakeBMC()
    events = with_sessions(bmc)
    client = bmc.client(auth="session")
    async with client.connect(ACCESS) as connection:
        await read_power(connection)
        bmc.tokens.clear()  # type: ignore[attr-defined]  # the BMC forgot every session
        assert (await read_power(connection)).power_state == "On"
    await client.aclose()
    assert events == ["create", "create", "delete"]


async def test_requests_in_flight_per_bmc_are_capped() -> None:
    in_flight = peak = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.02)
        in_flight -= 1
        return httpx.Response(200, json={"Systems": {"@odata.id": "/redfish/v1/Systems"}})

    client = RedfishClient(CredentialResolver(env=ENV), max_in_flight=2, auth="basic",
                           transport=httpx.MockTransport(handler))  # fmt: skip
    async with client.connect(ACCESS) as connection:
        await asyncio.gather(*(connection.get("/redfish/v1/Chassis") for _ in range(10)))
    await client.aclose()
    assert peak == 2


async def test_credential_references_fail_without_revealing_values(tmp_path: Path) -> None:
    resolver = CredentialResolver(env={"BMC_USER": "admin"})
    with pytest.raises(CredentialsUnavailable, match="BMC_USER/BMC_PASS are not both set"):
        await resolver.resolve(ACCESS.credentials)
    bad = tmp_path / "creds.json"
    bad.write_text(f'{{"username": "admin", "password": "{SECRET}"')  # truncated JSON
    with pytest.raises(CredentialsUnavailable) as caught:
        await resolver.resolve(CredentialRef(file=str(bad)))
    assert SECRET not in str(caught.value) and str(bad) in str(caught.value)
    with pytest.raises(CredentialsUnavailable, match="cannot read file"):
        await resolver.resolve(CredentialRef(file=str(tmp_path / "missing.json")))
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"username": "admin", "password": SECRET}))
    found = await resolver.resolve(CredentialRef(file=str(good)))
    assert (found.username, found.password) == ("admin", SECRET)
    assert SECRET not in repr(found)
