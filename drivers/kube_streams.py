"""Kubernetes watch streams on an async HTTP client, configured from the `kubernetes` client's own
`Configuration` (kubeconfig or in-cluster: server, CA, client certificate, bearer token).

Why not the `kubernetes` client's `Watch`: it blocks a thread for as long as a stream is
open, and a host watcher keeps three streams open for hours; across a fleet that is thousands
of parked threads, and a blocked read cannot be cancelled. An `httpx` stream is a coroutine:
cancelling the task closes the connection at once.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from typing import Any

import httpx
from kubernetes import client as k8s

from drivers.kube import Kind

Object = dict[str, Any]


OPENED = "OPENED"
"""A pseudo-event `watch_events` yields once the server accepted the watch (status 200)."""


class WatchExpired(Exception):
    """410 Gone: the resourceVersion is older than the server keeps; list again."""


class WatchFailed(Exception):
    """The stream could not be opened or kept (5xx, 429, a refused or broken connection)."""


class WatchRejected(Exception):
    """The server refused the watch for good (400, 401, 403, 404): retrying cannot help."""


def http_client(configuration: k8s.Configuration) -> httpx.AsyncClient:
    """An `httpx.AsyncClient` that reaches the API server as `configuration` says."""
    verify: ssl.SSLContext | bool = bool(configuration.verify_ssl)
    if configuration.verify_ssl:
        context = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
        if configuration.cert_file:
            context.load_cert_chain(configuration.cert_file, configuration.key_file or None)
        verify = context
    return httpx.AsyncClient(base_url=configuration.host, verify=verify, timeout=httpx.Timeout(10.0))


def auth_headers(configuration: k8s.Configuration) -> dict[str, str]:
    """The Authorization header (refreshed by the client's hook, e.g. an exec plugin's token)."""
    if configuration.refresh_api_key_hook is not None:
        configuration.refresh_api_key_hook(configuration)
    headers: dict[str, str] = {}
    settings: dict[str, dict[str, Any]] = dict(configuration.auth_settings())  # type: ignore[arg-type]
    for setting in settings.values():
        if setting.get("in") == "header" and setting.get("value"):
            headers[str(setting["key"])] = str(setting["value"])
    if "authorization" not in headers and configuration.username:
        headers["authorization"] = str(configuration.get_basic_auth_token())
    return headers


def _path(kind: Kind, namespace: str) -> str:
    root = f"/apis/{kind.group}" if kind.group else "/api"  # the core group (pods) is under /api
    return f"{root}/{kind.version}/namespaces/{namespace}/{kind.plural}"


async def list_objects(
    http: httpx.AsyncClient, configuration: k8s.Configuration, kind: Kind, namespace: str, *,
    label_selector: str = "", field_selector: str = "",
) -> Object:  # fmt: skip
    """One list call; the body (`items`, `metadata.resourceVersion`)."""
    params = {k: v for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector)) if v}
    try:
        response = await http.get(_path(kind, namespace), params=params, headers=auth_headers(configuration))
    except httpx.TransportError as err:
        raise WatchFailed(f"list {kind.plural}: {type(err).__name__}: {err}") from None
    _check(response, kind)
    body: Object = response.json()
    return body


def _check(response: httpx.Response, kind: Kind) -> None:
    if response.status_code == 410:
        raise WatchExpired(kind.plural)
    if response.status_code in (400, 401, 403, 404, 422):
        raise WatchRejected(f"{kind.plural}: {response.status_code} {response.text[:300]}")
    if response.status_code >= 300:
        raise WatchFailed(f"{kind.plural}: {response.status_code} {response.reason_phrase}")


async def watch_events(
    http: httpx.AsyncClient, configuration: k8s.Configuration, kind: Kind, namespace: str, *,
    resource_version: str, label_selector: str = "", field_selector: str = "", timeout_seconds: int = 290,
) -> AsyncIterator[Object]:  # fmt: skip
    """An `OPENED` pseudo-event, then events (`{"type", "object"}`, BOOKMARKs included) from
    `resource_version` on, until the server ends the stream (its timeout, or a dropped
    connection: resume from the last version).

    Raises:
        WatchExpired: The version is too old (410, as a status or as an ERROR event).
        WatchFailed: The stream could not be opened or broke with a transport error.
        WatchRejected: The request was refused for good.
    """
    params: dict[str, str | int] = {
        "watch": "true",
        "allowWatchBookmarks": "true",
        "resourceVersion": resource_version,
        "timeoutSeconds": timeout_seconds,
    }
    if label_selector:
        params["labelSelector"] = label_selector
    if field_selector:
        params["fieldSelector"] = field_selector
    # The read timeout outlives the server's own stream timeout, so a dead connection is noticed.
    timeout = httpx.Timeout(10.0, read=timeout_seconds + 30.0)
    try:
        async with http.stream(
            "GET", _path(kind, namespace), params=params, headers=auth_headers(configuration), timeout=timeout
        ) as response:
            if response.status_code != 200:
                await response.aread()
                _check(response, kind)
            yield {"type": OPENED}
            async for line in response.aiter_lines():
                if not line.strip():
                    continue
                event: Object = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    if status.get("code") == 410:
                        raise WatchExpired(str(status.get("message", kind.plural)))
                    code, message = status.get("code"), status.get("message")
                    raise WatchFailed(f"{kind.plural}: watch error {code}: {message}")
                yield event
    except (httpx.TransportError, json.JSONDecodeError) as err:
        raise WatchFailed(f"watch {kind.plural}: {type(err).__name__}: {err}") from None
