"""Host power through a BMC connection: read it, set it, shut down gracefully.

The functions `metalflow bmc` and the power activities (`activities/redfish/power.py`) share: each
takes an open `BMCConnection` and an optional `say` (a line of progress for a person or a log).
They raise only the errors of `contracts.errors`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

from contracts.errors import BMCUnavailable, PowerStateTimeout
from contracts.models.redfish import (
    GracefulShutdownInput,
    GracefulShutdownResult,
    SetPowerInput,
    SetPowerResult,
    SystemPower,
)
from drivers.redfish.connection import BMCConnection
from drivers.redfish.system import (
    System,
    find_system,
    parse_time,
    read_system,
    require_reset_type,
    send_reset,
    wait_for_power,
)

Say = Callable[[str], None]
_TURN_ON = frozenset({"On", "ForceOn"})
_TURN_OFF = frozenset({"ForceOff", "GracefulShutdown"})
_RESTART = frozenset({"ForceRestart", "GracefulRestart", "PowerCycle", "FullPowerCycle"})
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


async def set_power(
    connection: BMCConnection, request: SetPowerInput, say: Say = _quiet, sending: Say = _quiet
) -> SetPowerResult:
    """Send a reset the BMC advertises, skipping one whose target already holds, and wait for it.

    On/ForceOn of an On host and ForceOff/GracefulShutdown of an Off host send nothing; a
    restart of an Off host is `On` (the bare-metal manager instead stops for a person there:
    docs/DOMAIN.md section 4.1).
    Real BMCs report the old PowerState for seconds after a reset (by us or anyone), with no
    Powering* state: a state is trusted only once it held for `settle_seconds` (re-deciding if
    it moved), and the final state is verified the same way before success is reported. A final
    state that moves away within the settle fails retryably (`PowerStateTimeout`), unless
    `report_reversal` asks for it as the result (`reversed_to`): another actor's reset, which a
    retry would fight. `sending` is told the reset type just before it is sent (a failure after
    it may have left the host's power changed).
    """
    started = _now()
    system = await find_system(connection)
    uri = system.uri
    wanted = request.reset_type
    mark_before = system.last_reset_time  # `SetPowerResult.last_reset_time`: only a mark that moved
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
    sending(sent)  # from here the reset may have reached the BMC, whatever fails next
    await send_reset(connection, system, sent, deadline)
    accepted = time.monotonic()
    target = "Off" if sent in _TURN_OFF else "On" if sent in _TURN_ON | _RESTART else None
    lag = None
    if target is not None:
        system = await wait_for_power(connection, uri, frozenset({target}), deadline)
        lag = round(time.monotonic() - accepted, 3)
        say(f"PowerState {system.power_state} after {lag:g} s")
        held = await _settled(connection, uri, system, request.settle_seconds, say)
        if held.power_state != system.power_state and request.report_reversal:
            # Someone else's reset: answered, not retried (a retry would send ours again, and
            # fight them: docs of `SetPowerInput.report_reversal`).
            say(f"{held.power_state} again within the settle: a reset nobody here sent")
            return SetPowerResult(
                bmc_id=connection.bmc_id, requested=wanted, sent=sent, power_state=held.power_state,
                started_at=started, finished_at=_now(), lag_seconds=lag, reversed_to=held.power_state,
            )  # fmt: skip
        if held.power_state != system.power_state:
            raise PowerStateTimeout(
                f"BMC {connection.bmc_id}: PowerState reached {system.power_state} after {sent} but then "
                f"showed {held.power_state} within {request.settle_seconds:g} s"
            )
        system = held  # the final read
    else:
        system = await read_system(connection, uri)
    mark = system.last_reset_time if system.last_reset_time != mark_before else None
    return SetPowerResult(
        bmc_id=connection.bmc_id, requested=wanted, sent=sent, power_state=system.power_state,
        started_at=started, finished_at=_now(), lag_seconds=lag, last_reset_time=parse_time(mark),
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
