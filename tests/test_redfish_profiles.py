"""metalflow's Redfish client against the BMC profiles real vendors taught us (issue 8), over real
HTTP to simulated BMCs each at the root of its own address: basic-only, power-lag,
powercycle-501, multi-system and self-signed-tls; and no leaked session on a ForceOff / wait /
On cycle that outlives the session timeout (issue 9 item 9)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from redfish_support import credentials_env, env_access

from contracts.errors import BMCAuthenticationFailed, InvalidInput
from contracts.models.inventory import BMCAccess
from contracts.models.redfish import PowerCycleInput, PowerCycleResult, SetPowerInput
from drivers.credentials import CredentialResolver
from drivers.redfish.client import RedfishClient
from drivers.redfish.power import read_power, set_power
from drivers.redfish.powercycle import PowerCycle
from simulators.redfish.standalone import RunningBMCs, serve_bmcs
from simulators.site import BMC, Host, Site
from simulators.timings import timings_for

HOSTS = {
    "basic": "basic-only",
    "lag": "power-lag",
    "p501": "powercycle-501",
    "multi-a": "multi-system",
    "multi-b": "multi-system",
    "tls": "self-signed-tls",
    "plain": "powercycle",
    "nocycle": "no-powercycle",
}
LAG_SECONDS = (1.0, 2.0)
SESSION_TIMEOUT = 2.0


@pytest.fixture(scope="module")
async def sim() -> AsyncIterator[RunningBMCs]:
    site = Site(hosts=[Host(id=host_id, bmc=BMC(profile=profile)) for host_id, profile in HOSTS.items()])
    timings = timings_for(
        "demo",
        power_transition_seconds=0.1,
        power_lag_min_seconds=LAG_SECONDS[0],
        power_lag_max_seconds=LAG_SECONDS[1],
        session_timeout_seconds=SESSION_TIMEOUT,
    )
    async with serve_bmcs(site, timings=timings) as running:
        yield running


@pytest.fixture
async def client(sim: RunningBMCs) -> AsyncIterator[RedfishClient]:
    redfish = RedfishClient(CredentialResolver(env=credentials_env(sim)))
    yield redfish
    await redfish.aclose()


def log_of(sim: RunningBMCs, host_id: str, since: int = 0) -> list[tuple[Any, Any, Any]]:
    return [(e["from"], e["to"], e["reset_type"]) for e in sim.bmcs.power_log(host_id)[since:]]


async def cycle(client: RedfishClient, bmc: BMCAccess, power_down_wait: float = 0.2) -> PowerCycleResult:
    request = PowerCycleInput(
        bmc=bmc, boot_generation=1, requested_at=datetime.now(UTC), power_down_wait_seconds=power_down_wait,
        timeout_seconds=30,
    )  # fmt: skip
    async with client.connect(bmc) as connection:
        return await PowerCycle(connection, request, None, persist=lambda _: None, flush_seconds=0.0).run()


async def test_auto_auth_uses_basic_where_there_is_no_session_service(
    sim: RunningBMCs, client: RedfishClient
) -> None:
    async with client.connect(env_access(sim, "basic")) as connection:
        power = await read_power(connection)
        assert await connection.auth_mode() == "basic"
    assert power.power_state == "On"
    async with client.connect(env_access(sim, "plain")) as connection:
        await read_power(connection)
        assert await connection.auth_mode() == "session"
    assert sim.bmcs.open_sessions("plain") == 0  # deleted when the last user finished


async def test_auto_auth_with_wrong_credentials_is_an_authentication_failure(sim: RunningBMCs) -> None:
    wrong = RedfishClient(
        CredentialResolver(env={**credentials_env(sim), "P_plain": "-wrong", "P_basic": "-wrong"})
    )
    try:
        for host_id in ("plain", "basic"):  # session refused, then basic refused too; basic alone
            with pytest.raises(BMCAuthenticationFailed) as caught:
                async with wrong.connect(env_access(sim, host_id)) as connection:
                    await read_power(connection)
            assert "401" in caught.value.message and "U_" in caught.value.message
    finally:
        await wrong.aclose()


async def test_multi_system_bmc_refuses_to_guess_and_drives_the_named_system(
    sim: RunningBMCs, client: RedfishClient
) -> None:
    assert sim.base("multi-a") == sim.base("multi-b")  # one BMC service, two hosts
    with pytest.raises(InvalidInput) as caught:
        async with client.connect(env_access(sim, "multi-b")) as connection:
            await read_power(connection)
    assert "/redfish/v1/Systems/multi-a" in caught.value.message
    assert "/redfish/v1/Systems/multi-b" in caught.value.message and "bmc.system" in caught.value.message
    with pytest.raises(InvalidInput, match="names System 'multi-c'"):
        async with client.connect(
            env_access(sim, "multi-b", bmc_id="multi-b-2", system="multi-c")
        ) as connection:
            await read_power(connection)
    before_a, before_b = len(sim.bmcs.power_log("multi-a")), len(sim.bmcs.power_log("multi-b"))
    result = await cycle(
        client, env_access(sim, "multi-b", bmc_id="multi-b-3", system="/redfish/v1/Systems/multi-b")
    )
    assert result.method == "PowerCycle"
    assert log_of(sim, "multi-b", before_b) == [("On", "Off", "PowerCycle"), ("Off", "On", "PowerCycle")]
    assert len(sim.bmcs.power_log("multi-a")) == before_a  # the other host behind the BMC is untouched


async def test_powercycle_answered_501_falls_back_in_the_same_attempt_and_is_remembered(
    sim: RunningBMCs, client: RedfishClient
) -> None:
    bmc = env_access(sim, "p501")
    first = await cycle(client, bmc)
    assert first.method == "ForceOff+On" and first.attempts == 1
    assert "cycle_requested" in first.steps and first.steps[-1] == "done"
    assert log_of(sim, "p501") == [("On", "Off", "ForceOff"), ("Off", "On", "On")]
    async with client.connect(bmc) as connection:
        power = await read_power(connection)
    assert power.power_cycle_method == "ForceOff+On"  # remembered: PowerCycle is not tried again
    second = await cycle(client, bmc)
    assert "cycle_requested" not in second.steps
    assert len(log_of(sim, "p501")) == 4


async def test_lagging_power_state_an_off_by_someone_else_then_on_ends_on(
    sim: RunningBMCs, client: RedfishClient
) -> None:
    bmc = env_access(sim, "lag")
    since = len(sim.bmcs.power_log("lag"))
    # Someone else's ForceOff, accepted: the BMC keeps reading On for 1-2 s, with no PoweringOff.
    async with httpx.AsyncClient(base_url=sim.base("lag"), auth=sim.credentials["lag"]) as other:
        target = "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset"
        assert (await other.post(target, json={"ResetType": "ForceOff"})).status_code == 204
    assert sim.bmcs.power_state("lag") == "On"
    async with client.connect(bmc) as connection:
        result = await set_power(connection, SetPowerInput(bmc=bmc, reset_type="On", settle_seconds=3.0))
    assert result.sent == "On" and result.power_state == "On"
    assert result.lag_seconds is not None and result.lag_seconds >= LAG_SECONDS[0] * 0.9
    assert log_of(sim, "lag", since) == [("On", "Off", "ForceOff"), ("Off", "On", "On")]
    assert sim.bmcs.power_state("lag") == "On"


async def test_self_signed_tls_verifies_with_the_site_ca_and_refuses_without(
    sim: RunningBMCs, client: RedfishClient
) -> None:
    assert sim.base("tls").startswith("https://")
    async with client.connect(env_access(sim, "tls")) as connection:
        assert (await read_power(connection)).power_state == "On"
    with pytest.raises(BMCAuthenticationFailed, match="did not verify; give the BMC a ca_bundle"):
        async with client.connect(env_access(sim, "tls", bmc_id="tls-no-ca", ca_bundle=None)) as connection:
            await read_power(connection)


async def test_off_wait_on_longer_than_the_session_timeout_leaks_no_session(
    sim: RunningBMCs, client: RedfishClient
) -> None:
    bmc = env_access(sim, "nocycle")
    async with client.connect(bmc) as connection:
        assert await connection.auth_mode() == "session"
    # ForceOff / wait 3x the session timeout / On, holding one session throughout.
    result = await cycle(client, bmc, power_down_wait=3 * SESSION_TIMEOUT)
    assert result.reset_types == ("ForceOff", "On")
    assert sim.bmcs.open_sessions("nocycle") == 0
    assert [v for v in sim.violations.as_json() if v["subject"] == "nocycle"] == []


async def test_no_profile_leaked_a_session(sim: RunningBMCs) -> None:
    # Last in the module: every test above opened sessions on session BMCs, with a 2 s timeout.
    assert sim.violations.as_json() == []
    assert all(sim.bmcs.open_sessions(host_id) == 0 for host_id in HOSTS)
