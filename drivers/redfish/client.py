"""One Redfish client per worker: TLS per BMC, session or basic auth per BMC, a request cap per BMC.

`RedfishClient.connect(access)` gives an activity its `BMCConnection` to one BMC
(`drivers.redfish.connection`), which sends through its wire (`wire`: the cap, redirects, links
kept on the BMC's origin) with the BMC's session (`sessions`) or basic auth. The BMC's answers
become errors of `contracts.errors` in `answers`; TLS is routed per BMC in `tls`; a 202's task
monitor is followed in `tasks`; what the worker remembers per BMC is `bmc_state`.

Auth, per BMC (`BMCAccess.auth`, or the client's `auth` which overrides it, as the CLI's
`--auth` does): `session`, `basic`, or `auto` (the default): a session at the standard
`/redfish/v1/SessionService/Sessions`; when that login is refused (401/403/404/405), basic is
tried before the credentials are called bad (after a 404/405, the service root is read first in
case it links the Sessions collection elsewhere). What `auto` chose is remembered per BMC.

Requests per BMC, learnt once per worker and kept (`BMCState`): the auth mode, the host's
System (`system.system_uri`: the path the inventory names, read at once; else found in the
standard `/redfish/v1/Systems`, the service root only when that is not found; looked up again
when the System answers 404), the SessionTimeout (read again after a session expired on us),
the reset types refused as not implemented. So a power cycle on a BMC whose System is named
costs login, System, the reset(s), the polls and the logout, the first as much as later ones;
an unnamed System adds the Systems read to the BMC's first cycle (bench/README.md). The service
root is read only when a standard path is not found, or for a link with no standard path
(UpdateService).

Sessions: the BMC's one session is deleted when the last activity using it finishes (`connect`
is a context manager) and, for safety, at `aclose`. BMCs hold few sessions (often 4 to 16) and
run out when clients leak them; a worker that is killed loses its session to the BMC's timeout,
which is why no session outlives the activities using it. That timeout is the Redfish way out
for a client that vanished (DSP8010 SessionService `SessionTimeout`: the seconds of inactivity
after which the service closes a session, 30 to 86,400): nothing can delete a killed process's
session, and a new worker cannot tell it from another worker's live one (they share the
account), so it deletes none but its own. Every request names its client in its `User-Agent`
(`metalflow-redfish (client <random>)`, one per `RedfishClient`), so a BMC's session list and the
simulated BMC tell a killed client's session (never used again) from one a running client leaked.

Load: at most `max_in_flight` requests per BMC are on the wire across the whole worker (sessions
included); waits between polls hold no slot. Cost per BMC: a few small objects.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import httpx

from contracts.models.inventory import BMCAccess
from drivers.credentials import CredentialResolver
from drivers.redfish.bmc_state import AuthMode, BMCState
from drivers.redfish.connection import BMCConnection, OnWait
from drivers.redfish.tls import TLSRouter, tls_key

log = logging.getLogger("metalflow.redfish")

USER_AGENT = "metalflow-redfish"


class RedfishClient:
    """Built once per worker; `connect(access)` gives an activity its connection to one BMC.

    Args:
        resolver: Resolves credential references.
        max_in_flight: Requests on the wire per BMC across the worker (Settings.bmc_max_in_flight).
        auth: Overrides every BMC's own `auth` (`session`, `basic` or `auto`); None: per BMC.
        timeout_seconds: Timeout of one HTTP request.
        transport: Replaces the network (tests pass `httpx.MockTransport`).
    """

    def __init__(
        self,
        resolver: CredentialResolver,
        *,
        max_in_flight: int = 2,
        auth: AuthMode | None = None,
        timeout_seconds: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._resolver = resolver
        self._max_in_flight = max_in_flight
        self.auth: AuthMode | None = auth
        # Which client a BMC's sessions came from (`user_agent`): a BMC, or the simulated one,
        # tells a session its client abandoned by being killed from one a running client leaked.
        self.user_agent = f"{USER_AGENT} (client {secrets.token_hex(6)})"
        self._http = httpx.AsyncClient(
            transport=TLSRouter(transport),
            timeout=timeout_seconds,
            follow_redirects=False,
            headers={"User-Agent": self.user_agent},
        )
        self._bmcs: dict[str, BMCState] = {}
        self._open: dict[str, BMCConnection] = {}
        self.on_connect: Callable[[BMCConnection], None] | None = None  # the CLI keeps them

    def _state(self, key: str) -> BMCState:
        state = self._bmcs.get(key)
        if state is None:
            state = self._bmcs[key] = BMCState(asyncio.Semaphore(self._max_in_flight))
        return state

    @asynccontextmanager
    async def connect(self, access: BMCAccess, on_wait: OnWait | None = None) -> AsyncIterator[BMCConnection]:
        """A connection to one BMC for the duration of the block (credentials resolved once).

        Args:
            access: The BMC and its credential reference.
            on_wait: Called on every poll of a wait (activities pass a `HeartbeatGate`).
        """
        tls = tls_key(access)
        if tls[0] == "insecure":
            log.warning(
                "TLS verification is OFF for BMC %s (%s): insecure is set", access.bmc_id, access.endpoint
            )
        credentials = await self._resolver.resolve(access.credentials)
        # Keyed by what identifies the service too: a BMC moved or re-pointed in the inventory
        # gets a fresh session, service root and System, never the old address's.
        key = f"{access.bmc_id}|{access.endpoint}|{access.system}|{access.auth}"
        state = self._state(key)
        state.users += 1
        auth = self.auth or access.auth
        connection = BMCConnection(self._http, access, state, credentials, tls, on_wait, auth)
        self._open[key] = connection
        if self.on_connect is not None:
            self.on_connect(connection)
        try:
            yield connection
        finally:
            state.users -= 1
            if state.users == 0:
                self._open.pop(key, None)
                await asyncio.shield(connection.close_session())

    async def aclose(self) -> None:
        """Delete every session still open (the worker is stopping), then close the HTTP client."""
        for connection in list(self._open.values()):
            await connection.close_session()
        self._open.clear()
        await self._http.aclose()
