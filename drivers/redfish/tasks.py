"""Redfish task monitors: what a 202 Accepted leads to.

A BMC may answer an action (a reset, a SimpleUpdate) with 202 and a task monitor (its
`Location`, or the body's `TaskMonitor` / `@odata.id`) instead of doing it at once. The monitor
answers 202 while the task runs and the Task once it ended; some BMCs drop it at once (404/410),
and then only the resource itself tells the outcome. A busy BMC (409/5xx, no answer) while
polling does not end the task; the caller's deadline does. The monitor must be on the BMC's own
origin: it is polled with the credentials.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

from contracts.errors import BMCRequestRejected, BMCUnavailable
from drivers.redfish.answers import maybe_json, odata_id, retry_after_seconds, url_path
from drivers.redfish.connection import BMCConnection

_TASK_POLL_MAX_SECONDS = 5.0
_TASK_END_STATES = frozenset({"Completed", "Exception", "Killed", "Cancelled", "Interrupted"})


async def follow_task(
    connection: BMCConnection, response: httpx.Response, deadline: float
) -> dict[str, Any] | None:
    """Follow a 202's task monitor until it stops answering 202; the final Task, or None.

    None when there was no monitor or it vanished (404): the caller checks the outcome on
    the resource itself. A task that ended `Exception`/`Killed`/`Cancelled` is rejected.
    """
    if response.status_code != 202:
        return maybe_json(response)
    body = maybe_json(response)
    monitor = response.headers.get("Location") or (body or {}).get("TaskMonitor") or odata_id(body)
    if monitor is None:
        return body
    url = urljoin(str(response.request.url), monitor)
    connection.link(urlsplit(url).path)  # refuse a monitor on another origin
    first = retry_after_seconds(response)
    delay = 1.0 if first is None else first
    while True:
        if time.monotonic() > deadline:
            raise BMCUnavailable(f"BMC {connection.bmc_id}: task {url_path(url)} did not finish in time")
        await connection.sleep(min(delay, _TASK_POLL_MAX_SECONDS, max(0.0, deadline - time.monotonic())))
        try:
            polled = await connection.request("GET", url, accept=frozenset({404, 410}))
        except BMCUnavailable:
            continue  # a busy BMC does not end the task; the deadline does
        if polled.status_code in (404, 410):
            return None  # some BMCs drop a finished task's monitor at once
        task = maybe_json(polled)
        if polled.status_code != 202 or (task or {}).get("TaskState") in _TASK_END_STATES:
            if task is not None and task.get("TaskState") in ("Exception", "Killed", "Cancelled"):
                ended = f"ended {task['TaskState']}: {_task_message(task)}"
                raise BMCRequestRejected(f"BMC {connection.bmc_id}: task {url_path(url)} {ended}")
            return task
        polled_delay = retry_after_seconds(polled)
        delay = delay if polled_delay is None else polled_delay


def _task_message(task: dict[str, Any]) -> str:
    messages = task.get("Messages")
    if isinstance(messages, list):
        texts = [str(m.get("Message")) for m in messages if isinstance(m, dict) and m.get("Message")]
        if texts:
            return "; ".join(texts)
    return "no message"
