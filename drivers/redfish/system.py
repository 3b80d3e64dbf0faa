"""The ComputerSystem of a BMC: find it by links, read its power, send resets, wait for power.

Vendors differ (docs/DOMAIN.md section 4.1): the System id (`System.Embedded.1`, `1`, `Self`), whether
`ResetType@Redfish.AllowableValues` or only a `ResetActionInfo` lists the reset types, whether
`LastResetTime` exists, and how a reset answers (200, 202 with a task monitor, 204). Nothing
here assumes an id: the System is the Systems collection's only member, or the one
the inventory names (`BMCAccess.system`, by Id or path) on a BMC with several; a BMC with
several and none named is refused, never guessed. The collection is read at its standard path
(the service root only when that is not found: one request less per BMC and worker). The
reset goes to the action's `target`.

A System the inventory names is read at once, without the collection (one request less per
power cycle on a BMC's first cycle in a worker; the collection is not needed to find it):
at its path, or at `/redfish/v1/Systems/<Id>` for an Id (the URI DSP0266 prescribes since
Redfish 1.6, as Metal3 and Ironic address a System). When that answers 404 (an older BMC with
other paths) the System is looked up in the collection, by the name, from then on for that BMC
in this worker; a name the collection does not hold is refused naming what it holds.
A reset type the BMC advertises but answers 501 / `ActionNotSupported` to is remembered per
BMC and no longer counted as offered.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, cast
from urllib.parse import quote

from contracts.errors import (
    BMCRequestRejected,
    BMCUnavailable,
    InvalidInput,
    PowerStateTimeout,
    ResetTypeNotSupported,
)
from contracts.models.redfish import PowerCycleMethod, PowerState
from drivers.redfish.answers import is_not_supported, json_object, odata_id, raise_for_status, required_link
from drivers.redfish.connection import BMCConnection
from drivers.redfish.tasks import follow_task

log = logging.getLogger("metalflow.redfish")

# The ResetType enum of the Redfish schema (Resource.v1): values outside it are a vendor's own and
# are shown to operators but never chosen.
RESET_TYPES = frozenset(
    {"On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "Nmi", "ForceOn",
     "PushPowerButton", "PowerCycle", "FullPowerCycle", "Suspend", "Pause", "Resume"}
)  # fmt: skip
# What a BMC that advertises nothing is assumed to take (what Ironic assumes): no PowerCycle.
ASSUMED_RESET_TYPES = ("On", "ForceOff", "GracefulShutdown", "ForceRestart")
POWER_STATES = frozenset({"On", "Off", "PoweringOn", "PoweringOff", "Paused"})
SYSTEMS_PATH = "/redfish/v1/Systems"
_POLL_FIRST_SECONDS = 0.25
_POLL_MAX_SECONDS = 3.0


@dataclass(frozen=True)
class System:
    """One reading of a ComputerSystem."""

    uri: str
    power_state: PowerState
    reset_target: str | None
    allowed: tuple[str, ...]  # Redfish reset types the BMC takes (assumed when not advertised)
    advertised: tuple[str, ...] | None  # what the BMC listed, unknown values included; None: nothing
    last_reset_time: str | None
    manufacturer: str | None
    model: str | None
    bmc_date: datetime | None = None  # the BMC's clock when read (HTTP `Date`), to the second

    def allows(self, reset_type: str) -> bool:
        return reset_type in self.allowed

    @property
    def power_cycle_method(self) -> PowerCycleMethod:
        """How `power_cycle_host` cycles this host when it is On (see `powercycle`)."""
        if self.allows("PowerCycle") and self.last_reset_time is not None:
            return "PowerCycle"
        return "ForceOff+On"


def parse_time(value: str | None) -> datetime | None:
    """A Redfish date-time (`2024-05-01T10:00:00Z`, `+00:00` offsets), or None when absent/unparsable."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def as_utc(moment: datetime) -> datetime:
    """`moment`, a naive one taken as UTC (as workflow times are)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def reset_since(last_reset_time: str | None, moment: datetime) -> bool:
    """The BMC's `LastResetTime` is after `moment`: the system was reset since. This compares
    the BMC's clock with the caller's, to the second: a check, never the only proof."""
    last = parse_time(last_reset_time)
    return last is not None and last > as_utc(moment)


async def system_uri(connection: BMCConnection) -> str:
    """The host's System `@odata.id`: the collection's only member, or the one the inventory names."""
    if connection.cached_system_uri is not None:
        return connection.cached_system_uri
    named_path = _named_path(connection.access.system)
    if named_path is not None and not connection.named_path_refused:
        return named_path
    members = (await _systems_collection(connection)).get("Members")
    uris = [u for u in (odata_id(m) for m in (members if isinstance(members, list) else [])) if u is not None]
    if not uris:
        raise BMCRequestRejected(f"BMC {connection.bmc_id}: the Systems collection has no members")
    named = connection.access.system
    if named is None:
        if len(uris) > 1:
            raise InvalidInput(
                f"BMC {connection.bmc_id}: {connection.access.endpoint} has {len(uris)} Systems "
                f"({', '.join(uris)}); name the host's one in the inventory (bmc.system: <id or path>)"
            )
        chosen = uris[0]
    else:
        wanted = named.rstrip("/")
        found = [u for u in uris if u.rstrip("/") == wanted or u.rstrip("/").rsplit("/", 1)[-1] == wanted]
        if len(found) != 1:
            raise InvalidInput(
                f"BMC {connection.bmc_id}: the inventory names System {named!r}, but "
                f"{connection.access.endpoint} has {', '.join(uris)}"
            )
        chosen = found[0]
    connection.remember_system_uri(chosen)
    return chosen


async def find_system(connection: BMCConnection) -> System:
    """The host's System, read (`system_uri` then `read_system`). A System the inventory names
    that is not at the path its name gives is looked up by the name at once: one request more,
    once per BMC and worker, and a name the BMC does not hold is refused (`InvalidInput`)."""
    refused = connection.named_path_refused
    uri = await system_uri(connection)
    try:
        return await read_system(connection, uri)
    except BMCUnavailable:
        if refused or not connection.named_path_refused:
            raise
        return await read_system(connection, await system_uri(connection))


def _named_path(named: str | None) -> str | None:
    """Where the System the inventory names is: its path, or the DSP0266 URI of its Id."""
    if named is None or not named.strip("/"):
        return None
    if named.startswith("/"):
        return named.rstrip("/")
    return f"{SYSTEMS_PATH}/{quote(named, safe='')}"


async def _systems_collection(connection: BMCConnection) -> dict[str, Any]:
    """The Systems collection: at its standard path (DSP0266 fixes `/redfish/v1/Systems`), or where
    the service root links it when the BMC answers 404 there (one more request, that BMC only)."""
    root = connection.cached_service_root
    if root is None:
        response = await connection.request("GET", connection.link(SYSTEMS_PATH), accept=frozenset({404}))
        if response.status_code != 404:
            return json_object(connection, response)
        root = await connection.service_root()
    systems_link = required_link(connection, root, "Systems", "the service root", "Systems collection")
    return await connection.get(systems_link)


async def read_system(connection: BMCConnection, uri: str) -> System:
    """GET the System and check that it is Redfish enough to drive."""
    response = await connection.request("GET", connection.link(uri), accept=frozenset({404}))
    if response.status_code == 404:
        if connection.cached_system_uri is None and uri == _named_path(connection.access.system):
            # Not at the path the name gives (a BMC older than DSP0266's URIs): look it up in
            # the collection by the name, on this attempt's next try and from then on.
            connection.refuse_named_path()
            raise BMCUnavailable(
                f"BMC {connection.bmc_id}: System {uri} answered 404; looking "
                f"{connection.access.system!r} up in the Systems collection"
            )
        connection.forget_system_uri()
        if not connection.looked_up_system:
            # The System an earlier connection learnt is gone (the BMC renamed it, e.g. after a
            # firmware update): the next look-up (this attempt's next try) reads Systems again.
            raise BMCUnavailable(f"BMC {connection.bmc_id}: System {uri} answered 404; looking it up again")
        raise_for_status(connection, "GET", connection.link(uri), response)  # just listed, yet absent
    body = json_object(connection, response)
    power = body.get("PowerState")
    if power not in POWER_STATES:
        shown = "missing" if power is None else repr(power)
        raise BMCRequestRejected(
            f"BMC {connection.bmc_id}: System {uri} has PowerState {shown}; not a Redfish System?"
        )
    action = (body.get("Actions") or {}).get("#ComputerSystem.Reset")
    action = action if isinstance(action, dict) else {}
    target = action.get("target") if isinstance(action.get("target"), str) else None
    advertised = _strings(action.get("ResetType@Redfish.AllowableValues"))
    if advertised is None and isinstance(action.get("@Redfish.ActionInfo"), str):
        advertised = await _action_info_values(connection, action["@Redfish.ActionInfo"])
    allowed = ASSUMED_RESET_TYPES if advertised is None else tuple(v for v in advertised if v in RESET_TYPES)
    refused = connection.unsupported_resets
    allowed = tuple(v for v in allowed if v not in refused)
    if power != connection.last_power_state:
        connection.last_power_state = power
        if connection.on_power_state is not None:
            connection.on_power_state(power)
    last_reset = body.get("LastResetTime")
    return System(
        uri=uri,
        power_state=cast(PowerState, power),
        reset_target=target,
        allowed=allowed,
        advertised=advertised,
        last_reset_time=last_reset if isinstance(last_reset, str) and last_reset else None,
        manufacturer=body.get("Manufacturer") if isinstance(body.get("Manufacturer"), str) else None,
        model=body.get("Model") if isinstance(body.get("Model"), str) else None,
        bmc_date=_http_date(response.headers.get("Date")),
    )


def _http_date(value: str | None) -> datetime | None:
    """The BMC's clock as its `Date` header gave it (to the second), or None."""
    if not value:
        return None
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return parsed if parsed.tzinfo is not None else None


