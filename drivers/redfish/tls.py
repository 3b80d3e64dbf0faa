"""TLS per BMC on one HTTP client, and what a failed handshake means.

httpx fixes `verify` per transport, and BMCs differ: a public CA, a site's CA bundle, self-signed
and explicitly insecure. So the worker's one HTTP client routes each request, by a request
extension its connection sets, to a transport built for that BMC's TLS settings (one per
setting, kept for the worker's life). A certificate that does not verify is a configuration
error (`BMCAuthenticationFailed`, permanent), not a BMC that is away.
"""

from __future__ import annotations

import ssl

import httpx

from contracts.errors import InvalidInput
from contracts.models.inventory import BMCAccess

# How a BMC's certificate is checked: ("verify", ""), ("ca", <bundle path>) or ("insecure", "").
TLSKey = tuple[str, str]
TLS_EXTENSION = "metalflow_tls"


class TLSRouter(httpx.AsyncBaseTransport):
    """Sends each request through a transport built for its BMC's TLS settings (`TLS_EXTENSION`).

    Args:
        inner: Replaces every transport (tests pass `httpx.MockTransport`).
    """

    def __init__(self, inner: httpx.AsyncBaseTransport | None) -> None:
        self._inner = inner
        self._transports: dict[TLSKey, httpx.AsyncBaseTransport] = {}

    def _transport(self, key: TLSKey) -> httpx.AsyncBaseTransport:
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
        key = request.extensions.pop(TLS_EXTENSION, ("verify", ""))
        return await self._transport(key).handle_async_request(request)

    async def aclose(self) -> None:
        for transport in {id(t): t for t in [*self._transports.values(), self._inner] if t}.values():
            await transport.aclose()


def tls_key(access: BMCAccess) -> TLSKey:
    """How `access`'s certificate is checked; `InvalidInput` for a CA bundle that cannot be loaded."""
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


def is_certificate_error(err: BaseException) -> bool:
    """The transport error (or one it was raised from) is a certificate that did not verify."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
