"""How metalflow reads a BMC's answers: errors of the taxonomy, the BMC's own words, Retry-After.

By what the BMC answered (only errors of `contracts.errors`):

- 401/403 before the credentials were ever accepted on this connection (session login, or the
  first authenticated request with basic auth), a TLS certificate that does not verify ->
  `BMCAuthenticationFailed` (permanent)
- 401 after the credentials were accepted on this connection -> `BMCAuthenticationFailed`
  (permanent), worded as credentials that changed during the operation (a password rotated
  meanwhile, its sessions ended): DSP0266's 401 is "the authentication credentials included
  with this request are missing or invalid", never a missing privilege (that is its 403)
- 403 on a resource after the credentials were accepted (DSP0266: "the service recognized the
  credentials ... but those credentials do not possess authorization": the account lacks the
  privilege), 400, 404, 405, 501 and any other 4xx but 409/429; a redirect to another host; a body that is
  not Redfish (malformed JSON, not an object) -> `BMCRequestRejected` (permanent); the
  exception carries `http_status` and `message_ids` so callers can tell a 501 or an
  `ActionNotSupported` apart (`is_not_supported`)
- 409, 429, 5xx but 501, a timeout, a refused or reset connection -> `BMCUnavailable`
  (transient), with `next_retry_delay` set from `Retry-After` when the BMC sent one

Messages name the BMC, the method, the URL and the status, and carry the BMC's own
`error.message` and every `@Message.ExtendedInfo` message; never a credential.
"""

from __future__ import annotations

import email.utils
import json
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx

from contracts.errors import BMCAuthenticationFailed, BMCRequestRejected, BMCUnavailable
from contracts.models.inventory import BMCAccess

# Message ids (last part) that mean "this action or parameter is not supported here": permanent.
NOT_SUPPORTED_MESSAGES = frozenset({"ActionNotSupported", "ActionParameterNotSupported"})


class Asker(Protocol):
    """Who sent the request an answer is read for (a `BMCConnection`): what its errors name."""

    @property
    def bmc_id(self) -> str: ...

    @property
    def access(self) -> BMCAccess: ...

    @property
    def authenticated(self) -> bool:
        """The credentials were accepted at least once: a later 401/403 is about a resource."""
        ...


def url_path(url: str) -> str:
    """The path of `url`, as messages show it (never the origin or the query)."""
    return urlsplit(url).path or "/"


def odata_id(value: Any) -> str | None:
    """The link `value` holds (`{"@odata.id": ...}`), or None when it is not one."""
    if isinstance(value, dict) and isinstance(value.get("@odata.id"), str):
        return str(value["@odata.id"])
    return None


def required_link(asker: Asker, body: dict[str, Any], name: str, holder: str, what: str = "") -> str:
    """The link `body` holds under `name`, or `BMCRequestRejected` naming `holder` and `what` is
    missing (default: `name`): a BMC without it cannot be driven this way."""
    link = odata_id(body.get(name))
    if link is None:
        raise BMCRequestRejected(f"BMC {asker.bmc_id}: {holder} links no {what or name}")
    return link


def maybe_json(response: httpx.Response) -> dict[str, Any] | None:
    """The response's JSON object, or None for an empty body or anything else."""
    if not response.content:
        return None
    try:
        loaded = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return loaded if isinstance(loaded, dict) else None


def json_object(connection: Asker, response: httpx.Response) -> dict[str, Any]:
    """The response's JSON object, or `BMCRequestRejected` for anything that is not Redfish."""
    where = f"BMC {connection.bmc_id}: {response.request.method} {url_path(str(response.request.url))}"
    try:
        loaded = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise BMCRequestRejected(f"{where} answered malformed JSON; not a Redfish service?") from None
    if not isinstance(loaded, dict):
        raise BMCRequestRejected(f"{where} answered JSON that is not an object; not a Redfish service?")
    return loaded


def redfish_error(response: httpx.Response) -> str:
    """The BMC's own words: `error.message` and every `MessageId: Message` of its ExtendedInfo."""
    error = _error(response)
    parts: list[str] = []
    if isinstance(error, dict):
        generic = str(error.get("message") or "")
        if generic and "See ExtendedInfo" not in generic:
            parts.append(generic)
        for info in _extended_info(error):
            parts.append(f"{_message_id(info)}: {info.get('Message', '')}".strip(": "))
        if not parts and generic:
            parts.append(generic)
    return "; ".join(parts) or response.reason_phrase or "no Redfish error body"


def message_ids(response: httpx.Response) -> tuple[str, ...]:
    """The last part of every ExtendedInfo `MessageId` (`ActionNotSupported`, ...)."""
    return tuple(_message_id(info) for info in _extended_info(_error(response)))


def _error(response: httpx.Response) -> Any:
    """The body's Redfish `error` (DSP0266's error response), whatever it is; None without one."""
    return (maybe_json(response) or {}).get("error")


def _extended_info(error: Any) -> list[dict[str, Any]]:
    """The messages of an `error`'s `@Message.ExtendedInfo` that are objects."""
    infos = error.get("@Message.ExtendedInfo") if isinstance(error, dict) else None
    return [info for info in infos if isinstance(info, dict)] if isinstance(infos, list) else []


def _message_id(info: dict[str, Any]) -> str:
    """The last part of a message's `MessageId` (`Base.1.8.ActionNotSupported` -> `ActionNotSupported`)."""
    return str(info.get("MessageId", "")).rsplit(".", 1)[-1]


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


def raise_for_status(
    connection: Asker,
    method: str,
    url: str,
    response: httpx.Response,
    *,
    authentication: bool = False,
) -> None:
    """Raise the taxonomy's error for a non-2xx answer.

    Args:
        authentication: The request was a login (session creation): a 401/403 there is about
            the credentials, whatever happened before.
    """
    status = response.status_code
    if status < 300:
        return
    what = f"BMC {connection.bmc_id}: {method} {url} answered {status} {redfish_error(response)}"
    err: BMCAuthenticationFailed | BMCRequestRejected | BMCUnavailable
    if status == 401 and connection.authenticated:
        err = BMCAuthenticationFailed(
            f"{what} (the BMC rejected the credentials it had accepted earlier in this operation: "
            "they changed during the operation, e.g. a password rotation; put the BMC's current "
            f"ones in {connection.access.credentials.describe()})"
        )
    elif status in (401, 403) and (authentication or not connection.authenticated):
        err = BMCAuthenticationFailed(
            f"{what} (check the credentials in {connection.access.credentials.describe()})"
        )
    elif status == 403:
        err = BMCRequestRejected(
            f"{what} (the credentials were accepted for other requests: the account lacks the "
            "privilege for this one, or the BMC protects it)"
        )
    elif status == 409 or status == 429 or (status >= 500 and status != 501):
        delay = retry_after_seconds(response)
        err = BMCUnavailable(
            what, next_retry_delay=None if delay is None else timedelta(seconds=max(delay, 0.1))
        )
    else:
        err = BMCRequestRejected(what)  # 4xx, and 501 Not Implemented: permanent
    err.http_status = status  # type: ignore[union-attr]
    err.message_ids = message_ids(response)  # type: ignore[union-attr]
    raise err


def is_not_supported(err: BMCRequestRejected) -> bool:
    """The BMC said the action or its parameter is not implemented (501, ActionNotSupported...)."""
    status = getattr(err, "http_status", None)
    ids = set(getattr(err, "message_ids", ()))
    return status == 501 or (status == 400 and bool(ids & NOT_SUPPORTED_MESSAGES))