async def _action_info_values(connection: BMCConnection, link: str) -> tuple[str, ...] | None:
    try:
        info = await connection.get(link)
    except BMCRequestRejected:
        return None  # an ActionInfo link that leads nowhere: fall back to the assumed set
    for parameter in info.get("Parameters") or []:
        if isinstance(parameter, dict) and parameter.get("Name") == "ResetType":
            return _strings(parameter.get("AllowableValues"))
    return None


def _strings(value: Any) -> tuple[str, ...] | None:
    if not isinstance(value, list):
        return None
    return tuple(v for v in value if isinstance(v, str))


def require_reset_type(connection: BMCConnection, system: System, reset_type: str) -> None:
    """`ResetTypeNotSupported` unless the BMC advertises `reset_type`."""
    if not system.allows(reset_type):
        listed = ", ".join(system.allowed) or "none"
        raise ResetTypeNotSupported(
            f"BMC {connection.bmc_id}: the System does not take ResetType {reset_type} (it takes: {listed})"
        )


async def send_reset(connection: BMCConnection, system: System, reset_type: str, deadline: float) -> None:
    """POST the reset to the action's target and follow a 202 task monitor to its end.

    The power has usually not changed when this returns: poll with `wait_for_power`.
    """
    require_reset_type(connection, system, reset_type)
    if system.reset_target is None:
        raise BMCRequestRejected(
            f"BMC {connection.bmc_id}: System {system.uri} has no #ComputerSystem.Reset action"
        )
    log.debug("BMC %s: sending ResetType %s", connection.bmc_id, reset_type)
    try:
        response = await connection.post(system.reset_target, {"ResetType": reset_type})
    except BMCRequestRejected as err:
        if not is_not_supported(err):
            raise
        # Advertised but not implemented: permanent, and remembered for this BMC.
        connection.mark_reset_unsupported(reset_type)
        raise ResetTypeNotSupported(
            f"{err.message} (ResetType {reset_type} is advertised but refused)"
        ) from None
    await follow_task(connection, response, deadline)


