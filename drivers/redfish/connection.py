"""One activity's connection to one BMC: authenticated, capped, classified requests and waits.

What an activity sees of a BMC (`RedfishClient.connect` builds it): requests that carry the
BMC's session token or basic auth (`drivers.redfish.sessions`), go out through the connection's
wire (`drivers.redfish.wire`: the cap per BMC, redirects, links on the BMC's origin) and raise
the taxonomy's errors for anything but 2xx (`drivers.redfish.answers`); waits that heartbeat and
keep the session alive; and what the worker remembers about the BMC (`BMCState`).

A session the BMC forgot (401 on the token: a timeout, a BMC reboot) is re-created once and the
request sent again; the SessionTimeout is then relearnt, since the keep-alive was too slow.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Callable
from typing import Any, Literal

import httpx

from contracts.models.inventory import BMCAccess
from drivers.credentials import Credentials
from drivers.redfish.answers import json_object, raise_for_status
from drivers.redfish.bmc_state import AuthMode, BMCState, Session
from drivers.redfish.sessions import BMCSessions
from drivers.redfish.tls import TLSKey
from drivers.redfish.wire import JSON_HEADERS, BMCWire

OnWait = Callable[[], None]


class BMCConnection:
    """Requests to one BMC, authenticated, capped and classified; links followed by origin.

    Args:
        http: The worker's HTTP client (its transport routes on the TLS extension).
        access: The BMC.
        state: What the worker shares about this BMC.
        credentials: The BMC's credentials, resolved.
        tls: How the BMC's certificate is checked (`drivers.redfish.tls`).
        on_wait: Called on every poll of a wait.
        auth: How to authenticate (the client's override, else the BMC's own `auth`).
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        access: BMCAccess,
        state: BMCState,
        credentials: Credentials,
        tls: TLSKey,
        on_wait: OnWait | None,
        auth: AuthMode,
    ) -> None:
        self.access = access
        self._state = state
        self._credentials = credentials
        self._auth = auth
        self.on_wait = on_wait
        self.on_power_state: Callable[[str], None] | None = None  # told each PowerState change seen
        self.last_power_state: str | None = None
        self._wire = BMCWire(http, access, state, tls)
        self._sessions = BMCSessions(self._wire, state, credentials, auth)
        self.looked_up_system = False  # this connection read Systems (not the worker's memory)
        self.on_problem: Callable[[str], None] | None = None  # told each transient error waited out
        self.on_answer: Callable[[], None] | None = None  # told each request the BMC answered (2xx)
        self.last_problem: str | None = None
        self.last_problem_answered = False  # the BMC answered it (an error answer), not silence

    def note_problem(self, err: Exception) -> None:
        """Remember a transient error that a wait rides out (the CLI shows it, and the last one),
        and whether the BMC answered it (an error status) or did not answer at all (timed out,
        could not be reached): the last request's, which raised it."""
        text = getattr(err, "message", None) or str(err)
        self.last_problem, self.last_problem_answered = text, self._wire.answered
        if self.on_problem is not None:
            self.on_problem(text)

    @property
    def bmc_id(self) -> str:
        return self.access.bmc_id

    @property
    def origin(self) -> str:
        """`scheme://host[:port]` of the BMC's endpoint: every link must stay on it."""
        return self._wire.origin

    @property
    def requests(self) -> int:
        """Requests this connection sent (redirects and session requests included)."""
        return self._wire.requests

    @property
    def authenticated(self) -> bool:
        """The credentials were accepted at least once here: a later 401/403 is about a resource."""
        return self._wire.authenticated

    # -- what the worker remembers about the BMC ---------------------------------------------

    @property
    def unsupported_resets(self) -> frozenset[str]:
        """Reset types this BMC advertised but refused as not implemented (remembered per BMC)."""
        return frozenset(self._state.unsupported_resets)

    def mark_reset_unsupported(self, reset_type: str) -> None:
        self._state.unsupported_resets.add(reset_type)

    @property
    def cached_system_uri(self) -> str | None:
        return self._state.system_uri

    def remember_system_uri(self, uri: str) -> None:
        self._state.system_uri = uri
        self.looked_up_system = True

    def forget_system_uri(self) -> None:
        self._state.system_uri = None

    @property
    def named_path_refused(self) -> bool:
        """The path the inventory names the System by answered 404 on this BMC (this worker):
        the System is looked up in the Systems collection from then on."""
        return self._state.named_path_refused

    def refuse_named_path(self) -> None:
        self._state.named_path_refused = True

    # -- waits ------------------------------------------------------------------------------

    def heartbeat(self) -> None:
        if self.on_wait is not None:
            self.on_wait()

    async def sleep(self, seconds: float) -> None:
        """Wait, heartbeating at least every second and keeping an open session alive (checked
        when it is due, not only on the second: a 2 s timeout is touched before it ends)."""
        end = time.monotonic() + seconds
        while True:
            self.heartbeat()
            await self._sessions.keep_alive()
            left = end - time.monotonic()
            if left <= 0:
                return
            await asyncio.sleep(min(left, 1.0, self._sessions.until_keepalive_due()))

    async def close_session(self) -> None:
        """Delete the BMC's session, if one is open (`BMCSessions.close`); never raises."""
        await self._sessions.close(self.sleep)

    # -- requests ---------------------------------------------------------------------------

    def service_root_url(self) -> str:
        return self._wire.service_root_url()

    def link(self, path: str) -> str:
        """The URL of a link from a response (server-absolute path, or an absolute URL on this origin)."""
        return self._wire.link(path)

    @property
    def cached_service_root(self) -> dict[str, Any] | None:
        """The service root if this worker has read it (it is read only when needed)."""
        return self._state.service_root

    async def service_root(self) -> dict[str, Any]:
        return await self._wire.service_root()

    async def get(self, path: str) -> dict[str, Any]:
        """GET a linked resource and return its JSON object."""
        return json_object(self, await self.request("GET", self.link(path)))

    async def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        return await self.request("POST", self.link(path), json_body=body)

    async def request(
        self,
        method: str,
        url: str,
        *,
        json_body: dict[str, Any] | None = None,
        authenticate: bool = True,
        accept: frozenset[int] = frozenset(),
    ) -> httpx.Response:
        """Send one request; raise the taxonomy's error for anything but 2xx and `accept`."""
        session_used: Session | None = None
        headers = dict(JSON_HEADERS)
        if authenticate:
            if await self.auth_mode() == "session":
                session_used = await self._sessions.current()
            headers |= self._credentials_for(session_used)
        response = await self._wire.send(method, url, headers, json_body)
        if response.status_code == 401 and session_used is not None:
            # The BMC dropped the session (timeout, BMC reboot): log in again, once.
            await self._sessions.forget(session_used)
            session_used = await self._sessions.current()
            headers = dict(JSON_HEADERS) | self._credentials_for(session_used)
            response = await self._wire.send(method, url, headers, json_body)
        if authenticate and response.status_code < 400:
            self._wire.authenticated = True
        if response.status_code not in accept:
            raise_for_status(self, method, url, response)
        if self.on_answer is not None:
            self.on_answer()
        return response

    def _credentials_for(self, session: Session | None) -> dict[str, str]:
        """The header that authenticates a request: the session's token, else basic auth (no
        session: `basic`, or `auto` fell back to it)."""
        if session is not None:
            return {"X-Auth-Token": session.token}
        return {"Authorization": _basic(self._credentials)}

    async def auth_mode(self) -> Literal["session", "basic"]:
        """How this BMC is authenticated: as configured, or what `auto` chose (session until a
        login is refused; no request is sent to decide)."""
        if self._auth != "auto":
            return self._auth
        return self._state.auth or "session"


def _basic(credentials: Credentials) -> str:
    raw = f"{credentials.username}:{credentials.password}".encode()
    return "Basic " + base64.b64encode(raw).decode()
