"""Long-lived watch activities hand over when their worker stops gracefully.

A watch (the site's DPF watch, a rollout's PodCliqueSet watcher) runs until cancelled: it never
completes on its own. When its worker begins a graceful shutdown (SIGTERM, a
rolling deploy, `metalflow dev` stopping, a test's `async with Worker(...)` ending), the SDK waits
the worker's whole `graceful_shutdown_timeout` (10 s for metalflow's worker) for running activities
before it cancels them, so every stop with a watch running took those 10 s, and the watch resumed
on another worker only after them. `handing_over_at_shutdown` ends the attempt as soon as the
shutdown begins instead: a retryable, BENIGN failure (`WorkerStopping`, logged at DEBUG, no
WARNING), so the server schedules the next attempt at once (the watches' retry policies start at
200 ms) on a worker that still polls, and that attempt resumes from the last heartbeated
checkpoint, as after a crash. A watch ends nothing on the way out that a crash would not skip.

Cost per running watch: one extra asyncio task waiting on the worker's shutdown event; nothing
sent to the server until the shutdown (then one failed attempt, not recorded in history: retries
of an activity add no history events).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any

from temporalio import activity

from contracts.errors import WorkerStopping

WORKER_STOPPING = WorkerStopping.__name__


async def handing_over_at_shutdown(watch: Coroutine[Any, Any, None], what: str) -> None:
    """Run `watch` (inside an activity) until it ends, or until the worker begins to shut down.

    A cancel of the activity (the workflow's, or the SDK's past the graceful timeout) cancels
    `watch` and is re-raised here, unchanged, for the caller's own handling.

    Raises:
        ApplicationError: `WorkerStopping`, retryable and BENIGN, when the worker began a graceful
            shutdown while `watch` ran; `watch` has been cancelled and has finished.
    """
    work = asyncio.create_task(watch, name=what)
    stopping = asyncio.create_task(activity.wait_for_worker_shutdown(), name=f"{what}: worker shutdown")
    try:
        await asyncio.wait({work, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        if not work.done():
            work.cancel()
            # The watch's own cleanup (its streams, its HTTP client) runs before this attempt ends.
            with contextlib.suppress(asyncio.CancelledError):
                await work
    if not work.cancelled():
        return work.result()  # it ended by itself (or raised) first
    raise WorkerStopping(f"{what}: the worker is stopping; the next attempt resumes from the last checkpoint")
