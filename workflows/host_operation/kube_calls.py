"""A host operation's Kubernetes calls, each bounded by the policy's `kube_call_timeout_seconds`
(its retries included): past the bound an operator decides.

Why: a Kubernetes outage must be a visible stall, not retries nobody sees. Past the bound the
run asks an operator (manual intervention naming the call and its last error); `retry` (or
`mark_rebooted`) calls it again. An abort (or a cancel) while the call runs or retries cancels it
and waits until it has ended (`kernel.Runbook.call`): the cleanup then reads a world no edit of
this call changes any more. In cleanup a call is neither abortable nor escalated: its failure is
logged by the cleanup and the run's own failure is the news.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, RetryState
from temporalio.exceptions import TimeoutError as TemporalTimeout

with workflow.unsafe.imports_passed_through():
    from workflows import kernel

ArgT = TypeVar("ArgT")
ResultT = TypeVar("ResultT")


async def bounded_call(
    runbook: kernel.Runbook,
    call: Callable[[ArgT], Awaitable[ResultT]],
    arg: ArgT,
    preset: workflow.ActivityConfig,
    summary: str,
    *,
    seconds: float,
    ask: Callable[[str], Awaitable[object]] | None,
) -> ResultT:
    """`call` through the runbook, its retries ending after `seconds`; past the bound `ask` an
    operator (the question names the call and its last error), then call again. `ask` None (a
    cleanup's call): not abortable, and past the bound its failure is raised."""
    options = kernel.options(kernel.bounded(preset, seconds), summary)
    if ask is None:
        return await runbook.call(call, arg, options, abortable=False)
    while True:
        try:
            return await runbook.call(call, arg, options)
        except ActivityError as err:
            if not timed_out(err):
                raise
            await ask(stalled(summary, seconds, err))


def timed_out(err: ActivityError) -> bool:
    """A bounded call past its bound: the server timed the attempt out, or stopped retrying it
    (retry state TIMEOUT, the last attempt's error as the cause)."""
    return isinstance(err.cause, TemporalTimeout) or err.retry_state == RetryState.TIMEOUT


def stalled(summary: str, seconds: float, err: ActivityError) -> str:
    """The operator's question about a call past its bound: the call and its last error (a
    timeout carries the last attempt's error as its cause)."""
    cause = err.cause
    last = (cause.cause if isinstance(cause, TemporalTimeout) else None) or cause
    return f"the Kubernetes call `{summary}` did not succeed within {seconds:g} s (last error: {last})"
