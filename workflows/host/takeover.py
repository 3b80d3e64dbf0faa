"""A new entity takes over what its predecessor left (the base of `HostWorkflow`, workflow.py,
split from its runbook by role; the rules are `takeover_rules.py`'s).

A run started with no state handed to it (a new entity: the first ever, or one after
`temporal workflow terminate` or a reset by hand) reads the last closed run of its workflow id
once (`read_entity_predecessor`: visibility lists, no history of the old run) and takes over
its memo's carried entry: boot generation, `left_off_by`, maintenance, an operator's hold on
automation; it adopts the host's operation its predecessor left running (followed to its end by
`await_operation_end`, `follow_adopted`) and records the runs that closed after the
predecessor last changed its phase (`takeover_rules.py`). Until then every handler waits (`Gate`,
the handlers' lock): a request is never decided on a state that forgot a host left OFF or an
operation still running. A run found closed unrecorded that was cut by hand (terminated,
cancelled: no result) has its reboots read as an adopted one's (`cut_to_read`): the OFF mark
when its last reboot left the host OFF, the generation they reached. A read that fails is
logged and the entity starts as new (a WARNING says what could not be taken over). Every change
of the carried entry is written to the memo (`_carry`), so a terminate at any moment leaves the
last one. Cost: one activity (about
6 history events) per new entity, one per reboot run read for a run found cut (at most
`REBOOTS_READ_AFTER_CANCEL`), one more per adopted operation (its wait: about 6 events, no
history while it heartbeats); one memo upsert per change of the entry. No command is added to a
run that adopts nothing and finds no run cut (auto-upgraded entities replay their histories as before).
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from types import TracebackType
from typing import Protocol

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api, names
    from contracts.models.host import EntityPredecessor, OperationRecord, OperationRun, PendingOperation
    from contracts.models.inventory import HostLookup
    from workflows import kernel
    from workflows.host.state import HostEntityState
    from workflows.host.takeover_rules import (
        CutReboots,
        carried,
        cut_read,
        cut_to_read,
        outcome_of_run,
        said_when_cut,
        take_over,
    )
    from workflows.parts.boot_generation import RebootLeft
    from workflows.parts.reboot_rounds import cut_run, reached_by_reboots

PREDECESSOR_READ: workflow.ActivityConfig = {
    "start_to_close_timeout": timedelta(seconds=30),
    "heartbeat_timeout": kernel.CALL_HEARTBEAT,
    # No worker serves the read (activities on another queue): the entity opens without it after
    # this, saying so in its log, rather than holding every request behind it for ever.
    "schedule_to_close_timeout": timedelta(seconds=120),
    "retry_policy": RetryPolicy(
        maximum_attempts=3, non_retryable_error_types=[*kernel.NON_RETRYABLE, "NotFoundError"]
    ),
}
ADOPTED_WAIT: workflow.ActivityConfig = {
    # An operation may wait days for a person: the wait is renewed (retried) past a day, and a
    # worker that dies is noticed within the heartbeat timeout; it never gives up while the run runs.
    "start_to_close_timeout": timedelta(days=1),
    "heartbeat_timeout": timedelta(seconds=30),
    "retry_policy": RetryPolicy(
        initial_interval=timedelta(seconds=1),
        maximum_interval=timedelta(seconds=30),
        maximum_attempts=0,
        non_retryable_error_types=[*kernel.NON_RETRYABLE, "NotFoundError"],
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


class RecordsEnd(Protocol):
    """How the workflow records an operation's end (`HostWorkflow.ended`), which a takeover calls
    for a run its predecessor left."""

    async def __call__(
        self, current: PendingOperation, outcome: str, unplanned: str, *, deletes_sent: bool = False,
        last_reset: datetime | None = None,
    ) -> None: ...  # fmt: skip


class TakeOver(kernel.Runbook):
    """`_take_over` at the start of a run, `_carry` whenever the entity shows itself. The workflow
    sets `state` and `_lock` (a `Gate`) in its `__init__`."""

    state: HostEntityState
    _lock: Gate
    ended: RecordsEnd  # HostWorkflow.ended: an operation's end recorded, shown, its campaign told

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
                reboots = None
                cut = cut_to_read(self.state, before)
                if cut is not None:  # a run cut by hand reported nothing: what did its reboots do?
                    reached, left = await reached_by_reboots(host, cut[1])
                    reboots = CutReboots(cut[0], reached, left)
                words = take_over(self.state, before, workflow.now(), reboots)
                if words:
                    workflow.logger.warning("%s: %s", host, words)
                    workflow.upsert_memo({TAKEN_OVER_MEMO: words})
        self._lock.open = True

    async def follow_adopted(self, current: PendingOperation) -> None:
        """An operation adopted from the predecessor: its end waited for by `await_operation_end`
        (an activity heartbeating while the run runs, retried on another worker when one dies;
        no history here until it ends), recorded as an own child's (`HostWorkflow._follow`).
        Not a signal from the operation at its end: a run of older code, already running when
        its entity was terminated, sends none, and a signal to a terminated entity is lost."""
        record, state = current.record, self.state
        run = OperationRun(workflow_id=record.workflow_id, run_id=current.adopted_run)
        try:
            end = await self.call(
                activity_api.await_operation_end,
                run,
                kernel.options(ADOPTED_WAIT, f"wait for the end of {record.workflow_id} (adopted)"),
                abortable=False,
            )
        except ActivityError as err:  # its run is gone (retention): nothing is claimed of the host
            outcome = f"ended, its end not read: {kernel.describe_failure(err)}"
            await self.ended(current, outcome, "")
            return
        reported, reboot = end.boot_generation, None
        cut = end.status in ("TERMINATED", "CANCELED")
        if cut and reported is None:  # Temporal keeps no result: what its reboots reached
            reported, reboot = await reached_by_reboots(state.host_id, state.boot_generation)
        state.reached(reported, workflow.now())
        outcome = await self.said_when_cut(record, outcome_of_run(end), reboot)
        await self.ended(
            current,
            outcome,
            end.unplanned_power,
            deletes_sent=end.deletes_sent,
            last_reset=end.last_reset_time,
        )

    async def said_when_cut(self, record: OperationRecord, outcome: str, reboot: RebootLeft | None) -> str:
        """The outcome of an operation (own child or adopted) that Temporal says was cut by hand,
        with what its run says it did and left, read once when there is something to read
        (`takeover_rules.cut_read`: a cancelled run's final details, a terminated reboot's or
        reset's last Phase, a terminated reprovision's state; `said_when_cut`). Other ends: as they are."""
        words = cut_read(record.operation, outcome)
        host = self.state.host_id
        seen = None if words is None else await cut_run(host, record.workflow_id, words=words)
        return said_when_cut(outcome, record.operation, seen, host, reboot)

    def _carry(self) -> None:
        """The memo's carried entry, written when it changed (a terminate leaves the last one)."""
        entry = carried(self.state)
        if workflow.memo_value(names.CARRIED_MEMO, None) != entry:
            workflow.upsert_memo({names.CARRIED_MEMO: entry})
