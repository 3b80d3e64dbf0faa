"""One Redfish client per worker: TLS per BMC, basic or session auth, a request cap per BMC.

Errors (only those of `metalflow.errors`), by what the BMC answered:

- 401, 403, a TLS certificate that does not verify -> `BMCAuthenticationFailed` (permanent)
- 400, 404, 405 and any other 4xx but 409/429; a redirect to another host; a body that is not
  Redfish (malformed JSON, not an object) -> `BMCRequestRejected` (permanent)
- 409, 429, 5xx, a timeout, a refused or reset connection -> `BMCUnavailable` (transient), with
  `next_retry_delay` set from `Retry-After` when the BMC sent one

Messages name the BMC, the method, the path and the Redfish MessageId/Message; never a
credential. Links in Redfish responses are server-absolute paths (`/redfish/v1/...`, or with a
prefix such as `/bmc/<id>/redfish/v1/...` behind a proxy): they are joined with the endpoint's
origin, never with the endpoint itself, and a link to another origin is refused.

Sessions: with `auth="session"` a BMC gets one session, created on the first request that needs
it and shared by every activity using that BMC at the time. It is deleted when the last of them
finishes (`RedfishClient.connect` is a context manager) and, for safety, at `aclose`. A session
the BMC forgot (401 on the token) is re-created once. BMCs hold few sessions (often 4 to 16) and
run out when clients leak them; a worker that is killed loses its session to the BMC's timeout,
which is why no session outlives the activities using it.

Load: at most `max_in_flight` requests per BMC are on the wire across the whole worker (sessions
included); waits between polls hold no slot.
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import json
import logging
import ssl
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from urllib.parse import urljoin, urlsplit

import httpx

from activities.credentials import CredentialResolver, Credentials
from metalflow.errors import BMCAuthenticationFailed, BMCRequestRejected, BMCUnavailable, InvalidInput
from metalflow.models.inventory import BMCAccess

log = logging.getLogger("metalflow.redfish")

AuthMode = Literal["session", "basic"]
OnWait = Callable[[], None]
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
    system_uri: str | None = None  # Systems.Members[0], stable for a BMC


class RedfishClient:
    """Built once per worker; `connect(access)` gives an activity its connection to one BMC.

    Args:
        resolver: Resolves credential references.
        max_in_flight: Requests on the wire per BMC across the worker (Settings.bmc_max_in_flight).
        auth: `session` (Redfish sessions, the default) or `basic`.
        timeout_seconds: Timeout of one HTTP request.
        transport: Replaces the network (tests pass `httpx.MockTransport`).
    """

    def __init__(
        self,
        resolver: CredentialResolver,
        *,
        max_in_flight: int = 2,
        auth: AuthMode = "session",
        timeout_seconds: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._resolver = resolver
        self._max_in_flight = max_in_flight
        self.auth: AuthMode = auth
        self._http = httpx.AsyncClient(
            transport=_TLSRouter(transport), timeout=timeout_seconds, follow_redirects=False
        )
        self._bmcs: dict[str, _BMCState] = {}
        self._open: dict[str, BMCConnection] = {}

    def _state(self, bmc_id: str) -> _BMCState:
        state = self._bmcs.get(bmc_id)
        if state is None:
            state = self._bmcs[bmc_id] = _BMCState(asyncio.Semaphore(self._max_in_flight))
        return state

    @asynccontextmanager
    async def connect(self, access: BMCAccess, on_wait: OnWait | None = None) -> AsyncIterator[BMCConnection]:
        """A connection to one BMC for the duration of the block (credentials resolved once).

        Args:
            access: The BMC and its credential reference.
            on_wait: Called on every poll of a wait (activities pass `activity.heartbeat`).
        """
        tls = _tls_key(access)
        if tls[0] == "insecure":
            log.warning(
                "TLS verification is OFF for BMC %s (%s): insecure is set", access.bmc_id, access.endpoint
            )
        credentials = await self._resolver.resolve(access.credentials)
        state = self._state(access.bmc_id)
        state.users += 1
        connection = BMCConnection(self, access, state, credentials, tls, on_wait)
        self._open[access.bmc_id] = connection
        try:
            yield connection
        finally:
            state.users -= 1
            if state.users == 0:
                self._open.pop(access.bmc_id, None)
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

    @property
    def bmc_id(self) -> str:
        return self.access.bmc_id

    @property
    def cached_system_uri(self) -> str | None:
        return self._state.system_uri

    def remember_system_uri(self, uri: str) -> None:
        self._state.system_uri = uri

    def heartbeat(self) -> None:
        if self.on_wait is not None:
            self.on_wait()

    async def sleep(self, seconds: float) -> None:
        """Wait, heartbeating at least every second."""
        end = time.monotonic() + seconds
        while True:
            self.heartbeat()
            left = end - time.monotonic()
            if left <= 0:
                return
            await asyncio.sleep(min(left, 1.0))

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
            if self._client.auth == "session":
                session_used = await self._session()
                headers["X-Auth-Token"] = session_used.token
            else:
                headers["Authorization"] = _basic(self._credentials)
        response = await self._send(method, url, headers, json_body)
        if response.status_code == 401 and session_used is not None:
            # The BMC dropped the session (timeout, BMC reboot): log in again, once.
            await self._forget_session(session_used)
            headers["X-Auth-Token"] = (await self._session()).token
            response = await self._send(method, url, headers, json_body)
        if response.status_code not in accept:
            raise_for_status(self, method, url, response)
        return response

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
                try:
                    response = await self._client._http.send(request)
                except httpx.TimeoutException:
                    raise BMCUnavailable(f"BMC {self.bmc_id}: {method} {_path(url)} timed out") from None
                except httpx.TransportError as err:
                    if _is_certificate_error(err):
                        raise BMCAuthenticationFailed(
                            f"BMC {self.bmc_id}: the TLS certificate of {self.origin} did not verify; "
                            "give the BMC a ca_bundle (or, knowingly, insecure: true)"
                        ) from None
                    raise BMCUnavailable(
                        f"BMC {self.bmc_id}: cannot reach {self.origin} ({type(err).__name__}: {err})"
                    ) from None
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

    async def _session(self) -> _Session:
        state = self._state
        if state.session is not None:
            return state.session
        async with state.session_lock:
            if state.session is None:
                state.session = await self._create_session()
            return state.session

    async def _create_session(self) -> _Session:
        root = await self.service_root()
        link = _odata_id(root.get("Links", {}).get("Sessions")) or "/redfish/v1/SessionService/Sessions"
        url = self.link(link) if "Links" in root else self.access.endpoint.rstrip("/") + link
        body = {"UserName": self._credentials.username, "Password": self._credentials.password}
        response = await self._send("POST", url, {"Accept": "application/json"}, body)
        raise_for_status(self, "POST", url, response)
        token = response.headers.get("X-Auth-Token")
        if not token:
            raise BMCRequestRejected(f"BMC {self.bmc_id}: session created without an X-Auth-Token header")
        location = response.headers.get("Location")
        if location is None:
            location = _odata_id(_maybe_json(response))
        log.debug("BMC %s: session opened (%s)", self.bmc_id, location)
        return _Session(token, None if location is None else urljoin(url, location))

    async def _forget_session(self, session: _Session) -> None:
        async with self._state.session_lock:
            if self._state.session is session:
                self._state.session = None

    async def close_session(self) -> None:
        """Delete the BMC's session, if one is open; failures are logged, not raised."""
        async with self._state.session_lock:
            session, self._state.session = self._state.session, None
        if session is None or session.location is None:
            return
        try:
            response = await self._send("DELETE", session.location, {"X-Auth-Token": session.token}, None)
            if response.status_code >= 400 and response.status_code != 404:
                log.warning("BMC %s: deleting session answered %s", self.bmc_id, response.status_code)
        except Exception as err:  # closing must not hide the activity's own outcome
            log.warning("BMC %s: could not delete session: %s", self.bmc_id, err)

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


