"""What a power cycle costs each BMC (issue 11): the requests a first and a second cycle send, through
a real worker (the metalflow worker's heartbeat throttle, Temporal's read-back of every step)
against simulated BMCs over HTTP; and the pieces that make a reset follow its step at once.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from redfish_support import CycleOptions, CyclePower, credentials_env, cycle_worker, env_access
from temporalio.testing import WorkflowEnvironment

from activities.heartbeat import HEARTBEAT_THROTTLE, HeartbeatGate
from contracts.models.redfish import PowerCycleInput
from drivers.credentials import CredentialResolver
from drivers.redfish.client import RedfishClient
from drivers.redfish.powercycle import PowerCycle
from drivers.redfish.system import System
from simulators.redfish.standalone import RunningBMCs, serve_bmcs
from simulators.site import BMC, Host, Site
from simulators.timings import timings_for
from workflows.parts.power_cycle_options import POWER_CYCLE_HEARTBEAT

HOSTS = {"native": "powercycle", "monitor": "task-monitor", "forceoff": "no-powercycle"}
# `power_cycle_host` with the reboot workflow's heartbeat timeout, and no second attempt.
AS_THE_REBOOT_DOES = CycleOptions(heartbeat=POWER_CYCLE_HEARTBEAT, maximum_attempts=1)


class Recording(httpx.AsyncBaseTransport):
    """Real HTTP to the simulated BMCs, noting each request as `METHOD path` per BMC port."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport(retries=0)
        self.seen: list[tuple[int, str]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.seen.append((request.url.port or 0, f"{request.method} {request.url.path}"))
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


@pytest.fixture(scope="module")
async def sim() -> AsyncIterator[RunningBMCs]:
    site = Site(hosts=[Host(id=host_id, bmc=BMC(profile=profile)) for host_id, profile in HOSTS.items()])
    async with serve_bmcs(site, timings=timings_for("zero")) as running:
        yield running


LEARN_TIMEOUT = "GET /redfish/v1/SessionService"


def without_polls(requests: list[str], system: str) -> list[str]:
    """The requests but the System reads after the first reset (polls vary with load) and the
    SessionTimeout read (counted on its own)."""
    requests = [r for r in requests if r != LEARN_TIMEOUT]
    reset_at = next(i for i, r in enumerate(requests) if r.startswith("POST") and "Reset" in r)
    later = [r for r in requests[reset_at:] if r != f"GET {system}"]
    return requests[:reset_at] + later


async def test_first_and_second_cycle_requests_per_profile(
    local_env: WorkflowEnvironment, task_queue: str, sim: RunningBMCs
) -> None:
    transport = Recording()
    redfish = RedfishClient(CredentialResolver(env=credentials_env(sim)), transport=transport)
    seen: dict[tuple[str, int], list[str]] = {}
    try:
        async with cycle_worker(
            local_env.client,
            task_queue,
            redfish,
            max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,  # as metalflow.runtime.worker builds it
        ):
            for generation in (1, 2):
                for host_id in HOSTS:
                    port = httpx.URL(sim.base(host_id)).port
                    before = len(transport.seen)
                    request = PowerCycleInput(
                        bmc=env_access(sim, host_id), boot_generation=generation,
                        requested_at=datetime.now(UTC), power_down_wait_seconds=0.0, timeout_seconds=60,
                    )  # fmt: skip
                    result = await local_env.client.execute_workflow(
                        CyclePower.run,
                        args=[request, AS_THE_REBOOT_DOES],
                        id=f"requests-{uuid.uuid4()}",
                        task_queue=task_queue,
                    )
                    assert result.steps[-1] == "done" and result.attempts == 1
                    seen[(host_id, generation)] = [r for p, r in transport.seen[before:] if p == port]
    finally:
        await redfish.aclose()
    login, logout = "POST /redfish/v1/SessionService/Sessions", "DELETE /redfish/v1/SessionService/Sessions/"
    systems = "GET /redfish/v1/Systems"
    for host_id, system in (("native", "System.Embedded.1"), ("monitor", "Self"), ("forceoff", "1")):
        uri = f"/redfish/v1/Systems/{system}"
        reset = f"POST {uri}/Actions/ComputerSystem.Reset"
        first, second = (without_polls(seen[(host_id, g)], uri) for g in (1, 2))
        task = ["GET /redfish/v1/TaskService/Tasks/1"] if host_id == "monitor" else []
        resets = [reset] + task if host_id != "forceoff" else [reset, reset]
        # The SessionTimeout: read at most once per BMC and worker, and only by a cycle that
        # waited (PowerCycle waits 1 s after reading a LastResetTime under 2 s old, as this fresh
        # BMC's is); ForceOff+On with no power-down wait never waits.
        learnt = sum(seen[(host_id, g)].count(LEARN_TIMEOUT) for g in (1, 2))
        assert learnt == 0 if host_id == "forceoff" else learnt <= 1, (host_id, seen)
        # No service root, ever.
        assert first[:4] == [login, systems, f"GET {uri}", reset], (host_id, first)
        assert first[3:-1] == resets and first[-1].startswith(logout), (host_id, first)
        # The second cycle on the same worker: the System is known, Systems is not read again.
        assert second[:3] == [login, f"GET {uri}", reset], (host_id, second)
        assert second[-1].startswith(logout)
        # After the reset, only what a wait needs: at least one poll, and never a System re-read
        # between the end of one wait and the next reset (ForceOff+On: one wait per reset).
        polls = seen[(host_id, 1)].count(f"GET {uri}") - 1
        assert 1 <= polls if host_id != "forceoff" else 2 <= polls, (host_id, seen[(host_id, 1)])
    for host_id in HOSTS:
        power_log = [(e["from"], e["to"], e["reset_type"]) for e in sim.bmcs.power_log(host_id)]
        off_on = ("PowerCycle", "PowerCycle") if host_id != "forceoff" else ("ForceOff", "On")
        assert power_log == [("On", "Off", off_on[0]), ("Off", "On", off_on[1])] * 2, host_id
    assert sim.violations.as_json() == []
    assert all(sim.bmcs.open_sessions(host_id) == 0 for host_id in HOSTS)


def test_heartbeat_gate_forwards_changes_and_drops_repeats() -> None:
    sent: list[tuple[Any, ...]] = []
    gate = HeartbeatGate(interval=3600.0, send=lambda *details: sent.append(details))
    for details in ("started", "started", "started", "off_reached", "off_reached", "started"):
        gate(details)
    assert sent == [("started",), ("off_reached",), ("started",)]
    every = HeartbeatGate(interval=0.0, send=lambda *details: sent.append(details))
    every("x")
    every("x")
    assert sent[-2:] == [("x",), ("x",)]  # past the interval, the same details go again


def _system(last_reset: str | None, bmc_date: datetime | None) -> System:
    return System(
        uri="/redfish/v1/Systems/1", power_state="On", reset_target=None, allowed=("PowerCycle", "On"),
        advertised=None, last_reset_time=last_reset, manufacturer=None, model=None, bmc_date=bmc_date,
    )  # fmt: skip


def test_last_reset_time_resolution_wait_only_when_the_bmc_clock_is_close() -> None:
    last = "2026-11-23T04:00:00Z"
    at = datetime(2026, 11, 23, 4, 0, 0, tzinfo=UTC)
    wait = PowerCycle._last_reset_resolution
    assert wait(_system(last, at + timedelta(seconds=2))) == 0.0  # a cycle now lands 2 s later
    assert wait(_system(last, at + timedelta(seconds=1))) == 1.0  # could share a second with skew
    assert wait(_system(last, None)) == 1.0  # no Date header: the safe wait
    assert wait(_system(last, at - timedelta(hours=1))) == 1.0  # a clock behind: the safe wait
