"""Authentication of every simulated BMC: HTTP basic and Redfish sessions.

Sessions are what real BMCs run out of: each BMC holds at most `SESSION_CAP` open sessions,
and one more is refused with 503 `SessionLimitExceeded` (with `Retry-After` until the oldest
idle session would expire): the status bmcweb gives that message and Dell iDRAC's answer to one
login too many (BEHAVIOUR.md S2; the cap and `Retry-After` are ours). A session idle for
`session_timeout_seconds` (served as `SessionService.SessionTimeout`) expires, as DSP8010 says
of it: "the number of seconds of inactivity that a session can have before the session service
closes the session due to inactivity" (30 to 86,400). That is how a BMC reclaims the session of
a client that vanished: a process killed mid-operation cannot delete its session, so its
expiry is the BMC doing its job, logged, not a violation. A session its client left idle to
expire while that same client kept using the BMC (its `User-Agent` seen since the session's
last use) is a leak, recorded as a `bmc-session-expired` violation (BEHAVIOUR.md S1).

State is created lazily: a BMC nobody opened a session on holds nothing here, and each open
session holds one timer handle (no task per BMC or per session).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import logging
import math
import secrets
from dataclasses import dataclass

from aiohttp import web

from simulators.measure import client_of
from simulators.violations import BMC_SESSION_EXPIRED, Violations

from . import messages

log = logging.getLogger(__name__)

SESSION_CAP = 4


@dataclass(slots=True)
class Session:
    """One open session of one BMC."""

    id: str
    token: str
    username: str
    last_used: float  # loop time
    timer: asyncio.TimerHandle | None = None
    client: str = "-"  # the User-Agent that opened it ("-": none sent)


class _BMCSessions:
    __slots__ = ("by_token", "by_id", "next_id")

    def __init__(self) -> None:
        self.by_token: dict[str, Session] = {}
        self.by_id: dict[str, Session] = {}
        self.next_id = 1


class Auth:
    """Credentials check and session bookkeeping for all BMCs of the site."""

    def __init__(
        self,
        credentials: dict[str, tuple[str, str]],
        session_timeout_seconds: float,
        violations: Violations,
    ) -> None:
        self._credentials = credentials
        # Passwords the BMCs hold that differ from the stored ones (fault `wrong-credentials`, a
        # rotation the secret store did not get): by BMC service id.
        self._rotated: dict[str, str] = {}
        self._timeout = session_timeout_seconds
        self._violations = violations
        self._sessions: dict[str, _BMCSessions] = {}
        # When each client (its User-Agent) last made an authenticated request, per BMC: a
        # session that expires after its client's later requests was leaked by a running client.
        self._seen: dict[tuple[str, str], float] = {}

    def _saw(self, bmc_id: str, request: web.BaseRequest) -> float:
        now = asyncio.get_running_loop().time()
        self._seen[(bmc_id, client_of(request))] = now
        return now

    def _valid(self, bmc_id: str, username: str, password: str) -> bool:
        expected = self._credentials.get(bmc_id)
        if expected is None:
            return False
        if bmc_id in self._rotated:
            expected = (expected[0], self._rotated[bmc_id])
        # Compare both fields in constant time so a timing probe learns nothing.
        user_ok = hmac.compare_digest(username.encode(), expected[0].encode())
        password_ok = hmac.compare_digest(password.encode(), expected[1].encode())
        return user_ok and password_ok

    def rotate(self, bmc_id: str) -> None:
        """The BMC's password changes to one nobody stored (a rotation whose new password never
        reached the secret store): every login with the stored password gets 401 from now on,
        and the account's open sessions end, as a password change ends them on the BMC."""
        self._rotated[bmc_id] = secrets.token_hex(16)
        store = self._sessions.get(bmc_id)
        for session in list(store.by_id.values()) if store is not None else ():
            self._drop(bmc_id, session)

    def restore(self, bmc_id: str) -> bool:
        """The BMC's password is the stored one again; False when it already was."""
        return self._rotated.pop(bmc_id, None) is not None

    def rotated(self, bmc_id: str) -> bool:
        return bmc_id in self._rotated

    def username(self, bmc_id: str) -> str | None:
        """The BMC's one account's user name (never its password)."""
        expected = self._credentials.get(bmc_id)
        return None if expected is None else expected[0]

    def check(self, bmc_id: str, request: web.BaseRequest, *, sessions: bool = True) -> web.Response | None:
        """None when the request is authenticated (session token or basic), else the 401.

        A BMC without a SessionService (`sessions=False`) knows no tokens: basic only.
        """
        token = request.headers.get("X-Auth-Token")
        if token is not None and sessions:
            session = self._find_token(bmc_id, token)
            if session is None:
                return messages.unauthorized("The session token is not valid or the session has expired.")
            session.last_used = self._saw(bmc_id, request)
            return None
        header = request.headers.get("Authorization")
        if header is None:
            return messages.unauthorized("There is no valid session established with the implementation.")
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "basic":
            return messages.unauthorized(
                "The authorization scheme is not supported; use Basic or X-Auth-Token."
            )
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return messages.unauthorized("The Authorization header is malformed.")
        username, _, password = decoded.partition(":")
        if not self._valid(bmc_id, username, password):
            return messages.unauthorized("The user name or password is not valid.")
        self._saw(bmc_id, request)
        return None

    def session_of(self, bmc_id: str, request: web.BaseRequest) -> Session | None:
        token = request.headers.get("X-Auth-Token")
        return None if token is None else self._find_token(bmc_id, token)

    def _find_token(self, bmc_id: str, token: str) -> Session | None:
        store = self._sessions.get(bmc_id)
        return None if store is None else store.by_token.get(token)

    def create(
        self, bmc_id: str, username: str, password: str, request: web.BaseRequest | None = None
    ) -> Session | web.Response:
        """Open a session (for the client that sent `request`), or the 401/503 a real BMC
        answers instead."""
        if not self._valid(bmc_id, username, password):
            return messages.unauthorized("The user name or password is not valid.")
        store = self._sessions.get(bmc_id)
        if store is None:
            store = self._sessions[bmc_id] = _BMCSessions()
        loop = asyncio.get_running_loop()
        if len(store.by_id) >= SESSION_CAP:
            oldest = min(s.last_used for s in store.by_id.values())
            wait = max(1, math.ceil(oldest + self._timeout - loop.time()))
            return messages.error_response(
                503,
                "SessionLimitExceeded",
                "The session establishment failed due to the number of simultaneous sessions "
                "exceeding the limit of the implementation.",
                resolution="Reduce the number of other sessions before trying to establish the "
                "session or increase the limit of simultaneous sessions, if supported.",
                headers={"Retry-After": str(wait)},
            )
        client = "-" if request is None else client_of(request)
        if request is not None:
            self._saw(bmc_id, request)
        session = Session(
            id=str(store.next_id),
            token=secrets.token_hex(16),
            username=username,
            last_used=loop.time(),
            client=client,
        )
        store.next_id += 1
        store.by_id[session.id] = session
        store.by_token[session.token] = session
        session.timer = loop.call_later(self._timeout, self._check_expiry, bmc_id, session)
        return session

    def _check_expiry(self, bmc_id: str, session: Session) -> None:
        loop = asyncio.get_running_loop()
        due = session.last_used + self._timeout
        if loop.time() < due:
            # Used since the timer was set: look again when it could next expire.
            session.timer = loop.call_at(due, self._check_expiry, bmc_id, session)
            return
        self._drop(bmc_id, session)
        if self._seen.get((bmc_id, session.client), -math.inf) <= session.last_used:
            # Its client sent nothing since: gone (killed, stopped). The timeout reclaims it.
            log.info(
                "BMC %s: session %s of user %r expired after %gs idle; its client (%s) sent nothing "
                "since (SessionTimeout)", bmc_id, session.id, session.username, self._timeout, session.client,
            )  # fmt: skip
            return
        self._violations.record(
            BMC_SESSION_EXPIRED,
            bmc_id,
            f"session {session.id} of user {session.username!r} was left idle for "
            f"{self._timeout:g}s and expired instead of being deleted, while its client "
            f"({session.client}) kept using this BMC",
        )

    def _drop(self, bmc_id: str, session: Session) -> None:
        store = self._sessions.get(bmc_id)
        if store is None:
            return
        store.by_id.pop(session.id, None)
        store.by_token.pop(session.token, None)
        if session.timer is not None:
            session.timer.cancel()
            session.timer = None

    def get(self, bmc_id: str, session_id: str) -> Session | None:
        store = self._sessions.get(bmc_id)
        return None if store is None else store.by_id.get(session_id)

    def list(self, bmc_id: str) -> list[Session]:
        store = self._sessions.get(bmc_id)
        return [] if store is None else list(store.by_id.values())

    def delete(self, bmc_id: str, session_id: str) -> bool:
        """Close a session the client deleted; False when there is no such session."""
        session = self.get(bmc_id, session_id)
        if session is None:
            return False
        self._drop(bmc_id, session)
        return True

    def open_count(self, bmc_id: str) -> int:
        store = self._sessions.get(bmc_id)
        return 0 if store is None else len(store.by_id)

    def close(self) -> None:
        """Cancel every expiry timer (the simulator is stopping; nothing expires)."""
        for store in self._sessions.values():
            for session in store.by_id.values():
                if session.timer is not None:
                    session.timer.cancel()
                    session.timer = None
