"""One Redfish client per worker: TLS per BMC, session or basic auth per BMC, a request cap per BMC.

Errors: only those of `contracts.errors`, classified by `drivers.redfish.answers` (which
says how each BMC answer maps to them). Links in Redfish responses are server-absolute paths
(`/redfish/v1/...`): they are joined with the endpoint's origin, never with the endpoint
itself, and a link to another origin is refused.

Auth, per BMC (`BMCAccess.auth`, or the client's `auth` which overrides it, as the CLI's
`--auth` does): `session`, `basic`, or `auto` (the default): a session at the standard
`/redfish/v1/SessionService/Sessions`; when that login is refused (401/403/404/405), basic is
tried before the credentials are called bad (after a 404/405, the service root is read first in
case it links the Sessions collection elsewhere). What `auto` chose is remembered per BMC.

Requests per BMC, learnt once per worker and kept (`_BMCState`): the auth mode, the host's
System (`system.system_uri`: the path the inventory names, read at once; else found in the
standard `/redfish/v1/Systems`, the service root only when that is not found; looked up again
when the System answers 404), the SessionTimeout (read again after a session expired on us),
the reset types refused as not implemented. So a power cycle on a BMC whose System is named
costs login, System, the reset(s), the polls and the logout, the first as much as later ones;
an unnamed System adds the Systems read to the BMC's first cycle (measured in
bench/README.md). The service root is read only when a
standard path is not found, or for a link with no standard path (UpdateService).

Sessions: a BMC gets one session, created on the first request that needs it and shared by
every activity using that BMC at the time. It is deleted when the last of them finishes
(`RedfishClient.connect` is a context manager) and, for safety, at `aclose`. A session the BMC
forgot (401 on the token) is re-created once (and the SessionTimeout relearnt: the keep-alive
was too slow). Long waits (`BMCConnection.sleep`) touch the session when it has been idle for a
third of the BMC's `SessionTimeout` (at most `SESSION_KEEPALIVE_SECONDS`). The SessionTimeout is
read lazily, once per BMC per worker: the first time a wait leaves the session idle for
`_KEEPALIVE_FLOOR_SECONDS` (that GET touches the session too), so a cycle without a long wait
never reads it. BMCs time sessions out after 60 s or less, and a ForceOff / 120 s wait / On
cycle must not leak one. BMCs hold few sessions (often 4 to 16) and run out when clients leak
them; a worker that is killed loses its session to the BMC's timeout, which is why no session
outlives the activities using it.

Load: at most `max_in_flight` requests per BMC are on the wire across the whole worker (sessions
included); waits between polls hold no slot. Cost per BMC: a few small objects.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import ssl
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urljoin, urlsplit

import httpx

from contracts import metrics
from contracts.errors import BMCAuthenticationFailed, BMCRequestRejected, BMCUnavailable, InvalidInput
from contracts.models.inventory import BMCAccess
from drivers.credentials import CredentialResolver, Credentials
from drivers.redfish.answers import (
    _maybe_json,
    _odata_id,
    _path,
    _task_message,
    is_not_supported,
    json_object,
    raise_for_status,
    retry_after_seconds,
)

log = logging.getLogger("metalflow.redfish")

AuthMode = Literal["session", "basic", "auto"]
OnWait = Callable[[], None]
# A session DELETE that fails transiently is sent again, this often in all, pausing between.
_SESSION_DELETE_ATTEMPTS = 3
_SESSION_DELETE_PAUSE_SECONDS = 0.5
# Touch an open session at least this often during a wait (BMC idle timeouts are often 60 s).
SESSION_KEEPALIVE_SECONDS = 20.0
# Until the BMC's SessionTimeout is known, a wait touches (and learns it) after this much idle.
# Redfish's SessionService schema (DSP8010) sets SessionTimeout's minimum at 30 s: 1.5 s leaves
# a wide margin for BMCs that ignore it, and is longer than the 1 s a PowerCycle waits out a
# fresh `LastResetTime`, so that wait no longer reads SessionService (it did at 0.5 s: one
# request more on a BMC's first re-cycle within 2 s in a worker; bench/README.md).
_KEEPALIVE_FLOOR_SECONDS = 1.5
# Shortest pause between keep-alive checks of a wait (a timeout shorter than the floor is
# touched at most this late).
_KEEPALIVE_MIN_PAUSE_SECONDS = 0.05
SESSIONS_PATH = "/redfish/v1/SessionService/Sessions"  # DSP0266: the session login URI
SESSION_SERVICE_PATH = "/redfish/v1/SessionService"
_TLS_EXTENSION = "metalflow_tls"
_MAX_REDIRECTS = 5
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_TASK_POLL_MAX_SECONDS = 5.0
_TASK_END_STATES = frozenset({"Completed", "Exception", "Killed", "Cancelled", "Interrupted"})


class _TLSRouter(httpx.AsyncBaseTransport):
    """Sends each request through a transport built for its BMC's TLS settings.

    httpx fixes `verify` per transport; BMCs differ (public CA, a site CA bundle, self-signed and
    explicitly insecure), so one client routes on a request extension instead.
    """

    def __init__(self, inner: httpx.AsyncBaseTransport | None) -> None:
        self._inner = inner
        self._transports: dict[tuple[str, str], httpx.AsyncBaseTransport] = {}

    def _transport(self, key: tuple[str, str]) -> httpx.AsyncBaseTransport:
        if self._inner is not None:
            return self._inner
        found = self._transports.get(key)
        if found is None:
            kind, value = key
            verify: ssl.SSLContext | bool
            if kind == "insecure":
                verify = False
            elif kind == "ca":
                verify = ssl.create_default_context(cafile=value)
            else:
                verify = True
            found = self._transports[key] = httpx.AsyncHTTPTransport(verify=verify, retries=0)
        return found

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        key = request.extensions.pop(_TLS_EXTENSION, ("verify", ""))
        return await self._transport(key).handle_async_request(request)

    async def aclose(self) -> None:
        for transport in {id(t): t for t in [*self._transports.values(), self._inner] if t}.values():
            await transport.aclose()


@dataclass
class _Session:
    token: str
    location: str | None


@dataclass
class _BMCState:
    """What the worker shares about one BMC across activities."""

    slots: asyncio.Semaphore
    session_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0
    session: _Session | None = None
    service_root: dict[str, Any] | None = None
    system_uri: str | None = None  # the host's System, stable for a BMC
    named_path_refused: bool = False  # the System's path the inventory names answered 404 here
    auth: Literal["session", "basic"] | None = None  # what `auto` chose for this BMC
    unsupported_resets: set[str] = field(default_factory=set)  # advertised, but refused as permanent
    last_request: float = 0.0  # monotonic time of the last request (session keep-alive)
    keepalive_seconds: float = 20.0  # a third of the BMC's SessionTimeout, at most 20 s
    session_timeout_known: bool = False  # SessionTimeout read (once per BMC per worker)


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
        self._http = httpx.AsyncClient(
            transport=_TLSRouter(transport), timeout=timeout_seconds, follow_redirects=False
        )
        self._bmcs: dict[str, _BMCState] = {}
        self._open: dict[str, BMCConnection] = {}
        self.on_connect: Callable[[BMCConnection], None] | None = None  # the CLI keeps them

    def _state(self, key: str) -> _BMCState:
        state = self._bmcs.get(key)
        if state is None:
            state = self._bmcs[key] = _BMCState(asyncio.Semaphore(self._max_in_flight))
        return state

    @asynccontextmanager
    async def connect(self, access: BMCAccess, on_wait: OnWait | None = None) -> AsyncIterator[BMCConnection]:
        """A connection to one BMC for the duration of the block (credentials resolved once).

        Args:
            access: The BMC and its credential reference.
            on_wait: Called on every poll of a wait (activities pass a `HeartbeatGate`).
        """
        tls = _tls_key(access)
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
        connection = BMCConnection(self, access, state, credentials, tls, on_wait)
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


def _tls_key(access: BMCAccess) -> tuple[str, str]:
    if access.insecure:
        return ("insecure", "")
    if access.ca_bundle is not None:
        try:
            ssl.create_default_context(cafile=access.ca_bundle)
        except (OSError, ssl.SSLError) as err:
            raise InvalidInput(
                f"BMC {access.bmc_id}: CA bundle {access.ca_bundle} is not usable: {err}"
            ) from None
        return ("ca", access.ca_bundle)
    return ("verify", "")


class BMCConnection:
    """Requests to one BMC, authenticated, capped and classified; links followed by origin."""

    def __init__(
        self,
        client: RedfishClient,
        access: BMCAccess,
        state: _BMCState,
        credentials: Credentials,
        tls: tuple[str, str],
        on_wait: OnWait | None,
    ) -> None:
        self._client = client
        self.access = access
        self._state = state
        self._credentials = credentials
        self._tls = tls
        self.on_wait = on_wait
        self.on_power_state: Callable[[str], None] | None = None  # told each PowerState change seen
        self.last_power_state: str | None = None
        parts = urlsplit(access.endpoint)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise InvalidInput(f"BMC {access.bmc_id}: endpoint {access.endpoint!r} is not an http(s) URL")
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.requests = 0  # sent by this connection, for the results' figures
        self.looked_up_system = False  # this connection read Systems (not the worker's memory)
        # The credentials were accepted at least once here: a later 401/403 is about a resource.
        self.authenticated = False
        self.on_problem: Callable[[str], None] | None = None  # told each transient error waited out
        self.last_problem: str | None = None

    def note_problem(self, err: Exception) -> None:
        """Remember a transient error that a wait rides out (the CLI shows it, and the last one)."""
        text = getattr(err, "message", None) or str(err)
        self.last_problem = text
        if self.on_problem is not None:
            self.on_problem(text)

    @property
    def unsupported_resets(self) -> frozenset[str]:
        """Reset types this BMC advertised but refused as not implemented (remembered per BMC)."""
        return frozenset(self._state.unsupported_resets)

    def mark_reset_unsupported(self, reset_type: str) -> None:
        self._state.unsupported_resets.add(reset_type)

    @property
    def bmc_id(self) -> str:
        return self.access.bmc_id

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

    def heartbeat(self) -> None:
        if self.on_wait is not None:
            self.on_wait()

    async def sleep(self, seconds: float) -> None:
        """Wait, heartbeating at least every second and keeping an open session alive (checked
        when it is due, not only on the second: a 2 s timeout is touched before it ends)."""
        end = time.monotonic() + seconds
        while True:
            self.heartbeat()
            await self.keep_session_alive()
            left = end - time.monotonic()
            if left <= 0:
                return
            await asyncio.sleep(min(left, 1.0, self._until_keepalive_due()))

    def _until_keepalive_due(self) -> float:
        """Seconds until an open session is due for a touch (or, timeout unknown, a learn)."""
        state = self._state
        if state.session is None or state.session.location is None:
            return 1.0
        due = state.keepalive_seconds if state.session_timeout_known else _KEEPALIVE_FLOOR_SECONDS
        return max(_KEEPALIVE_MIN_PAUSE_SECONDS, due - (time.monotonic() - state.last_request))

    # -- URLs -------------------------------------------------------------------------------

    def service_root_url(self) -> str:
        return self.access.endpoint.rstrip("/") + "/redfish/v1/"

    def link(self, path: str) -> str:
        """The URL of a link from a response (server-absolute path, or an absolute URL on this origin)."""
        url = urljoin(self.origin + "/", path)
        if not url.startswith(self.origin + "/"):
            raise BMCRequestRejected(f"BMC {self.bmc_id}: link {path!r} leaves the BMC ({self.origin})")
        return url

    # -- requests ---------------------------------------------------------------------------

    @property
    def cached_service_root(self) -> dict[str, Any] | None:
        """The service root if this worker has read it (it is read only when needed)."""
        return self._state.service_root

    async def service_root(self) -> dict[str, Any]:
        if self._state.service_root is None:
            response = await self.request("GET", self.service_root_url(), authenticate=False)
            self._state.service_root = json_object(self, response)
        return self._state.service_root

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
        session_used: _Session | None = None
        headers: dict[str, str] = {"Accept": "application/json", "OData-Version": "4.0"}
        if authenticate:
            if await self.auth_mode() == "session":
                session_used = await self._session()
            if session_used is not None:
                headers["X-Auth-Token"] = session_used.token
            else:
                headers["Authorization"] = _basic(self._credentials)
        response = await self._send(method, url, headers, json_body)
        if response.status_code == 401 and session_used is not None:
            # The BMC dropped the session (timeout, BMC reboot): log in again, once, and read its
            # SessionTimeout again at the next wait (it may have been shortened).
            self._state.session_timeout_known = False
            await self._forget_session(session_used)
            session_used = await self._session()
            if session_used is not None:
                headers["X-Auth-Token"] = session_used.token
            else:
                headers.pop("X-Auth-Token", None)
                headers["Authorization"] = _basic(self._credentials)
            response = await self._send(method, url, headers, json_body)
        if authenticate and response.status_code < 400:
            self.authenticated = True
        if response.status_code not in accept:
            raise_for_status(self, method, url, response)
        return response

    async def auth_mode(self) -> Literal["session", "basic"]:
        """How this BMC is authenticated: as configured, or what `auto` chose (session until a
        login is refused; no request is sent to decide)."""
        wanted = self._client.auth or self.access.auth
        if wanted != "auto":
            return wanted
        return self._state.auth or "session"

    async def _send(
        self, method: str, url: str, headers: dict[str, str], json_body: dict[str, Any] | None
    ) -> httpx.Response:
        for _ in range(_MAX_REDIRECTS + 1):
            content = None if json_body is None else json.dumps(json_body).encode()
            send_headers = dict(headers)
            if content is not None:
                send_headers["Content-Type"] = "application/json"
            request = self._client._http.build_request(
                method, url, headers=send_headers, content=content, extensions={_TLS_EXTENSION: self._tls}
            )
            async with self._state.slots:
                self.requests += 1
                self._state.last_request = started = time.monotonic()
                try:
                    response = await self._client._http.send(request)
                except httpx.TimeoutException:
                    metrics.activity_bmc_request(self.bmc_id, "timeout")
                    raise BMCUnavailable(f"BMC {self.bmc_id}: {method} {_path(url)} timed out") from None
                except httpx.TransportError as err:
                    metrics.activity_bmc_request(self.bmc_id, "unreachable")
                    if _is_certificate_error(err):
                        raise BMCAuthenticationFailed(
                            f"BMC {self.bmc_id}: the TLS certificate of {self.origin} did not verify; "
                            "give the BMC a ca_bundle (or, knowingly, insecure: true)"
                        ) from None
                    raise BMCUnavailable(
                        f"BMC {self.bmc_id}: cannot reach {self.origin} ({type(err).__name__}: {err})"
                    ) from None
            metrics.activity_bmc_request(self.bmc_id, response.status_code, time.monotonic() - started)
            if response.status_code not in _REDIRECTS:
                return response
            target = response.headers.get("Location")
            if target is None:
                return response
            next_url = urljoin(url, target)
            if urlsplit(next_url).netloc != urlsplit(url).netloc or urlsplit(next_url).scheme not in (
                urlsplit(url).scheme,
                "https",
            ):
                # Credentials go with the request: never to another host, never downgraded to http.
                raise BMCRequestRejected(
                    f"BMC {self.bmc_id}: {method} {_path(url)} was redirected to {next_url}, another "
                    "origin; not following with credentials (fix the BMC's endpoint)"
                )
            if method != "GET" and response.status_code not in (307, 308):
                raise BMCRequestRejected(
                    f"BMC {self.bmc_id}: {method} {_path(url)} answered {response.status_code} to "
                    f"{_path(next_url)}; a {method} is only re-sent on 307/308"
                )
            url = next_url
        raise BMCRequestRejected(
            f"BMC {self.bmc_id}: {method} {_path(url)} redirected more than {_MAX_REDIRECTS} times"
        )

    # -- sessions ---------------------------------------------------------------------------

    async def _session(self) -> _Session | None:
        """The BMC's session, created when needed; None when `auto` fell back to basic auth."""
        state = self._state
        if state.session is not None:
            return state.session
        async with state.session_lock:
            if state.session is None:
                state.session = await self._create_session()
            return state.session

    async def _create_session(self) -> _Session | None:
        root = self._state.service_root
        link = (_odata_id(root.get("Links", {}).get("Sessions")) if root else None) or SESSIONS_PATH
        url = self.link(link)
        body = {"UserName": self._credentials.username, "Password": self._credentials.password}
        headers = {"Accept": "application/json", "OData-Version": "4.0"}
        response = await self._send("POST", url, headers, body)
        if response.status_code in (404, 405) and root is None:
            # Not at the standard path: the service root may link the collection elsewhere.
            root = await self.service_root()
            linked = _odata_id(root.get("Links", {}).get("Sessions"))
            if linked is not None and self.link(linked) != url:
                url = self.link(linked)
                response = await self._send("POST", url, headers, body)
        auto = (self._client.auth or self.access.auth) == "auto"
        if response.status_code in (401, 403, 404, 405) and auto:
            # No usable SessionService: basic auth decides whether the credentials are bad.
            log.info(
                "BMC %s: session login answered %s; trying basic auth", self.bmc_id, response.status_code
            )
            self._state.auth = "basic"
            return None
        if response.status_code < 300:
            self.authenticated = True
        raise_for_status(self, "POST", url, response, authentication=True)
        token = response.headers.get("X-Auth-Token")
        if not token:
            raise BMCRequestRejected(f"BMC {self.bmc_id}: session created without an X-Auth-Token header")
        if auto:
            self._state.auth = "session"
        location = response.headers.get("Location")
        if location is None:
            location = _odata_id(_maybe_json(response))
        log.debug("BMC %s: session opened (%s)", self.bmc_id, location)
        return _Session(token, None if location is None else urljoin(url, location))

    async def _learn_session_timeout(self, session: _Session) -> bool:
        """Read the BMC's SessionTimeout with the session's token (which touches the session):
        keep-alive at a third of it. False when the BMC did not answer it (not learnt)."""
        root = self._state.service_root
        link = (_odata_id(root.get("SessionService")) if root else None) or SESSION_SERVICE_PATH
        headers = {"Accept": "application/json", "OData-Version": "4.0", "X-Auth-Token": session.token}
        try:
            response = await self._send("GET", self.link(link), headers, None)
        except (BMCUnavailable, BMCRequestRejected):
            return False
        self._state.session_timeout_known = True  # answered: not asked again by this worker
        timeout = (_maybe_json(response) or {}).get("SessionTimeout") if response.status_code == 200 else None
        if isinstance(timeout, int | float) and timeout > 0:
            self._state.keepalive_seconds = min(SESSION_KEEPALIVE_SECONDS, max(0.5, timeout / 3))
        return response.status_code == 200

    async def keep_session_alive(self) -> None:
        """Touch the open session (GET it) when it has been idle for a third of its timeout.

        Called during long waits: a BMC expires an idle session (often after 60 s), which would
        leak it and make the next request log in again. While the timeout is unknown, the first
        wait idle for `_KEEPALIVE_FLOOR_SECONDS` reads it (one GET that touches the session).
        Failures are left to the next request.
        """
        state = self._state
        session = state.session
        if session is None or session.location is None:
            return
        idle = time.monotonic() - state.last_request
        if not state.session_timeout_known:
            if idle < _KEEPALIVE_FLOOR_SECONDS or await self._learn_session_timeout(session):
                return
        elif idle < state.keepalive_seconds:
            return
        try:
            await self._send(
                "GET", session.location, {"X-Auth-Token": session.token, "OData-Version": "4.0"}, None
            )
        except (BMCUnavailable, BMCRequestRejected) as err:
            log.info("BMC %s: session keep-alive failed: %s", self.bmc_id, err)

    async def _forget_session(self, session: _Session) -> None:
        async with self._state.session_lock:
            if self._state.session is session:
                self._state.session = None

    async def close_session(self) -> None:
        """Delete the BMC's session, if one is open; failures are logged, not raised.

        A busy or failing BMC (5xx, 429, no answer) is asked again, up to
        `_SESSION_DELETE_ATTEMPTS` times over a few seconds: a session left open holds one of
        the BMC's few session slots until its idle timeout (found by `make chaos`: one 500 on the
        DELETE leaked a session). Cost: at most two more requests, only on a failing DELETE.
        """
        async with self._state.session_lock:
            session, self._state.session = self._state.session, None
        if session is None or session.location is None:
            return
        for attempt in range(1, _SESSION_DELETE_ATTEMPTS + 1):
            last = attempt == _SESSION_DELETE_ATTEMPTS
            try:
                response = await self._send("DELETE", session.location, {"X-Auth-Token": session.token}, None)
            except Exception as err:  # closing must not hide the activity's own outcome
                if last:
                    log.warning("BMC %s: could not delete session: %s", self.bmc_id, err)
                    return
                await self.sleep(_SESSION_DELETE_PAUSE_SECONDS)
                continue
            transient = response.status_code >= 500 or response.status_code == 429
            if transient and not last:
                wait = retry_after_seconds(response)
                await self.sleep(min(wait if wait is not None else _SESSION_DELETE_PAUSE_SECONDS, 2.0))
                continue
            if response.status_code >= 400 and response.status_code != 404:
                log.warning("BMC %s: deleting session answered %s", self.bmc_id, response.status_code)
            return

    # -- task monitors ----------------------------------------------------------------------

    async def follow_task(self, response: httpx.Response, deadline: float) -> dict[str, Any] | None:
        """Follow a 202's task monitor until it stops answering 202; the final Task, or None.

        None when there was no monitor or it vanished (404): the caller checks the outcome on
        the resource itself. A task that ended `Exception`/`Killed`/`Cancelled` is rejected.
        """
        if response.status_code != 202:
            return _maybe_json(response)
        body = _maybe_json(response)
        monitor = response.headers.get("Location") or (body or {}).get("TaskMonitor") or _odata_id(body)
        if monitor is None:
            return body
        url = urljoin(str(response.request.url), monitor)
        self.link(urlsplit(url).path)  # refuse a monitor on another origin
        first = retry_after_seconds(response)
        delay = 1.0 if first is None else first
        while True:
            if time.monotonic() > deadline:
                raise BMCUnavailable(f"BMC {self.bmc_id}: task {_path(url)} did not finish in time")
            await self.sleep(min(delay, _TASK_POLL_MAX_SECONDS, max(0.0, deadline - time.monotonic())))
            try:
                polled = await self.request("GET", url, accept=frozenset({404, 410}))
            except BMCUnavailable:
                continue  # a busy BMC does not end the task; the deadline does
            if polled.status_code in (404, 410):
                return None  # some BMCs drop a finished task's monitor at once
            task = _maybe_json(polled)
            if polled.status_code != 202 or (task or {}).get("TaskState") in _TASK_END_STATES:
                if task is not None and task.get("TaskState") in ("Exception", "Killed", "Cancelled"):
                    ended = f"ended {task['TaskState']}: {_task_message(task)}"
                    raise BMCRequestRejected(f"BMC {self.bmc_id}: task {_path(url)} {ended}")
                return task
            polled_delay = retry_after_seconds(polled)
            delay = delay if polled_delay is None else polled_delay


def _basic(credentials: Credentials) -> str:
    raw = f"{credentials.username}:{credentials.password}".encode()
    return "Basic " + base64.b64encode(raw).decode()


def _is_certificate_error(err: BaseException) -> bool:
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


__all__ = ["BMCConnection", "RedfishClient", "is_not_supported", "json_object", "raise_for_status"]
