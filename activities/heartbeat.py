"""Heartbeats that match the work: one helper for every long activity.

An activity heartbeats so Temporal can tell a dead worker from a slow one. Heartbeating only
between steps is not enough: a single request (a BMC that takes 40 s to answer a reset, a
Kubernetes call under load) can outlast the heartbeat timeout, and Temporal then starts a second
attempt alongside the first, which is still running. `heartbeating()` heartbeats from a
background task while the block runs, so an activity is declared dead only when its worker is.

Details: an activity that resumes from heartbeat details (the power cycle) passes `details`, a
function returning what to send now; every beat sends the latest details, so a background beat
never replaces recorded progress with nothing. The activity's own code decides when a step is
durable: `wait_until_recorded` reads this attempt's details back from the server before an
action that must not be repeated (see `drivers.redfish.powercycle`).

Throttle: the SDK sends at most one heartbeat per throttle interval per activity (the latest
details), 0.8 x the heartbeat timeout by default (3.2 s for the power cycle: the floor of every
reset's reaction time, bench/README.md). The worker caps it at `HEARTBEAT_THROTTLE` (0.2 s,
`metalflow.runtime.worker`), so a recorded step reaches the server at once, and `HeartbeatGate` keeps
the rate what the work needs: callers that beat on every poll forward only changed details, or
the same details once per beat interval. Cost, in heartbeat RPCs per second per running
activity: at most its own forwarded calls, never over 1 / `HEARTBEAT_THROTTLE` = 5: the power
cycle ~0.75 (one per heartbeat_timeout / 3, 1.33 s) plus one per step (at most 6 per cycle) plus
the read-backs (a few DescribeWorkflowExecution per reset); the other BMC activities one per
10 s; a short call (`beats_while_running`) none in its first 3.3 s, then one per 3.3 s; the
site's DPF watch one per flush or idle interval (one per site, not per host).

Cost per running activity: one asyncio task waking every heartbeat_timeout / 3 (at most every
10 s without a timeout) and the RPCs above; no history events (heartbeats are not recorded in
the workflow's history).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any, ParamSpec, TypeVar

from temporalio import activity
from temporalio.service import RPCError

from contracts.errors import ProgressNotRecorded, WatcherStopped

_NO_TIMEOUT_INTERVAL_SECONDS = 10.0
_MIN_INTERVAL_SECONDS = 0.1
HEARTBEAT_THROTTLE = timedelta(milliseconds=200)
"""The worker's `max_heartbeat_throttle_interval`: a recorded step is sent within this."""
# Read-backs start soon (a step is sent at once when no beat went out in the last throttle
# interval), stay this frequent until the throttle has surely let it out (a beat just before it
# holds it back up to `HEARTBEAT_THROTTLE`), then slow down to `_READ_BACK_INTERVAL_SECONDS`.
# Doubling from the start instead read at 0.05, 0.15, 0.35 s: a step held by the throttle was
# seen at 0.35 s, the median reset of a paced bench (bench/README.md, branch `reaction`).
_READ_BACK_FIRST_SECONDS = 0.05
_READ_BACK_FREQUENT_FOR_SECONDS = HEARTBEAT_THROTTLE.total_seconds() + 0.15
_READ_BACK_INTERVAL_SECONDS = 0.5


def beat_interval(heartbeat_timeout_seconds: float | None) -> float:
    """How often to beat: a third of the timeout, so two beats can be lost before it fires."""
    if heartbeat_timeout_seconds is None:
        return _NO_TIMEOUT_INTERVAL_SECONDS
    return max(_MIN_INTERVAL_SECONDS, heartbeat_timeout_seconds / 3)


class HeartbeatGate:
    """`activity.heartbeat` for callers that beat on every poll: forwards the details when they
    differ from the last forwarded, or when `interval` has passed since (so a beat lost while the
    server was away is sent again); drops the rest, which the SDK would only have throttled.

    Args:
        interval: Seconds between forwarded beats of unchanged details; default: the beat
            interval of the running activity (`beat_interval`).
        send: Where forwarded beats go (default `activity.heartbeat`).
    """

    def __init__(self, interval: float | None = None, send: Callable[..., None] | None = None) -> None:
        if interval is None:
            timeout = activity.info().heartbeat_timeout
            interval = beat_interval(None if timeout is None else timeout.total_seconds())
        self._interval = interval
        self._send = send or activity.heartbeat
        self._last: tuple[Any, ...] | None = None
        self._at = 0.0

    def __call__(self, *details: Any) -> None:
        now = time.monotonic()
        if details == self._last and now - self._at < self._interval:
            return
        self._last, self._at = details, now
        self._send(*details)


@contextlib.asynccontextmanager
async def heartbeating(details: Callable[[], Sequence[Any]] | None = None) -> AsyncIterator[None]:
    """Heartbeat in the background for the duration of the block (inside an activity only).

    The first beat comes one interval in (a third of the heartbeat timeout), never at once: the
    heartbeat timeout counts from the attempt's start, so a worker that dies before it is noticed
    as soon either way, and a block that ends within the interval (a BMC read: tens of
    milliseconds) sends no heartbeat at all. A beat at once was one Action and one server write
    per short BMC activity that bought nothing (issue 37: 3 a host in the watched 120 s
    power-down wait alone, its `read_power_state` every 30 s), and an early beat of nothing new
    would also delay the step an activity records next (the power cycle's `cycle_requested`,
    read back before its reset) by up to the SDK's throttle.

    Args:
        details: Returns the details to send with each beat (the latest progress); None sends
            none (for activities that do not resume from details).
    """
    info = activity.info()
    timeout = info.heartbeat_timeout
    interval = beat_interval(None if timeout is None else timeout.total_seconds())

    async def beat() -> None:
        while True:
            await asyncio.sleep(interval)
            activity.heartbeat(*(details() if details is not None else ()))

    task = asyncio.create_task(beat(), name=f"heartbeat {info.activity_type} {info.activity_id}")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


