"""One connection's requests on the wire to one BMC, whatever their auth.

Links in Redfish responses are server-absolute paths (`/redfish/v1/...`): they are joined with
the endpoint's origin, never with the endpoint itself, and a link to another origin is refused.
A redirect is followed only on the same origin, never downgraded to http (the credentials go with
the request), a non-GET only on 307/308, and at most `_MAX_REDIRECTS` times. A timeout or an
unreachable BMC is `BMCUnavailable`; a certificate that does not verify, `BMCAuthenticationFailed`.

Load: at most `max_in_flight` requests per BMC are on the wire across the whole worker (sessions
included): each request holds one of the BMC's `slots` while it is sent; waits hold none.
"""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

from contracts import metrics
from contracts.errors import BMCAuthenticationFailed, BMCRequestRejected, BMCUnavailable, InvalidInput
from contracts.models.inventory import BMCAccess
from drivers.redfish.answers import json_object, raise_for_status, url_path
from drivers.redfish.bmc_state import BMCState
from drivers.redfish.tls import TLS_EXTENSION, TLSKey, is_certificate_error

# What every Redfish request but the session's touch and delete asks for.
JSON_HEADERS = {"Accept": "application/json", "OData-Version": "4.0"}
_MAX_REDIRECTS = 5
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


class BMCWire:
    """Sends one connection's requests to its BMC, counted and capped; links kept on its origin.

    Args:
        http: The worker's HTTP client (its transport routes on `TLS_EXTENSION`).
        access: The BMC.
        state: What the worker shares about the BMC (its slots, when it was last sent to).
        tls: How the BMC's certificate is checked.
    """

    def __init__(self, http: httpx.AsyncClient, access: BMCAccess, state: BMCState, tls: TLSKey) -> None:
        self._http = http
        self.access = access
        self._state = state
        self._tls = tls
        parts = urlsplit(access.endpoint)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise InvalidInput(f"BMC {access.bmc_id}: endpoint {access.endpoint!r} is not an http(s) URL")
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.requests = 0  # sent by this connection, for the results' figures
        # The last request got an answer (whatever its status); False: it timed out or could not
        # reach the BMC. A problem waited out says which (`BMCConnection.note_problem`).
        self.answered = True
        # The credentials were accepted at least once here: a later 401/403 is about a resource.
        self.authenticated = False

    @property
    def bmc_id(self) -> str:
        return self.access.bmc_id

    def service_root_url(self) -> str:
        return self.access.endpoint.rstrip("/") + "/redfish/v1/"

    def link(self, path: str) -> str:
        """The URL of a link from a response (server-absolute path, or an absolute URL on this origin)."""
        url = urljoin(self.origin + "/", path)
        if not url.startswith(self.origin + "/"):
            raise BMCRequestRejected(f"BMC {self.bmc_id}: link {path!r} leaves the BMC ({self.origin})")
        return url

    async def service_root(self) -> dict[str, Any]:
        """The service root, read without credentials once per BMC and worker."""
        if self._state.service_root is None:
            url = self.service_root_url()
            response = await self.send("GET", url, dict(JSON_HEADERS), None)
            raise_for_status(self, "GET", url, response)
            self._state.service_root = json_object(self, response)
        return self._state.service_root

    async def send(
        self, method: str, url: str, headers: dict[str, str], json_body: dict[str, Any] | None
    ) -> httpx.Response:
        """Send one request, following redirects on this origin; the answer, whatever its status."""
        for _ in range(_MAX_REDIRECTS + 1):
            content = None if json_body is None else json.dumps(json_body).encode()
            send_headers = dict(headers)
            if content is not None:
                send_headers["Content-Type"] = "application/json"
            request = self._http.build_request(
                method, url, headers=send_headers, content=content, extensions={TLS_EXTENSION: self._tls}
            )
            async with self._state.slots:
                self.requests += 1
                self._state.last_request = started = time.monotonic()
                self.answered = False
                try:
                    response = await self._http.send(request)
                except httpx.TimeoutException:
                    metrics.activity_bmc_request(self.bmc_id, "timeout")
                    raise BMCUnavailable(f"BMC {self.bmc_id}: {method} {url_path(url)} timed out") from None
                except httpx.TransportError as err:
                    metrics.activity_bmc_request(self.bmc_id, "unreachable")
                    if is_certificate_error(err):
                        raise BMCAuthenticationFailed(
                            f"BMC {self.bmc_id}: the TLS certificate of {self.origin} did not verify; "
                            "give the BMC a ca_bundle (or, knowingly, insecure: true)"
                        ) from None
                    raise BMCUnavailable(
                        f"BMC {self.bmc_id}: cannot reach {self.origin} ({type(err).__name__}: {err})"
                    ) from None
            self.answered = True
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
                    f"BMC {self.bmc_id}: {method} {url_path(url)} was redirected to {next_url}, another "
                    "origin; not following with credentials (fix the BMC's endpoint)"
                )
            if method != "GET" and response.status_code not in (307, 308):
                raise BMCRequestRejected(
                    f"BMC {self.bmc_id}: {method} {url_path(url)} answered {response.status_code} to "
                    f"{url_path(next_url)}; a {method} is only re-sent on 307/308"
                )
            url = next_url
        raise BMCRequestRejected(
            f"BMC {self.bmc_id}: {method} {url_path(url)} redirected more than {_MAX_REDIRECTS} times"
        )
