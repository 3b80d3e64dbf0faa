"""Attack 41a MEDIUM-3: `host status` said `BMC host-005 has not answered since ... (POST ...
answered 409 ResourceInUse ...)`: the BMC had answered, with an error (a busy BMC); and under a
flaky BMC every 1-second 503 blip showed in `--wait` as a lasting problem. Now "has not answered"
is said only of no answer (a connection error, a timeout: `PowerCycleProgress.bmc_answered_error`
false), an error answer reads "has answered errors since T, no success", and nothing is said
until the problem has lasted `BMC_TROUBLE_AFTER_SECONDS` (the status read knows `now`). The kind
is the driver's: the wire says whether the last request got an answer (`BMCWire.answered`), the
connection keeps it with the problem, the power cycle with its progress."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fake_bmc_support import ACCESS, ENV

from contracts.errors import BMCUnavailable
from contracts.models.inventory import BMCAccess, CredentialRef
from contracts.models.redfish import PowerCycleInput, PowerCycleProgress
from drivers.credentials import CredentialResolver
from drivers.redfish.bmc_state import BMCState
from drivers.redfish.client import RedfishClient
from drivers.redfish.powercycle import PowerCycle
from drivers.redfish.wire import BMCWire
from metalflow.seen import BMC_TROUBLE_AFTER_SECONDS, power_cycle_trouble

SINCE = datetime(2026, 11, 30, 3, 10, 2, tzinfo=UTC)
UNTIL = SINCE + timedelta(minutes=15)
LASTED = SINCE + timedelta(seconds=BMC_TROUBLE_AFTER_SECONDS)
BUSY = "BMC host-005: POST /redfish/v1/Systems/1/Actions/ComputerSystem.Reset answered 409 ResourceInUse"
GONE = "BMC host-005: cannot reach http://10.0.0.5 (ConnectError: All connection attempts failed)"


def problem(words: str, *, answered: bool) -> PowerCycleProgress:
    return PowerCycleProgress(
        bmc_problem=words, bmc_silent_since=SINCE, bmc_retry_until=UNTIL, bmc_answered_error=answered
    )


def test_an_error_answer_is_not_said_as_no_answer() -> None:
    said = power_cycle_trouble(problem(BUSY, answered=True), 1, 5, "", LASTED)
    assert "has not answered" not in said, said
    assert said.startswith(
        "BMC host-005 has answered errors since 2026-11-30T03:10:02Z, no success (POST "
        "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset answered 409 ResourceInUse); "
    ), said
    silent = power_cycle_trouble(problem(GONE, answered=False), 1, 5, "", LASTED)
    assert silent.startswith("BMC host-005 has not answered since 2026-11-30T03:10:02Z (cannot reach "), (
        silent
    )


@pytest.mark.parametrize("answered", [True, False])
def test_a_problem_is_said_only_once_it_has_lasted(answered: bool) -> None:
    progress = problem(BUSY if answered else GONE, answered=answered)
    blip = LASTED - timedelta(seconds=1)
    assert power_cycle_trouble(progress, 1, 5, "", SINCE) == ""
    assert power_cycle_trouble(progress, 1, 5, "", blip) == ""  # a blip: nothing shown in `--wait`
    assert power_cycle_trouble(progress, 1, 5, "", LASTED) != ""
    # A retried attempt still names the failure it follows, while the young problem is unsaid.
    failure = "BMC host-005: PowerState did not become On in time"
    assert power_cycle_trouble(progress, 2, 5, failure, blip) == (
        f"the power cycle is on attempt 2 of 5; the last one failed: {failure}"
    )


def wire(handler: httpx.MockTransport) -> BMCWire:
    access = BMCAccess(bmc_id="b", endpoint="http://10.0.0.5", credentials=CredentialRef(file="/x"))
    return BMCWire(
        httpx.AsyncClient(transport=handler), access, BMCState(slots=asyncio.Semaphore(1)), ("", "")
    )


async def test_the_wire_says_whether_the_last_request_was_answered() -> None:
    def busy(request: httpx.Request) -> httpx.Response:
        return httpx.Response(409)

    def gone(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    answering = wire(httpx.MockTransport(busy))
    await answering.send("GET", "http://10.0.0.5/redfish/v1/", {}, None)
    assert answering.answered
    silent = wire(httpx.MockTransport(gone))
    with pytest.raises(Exception, match="cannot reach"):
        await silent.send("GET", "http://10.0.0.5/redfish/v1/", {}, None)
    assert not silent.answered


@pytest.mark.parametrize("answered", [True, False])
async def test_the_power_cycle_records_the_kind_with_the_problem(answered: bool) -> None:
    """What the activity wires (`connection.on_problem = cycle.bmc_problem`): a BMC that answers
    only 503 is recorded as answering errors; one that cannot be reached, as silence."""

    def busy(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, headers={"Retry-After": "0"})

    def gone(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    client = RedfishClient(
        CredentialResolver(env=ENV), transport=httpx.MockTransport(busy if answered else gone)
    )
    request = PowerCycleInput(
        bmc=ACCESS, boot_generation=1, requested_at=SINCE, timeout_seconds=0.01, power_down_wait_seconds=0
    )
    recorded: list[PowerCycleProgress] = []
    try:
        with pytest.raises(BMCUnavailable):
            async with client.connect(ACCESS) as connection:
                cycle = PowerCycle(connection, request, None, persist=recorded.append, flush_seconds=0)
                connection.on_problem = cycle.bmc_problem
                await cycle.run()
    finally:
        await client.aclose()
    problems = [p for p in recorded if p.bmc_problem]
    assert problems and all(p.bmc_answered_error is answered for p in problems), problems
