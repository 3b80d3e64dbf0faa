"""A simulated BMC counts the requests it answers at once and per minute (`BMCs.load`, served at
`GET /sim/bmcs/<id>/load`; a test instrument of the simulator, `simulators/redfish/load.py`),
over real HTTP against in-process BMCs. The benchmark's `bmc_max_in_flight` and
`bmc_max_per_minute` are these peaks (bench/bench_fleet.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from redfish_support import basic_client

from simulators.faults import FaultRates, Faults
from simulators.redfish.standalone import RunningBMCs, serve_bmcs
from simulators.site import default_site

HELD_SECONDS = 0.3  # every answer held this long, so requests sent together overlap at the BMC


@pytest.fixture
async def sim() -> AsyncIterator[RunningBMCs]:
    faults = Faults("none")
    faults.rates = FaultRates(slow_response=1.0, slow_response_seconds=HELD_SECONDS)
    async with serve_bmcs(default_site(2, 1), faults=faults) as running:
        yield running


async def get_root(client: httpx.AsyncClient) -> None:
    response = await client.get("/redfish/v1/Systems")
    assert response.status_code == 200, response.text


async def test_requests_sent_together_count_together_and_one_at_a_time_counts_one(sim: RunningBMCs) -> None:
    assert sim.bmcs.load("host-001")["requests_in_flight_peak"] == 0
    # httpx opens a connection per request in flight: 4 on the wire to one BMC at once.
    async with basic_client(sim, "host-001") as client:
        await asyncio.gather(*(get_root(client) for _ in range(4)))
        for _ in range(3):
            await get_root(client)
    load = sim.bmcs.load("host-001")
    assert load["requests_in_flight_peak"] == 4, load
    assert load["requests_per_minute_peak"] == 7, load
    # Another BMC's record is its own; one request at a time stays a peak of one.
    async with basic_client(sim, "host-002") as client:
        for _ in range(2):
            await get_root(client)
    assert sim.bmcs.load("host-002") == {
        "requests_in_flight_peak": 1, "requests_per_minute_peak": 2, "systems_off_peak": 0,
    }  # fmt: skip
    assert sim.bmcs.load("host-001")["requests_in_flight_peak"] == 4


async def test_requests_that_reach_a_bmc_together_count_together_though_answered_at_once() -> None:
    """Zero-time answers: 4 requests written at once on kept-alive connections reach the BMC in one
    turn of its event loop; each is answered at once, yet they were at the BMC together (a
    request ends a turn after its answer, `Redfish.handle`). Counted as each answer ended, the
    peak read 1."""
    async with serve_bmcs(default_site(1, 0)) as running:
        async with basic_client(running, "host-001") as client:
            for _ in range(2):  # the first opens the connections, the second reuses them
                await asyncio.gather(*(get_root(client) for _ in range(4)))
        assert running.bmcs.load("host-001")["requests_in_flight_peak"] >= 2
