"""Update-with-start that never leaves an unretrieved exception behind; an update sent again when
Temporal dropped it with its failed workflow task (`execute_update`).

Why: the SDK hands the start half's outcome to `WithStartWorkflowOperation`'s own future, which
nobody awaits when the call itself raised (the server gone, a timeout). asyncio then logs
"Future exception was never retrieved" with a traceback when the future is collected: a
multi-line traceback after the CLI's one-line "lost Temporal" error (seen in
tests/test_cli_input_bounds.py under load), or in a worker's log after an activity's retry.
Every update-with-start of the product goes through `execute_update_with_start`, which marks that
outcome read once the call has ended, whatever the call did.

Cost: none beyond the call (a look at a future that is already done).
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any, Final

from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowHandle,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.service import RPCError, RPCStatusCode


class NotAccepted(Exception):
    """No worker took the update within `accept_within`: no workflow task ran it (the workers of
    its task queue are stopped, stuck or gone). Temporal keeps such an update with the workflow
    (admitted, not yet in its history) and hands it to the workflow's next task, so it may still
    be applied, and its handler run, when a worker comes back (seen in issue 38: a `host reboot`
    sent to a stopped worker rebooted the host once the worker resumed); a server restart drops it.
    There is no call to withdraw it. `seconds`: the time waited."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no worker took the update within {seconds:g} s")
        self.seconds = seconds


async def execute_update_with_start(
    client: Client,
    update: Any,
    arg: Any,
    *,
    start: WithStartWorkflowOperation[Any, Any],
    accept_within: timedelta | None = None,
    **options: Any,
) -> Any:
    """`client.execute_update_with_start_workflow(update, arg, start_workflow_operation=start,
    **options)`, the start half's outcome read afterwards (see the module's docstring).

    `accept_within`: how long to wait for a worker to take the update (accept it, or its validator
    to refuse it); past it `NotAccepted` is raised (else the SDK waits for ever). Once taken, its
    result is awaited without a bound (a worker runs the handler)."""
    try:
        if accept_within is None:
            return await client.execute_update_with_start_workflow(
                update, arg, start_workflow_operation=start, **options
            )
        options.pop("rpc_timeout", None)  # one attempt's bound is `accept_within`
        async with _bounded(accept_within):
            handle = await client.start_update_with_start_workflow(
                update, arg, start_workflow_operation=start, wait_for_stage=WorkflowUpdateStage.ACCEPTED,
                rpc_timeout=accept_within, **options,
            )  # fmt: skip
        return await handle.result()
    finally:
        settle_start(start)


class _bounded:
    """`asyncio.timeout(within)` around a call that sends an update with `rpc_timeout=within`: the
    SDK sends it again while the server answers "admitted, not accepted yet", so the call's own
    timeout bounds one attempt only. Either expiry is `NotAccepted`."""

    def __init__(self, within: timedelta) -> None:
        self.seconds = within.total_seconds()
        self.timeout = asyncio.timeout(self.seconds + 1.0)

    async def __aenter__(self) -> None:
        await self.timeout.__aenter__()

    async def __aexit__(self, kind: Any, err: Any, trace: Any) -> bool:
        try:
            await self.timeout.__aexit__(kind, err, trace)
        except TimeoutError:
            raise NotAccepted(self.seconds) from None
        if isinstance(err, WorkflowUpdateRPCTimeoutOrCancelledError):
            raise NotAccepted(self.seconds) from None
        return False


def settle_start(start: WithStartWorkflowOperation[Any, Any]) -> None:
    """Mark the start half's outcome as read when the SDK set one (its exception, if any, is the
    call's own error, raised to the caller already)."""
    # The SDK keeps the outcome in a private future; reading it through the public
    # `workflow_handle()` would wait for ever when the call failed before the start was sent.
    outcome = start._workflow_handle  # noqa: SLF001
    if outcome.done() and not outcome.cancelled():
        outcome.exception()  # marks it retrieved: no "never retrieved" log at collection


# An update Temporal dropped because the workflow task that carried it failed (a workflow task
# timed out on a busy worker, or the worker died with it): the update was never applied, and the
# server says so with FAILED_PRECONDITION. Seen in `make test` under load: `host abort` exited 1
# with "Unable to perform workflow execution update due to unexpected workflow task failure".
_TASK_FAILED = "workflow task failure"
UPDATE_ATTEMPTS: Final = 3
UPDATE_RETRY_SECONDS: Final = 1.0


def dropped_with_its_task(err: BaseException) -> bool:
    """Whether Temporal dropped the update with its failed workflow task (safe to send again)."""
    return (
        isinstance(err, RPCError)
        and err.status == RPCStatusCode.FAILED_PRECONDITION
        and _TASK_FAILED in err.message
    )


async def execute_update(
    handle: WorkflowHandle[Any, Any],
    update: Any,
    arg: Any,
    *,
    accept_within: timedelta | None = None,
    **options: Any,
) -> Any:
    """`handle.execute_update(update, arg, **options)`, sent again (up to `UPDATE_ATTEMPTS` times,
    `UPDATE_RETRY_SECONDS` apart) while Temporal drops it with a failed workflow task. Every
    attempt carries the same update id, so an update that was applied after all is answered, not
    applied twice (Temporal deduplicates updates by id within a run). `accept_within`: as for
    `execute_update_with_start` (`NotAccepted` past it)."""
    options.setdefault("id", str(uuid.uuid4()))
    if accept_within is not None:
        options.pop("rpc_timeout", None)  # one attempt's bound is `accept_within`
    for attempt in range(1, UPDATE_ATTEMPTS + 1):
        try:
            if accept_within is None:
                return await handle.execute_update(update, arg, **options)
            async with _bounded(accept_within):
                taken = await handle.start_update(
                    update, arg, wait_for_stage=WorkflowUpdateStage.ACCEPTED, rpc_timeout=accept_within,
                    **options,
                )  # fmt: skip
            return await taken.result()
        except RPCError as err:
            if attempt == UPDATE_ATTEMPTS or not dropped_with_its_task(err):
                raise
        await asyncio.sleep(UPDATE_RETRY_SECONDS)
    raise AssertionError("unreachable")
