"""A BMC's one session: login (and `auto`'s fall back to basic auth), keep-alive, logout.

A BMC gets one session, created on the first request that needs it and shared by every activity
using that BMC at the time (`BMCState.session`); the last of them deletes it. BMCs hold few
sessions and run out when clients leak them, so none outlives the activities using it.

Login goes to the standard `/redfish/v1/SessionService/Sessions` (DSP0266); after a 404/405 the
service root is read in case it links the collection elsewhere. With `auto`, a login refused
(401/403/404/405) means basic auth for that BMC: basic then decides whether the credentials are
bad, not the SessionService.

Keep-alive: long waits touch the session when it has been idle for a third of the BMC's
`SessionTimeout` (at most `SESSION_KEEPALIVE_SECONDS`): BMCs time sessions out after 60 s or
less, and a ForceOff / 120 s wait / On cycle must not leak one. The SessionTimeout is read
lazily, once per BMC per worker: the first time a wait leaves the session idle for
`_KEEPALIVE_FLOOR_SECONDS` (that GET touches the session too), so a cycle without a long wait
never reads it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from urllib.parse import urljoin

from contracts.errors import BMCRequestRejected, BMCUnavailable
from drivers.credentials import Credentials
from drivers.redfish.answers import maybe_json, odata_id, raise_for_status, retry_after_seconds
from drivers.redfish.bmc_state import AuthMode, BMCState, Session
from drivers.redfish.wire import JSON_HEADERS, BMCWire

log = logging.getLogger("metalflow.redfish")

# A session DELETE that fails transiently is sent again, this often in all, pausing between.
_SESSION_DELETE_ATTEMPTS = 3
_SESSION_DELETE_PAUSE_SECONDS = 0.5
# Touch an open session at least this often during a wait (BMC idle timeouts are often 60 s).
SESSION_KEEPALIVE_SECONDS = 20.0
# Until the BMC's SessionTimeout is known, a wait touches (and learns it) after this much idle.
# Redfish's SessionService schema (DSP8010) sets SessionTimeout's minimum at 30 s: 1.5 s leaves
# a wide margin for BMCs that ignore it, and is longer than the 1 s a PowerCycle waits out a
# fresh `LastResetTime`, so that wait does not read SessionService (bench/README.md).
_KEEPALIVE_FLOOR_SECONDS = 1.5
# Shortest pause between keep-alive checks of a wait (a timeout shorter than the floor is
# touched at most this late).
_KEEPALIVE_MIN_PAUSE_SECONDS = 0.05
SESSIONS_PATH = "/redfish/v1/SessionService/Sessions"  # DSP0266: the session login URI
SESSION_SERVICE_PATH = "/redfish/v1/SessionService"


class BMCSessions:
    """One connection's use of its BMC's shared session.

    Args:
        wire: The connection's requests on the wire.
        state: What the worker shares about the BMC (the session lives there).
        credentials: The BMC's credentials, resolved.
        auth: How the BMC is authenticated (`auto` may fall back to basic at login).
    """

    def __init__(self, wire: BMCWire, state: BMCState, credentials: Credentials, auth: AuthMode) -> None:
        self._wire = wire
        self._state = state
        self._credentials = credentials
        self._auth = auth

    async def current(self) -> Session | None:
        """The BMC's session, created when needed; None when `auto` fell back to basic auth."""
        state = self._state
        if state.session is not None:
            return state.session
        async with state.session_lock:
            if state.session is None:
                state.session = await self._create()
            return state.session

    async def _create(self) -> Session | None:
        wire = self._wire
        root = self._state.service_root
        link = (odata_id(root.get("Links", {}).get("Sessions")) if root else None) or SESSIONS_PATH
        url = wire.link(link)
        body = {"UserName": self._credentials.username, "Password": self._credentials.password}
        headers = dict(JSON_HEADERS)
        response = await wire.send("POST", url, headers, body)
        if response.status_code in (404, 405) and root is None:
            # Not at the standard path: the service root may link the collection elsewhere.
            root = await wire.service_root()
            linked = odata_id(root.get("Links", {}).get("Sessions"))
            if linked is not None and wire.link(linked) != url:
                url = wire.link(linked)
                response = await wire.send("POST", url, headers, body)
        auto = self._auth == "auto"
        if response.status_code in (401, 403, 404, 405) and auto:
            # No usable SessionService: basic auth decides whether the credentials are bad. A 401
            # or 403 here is at DEBUG: when basic auth is refused too, its failure says so (wrong
            # credentials were the same fact three times in the worker's log); a BMC without a
            # SessionService (404, 405) is said, once per BMC, at INFO.
            log.log(
                logging.DEBUG if response.status_code in (401, 403) else logging.INFO,
                "BMC %s: session login answered %s; trying basic auth",
                wire.bmc_id,
                response.status_code,
            )
            self._state.auth = "basic"
            return None
        if response.status_code < 300:
            wire.authenticated = True
        raise_for_status(wire, "POST", url, response, authentication=True)
        token = response.headers.get("X-Auth-Token")
        if not token:
            raise BMCRequestRejected(f"BMC {wire.bmc_id}: session created without an X-Auth-Token header")
        if auto:
            self._state.auth = "session"
        location = response.headers.get("Location")
        if location is None:
            location = odata_id(maybe_json(response))
        log.debug("BMC %s: session opened (%s)", wire.bmc_id, location)
        return Session(token, None if location is None else urljoin(url, location))

    async def forget(self, session: Session) -> None:
        """The BMC no longer knows `session` (401 on its token): the next request logs in again,
        and a wait reads the SessionTimeout again (it may have been shortened)."""
        self._state.session_timeout_known = False
        async with self._state.session_lock:
            if self._state.session is session:
                self._state.session = None

    async def _learn_timeout(self, session: Session) -> bool:
        """Read the BMC's SessionTimeout with the session's token (which touches the session):
        keep-alive at a third of it. False when the BMC did not answer it (not learnt)."""
        root = self._state.service_root
        link = (odata_id(root.get("SessionService")) if root else None) or SESSION_SERVICE_PATH
        headers = {**JSON_HEADERS, "X-Auth-Token": session.token}
        try:
            response = await self._wire.send("GET", self._wire.link(link), headers, None)
        except (BMCUnavailable, BMCRequestRejected):
            return False
        self._state.session_timeout_known = True  # answered: not asked again by this worker
        timeout = (maybe_json(response) or {}).get("SessionTimeout") if response.status_code == 200 else None
        if isinstance(timeout, int | float) and timeout > 0:
            self._state.keepalive_seconds = min(SESSION_KEEPALIVE_SECONDS, max(0.5, timeout / 3))
        return response.status_code == 200

    async def keep_alive(self) -> None:
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
            if idle < _KEEPALIVE_FLOOR_SECONDS or await self._learn_timeout(session):
                return
        elif idle < state.keepalive_seconds:
            return
        try:
            await self._wire.send(
                "GET", session.location, {"X-Auth-Token": session.token, "OData-Version": "4.0"}, None
            )
        except (BMCUnavailable, BMCRequestRejected) as err:
            log.info("BMC %s: session keep-alive failed: %s", self._wire.bmc_id, err)

    def until_keepalive_due(self) -> float:
        """Seconds until an open session is due for a touch (or, timeout unknown, a learn)."""
        state = self._state
        if state.session is None or state.session.location is None:
            return 1.0
        due = state.keepalive_seconds if state.session_timeout_known else _KEEPALIVE_FLOOR_SECONDS
        return max(_KEEPALIVE_MIN_PAUSE_SECONDS, due - (time.monotonic() - state.last_request))

    async def close(self, pause: Callable[[float], Awaitable[None]]) -> None:
        """Delete the BMC's session, if one is open; failures are logged, not raised.

        A busy or failing BMC (5xx, 429, no answer) is asked again, up to
        `_SESSION_DELETE_ATTEMPTS` times over a few seconds, `pause` between: a session left
        open holds one of the BMC's few session slots until its idle timeout (found by
        `make chaos`: one 500 on the DELETE leaked a session). Cost: at most two more requests,
        only on a failing DELETE.
        """
        async with self._state.session_lock:
            session, self._state.session = self._state.session, None
        if session is None or session.location is None:
            return
        bmc_id, token = self._wire.bmc_id, {"X-Auth-Token": session.token}
        for attempt in range(1, _SESSION_DELETE_ATTEMPTS + 1):
            last = attempt == _SESSION_DELETE_ATTEMPTS
            try:
                response = await self._wire.send("DELETE", session.location, token, None)
            except Exception as err:  # closing must not hide the activity's own outcome
                if last:
                    log.warning("BMC %s: could not delete session: %s", bmc_id, err)
                    return
                await pause(_SESSION_DELETE_PAUSE_SECONDS)
                continue
            transient = response.status_code >= 500 or response.status_code == 429
            if transient and not last:
                wait = retry_after_seconds(response)
                await pause(min(wait if wait is not None else _SESSION_DELETE_PAUSE_SECONDS, 2.0))
                continue
            if response.status_code >= 400 and response.status_code != 404:
                log.warning("BMC %s: deleting session answered %s", bmc_id, response.status_code)
            return