def _path(url: str) -> str:
    return urlsplit(url).path or "/"


def _odata_id(value: Any) -> str | None:
    if isinstance(value, dict) and isinstance(value.get("@odata.id"), str):
        return str(value["@odata.id"])
    return None


def _maybe_json(response: httpx.Response) -> dict[str, Any] | None:
    if not response.content:
        return None
    try:
        loaded = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return loaded if isinstance(loaded, dict) else None


def _task_message(task: dict[str, Any]) -> str:
    messages = task.get("Messages")
    if isinstance(messages, list):
        texts = [str(m.get("Message")) for m in messages if isinstance(m, dict) and m.get("Message")]
        if texts:
            return "; ".join(texts)
    return "no message"


def json_object(connection: BMCConnection, response: httpx.Response) -> dict[str, Any]:
    """The response's JSON object, or `BMCRequestRejected` for anything that is not Redfish."""
    where = f"BMC {connection.bmc_id}: {response.request.method} {_path(str(response.request.url))}"
    try:
        loaded = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise BMCRequestRejected(f"{where} answered malformed JSON; not a Redfish service?") from None
    if not isinstance(loaded, dict):
        raise BMCRequestRejected(f"{where} answered JSON that is not an object; not a Redfish service?")
    return loaded


def redfish_error(response: httpx.Response) -> str:
    """`MessageId: Message` of a Redfish error body, or a short reason when there is none."""
    body = _maybe_json(response)
    error = (body or {}).get("error")
    if isinstance(error, dict):
        infos = error.get("@Message.ExtendedInfo")
        if isinstance(infos, list) and infos and isinstance(infos[0], dict):
            message_id = str(infos[0].get("MessageId", "")).rsplit(".", 1)[-1]
            return f"{message_id}: {infos[0].get('Message', '')}".strip()
        if error.get("message"):
            return str(error["message"])
    return response.reason_phrase or "no Redfish error body"


def retry_after_seconds(response: httpx.Response) -> float | None:
    """`Retry-After` as seconds (delta-seconds or an HTTP date), or None."""
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def raise_for_status(connection: BMCConnection, method: str, url: str, response: httpx.Response) -> None:
    """Raise the taxonomy's error for a non-2xx answer."""
    status = response.status_code
    if status < 300:
        return
    what = f"BMC {connection.bmc_id}: {method} {_path(url)} answered {status} {redfish_error(response)}"
    if status in (401, 403):
        raise BMCAuthenticationFailed(
            f"{what} (check the credentials in {connection.access.credentials.describe()})"
        )
    if status == 409 or status == 429 or status >= 500:
        delay = retry_after_seconds(response)
        raise BMCUnavailable(
            what, next_retry_delay=None if delay is None else timedelta(seconds=max(delay, 0.1))
        )
    raise BMCRequestRejected(what)
