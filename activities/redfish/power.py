"""Host power as Temporal activities; the same functions serve `metalflow bmc` without Temporal.

Activity names (what workflows call): `read_power_state`, `set_power_state`, `power_cycle_host`,
`shut_down_host_gracefully`. Each opens one connection to the BMC for its duration (sessions are
shared with concurrent activities on the same BMC and deleted at the end), heartbeats on every
poll of a wait, and raises only the errors of `metalflow.errors`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio import activity

from activities.heartbeat import HeartbeatGate, heartbeating, wait_until_recorded
from activities.redfish.access import BMCSource, current_access
from activities.redfish.client import BMCConnection, RedfishClient
from activities.redfish.powercycle import PowerCycle
from activities.redfish.system import (
    System,
    find_system,
    parse_time,
    read_system,
    require_reset_type,
    send_reset,
    wait_for_power,
)
from metalflow.errors import BMCUnavailable, PowerStateTimeout
from metalflow.models.inventory import BMCAccess
from metalflow.models.redfish import (
    GracefulShutdownInput,
    GracefulShutdownResult,
    PowerCycleInput,
    PowerCycleProgress,
    PowerCycleResult,
    ReadPowerStateInput,
    SetPowerInput,
    SetPowerResult,
    SystemPower,
)

Say = Callable[[str], None]
_TURN_ON = frozenset({"On", "ForceOn"})
_TURN_OFF = frozenset({"ForceOff", "GracefulShutdown"})
_RESTART = frozenset({"ForceRestart", "GracefulRestart", "PowerCycle", "FullPowerCycle"})
# The SDK's heartbeat throttle when an activity has no heartbeat timeout, and its cap.
_DEFAULT_THROTTLE = timedelta(seconds=30)
_MAX_THROTTLE = timedelta(seconds=60)
_FLUSH_MARGIN_SECONDS = 1.0
_MAX_DECISIONS = 4  # re-decisions when PowerState moves under us before giving up
_SETTLE_POLL_SECONDS = 0.5


def _now() -> datetime:
    return datetime.now(UTC)


def _quiet(_: str) -> None:
    pass


async def read_power(connection: BMCConnection) -> SystemPower:
    """The System's power state, reset types and how a power cycle would be done."""
    system = await find_system(connection)
    uri = system.uri
    return SystemPower(
        bmc_id=connection.bmc_id,
        system=uri,
        manufacturer=system.manufacturer,
        model=system.model,
        power_state=system.power_state,
        allowed_reset_types=system.advertised if system.advertised is not None else system.allowed,
        last_reset_time=parse_time(system.last_reset_time),
        power_cycle_method=system.power_cycle_method,
        observed_at=_now(),
    )


async def set_power(connection: BMCConnection, request: SetPowerInput, say: Say = _quiet) -> SetPowerResult:
    """Send a reset the BMC advertises, skipping one whose target already holds, and wait for it.

    As the bare-metal manager does (DOMAIN.md section 1): On/ForceOn of an On host and
    ForceOff/GracefulShutdown of an Off host send nothing; a restart of an Off host is `On`.
    Real BMCs report the old PowerState for seconds after a reset (by us or anyone), with no
    Powering* state: a state is trusted only once it held for `settle_seconds` (re-deciding if
    it moved), and the final state is verified the same way before success is reported.
    """
    started = _now()
    system = await find_system(connection)
    uri = system.uri
    wanted = request.reset_type
    for _ in range(_MAX_DECISIONS):
        if system.power_state.startswith("Powering"):
            say(f"{system.power_state}: waiting for the running transition to settle")
            system = await wait_for_power(
                connection, uri, frozenset({"On", "Off"}), time.monotonic() + request.timeout_seconds
            )
        sent = _reset_to_send(wanted, system.power_state)
        if sent is not None:
            break
        moved = await _settled(connection, uri, system, request.settle_seconds, say)
        if moved.power_state == system.power_state:
            say(f"already {system.power_state} (held {request.settle_seconds:g} s): nothing sent")
            return SetPowerResult(
                bmc_id=connection.bmc_id, requested=wanted, sent=None, power_state=system.power_state,
                started_at=started, finished_at=_now(),
            )  # fmt: skip
        system = moved  # a reset we did not send is taking effect: decide again
    else:
        raise PowerStateTimeout(f"BMC {connection.bmc_id}: PowerState kept changing; not deciding on it")
    state = system.power_state
    if sent != wanted:
        say(f"{wanted} of a host that is Off: sending On instead")
    # Check what was asked too, so an unsupported request fails the same whatever the power is.
    for reset_type in (wanted, sent):
        require_reset_type(connection, system, reset_type)
    deadline = time.monotonic() + request.timeout_seconds
    say(f"{state} -> sending {sent}")
    await send_reset(connection, system, sent, deadline)
    accepted = time.monotonic()
    target = "Off" if sent in _TURN_OFF else "On" if sent in _TURN_ON | _RESTART else None
    lag = None
    if target is not None:
        system = await wait_for_power(connection, uri, frozenset({target}), deadline)
        lag = round(time.monotonic() - accepted, 3)
        say(f"PowerState {system.power_state} after {lag:g} s")
        held = await _settled(connection, uri, system, request.settle_seconds, say)
        if held.power_state != system.power_state:
            raise PowerStateTimeout(
                f"BMC {connection.bmc_id}: PowerState reached {system.power_state} after {sent} but then "
                f"showed {held.power_state} within {request.settle_seconds:g} s"
            )
    else:
        system = await read_system(connection, uri)
    return SetPowerResult(
        bmc_id=connection.bmc_id, requested=wanted, sent=sent, power_state=system.power_state,
        started_at=started, finished_at=_now(), lag_seconds=lag,
    )  # fmt: skip


