"""Redfish error bodies, small JSON helpers and resource bodies shared by every simulated BMC.

Error bodies follow the Redfish specification: a top-level `error` with `code` and `message`,
and `@Message.ExtendedInfo` holding one message from the DMTF Base registry, so a client can
match `MessageId` the way it would against a real BMC.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

BASE_REGISTRY = "Base.1.16.0"
MESSAGE_TYPE = "#Message.v1_1_2.Message"

JSON_TYPE = "application/json"


def now_rfc3339() -> str:
    """The current UTC time as RFC 3339 with a `Z` suffix (as the power log and Redfish use)."""
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def now_rfc3339_precise() -> str:
    """The current UTC time with microseconds, for logs whose entries may be close together."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def message(
    message_id: str, text: str, *, args: list[str] | None = None, resolution: str = "None."
) -> dict[str, Any]:
    """One `Message` of the Base registry."""
    severity = "OK" if message_id in ("Success", "Created") else "Critical"
    return {
        "@odata.type": MESSAGE_TYPE,
        "MessageId": f"{BASE_REGISTRY}.{message_id}",
        "Message": text,
        "MessageArgs": args or [],
        "MessageSeverity": severity,
        "Severity": severity,
        "Resolution": resolution,
    }


def json_response(
    body: dict[str, Any], *, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    """A Redfish JSON response (OData-Version header as every Redfish service sends)."""
    all_headers = {"OData-Version": "4.0", "Cache-Control": "no-cache"}
    if headers:
        all_headers.update(headers)
    return web.Response(status=status, text=json.dumps(body), content_type=JSON_TYPE, headers=all_headers)


def error_response(
    status: int,
    message_id: str,
    text: str,
    *,
    args: list[str] | None = None,
    resolution: str = "None.",
    headers: dict[str, str] | None = None,
) -> web.Response:
    """A Redfish error: `{"error": {"code", "message", "@Message.ExtendedInfo": [...]}}`."""
    body = {
        "error": {
            "code": f"{BASE_REGISTRY}.GeneralError",
            "message": "A general error has occurred. See ExtendedInfo for more information.",
            "@Message.ExtendedInfo": [message(message_id, text, args=args, resolution=resolution)],
        }
    }
    return json_response(body, status=status, headers=headers)


def not_found(path: str) -> web.Response:
    return error_response(
        404,
        "ResourceMissingAtURI",
        f"The resource at the URI '{path}' was not found.",
        args=[path],
        resolution="Place a valid resource at the URI or correct the URI and resubmit the request.",
    )


def method_not_allowed(method: str, allowed: list[str]) -> web.Response:
    return error_response(
        405,
        "OperationNotAllowed",
        f"The HTTP method {method} is not allowed on this resource.",
        resolution="None.",
        headers={"Allow": ", ".join(allowed)},
    )


def malformed_json() -> web.Response:
    return error_response(
        400,
        "MalformedJSON",
        "The request body submitted was malformed JSON and could not be parsed by the receiving service.",
        resolution="Ensure that the request body is valid JSON and resubmit the request.",
    )


def unauthorized(text: str) -> web.Response:
    return error_response(
        401,
        "NoValidSession",
        text,
        resolution="Establish a session before attempting any operations, or supply valid credentials.",
        headers={"WWW-Authenticate": 'Basic realm="Redfish"'},
    )


def action_parameter_missing(action: str, parameter: str) -> web.Response:
    return error_response(
        400,
        "ActionParameterMissing",
        f"The action {action} requires the parameter {parameter} to be present in the request body.",
        args=[action, parameter],
        resolution="Supply the action with the required parameter in the request body.",
    )


def resource_in_use(text: str, *, headers: dict[str, str] | None = None) -> web.Response:
    return error_response(
        409,
        "ResourceInUse",
        text,
        resolution="Remove the condition and resubmit the request if the operation failed.",
        headers=headers,
    )


def fault_response(status: int, retry_after: int | None) -> web.Response:
    """The answer of a BMC that misbehaves on this request (an injected fault)."""
    if status == 503:
        seconds = retry_after if retry_after is not None else 1
        return error_response(
            503,
            "ServiceTemporarilyUnavailable",
            f"The service is temporarily unavailable.  Retry in {seconds} seconds.",
            args=[str(seconds)],
            resolution="Wait for the indicated retry duration and retry the operation.",
            headers={"Retry-After": str(seconds)},
        )
    if status == 409:
        return resource_in_use(
            "The change to the requested resource failed because the resource is in use or in transition."
        )
    return error_response(
        status,
        "InternalError",
        "The request failed due to an internal service error.  The service is still operational.",
        resolution="Resubmit the request.  If the problem persists, consider resetting the service.",
    )


def read_json_object(raw: bytes) -> dict[str, Any] | None:
    """The request body as a JSON object, or None when it is not one."""
    try:
        data = json.loads(raw) if raw else {}
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def odata_type_of(raw: bytes) -> str | None:
    """The `@odata.type` of a JSON body (for the `Link` header), or None."""
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    value = data.get("@odata.type") if isinstance(data, dict) else None
    return value if isinstance(value, str) else None


def update_service(prefix: str) -> dict[str, Any]:
    """An UpdateService linking its FirmwareInventory, without actions: what host and DPU BMCs
    share (the DPU's adds SimpleUpdate: `dpu.update_service_body`)."""
    base = f"{prefix}/redfish/v1/UpdateService"
    return {
        "@odata.id": base,
        "@odata.type": "#UpdateService.v1_11_0.UpdateService",
        "Id": "UpdateService",
        "Name": "Update Service",
        "ServiceEnabled": True,
        "Status": {"State": "Enabled", "Health": "OK"},
        "FirmwareInventory": {"@odata.id": f"{base}/FirmwareInventory"},
    }