P = ParamSpec("P")
R = TypeVar("R")


def beats_while_running(call: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Run an activity's whole body in `heartbeating()` (no details): put it under
    `@activity.defn`.

    For the short calls (one Kubernetes, inventory, lease or Temporal request or a few): their
    presets carry a heartbeat timeout (`workflows.kernel.CALL_HEARTBEAT`, 10 s), so a worker that
    dies holding one is noticed within 10 s of its last beat (or of the attempt's start) and the
    call retried elsewhere after its backoff (0.5-1 s at first), not after its start-to-close
    timeout (30 s for a read, 60 s for a write, 5 min for a campaign's requests: the retry that
    a SIGKILLed worker's `lease_host_bmc` waited 31 s for). The start-to-close and the retry
    policy stay: a call that legitimately takes longer (a list of 10,000 DPUs from a slow API
    server) beats every third of the timeout and runs to its start-to-close as before.

    Cost: a call that ends within one beat interval (3.3 s: nearly all, tens of milliseconds)
    sends no heartbeat; a longer one one heartbeat RPC per 3.3 s (a billable Action on Temporal
    Cloud, no history event), and one asyncio task while it runs. Per host, nothing in the usual
    run; a reprovision under a stalled API server a few beats per stalled call."""

    @functools.wraps(call)
    async def beating(*args: P.args, **kwargs: P.kwargs) -> R:
        async with heartbeating():
            return await call(*args, **kwargs)

    return beating


def stop_quietly_if_workflow_ended(what: str) -> None:
    """Call in `except asyncio.CancelledError:` of a long-lived watcher, then re-raise: when the
    cancel came because the workflow ended without waiting for its watcher, nobody is left to
    tell, so stopping is normal; this raises a non-retryable BENIGN failure instead, which the SDK
    logs without a WARNING and a traceback. A cancel from the workflow or a stopping worker
    returns, and the caller re-raises it (the SDK reports those quietly itself).

    Raises:
        ApplicationError: `WatcherStopped`, BENIGN, when the workflow has ended.
    """
    details = activity.cancellation_details()
    if details is None or not details.not_found:
        return
    logging.getLogger(__name__).debug(
        "%s of %s stopped: its workflow ended", what, activity.info().workflow_id
    )
    raise WatcherStopped("the workflow ended; the watcher stopped") from None


async def wait_until_recorded(
    details: Any, *, within_seconds: float, what: str, beat: Callable[..., None] | None = None
) -> None:
    """Return once the Temporal server shows `details` as this attempt's last heartbeat details.

    Waiting "long enough" for the SDK to send a heartbeat is not enough: with the server down (or
    unreachable) the heartbeat is never recorded, the activity cannot tell, and a later attempt
    resumes from older details. Before an action that must not be repeated (a reset), the activity
    reads its details back with DescribeWorkflowExecution and acts only when they are there.
    Heartbeats `details` through `beat` (default `activity.heartbeat`) while it waits.

    Cost: DescribeWorkflowExecution every 0.05 s for the first 0.35 s (the throttle and a
    margin), then at doubling intervals up to every 0.5 s, until the details show (one to five
    with the worker's `HEARTBEAT_THROTTLE`); no history events.

    Raises:
        ProgressNotRecorded: not shown within `within_seconds` (the server is unreachable), or
            another attempt of this activity is now the current one; retryable: the next
            attempt resumes from whatever the server did record.
    """
    info = activity.info()
    if info.workflow_id is None:
        raise ProgressNotRecorded(f"{what}: run outside a workflow, nothing to read the progress back from")
    client = activity.client()
    handle = client.get_workflow_handle(info.workflow_id, run_id=info.workflow_run_id)
    began = time.monotonic()
    deadline = began + within_seconds
    problem = "not shown yet"
    send = beat or activity.heartbeat
    pause = _READ_BACK_FIRST_SECONDS
    while True:
        send(details)
        await asyncio.sleep(pause)
        if time.monotonic() - began >= _READ_BACK_FREQUENT_FOR_SECONDS:
            pause = min(2 * pause, _READ_BACK_INTERVAL_SECONDS)
        try:
            description = await handle.describe()
        except RPCError as err:
            problem = f"the server did not answer ({err.message})"
        else:
            pending = [
                p for p in description.raw_description.pending_activities if p.activity_id == info.activity_id
            ]
            if not pending:
                problem = "the activity is no longer pending"
            elif pending[0].attempt != info.attempt:
                current = pending[0].attempt
                raise ProgressNotRecorded(
                    f"{what}: attempt {current} of this activity is current, not {info.attempt}"
                )
            elif pending[0].heartbeat_details.payloads:
                recorded = await client.data_converter.decode(
                    pending[0].heartbeat_details.payloads, [type(details)]
                )
                if recorded and recorded[0] == details:
                    return
                problem = "older details shown"
        if time.monotonic() >= deadline:
            raise ProgressNotRecorded(
                f"{what}: Temporal did not record this attempt's progress within {within_seconds:g} s "
                f"({problem}); not acting on an unrecorded step"
            )
