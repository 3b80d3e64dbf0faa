"""The `flaky` fault profile on BMCs: 500, 503 + Retry-After and 409, deterministic per seed, no effect."""

from __future__ import annotations

import asyncio

import httpx

from simulators.faults import Faults
from simulators.redfish.standalone import serve_bmcs
from simulators.site import default_site
from simulators.timings import timings_for

HOST = "host-001"
SYSTEM = "/redfish/v1/Systems/System.Embedded.1"
REQUESTS = 90


async def run_flaky_session(seed: int) -> list[tuple[str, int, str | None]]:
    """Alternate GET, reset (toggling the power) and PATCH; check every faulted request changed nothing.

    Returns (request, status, Retry-After) for each request, in order.
    """
    answers: list[tuple[str, int, str | None]] = []
    async with serve_bmcs(
        default_site(1, 0), timings=timings_for("zero"), faults=Faults("flaky", seed)
    ) as sim:
        base = sim.base(HOST)
        async with httpx.AsyncClient(base_url=base, auth=sim.credentials[HOST], timeout=10) as client:
            for i in range(REQUESTS):
                power_before = sim.bmcs.power_state(HOST)
                log_before = len(sim.bmcs.power_log(HOST))
                kind = ("get", "reset", "patch")[i % 3]
                if kind == "get":
                    response = await client.get(SYSTEM)
                elif kind == "reset":
                    reset_type = "ForceOff" if power_before == "On" else "On"
                    response = await client.post(
                        f"{SYSTEM}/Actions/ComputerSystem.Reset", json={"ResetType": reset_type}
                    )
                else:
                    response = await client.patch(SYSTEM, json={"AssetTag": f"tag-{i}"})
                answers.append((kind, response.status_code, response.headers.get("Retry-After")))
                if response.status_code >= 400:
                    body = response.json()["error"]
                    assert body["@Message.ExtendedInfo"][0]["MessageId"].startswith("Base.")
                    await asyncio.sleep(0.01)  # a transition, had one wrongly started, would show now
                    assert sim.bmcs.power_state(HOST) == power_before
                    assert len(sim.bmcs.power_log(HOST)) == log_before
                    if kind == "patch":
                        tag = sim.bmcs.host_bmc(HOST)
                        assert tag is not None and tag.asset_tag != f"tag-{i}"
                else:
                    for _ in range(100):
                        if sim.bmcs.power_state(HOST) in ("On", "Off"):
                            break
                        await asyncio.sleep(0.005)
            successful_resets = sum(1 for kind, status, _ in answers if kind == "reset" and status < 300)
            assert len(sim.bmcs.power_log(HOST)) == successful_resets
    return answers


async def test_flaky_bmc_faults_are_deterministic_per_seed_and_change_nothing() -> None:
    first = await run_flaky_session(seed=12)
    second = await run_flaky_session(seed=12)
    assert first == second
    statuses = {status for _, status, _ in first}
    assert {500, 503, 409} <= statuses, statuses
    assert all(retry is not None and int(retry) >= 1 for _, status, retry in first if status == 503)
    # 409 is a refusal of resets only.
    assert all(kind == "reset" for kind, status, _ in first if status == 409)
    other_seed = await run_flaky_session(seed=13)
    assert other_seed != first