def _reset_to_send(wanted: str, state: str) -> str | None:
    """The reset to send for `wanted` when PowerState is `state`; None when its target holds."""
    if (wanted in _TURN_ON and state == "On") or (wanted in _TURN_OFF and state == "Off"):
        return None
    if wanted in _RESTART and state == "Off":
        return "On"
    return wanted


async def _settled(connection: BMCConnection, uri: str, seen: System, seconds: float, say: Say) -> System:
    """Re-read PowerState for `seconds`; the first reading that differs from `seen`, else the last."""
    end = time.monotonic() + seconds
    current = seen
    while (left := end - time.monotonic()) > 0:
        await connection.sleep(min(left, _SETTLE_POLL_SECONDS))
        try:
            current = await read_system(connection, uri)
        except BMCUnavailable as err:
            connection.note_problem(err)
            continue
        if current.power_state != seen.power_state:
            say(f"PowerState moved {seen.power_state} -> {current.power_state} while settling")
            return current
    return current


async def graceful_shutdown(
    connection: BMCConnection, request: GracefulShutdownInput, say: Say = _quiet
) -> GracefulShutdownResult:
    """GracefulShutdown, then ForceOff when the host is not Off after `grace_seconds`."""
    started = _now()
    system = await find_system(connection)
    uri = system.uri
    sent: list[str] = []
    if system.power_state != "Off":
        if system.allows("GracefulShutdown") and request.grace_seconds > 0:
            say("sending GracefulShutdown")
            sent.append("GracefulShutdown")
            grace_end = time.monotonic() + request.grace_seconds
            await send_reset(connection, system, "GracefulShutdown", grace_end)
            try:
                system = await wait_for_power(connection, uri, frozenset({"Off"}), grace_end)
            except PowerStateTimeout:  # the OS did not shut down in time
                say(f"not Off after {request.grace_seconds:g} s")
        if system.power_state != "Off":
            say("sending ForceOff")
            sent.append("ForceOff")
            deadline = time.monotonic() + request.timeout_seconds
            system = await read_system(connection, uri)
            await send_reset(connection, system, "ForceOff", deadline)
            system = await wait_for_power(connection, uri, frozenset({"Off"}), deadline)
    return GracefulShutdownResult(
        bmc_id=connection.bmc_id, reset_types=tuple(sent), forced="ForceOff" in sent,
        power_state=system.power_state, started_at=started, finished_at=_now(),
    )  # fmt: skip


def heartbeat_flush_seconds(heartbeat_timeout: timedelta | None) -> float:
    """How long until a heartbeat recorded now has surely been sent under the SDK's default
    throttle: the power cycle's wait when it has no server to read its step back from (unit
    tests); with one, it reads the step back instead of waiting (`PowerCycle._flush`)."""
    throttle = _DEFAULT_THROTTLE if heartbeat_timeout is None else min(heartbeat_timeout * 0.8, _MAX_THROTTLE)
    return throttle.total_seconds() + _FLUSH_MARGIN_SECONDS


