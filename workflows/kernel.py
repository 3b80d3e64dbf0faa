"""The mechanics every metalflow workflow shares, written once.

A workflow module reads as a runbook; what is not the runbook is here:

- **Activity options**: presets for each kind of I/O (`workflow.ActivityConfig`s, so mypy checks
  them), `options(preset, summary)` for a call, `bounded(preset, seconds)` for a call whose
  retries must end. Every retry policy refuses the permanent error types of `contracts.errors`.
  `INVENTORY` resolves a host; `KUBE_READ`, `KUBE_WRITE` are one DPF or Grove API call; `BMC_READ`
  one Redfish read or one reset that waits for its power state (retries stop after
  `BMC_ATTEMPTS`, so a dead BMC turns into someone's decision); `WATCHER` a long-running watch
  the workflow cancels. The power cycle's own presets live with the reboot
  (`workflows/parts/power_cycle_options.py`).
- **Phases**: `Runbook.enter` shows a phase (the `Phase` search attribute, the current details
  and one INFO line in the worker's log, once, together, so the UI list and a workflow's page
  never disagree); `Runbook.show` new details within it; `Runbook.end_early` the final phase of
  a run that ends early, naming what ended it and what it leaves behind.
- **Operator control**: `abort` (an update every steerable workflow answers, with one validator:
  refused once ended, while aborting, or for the workflow's own reason), `pause` and `resume` (a
  flag the runbook honours at its safe points), decisions (`await_decision`: wait in a phase
  until an operator answers a named update, e.g. `retry`, `mark_rebooted`, `rollback`; one answer
  wins, a second other one is refused naming it). Handlers only record; the runbook acts at its
  next wait, so no handler races a step.
- **Waits and calls an abort interrupts**: `Runbook.wait` (a `wait_condition` that raises
  `OperationAborted` once aborted), `Runbook.call` (an activity that an abort, or a cancel of the
  workflow, cancels and then waits for: the server retries nothing after a cancel, so that is at
  most the attempt in flight, and the run never ends with a call pending), and the plain
  `await_unless` and `cancel_and_wait` under them.

Cost: none of its own beyond what a workflow calls: an `enter` is at most one search-attribute
upsert (one history event, one billable Action; none when the phase and the attributes it
carries already hold, `upsert_changed`, or when a later `enter` of the same activation supersedes
it, `workflows.phase_upserts`), a cancelled call one RequestCancel and one
ActivityTaskCanceled event.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Sequence
from datetime import timedelta
from typing import Any, ClassVar, Final, TypeVar, cast

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeUpdate
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    FailureError,
)

with workflow.unsafe.imports_passed_through():
    from contracts import counted_runs, events, metrics, names
    from contracts.errors import PERMANENT_TYPES, OperationAborted, WorkflowError, first_application_error
    from contracts.models.control import ABORT_UPDATE, OperatorAnswer, OperatorRequest
    from contracts.operator_answers import Answered, second_answer_refusal
    from contracts.wording import answers_in_words
    from workflows.phase_upserts import DeferredUpserts
    from workflows.phase_upserts import upsert_changed as upsert_changed

ArgT = TypeVar("ArgT")
ResultT = TypeVar("ResultT")

# -- activity options ----------------------------------------------------------------------------

NON_RETRYABLE: Final[list[str]] = sorted(PERMANENT_TYPES)

QUICK_RETRY: Final = RetryPolicy(
    initial_interval=timedelta(milliseconds=500),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    non_retryable_error_types=NON_RETRYABLE,
)
"""Unlimited attempts with a capped backoff: for idempotent calls on a world that comes back."""

BMC_ATTEMPTS: Final = 5
"""Attempts of one BMC call: a BMC that stays away ends in a decision, not in endless retries."""

CALL_HEARTBEAT: Final = timedelta(seconds=10)  # a short call's: `activities.heartbeat.beats_while_running`

INVENTORY: Final[workflow.ActivityConfig] = {
    "start_to_close_timeout": timedelta(seconds=30),
    "heartbeat_timeout": CALL_HEARTBEAT,
    "retry_policy": RetryPolicy(
        initial_interval=timedelta(seconds=1),
        maximum_interval=timedelta(seconds=30),
        maximum_attempts=10,
        non_retryable_error_types=NON_RETRYABLE,
    ),
}

KUBE_READ: Final[workflow.ActivityConfig] = {
    "start_to_close_timeout": timedelta(seconds=30),
    "heartbeat_timeout": CALL_HEARTBEAT,
    "retry_policy": QUICK_RETRY,
}

KUBE_WRITE: Final[workflow.ActivityConfig] = {
    "start_to_close_timeout": timedelta(seconds=60),
    "heartbeat_timeout": CALL_HEARTBEAT,
    "retry_policy": QUICK_RETRY,
}

BMC_READ: Final[workflow.ActivityConfig] = {
    "start_to_close_timeout": timedelta(minutes=6),  # a reset waits up to 5 minutes for its state
    "heartbeat_timeout": timedelta(seconds=30),
    "retry_policy": RetryPolicy(
        initial_interval=timedelta(seconds=1),
        maximum_interval=timedelta(seconds=30),
        maximum_attempts=BMC_ATTEMPTS,
        non_retryable_error_types=NON_RETRYABLE,
    ),
}

WATCHER_HEARTBEAT_SECONDS: Final = 1.0  # how often a watch activity heartbeats while nothing changes

WATCHER: Final[workflow.ActivityConfig] = {
    "start_to_close_timeout": timedelta(days=30),
    "heartbeat_timeout": timedelta(seconds=5),
    "retry_policy": RetryPolicy(
        initial_interval=timedelta(milliseconds=200),
        maximum_interval=timedelta(seconds=10),
        non_retryable_error_types=NON_RETRYABLE,
    ),
}

WAIT_CANCELLATION_COMPLETED: Final = workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED


def options(
    preset: workflow.ActivityConfig,
    summary: str,
    *,
    cancellation_type: workflow.ActivityCancellationType | None = None,
) -> workflow.ActivityConfig:
    """`preset` with the call's summary (and cancellation type): `**options(KUBE_READ, "...")`, one
    typed dictionary (mypy cannot tell that a preset holds no `summary` when both are keywords)."""
    config: workflow.ActivityConfig = {**preset, "summary": summary}
    if cancellation_type is not None:
        config["cancellation_type"] = cancellation_type
    return config


def bounded(preset: workflow.ActivityConfig, seconds: float) -> workflow.ActivityConfig:
    """`preset` with a `schedule_to_close_timeout`: its retries end after `seconds` in all (a world
    that may stay away: the caller sees an `ActivityError` caused by a `TimeoutError` and decides)."""
    return {**preset, "schedule_to_close_timeout": timedelta(seconds=seconds)}


# -- calls that can be stopped -------------------------------------------------------------------


def start_cancellable(
    call: Callable[[ArgT], Awaitable[ResultT]], arg: ArgT, config: workflow.ActivityConfig
) -> workflow.ActivityHandle[ResultT]:
    """Start an activity whose cancellation is waited for (`WAIT_CANCELLATION_COMPLETED`)."""
    cancellable: workflow.ActivityConfig = {**config, "cancellation_type": WAIT_CANCELLATION_COMPLETED}
    return workflow.start_activity(call, arg, **cancellable)


async def cancel_and_wait(call: asyncio.Future[Any]) -> None:
    """Cancel a call (an activity started with `WAIT_CANCELLATION_COMPLETED`, a child, a task)
    and wait until it has ended, however it ends: the run then ends with nothing pending."""
    if not call.done():
        call.cancel()
    try:
        await call
    except (ActivityError, ChildWorkflowError, asyncio.CancelledError):
        pass


async def await_unless(call: asyncio.Future[Any], stop: Callable[[], bool]) -> bool:
    """Wait until `call` ends (True), or until `stop()` holds first: then cancel it and wait
    until it has ended (False). A cancel of the workflow meanwhile cancels the call too, waits
    for it, and is raised."""
    try:
        await workflow.wait_condition(lambda: call.done() or stop())
    except asyncio.CancelledError:
        await cancel_and_wait(call)
        raise
    if call.done():
        return True
    await cancel_and_wait(call)
    return False


# -- visibility ----------------------------------------------------------------------------------


def enter_phase(phase: str, details: str, *, log: bool = True) -> None:
    """Show a new phase: the current details and one INFO line in the worker's log, its metric and
    Event (not on replay); `log=False`: none (logged already). Its search attributes are
    `Runbook.enter`'s, written at the activation's end (`workflows.phase_upserts`)."""
    workflow.set_current_details(f"**{phase}**: {details}")
    if log:
        metrics.workflow_phase_entered(phase)
        events.workflow_phase_entered(phase, details)  # the worker's Kubernetes Events; not on replay
        workflow.logger.info("%s: %s", phase, details)


def report(occurrence: str, details: str, *, warning: bool = True) -> None:
    """Tell the worker of something seen or done within the current phase (e.g. the monitor's
    `unplanned-reset`, a reboot's `power-cycled`): handed to its Kubernetes Events as a phase
    change would be (`contracts.events`, not on replay; `metalflow.runtime.events` names the
    occurrences it reports) and one WARNING line (`warning=False`: INFO). No phase change, no
    search attribute, no history event. One per workflow task: the emitter takes a second one
    with the same name in the same task for a retried task's repeat."""
    events.workflow_phase_entered(occurrence, details)
    (workflow.logger.warning if warning else workflow.logger.info)("%s: %s", occurrence, details)


def set_details(phase: str, details: str) -> None:
    """Update the current details within a phase (no search attribute write)."""
    workflow.set_current_details(f"**{phase}**: {details}")


def describe_failure(err: BaseException) -> str:
    """What ended a run, in words: the chain of Temporal failures down to the root cause, e.g.
    "activity register_host_dpus failed: InvalidInput: DPUDevice ... serialNumber is immutable"."""
    parts: list[str] = []
    current: BaseException | None = err
    while current is not None:
        if isinstance(current, ActivityError):
            parts.append(f"activity {current.activity_type} failed")
        elif isinstance(current, ChildWorkflowError):
            parts.append(f"child workflow {current.workflow_type} {current.workflow_id} ended")
        elif isinstance(current, ApplicationError) and current.type:
            parts.append(f"{current.type}: {current.message}")
        else:
            parts.append(str(current) or type(current).__name__)
        current = current.cause if isinstance(current, FailureError) else None
    return ": ".join(parts)


def ending(err: BaseException, aborted_type: str = OperationAborted.__name__) -> tuple[str, str]:
    """The final phase of a run that ends early, and why, in words: `cancelled` (the workflow
    was cancelled), `aborted` (an operator's abort: an error of type `aborted_type`) or
    `failed` (with the cause chain)."""
    if isinstance(err, asyncio.CancelledError | CancelledError):
        return "cancelled", "cancelled (the workflow was cancelled)"
    if isinstance(err, ApplicationError) and err.type == aborted_type:
        return "aborted", err.message
    return "failed", describe_failure(err)


# -- the runbook's state -------------------------------------------------------------------------


class Runbook:
    """Phase, details and operator control of one workflow run; workflows derive from it.

    `ENDED` names the phases after which the run takes no more operator requests. A workflow an
    operator may stop derives from `Abortable`, which declares the `abort` update once.
    """

    ENDED: ClassVar[Collection[str]] = ("completed", "failed", "aborted", "cancelled")
    ABORTED_ERROR: ClassVar[type[WorkflowError]] = OperationAborted
    """The error `aborted()` raises: a run that ends with it ends `aborted` (`end_early`)."""

    def __init__(self) -> None:
        self.phase = "starting"
        self.details = ""
        self.abort_request: OperatorRequest | None = None
        self.paused_by: OperatorRequest | None = None
        self._question: str | None = None  # what an operator is asked (`await_decision`)
        self._kinds: tuple[str, ...] = ()
        self._answer: tuple[str, OperatorRequest] | None = None
        self._taken: Answered | None = None  # an answer accepted, not acted on (`answer_taken`)
        self.left_behind = ""  # what an early end left, in words (`to_the_end`'s `clean_up`)
        self.operation_kind: str | None = None  # an operation's `kind` label, counted by `to_the_end`
        self._phases_entered = 0  # replays included (`enter`)
        self._upserts = DeferredUpserts()  # `enter`'s search attributes, written at the activation's end

    # -- phases ----------------------------------------------------------------------------------
    def enter(
        self, phase: str, details: str, *, log: bool = True, also: Sequence[SearchAttributeUpdate[Any]] = ()
    ) -> None:
        """A new phase (`enter_phase`), its log line once per run id and count of phases entered
        (replays included) in this process (`contracts.counted_runs`): a refused task run again.

        Its search attributes are written at the activation's end (`workflows.phase_upserts`), a
        final phase's (`ENDED`) at once: a phase entered and left in one activation costs none."""
        self.phase, self.details, self._phases_entered = phase, details, self._phases_entered + 1
        nth = f"phase {self._phases_entered}"
        once = workflow.unsafe.is_replaying() or counted_runs.first_time(workflow.info().run_id, nth)
        enter_phase(phase, details, log=log and once)
        self._upserts.defer([names.PHASE.value_set(phase), *also], now=phase in self.ENDED)

    def settle_upserts(self) -> None:
        """Write what `enter` deferred, now: before a continue-as-new (`to_the_end` settles too)."""
        self._upserts.settle()

    def show(self, details: str) -> None:
        """New details within the phase."""
        self.details = details
        set_details(self.phase, details)

    async def end_early(self, err: BaseException, left_behind: str) -> None:
        """The final phase of a run that ends early (what ended it, what it leaves behind), then
        wait until every handler has answered, so no accepted update is lost."""
        phase, why = ending(err, self.ABORTED_ERROR.__name__)
        self.enter(phase, f"{why}. {left_behind}")
        await workflow.wait_condition(workflow.all_handlers_finished)

    async def finish(self, phase: str, details: str) -> None:
        """The final phase of a run that ends as planned, then wait until every handler has
        answered (an update accepted in the last task is never lost)."""
        self.enter(phase, details)
        await workflow.wait_condition(workflow.all_handlers_finished)

    async def to_the_end(
        self,
        runbook: Callable[[], Awaitable[ResultT]],
        clean_up: Callable[[BaseException], Awaitable[str]],
    ) -> ResultT:
        """Run `runbook`; every early end (a failure, an abort, a cancel of the workflow) runs
        `clean_up(err)`, which puts back what it can and says what the run leaves behind; then the
        final phase (`end_early`) and the error raised: `ending_error`'s, by default the error
        the activity or child raised, with what the run left (`said_in_words`), so a parent or a
        reader of the result sees the cause in words, not "Activity task failed".

        The one ending skeleton of every workflow, so each way a run ends leaves the world and
        its Phase true. `clean_up` runs no abortable call: the run is ending already. An abort
        returns `aborted_result(err)` instead when the workflow gives one (the run completes).
        """
        metrics.workflow_operation_started(self.operation_kind)
        try:
            done = await runbook()
            self.settle_upserts()
        except (FailureError, asyncio.CancelledError) as err:
            left_behind = self.left_behind = await clean_up(err)
            await self.end_early(err, left_behind)
            metrics.workflow_operation_ended(self.operation_kind, self.phase, err)
            if self.phase == "aborted" and (result := self.aborted_result(err)) is not None:
                return cast(ResultT, result)  # an operator's abort, asked for: the run completes
            replacement = self.ending_error(err)
            if replacement is None:
                raise
            raise replacement from err
        metrics.workflow_operation_ended(self.operation_kind, self.phase)
        return done

    def aborted_result(self, err: BaseException) -> Any:
        """What a run an operator aborted returns (Temporal: Completed, its Phase `aborted`, the
        result saying who aborted and why: `aborted_words`), so an intended abort is no Failed run
        in the UI nor in an alert on failed workflows. None (the default): the run fails with its
        abort error."""
        return None

    def aborted_words(self) -> str:
        """An aborted run's words for its result: who aborted, why, what it did and what it left,
        as its final Phase says them (`end_early`: the abort's message, then `clean_up`'s words)."""
        return self.details.strip()

    def ending_error(self, err: BaseException) -> BaseException | None:
        """The error a run that ended early raises instead of `err` (None: `err` itself): by
        default `said_in_words(err)`; a workflow overrides it to add what its parent needs (e.g.
        the boot generation reached)."""
        return self.said_in_words(err)

    def said_in_words(self, err: BaseException) -> ApplicationError | None:
        """For a failure that wraps the error an activity or a child raised (an `ActivityError`,
        a `ChildWorkflowError`): that error, its type, message and details, with what the run left
        (`left_behind`) after the message, so the run's failure reads e.g. "BMCCredentialsRejected:
        the BMC of host-002-dpu-0 rejected the credentials. Done: nothing was reset; host power
        not touched by this run". None for the run's own errors (an abort's included: they say it
        already), a cancel, or a chain without an application error (a timeout: Temporal's words
        are the news)."""
        if isinstance(err, ApplicationError | asyncio.CancelledError | CancelledError):
            return None
        found = first_application_error(err)
        if found is None:
            return None
        message = f"{found.message}. {self.left_behind}" if self.left_behind else found.message
        return ApplicationError(
            message, *found.details, type=found.type, non_retryable=True, category=found.category
        )

    @property
    def aborting(self) -> bool:
        return self.abort_request is not None

    def aborted(self, outcome: str = "", *details: Any) -> WorkflowError:
        """The error an aborted run ends with: who aborted, why, and `outcome` (what it left).
        `OperationAborted`; a workflow whose abort has its own type overrides it (a rollout's
        `RolloutAborted`, named in `ABORTED_ERROR`), and `wait` and `call` raise that."""
        abort = self.abort_request
        assert abort is not None, "aborted() before an abort"
        why = f"aborted by {abort.requested_by}: {abort.reason or 'no reason given'}"
        return OperationAborted(f"{why}; {outcome}" if outcome else why, *details)

    # -- abort -----------------------------------------------------------------------------------
    def validate_abort(self, *, again: bool = False) -> None:
        """Validator of `abort`: refused once ended, while aborting (unless `again`: the
        workflow's own escalation of an abort), or for the workflow's own reason (`abort_refusal`)."""
        if self.phase in self.ENDED:
            raise ValueError(f"`abort`: {workflow.info().workflow_id} has already {self.phase}")
        if self.abort_request is not None and not again:
            raise ValueError(f"already aborting (asked by {self.abort_request.requested_by})")
        refusal = second_answer_refusal(ABORT_UPDATE, self.answer_taken()) or self.abort_refusal()
        if refusal is not None:
            raise ValueError(refusal)

    def accept_abort(self, request: OperatorRequest) -> OperatorAnswer:
        """Record an accepted abort; the runbook acts on it at its next `wait` or `call`."""
        self.abort_request = request
        self._taken = Answered(ABORT_UPDATE, request.requested_by, workflow.now())
        self.on_abort()
        return OperatorAnswer(accepted=True, message=self.abort_promise())

    def abort_refusal(self) -> str | None:
        """Why an abort is refused now (None: accepted); a workflow overrides it."""
        return None

    def answer_taken(self) -> Answered | None:
        """The answer accepted, not acted on yet: another is refused naming it (`operator_answers`)."""
        return self._taken

    def abort_promise(self) -> str:
        """What an accepted abort will do, in the answer; a workflow overrides it."""
        return f"aborting at the next safe point ({self.phase})"

    def on_abort(self) -> None:
        """Called when an abort is accepted (e.g. to cut a wait short); default: nothing."""

    # -- pause and resume ------------------------------------------------------------------------
    def validate_pause(self) -> None:
        """Validator of `pause`: a running, unpaused, not aborting run."""
        self.validate_running("pause")
        if self.paused_by is not None:
            raise ValueError(f"already paused by {self.paused_by.requested_by}")

    def validate_resume(self, *, also: bool = False) -> None:
        """Validator of `resume`: a paused run (or `also`, the workflow's other reason)."""
        self.validate_running("resume")
        if self.paused_by is None and not also:
            raise ValueError(f"`resume`: not paused (now: {self.phase})")

    def validate_running(self, kind: str) -> None:
        """Validator of any operator update: refused once the run has ended."""
        if self.phase in self.ENDED:
            raise ValueError(f"`{kind}`: {workflow.info().workflow_id} has already {self.phase}")

    # -- decisions -------------------------------------------------------------------------------
    async def await_decision(
        self, phase: str, question: str, kinds: tuple[str, ...], how: str | None = None
    ) -> tuple[str, OperatorRequest]:
        """Enter `phase`, ask an operator `question`, and wait for one of the updates `kinds` (an
        abort raises). Returns the kind answered and who. `how`: the one sentence on how to answer
        (`answers_in_words`; default: the updates by name; "": the question says it)."""
        self._question, self._kinds, self._answer = question, kinds, None
        how = answers_in_words(kinds, {}) if how is None else how
        self.enter(phase, f"{question}. {how}" if how else question)
        try:
            await self.wait(lambda: self._answer is not None)
        finally:
            self._question, self._kinds = None, ()
        assert self._answer is not None
        answer, self._answer, self._taken = self._answer, None, None
        workflow.logger.info("operator %s answered %s", answer[1].requested_by, answer[0])
        return answer

    @property
    def question(self) -> str | None:
        """What an operator is asked now (None: nothing)."""
        return self._question

    def awaits(self, kind: str) -> bool:
        """Whether an operator's `kind` is awaited now."""
        return kind in self._kinds and self._answer is None

    def validate_decision(self, kind: str, *, asked_in: str | None = None) -> None:
        """Validator of a decision update: only while that decision is awaited (`asked_in`: the
        phase it is asked in, for the refusal's words); refused once an abort was accepted."""
        if (refused := second_answer_refusal(kind, self.answer_taken())) is not None:
            raise ValueError(refused)
        if self.awaits(kind):
            return
        if asked_in is not None and self.phase != asked_in:
            raise ValueError(f"`{kind}` is only accepted in {asked_in} (now: {self.phase})")
        waiting = f"; it waits for: {self.details}" if self.details else ""
        raise ValueError(f"`{kind}` is not awaited now (phase {self.phase}{waiting})")

    def decide(self, kind: str, request: OperatorRequest) -> OperatorAnswer:
        """Record an operator's decision; the waiting runbook goes on."""
        self._answer = (kind, request)
        self._taken = Answered(kind, request.requested_by, workflow.now())
        return OperatorAnswer(accepted=True, message=f"{kind} accepted from {request.requested_by}")

    # -- waits and calls an abort interrupts ----------------------------------------------------
    async def wait(
        self,
        condition: Callable[[], bool],
        *,
        timeout: float | None = None,
        timeout_summary: str | None = None,
        abortable: bool = True,
    ) -> bool:
        """True once `condition` holds, False when `timeout` seconds passed first (its timer is
        labelled `timeout_summary` in the UI). Aborted meanwhile (`abortable`): raises `aborted()`."""
        waiting = events.wait_started(self.phase, timeout)  # the stalled-wait gauge; no history
        try:
            await workflow.wait_condition(
                lambda: (abortable and self.abort_request is not None) or condition(),
                timeout=None if timeout is None else timedelta(seconds=timeout),
                timeout_summary=timeout_summary if timeout is not None else None,
            )
        except TimeoutError:
            return False
        finally:
            events.wait_ended(waiting)
        if abortable and self.abort_request is not None:
            raise self.aborted()
        return True

    async def call(
        self,
        call: Callable[[ArgT], Awaitable[ResultT]],
        arg: ArgT,
        config: workflow.ActivityConfig,
        *,
        abortable: bool = True,
    ) -> ResultT:
        """One activity; aborted while it runs or retries (`abortable`), it is cancelled, waited
        for, and `aborted()` raised. A cancel of the workflow cancels it and waits too."""
        handle = start_cancellable(call, arg, config)
        if not await await_unless(handle, lambda: abortable and self.abort_request is not None):
            raise self.aborted()
        return await handle


class Abortable(Runbook):
    """A runbook an operator may stop: the `abort` update, declared once for every workflow
    whose abort takes an `OperatorRequest`.

    A workflow says when it refuses an abort (`abort_refusal`) and what an accepted one will do
    (`abort_promise`); it acts on it at its next `wait` or `call` (or where it checks `aborting`).
    A workflow whose abort takes a richer request (a campaign's `AbortRequest`) derives from
    `Runbook` and declares its own `abort` update over `validate_abort` and `accept_abort`.
    """

    @workflow.update(name=ABORT_UPDATE)
    def abort(self, request: OperatorRequest) -> OperatorAnswer:
        """Stop at the next safe point; what stopping leaves is the workflow's (`abort_promise`)."""
        return self.accept_abort(request)

    @abort.validator
    def _validate_abort(self, request: OperatorRequest) -> None:
        self.validate_abort()
