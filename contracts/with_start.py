"""Update-with-start that never leaves an unretrieved exception behind.

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

from typing import Any

from temporalio.client import Client, WithStartWorkflowOperation


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
