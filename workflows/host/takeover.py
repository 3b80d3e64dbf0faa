"""A new entity takes over what its predecessor left (the base of `HostWorkflow`, workflow.py,
split from its runbook by role; the rules are `takeover_rules.py`'s).

A run started with no state handed to it (a new entity: the first ever, or one after
`temporal workflow terminate` or a reset by hand) reads the last closed run of its workflow id
once (`read_entity_predecessor`: one visibility list, no history of the old run) and takes over
its memo's carried entry: boot generation, `left_off_by`, maintenance, an operator's hold on
automation. Until then every handler waits (`Gate`, the handlers' lock): a request is never
decided on a state that forgot a host left OFF. A read that fails is logged and the entity starts
as new (a WARNING says what could not be taken over). Every change of the carried entry is written
to the memo (`carry`), so a terminate at any moment leaves the last one. Cost: one activity (about
6 history events) per new entity; one memo upsert per change of the entry.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from types import TracebackType

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api, names
    from contracts.models.host import EntityPredecessor
    from contracts.models.inventory import HostLookup
    from workflows import kernel
    from workflows.host.state import HostEntityState
    from workflows.host.takeover_rules import carried, take_over

PREDECESSOR_READ: workflow.ActivityConfig = {
    "start_to_close_timeout": timedelta(seconds=30),
    # No worker serves the read (activities on another queue): the entity opens without it after
    # this, saying so in its log, rather than holding every request behind it for ever.
    "schedule_to_close_timeout": timedelta(seconds=120),
    "retry_policy": RetryPolicy(
        maximum_attempts=3, non_retryable_error_types=[*kernel.NON_RETRYABLE, "NotFoundError"]
    ),
}
TAKEN_OVER_MEMO = "taken_over"  # what a new entity took over from its predecessor, in words


class Gate:
    """The handlers' one lock, opened once the entity took over its predecessor's record."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.open = False

    async def __aenter__(self) -> None:
        await workflow.wait_condition(lambda: self.open)
        await self.lock.acquire()

    async def __aexit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.lock.release()


class TakeOver(kernel.Runbook):
    """`_take_over` at the start of a run, `_carry` whenever the entity shows itself. The workflow
    sets `state` and `_lock` (a `Gate`) in its `__init__`."""

    state: HostEntityState
    _lock: Gate

    async def _take_over(self, new: bool) -> None:
        """A new entity (`new`): read the predecessor once and take over its record; then open."""
        if new:
            host = self.state.host_id
            try:
                before: EntityPredecessor = await self.call(
                    activity_api.read_entity_predecessor,
                    HostLookup(host_id=host),
                    kernel.options(PREDECESSOR_READ, f"what did the last run of host/{host} leave?"),
                    abortable=False,
                )
            except ActivityError as err:
                workflow.logger.warning(
                    "%s: its previous entity run not read (%s): a record it left (host OFF, boot "
                    "generation, maintenance, a hold on automation) is not taken over",
                    host, kernel.describe_failure(err),
                )  # fmt: skip
            else:
                words = take_over(self.state, before, workflow.now())
                if words:
                    workflow.logger.warning("%s: %s", host, words)
                    workflow.upsert_memo({TAKEN_OVER_MEMO: words})
        self._lock.open = True

    def _carry(self) -> None:
        """The memo's carried entry, written when it changed (a terminate leaves the last one)."""
        entry = carried(self.state)
        if workflow.memo_value(names.CARRIED_MEMO, None) != entry:
            workflow.upsert_memo({names.CARRIED_MEMO: entry})