async def wait_for_power(
    connection: BMCConnection,
    uri: str,
    targets: frozenset[str],
    deadline: float,
    *,
    fallback: frozenset[str] = frozenset(),
) -> System:
    """Poll `PowerState` until it is one of `targets` (heartbeat on every poll).

    A state in `fallback` seen after a transitional one also ends the wait (a host that read
    `PoweringOn` and fell back to `Off`): the caller decides what to do. A BMC that is busy
    (409/5xx/timeouts) while polling does not end the wait; the deadline does, with
    `PowerStateTimeout`.
    """
    delay = _POLL_FIRST_SECONDS
    seen_transition = False
    last: str = "unknown"
    while True:
        connection.heartbeat()
        try:
            system = await read_system(connection, uri)
        except BMCUnavailable as err:
            connection.note_problem(err)
            log.info(
                "BMC %s: busy while waiting for %s: %s", connection.bmc_id, "/".join(sorted(targets)), err
            )
        else:
            last = system.power_state
            if last in targets or (seen_transition and last in fallback):
                return system
            seen_transition = seen_transition or last.startswith("Powering")
        if time.monotonic() >= deadline:
            raise PowerStateTimeout(
                f"BMC {connection.bmc_id}: PowerState did not become {' or '.join(sorted(targets))} in time "
                f"(last seen: {last})"
            )
        await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 1.5, _POLL_MAX_SECONDS)