def _read_back(
    what: str, beat: Callable[..., None]
) -> Callable[[PowerCycleProgress, float], Awaitable[None]] | None:
    """How the power cycle confirms a recorded step: read back from Temporal by a worker's
    activity; None only without a Temporal client (the SDK's `ActivityEnvironment` in unit
    tests), where the cycle trusts its flush wait."""
    try:
        activity.client()
    except RuntimeError:
        return None
    return lambda progress, within: wait_until_recorded(progress, within_seconds=within, what=what, beat=beat)


def resumed_progress(details: Any) -> PowerCycleProgress | None:
    """The progress a previous attempt heartbeated, or None on a first attempt."""
    if not details:
        return None
    return PowerCycleProgress.model_validate(details[0])


class PowerActivities:
    """Host power activities; the worker builds one, holding the worker's `RedfishClient`.

    With an `inventory`, each attempt uses the BMC's endpoint, credential reference, TLS, auth
    and system as the inventory says at that moment (the workflow's copy identifies the BMC), so
    an operator's fix to the site file helps an operation that is already retrying.
    """

    def __init__(self, client: RedfishClient, inventory: BMCSource | None = None) -> None:
        self._client = client
        self._inventory = inventory

    async def _current(self, given: BMCAccess) -> BMCAccess:
        return await current_access(self._inventory, given)

    @activity.defn(name="read_power_state")
    async def read_power_state(self, request: ReadPowerStateInput) -> SystemPower:
        """Read the host's PowerState, the reset types its BMC allows and how it would power cycle."""
        bmc = await self._current(request.bmc)
        async with heartbeating(), self._client.connect(bmc, on_wait=HeartbeatGate()) as connection:
            return await read_power(connection)

    @activity.defn(name="set_power_state")
    async def set_power_state(self, request: SetPowerInput) -> SetPowerResult:
        """Send one reset the BMC advertises (skipped when its target holds) and wait for the state."""
        bmc = await self._current(request.bmc)
        async with heartbeating(), self._client.connect(bmc, on_wait=HeartbeatGate()) as connection:
            return await set_power(connection, request, activity.logger.info)

    @activity.defn(name="shut_down_host_gracefully")
    async def shut_down_host_gracefully(self, request: GracefulShutdownInput) -> GracefulShutdownResult:
        """GracefulShutdown with a ForceOff fallback after the grace period."""
        bmc = await self._current(request.bmc)
        async with heartbeating(), self._client.connect(bmc, on_wait=HeartbeatGate()) as connection:
            return await graceful_shutdown(connection, request, activity.logger.info)

    @activity.defn(name="power_cycle_host")
    async def power_cycle_host(self, request: PowerCycleInput) -> PowerCycleResult:
        """Power cycle the host exactly once for this boot generation, resuming a previous attempt."""
        info = activity.info()
        resume = resumed_progress(info.heartbeat_details)
        activity.logger.info(
            "power cycle of %s for boot generation %d (attempt %d, resuming from %s)",
            request.bmc.bmc_id, request.boot_generation, info.attempt, resume.step if resume else "the start",
        )  # fmt: skip
        bmc = await self._current(request.bmc)
        # Every poll beats the progress: forwarded to the SDK only when it changed (a step) or
        # once per beat interval, so a step is sent at once under the worker's short throttle.
        beat = HeartbeatGate()
        async with self._client.connect(bmc) as connection:
            cycle = PowerCycle(
                connection,
                request,
                resume,
                persist=beat,
                flush_seconds=heartbeat_flush_seconds(info.heartbeat_timeout),
                confirm=_read_back(f"power cycle of {request.bmc.bmc_id}", beat),
                attempt=info.attempt,
            )
            # A single request (a reset the BMC is slow to answer) may outlast the heartbeat
            # timeout: beat from the background with the latest progress meanwhile. Not at once:
            # the first step recorded then goes out unthrottled (see `heartbeating`).
            async with heartbeating(lambda: (cycle.progress,), first_beat_at_once=False):
                return await cycle.run()
