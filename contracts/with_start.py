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
from typing import Any, Final

from temporalio.client import Client, WithStartWorkflowOperation, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode


async def execute_update_with_start(
    client: Client, update: Any, arg: Any, *, start: WithStartWorkflowOperation[Any, Any], **options: Any
) -> Any:
    """`client.execute_update_with_start_workflow(update, arg, start_workflow_operation=start,
    **options)`, the start half's outcome read afterwards (see the module's docstring)."""
    try:
        return await client.execute_update_with_start_workflow(
            update, arg, start_workflow_operation=start, **options
        )
    finally:
        settle_start(start)


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


async def execute_update(handle: WorkflowHandle[Any, Any], update: Any, arg: Any, **options: Any) -> Any:
    """`handle.execute_update(update, arg, **options)`, sent again (up to `UPDATE_ATTEMPTS` times,
    `UPDATE_RETRY_SECONDS` apart) while Temporal drops it with a failed workflow task. Every
    attempt carries the same update id, so an update that was applied after all is answered, not
    applied twice (Temporal deduplicates updates by id within a run)."""
    options.setdefault("id", str(uuid.uuid4()))
    for attempt in range(1, UPDATE_ATTEMPTS + 1):
        try:
            return await handle.execute_update(update, arg, **options)
        except RPCError as err:
            if attempt == UPDATE_ATTEMPTS or not dropped_with_its_task(err):
                raise
        await asyncio.sleep(UPDATE_RETRY_SECONDS)
    raise AssertionError("unreachable")
