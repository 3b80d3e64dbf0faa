"""A workflow's host reboots, each a `HostRebootWorkflow` child of the next boot generation: start
the next one, wait for it, read how it ended, stop the one in flight.

A host operation (a reboot per round DPF asks for, re-issued while DPF does not move on), a
firmware run (one reboot to activate the staged images) and a host reset (`--host`) reboot a
host the same way, through `RebootRounds`; the host entity starts a `host reboot` with
`start_next_reboot` and follows it as it follows any operation.

- **Start** (`start_next_reboot`): the generation asked for, or the first after it that no
  reboot used up (`boot_generation.spent`). A used-up generation means the caller's count is
  behind the host's (an earlier run, or another operation, rebooted it since); the caller still
  needs its reboot, so it takes the next generation, never an old reboot's result: a restarted
  operation never repeats an old reboot and never skips the one it needs. The id is the lock
  (`REJECT_DUPLICATE`); a generation whose run ended without its cycle (the BMC refused it:
  `BMCRebootFailed`; aborted or cancelled before anything was sent) is free and run again under
  its own id (the caller's own refused reboot: `retry_refused`; anyone's: one Temporal read,
  `describe_reboot_run`, on the conflict only), so the generation moves once per reset that
  happened and no number is skipped. A generation whose run still waits for a person (a reboot
  a firmware run terminated by hand abandoned) refuses the start (`HostBusy`, naming it and how
  to end it: `boot_generation.waits_for_a_person`): every later reboot would wait for it unsaid.
- **Wait** (`RebootRounds.wait`): the runbook's wait (`kernel.Runbook.wait`, abortable unless
  told not to). An abort, or a cancel of the workflow, stops the reboot first: it is cancelled
  and waited for (a reboot cut short powers the host back on, then completes with its result),
  and the abort or cancel is raised; `stop` then returns what that reboot did. A reboot started
  `ABANDON` (firmware's: never stopped halfway) is left to finish on its own.
- **Read** (`RebootOutcome`, `bmc_refusal`, `reached_by_abort`): the generation reached, whether
  it was a power cycle of ours (the BMC's, not a person's, not a reset someone else made that the
  reboot took as done), and a BMC that could not reboot the host: its words, for the caller's
  decision (a host operation asks an operator; others fail with it). A reboot an operator
  aborted itself completes `aborted` (its result says who and why): `wait` raises
  `OperationAborted` with its words, so the caller ends aborted too, counting the generation if
  the host was cycled.
- **Stop** (`RebootRounds.stop`, a cleanup's): the reboot in flight cancelled and waited for, and
  what it did, so a reboot that happened is counted and acknowledged.
- **Confirm** (`RebootRounds.confirm`): a person's word that the host was rebooted, passed to
  the reboot in flight (a manual reboot, or one whose BMC could not be reached).
- **Power nobody here took** (issue 39 item 3): the run's first reboot is handed the entity's last
  reading at rest (`power_before` of the operation's input, `with_reading`), so its cycle's first
  read, made anyway, tells a host powered Off (or On) by someone else just before it began; later
  reboots get none (ours came since). What the reboots' reads found (their `unplanned_power`) is
  kept (`unplanned_power`) for the run's result, which the entity shows (`host status`, memo).
  Cost: no BMC request, no history event.
- **Its wait in the caller's details** (issue 38): a reboot started here is told its caller
  listens (`tell_parent`); entering its power-down wait it signals `its_reboot_now` with the words
  `host status` prints, and the caller's current details (the Temporal UI's) add
  `; its reboot ID: PHASE: WORDS` to its own until its next phase (`HearsItsReboot`). Only the wait
  (the one long step): its later reads and its On are not signalled. Cost per reboot with such a
  wait (a BMC without PowerCycle): one signal (a billable Action), 5 history events in the reboot
  (the signal sent, done, and the workflow task it wakes), 4 in the caller (the signal and its
  workflow task); none for a BMC that cycles the host itself. No timer, no poll, no BMC request.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    FailureError,
    TerminatedError,
    WorkflowAlreadyStartedError,
)

with workflow.unsafe.imports_passed_through():
    from temporalio.common import (
        RetryPolicy,
        SearchAttributePair,
        TypedSearchAttributes,
        WorkflowIDReusePolicy,
    )

    from contracts import activity_api, names, priorities, workflow_api
    from contracts.errors import BMCRebootFailed, HostBusy, InvalidInput, OperationAborted
    from contracts.models.bmc_lease import RebootRunInput, RebootRunSeen
    from contracts.models.control import OperatorRequest
    from contracts.models.host import (
        HOST_REBOOTED_SIGNAL,
        MANUAL_INTERVENTION_REQUIRED,
        HostRebootInput,
        HostRebootResult,
    )
    from contracts.models.power_watch import ITS_REBOOT_NOW_SIGNAL, PowerAtRest, RebootNow
    from contracts.wording import with_its_reboot
    from workflows import kernel
    from workflows.parts import boot_generation
    from workflows.parts.boot_generation import RebootLeft

WAIT_FOR_CANCELLATION: Final = workflow.ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED
ABANDON: Final = workflow.ChildWorkflowCancellationType.ABANDON
MAX_SPENT_GENERATIONS: Final = 50  # generations an earlier run used; each costs one refused start
DESCRIBE_SECONDS: Final = 60.0  # `describe_reboot_run` gives up after this (the start then fails)

RebootChild = workflow.ChildWorkflowHandle[Any, HostRebootResult]


@dataclass(frozen=True)
class RebootOutcome:
    """A reboot that happened: the generation the host reached, and the reboot's result."""

    generation: int
    result: HostRebootResult

    @property
    def already_done(self) -> bool:
        """The BMC showed a reset since the reboot was owed: taken as this reboot, none sent."""
        return self.result.already_done

    @property
    def power_cycle(self) -> bool:
        """A reset of ours: the BMC's (a person's is not), not one someone else made."""
        return self.result.method.startswith("bmc") and not self.result.already_done


class HearsItsReboot:
    """The signal `its_reboot_now` of a workflow whose reboots are `reboots` (module docstring)."""

    reboots: RebootRounds

    @workflow.signal(name=ITS_REBOOT_NOW_SIGNAL)
    def its_reboot_now(self, now: RebootNow) -> None:
        """What its reboot in flight waits for now, for this run's current details."""
        self.reboots.heard(now)


def with_reading(request: HostRebootInput, before: PowerAtRest | None) -> HostRebootInput:
    """The reboot with the entity's last reading at rest (`before`: the run's, for its first
    reboot only; None for later ones); a reading the caller gave already is kept."""
    if before is None or request.power_before is not None:
        return request
    return request.model_copy(update={"power_before": before})


def joined_unplanned(found: list[str], result: HostRebootResult) -> None:
    """Keep what a reboot's reads found (its `unplanned_power`), once each, in order."""
    if result.unplanned_power and result.unplanned_power not in found:
        found.append(result.unplanned_power)


def bmc_refusal(err: ChildWorkflowError) -> str | None:
    """The BMC's words when the reboot failed because the BMC could not reboot the host
    (`BMCRebootFailed`: no reset happened); None for any other failure."""
    cause = err.cause
    if isinstance(cause, ApplicationError) and cause.type == BMCRebootFailed.__name__:
        return cause.message
    return None


class RebootRounds:
    """The reboot children of one run, one in flight at a time (see the module docstring).

    Args:
        runbook: The workflow whose abort stops a reboot it waits for.
        power_before: The entity's last reading at rest (the run's input), for the first reboot.
    """

    def __init__(self, runbook: kernel.Runbook, power_before: PowerAtRest | None = None) -> None:
        self._runbook = runbook
        self._power_before = power_before  # handed to the first reboot started, then None
        self._unplanned: list[str] = []  # what the reboots' reads found nobody here did
        self._last_reset: datetime | None = None  # the last reboot's (`last_reset_time`)
        self._child: RebootChild | None = None
        self._generation = 0
        self._abandoned = False
        self._stopped: RebootOutcome | None = None  # a reboot stopped by an interrupted wait
        self._shown_phase: str | None = None  # the reboot's phase the caller's Phase shows (`heard`)

    @property
    def child(self) -> RebootChild | None:
        """The reboot in flight (None: none), e.g. to pass it a person's confirmation."""
        return self._child

    @property
    def unplanned_power(self) -> str:
        """The power changes nobody here made that this run's reboots found, in words ("" none)."""
        return "; ".join(self._unplanned)

    @property
    def last_reset_time(self) -> datetime | None:
        """The host's LastResetTime as this run's last reboot read it at its end (its result's);
        None: not known, or a reboot started since ended without a result (failed, cut short)."""
        return self._last_reset

    @property
    def rebooting_to(self) -> int | None:
        """The generation the reboot in flight reboots to (None: none in flight)."""
        return self._generation if self._child is not None else None

    async def confirm(self, confirmation: OperatorRequest) -> str | None:
        """Pass a person's confirmation (`host_rebooted`) to the reboot in flight; None when it was
        delivered, else why not (logged, never raised).

        Why: the reboot may close between a handler's start and the signal's delivery (its
        completion and the confirmation can arrive in one workflow task, and handlers run first).
        A handler that raised would fail the whole run for a late confirmation, which the closed
        reboot made moot anyway.
        """
        child = self._child
        if child is None:
            return "no reboot is in flight"
        try:
            await child.signal(HOST_REBOOTED_SIGNAL, confirmation)
        except Exception as err:  # noqa: BLE001 - see the docstring: a handler must not fail the run
            why = f"the reboot {child.id} had already ended: {err}"
            workflow.logger.warning("confirmation from %s not passed on: %s", confirmation.requested_by, why)
            return why
        return None

    async def start(
        self,
        request: HostRebootInput,
        *,
        summary: str,
        parent_close_policy: workflow.ParentClosePolicy,
        cancellation_type: workflow.ChildWorkflowCancellationType = WAIT_FOR_CANCELLATION,
        retry_refused: bool = False,
    ) -> int:
        """Start the next reboot (`start_next_reboot`, same arguments); returns its generation."""
        assert self._child is None, "a reboot is in flight already"
        request, self._power_before = with_reading(request, self._power_before), None
        self._last_reset = None  # until this reboot ends with its result
        self._shown_phase = None  # the caller's last phase entered showed since (`heard`)
        request = request.model_copy(update={"tell_parent": True})  # `heard` takes its wait's words
        self._child, self._generation = await start_next_reboot(
            request,
            summary=summary,
            parent_close_policy=parent_close_policy,
            cancellation_type=cancellation_type,
            retry_refused=retry_refused,
        )
        self._abandoned = cancellation_type == ABANDON
        return self._generation

    def heard(self, now: RebootNow) -> None:
        """The reboot in flight says what it waits for now: the caller's current details say it
        after its own, as `host status` does (`metalflow.operation_progress.with_its_reboot`), until its next
        phase or details replace them. Words of a reboot no longer in flight are dropped.

        A reboot waiting for a person with the host OFF (manual-intervention-required: a firmware
        run's, which waits itself) puts the caller's `Phase` search attribute there too, until it
        says it waits otherwise or the caller enters its next phase: `host list` reads only
        visibility, and showed `power-cycling` alone (issue 40). The caller's own phase (its
        `status`, what routes `abort` and `retry` to the reboot) stays."""
        if self._child is None or now.reboot_id != self._child.id:
            return
        own = self._runbook
        kernel.set_details(own.phase, with_its_reboot(own.details, now.reboot_id, now.phase, now.details))
        shown = now.phase if now.phase == MANUAL_INTERVENTION_REQUIRED else own.phase
        if shown != own.phase or self._shown_phase is not None:
            self._shown_phase = shown if shown != own.phase else None
            kernel.upsert_changed([names.PHASE.value_set(shown)])

    async def wait(self, *, abortable: bool = True) -> RebootOutcome:
        """Wait until the reboot in flight ends: its outcome, or its failure raised as the
        `ChildWorkflowError` (`bmc_refusal` reads a BMC's). An abort (`abortable`) or a cancel of
        the workflow meanwhile stops it first (module docstring), then is raised."""
        child = self._child
        assert child is not None, "no reboot in flight"
        try:
            await self._runbook.wait(child.done, abortable=abortable)
        except (FailureError, asyncio.CancelledError):
            self._stopped = await self._halt()
            raise
        self._child = None
        result = await child
        joined_unplanned(self._unplanned, result)
        self._last_reset = result.last_reset_time
        if result.aborted:  # an operator aborted the reboot itself: it completed `aborted`
            raise self._aborted_reboot(child.id, result)
        return RebootOutcome(self._generation, result)

    def _aborted_reboot(self, reboot_id: str, result: HostRebootResult) -> OperationAborted:
        """A reboot an operator aborted (it completes, `aborted` saying who and why) ends the
        caller as aborted too: a reboot it reached is kept for `stop` (the cleanup counts it), and
        the error's details carry the generation reached (`reached_by_abort`)."""
        reached = result.boot_generation >= self._generation
        if reached:
            self._stopped = RebootOutcome(self._generation, result)
        details = [{"boot_generation": self._generation}] if reached else []
        workflow.logger.info("reboot %s %s", reboot_id, result.aborted)
        return OperationAborted(result.aborted, *details)  # its words: "aborted by <who>: ..."

    async def stop(self) -> RebootOutcome | None:
        """A cleanup's: stop the reboot in flight (cancelled and waited for; an abandoned one is
        left to finish) and say what it did, once: the outcome of a reboot that happened (one cut
        short completes with its result), whether stopped now or by an interrupted `wait`."""
        if self._child is not None:
            self._stopped = await self._halt()
        stopped, self._stopped = self._stopped, None
        return stopped

    async def _halt(self) -> RebootOutcome | None:
        child, self._child = self._child, None
        if child is None or self._abandoned:
            return None
        if not child.done():
            child.cancel()
        try:
            result = await child
        except (ChildWorkflowError, asyncio.CancelledError) as err:  # stopped before it rebooted
            workflow.logger.info("reboot %s ended as it was stopped: %s", child.id, err)
            return None
        joined_unplanned(self._unplanned, result)
        self._last_reset = result.last_reset_time
        if result.aborted and result.boot_generation < self._generation:  # aborted before a reset
            workflow.logger.info("reboot %s ended as it was stopped: %s", child.id, result.aborted)
            return None
        return RebootOutcome(self._generation, result)


def reached_by_abort(err: BaseException) -> int | None:
    """The generation a reboot an operator aborted had reached (`RebootRounds.wait`'s error's
    details), None when it reached none or `err` is no such error."""
    if not isinstance(err, ApplicationError):
        return None
    for detail in err.details:
        if isinstance(detail, dict) and isinstance(detail.get("boot_generation"), int):
            return int(detail["boot_generation"])
    return None


async def start_next_reboot(
    request: HostRebootInput,
    *,
    summary: str,
    parent_close_policy: workflow.ParentClosePolicy,
    cancellation_type: workflow.ChildWorkflowCancellationType = WAIT_FOR_CANCELLATION,
    search_attributes: TypedSearchAttributes | None = None,
    retry_refused: bool = False,
) -> tuple[RebootChild, int]:
    """Start the reboot of the first generation from `request.boot_generation` on that no reboot
    used (the module docstring says why).

    Args:
        request: The reboot; its `boot_generation` is the first one to try.
        summary: The child's summary in the UI; `{generation}` is replaced by the generation.
        parent_close_policy: What becomes of the reboot when the caller closes.
        cancellation_type: How cancelling the caller reaches the reboot.
        search_attributes: The child's search attributes at start (the entity sets Site too);
            default HostId and Operation, which a workflow's start writes for free (an upsert
            is a history event and a billable Action).
        retry_refused: `request.boot_generation` is the caller's own reboot that the BMC refused
            (it failed `BMCRebootFailed`: no reset happened), to be run again under the same id
            (`ALLOW_DUPLICATE_FAILED_ONLY`), so the generation moves once per reset that happened.

    Returns:
        The child's handle and the generation it reboots to.
    """
    generation = request.boot_generation
    if search_attributes is None:
        search_attributes = TypedSearchAttributes(
            [
                SearchAttributePair(names.HOST_ID, request.host_id),
                SearchAttributePair(names.OPERATION, names.REBOOT),
            ]
        )
    reuse = (
        WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY
        if retry_refused
        else WorkflowIDReusePolicy.REJECT_DUPLICATE
    )
    for _ in range(MAX_SPENT_GENERATIONS):
        try:
            handle = await workflow.start_child_workflow(
                workflow_api.HostRebootWorkflow.run,
                request.model_copy(update={"boot_generation": generation}),
                id=names.host_reboot_workflow_id(request.host_id, generation),
                id_reuse_policy=reuse,
                parent_close_policy=parent_close_policy,
                cancellation_type=cancellation_type,
                static_summary=summary.format(generation=generation),
                search_attributes=search_attributes,
                priority=priorities.REBOOT_PRIORITY,  # DPF waits for it: see contracts.priorities
            )
            return handle, generation
        except WorkflowAlreadyStartedError:
            if reuse != WorkflowIDReusePolicy.ALLOW_DUPLICATE and not await _spent(
                request.host_id, generation
            ):
                # Its run ended without reaching it (the BMC refused, aborted or cancelled before
                # the cycle): the generation is free, this reboot takes it (`boot_generation.spent`).
                reuse = WorkflowIDReusePolicy.ALLOW_DUPLICATE
                continue
            workflow.logger.info(
                "generation %d of %s already used: taking the next", generation, request.host_id
            )
            generation += 1
            reuse = WorkflowIDReusePolicy.REJECT_DUPLICATE
    raise InvalidInput(
        f"boot generations {request.boot_generation}..{generation - 1} of {request.host_id} are all spent"
    )


PRE_START_READ: Final[workflow.ActivityConfig] = {
    **kernel.bounded(kernel.KUBE_READ, DESCRIBE_SECONDS),
    # No worker serves it (a worker of other activities): the start goes on at once, its reboot
    # reads again (`refuse_behind_waiting`), rather than holding the request for the bound.
    "retry_policy": RetryPolicy(
        initial_interval=timedelta(milliseconds=500),
        maximum_interval=timedelta(seconds=30),
        non_retryable_error_types=[*kernel.NON_RETRYABLE, "NotFoundError"],
    ),
}


async def _describe(
    host_id: str, generation: int, summary: str, config: workflow.ActivityConfig | None = None
) -> RebootRunSeen:
    return await workflow.execute_activity(
        activity_api.describe_reboot_run,
        RebootRunInput(host_id=host_id, boot_generation=generation),
        **kernel.options(config or kernel.bounded(kernel.KUBE_READ, DESCRIBE_SECONDS), summary),
    )


async def _spent(host_id: str, generation: int, config: workflow.ActivityConfig | None = None) -> bool:
    """Whether the run holding generation `generation`'s reboot id used it up (one Temporal read:
    `describe_reboot_run`; `boot_generation.spent` decides).

    Raises:
        HostBusy: that run still waits for a person (`boot_generation.waits_for_a_person`): a
            reboot after it would wait for it, unsaid, until a person ends it.
    """
    seen = await _describe(host_id, generation, f"is generation {generation} of {host_id} used up?", config)
    waiting = boot_generation.waits_for_a_person(names.host_reboot_workflow_id(host_id, generation), seen)
    if waiting:
        raise HostBusy(f"host {host_id} is busy: {waiting}")
    if seen.end == "absent":
        return False
    return boot_generation.spent(generation, boot_generation.RunEnd(seen.end), seen.boot_generation)


async def refuse_behind_waiting(host_id: str, generation: int) -> None:
    """Before an operation that will reboot the host starts (the entity's check, before the
    operation changed anything): the reboot ids from `generation` on, as `start_next_reboot`
    walks them, up to the first free one (usually one read: none ran yet). A read that fails is
    logged and the operation starts: its own reboot reads the same run again as it starts
    (`start_next_reboot`) and fails `HostBusy` there, naming it.

    Raises:
        HostBusy: a run of one still waits for a person (`boot_generation.waits_for_a_person`),
            in the words `host reboot` is refused with.
    """
    for asked in range(generation, generation + REBOOTS_READ_AFTER_CANCEL):
        try:
            if not await _spent(host_id, asked, PRE_START_READ):
                return
        except ActivityError as failed:
            workflow.logger.warning(
                "reboot generation %d of %s not read before the start (%s): its reboot reads it "
                "as it starts", asked, host_id, kernel.describe_failure(failed),
            )  # fmt: skip
            return


async def cut_run(host_id: str, workflow_id: str, *, words: bool = False) -> RebootRunSeen:
    """How the run `workflow_id` (an operation ended by hand: cancelled or terminated) stands: its
    last Phase and, asked for its `words`, what it says it did and left (`RebootRunSeen.said`).
    `end` "unread" when it cannot be read (logged: nothing is claimed of the host's power)."""
    try:
        seen: RebootRunSeen = await workflow.execute_activity(
            activity_api.describe_reboot_run,
            RebootRunInput(host_id=host_id, boot_generation=1, workflow_id=workflow_id, words=words),
            **kernel.options(
                kernel.bounded(kernel.KUBE_READ, DESCRIBE_SECONDS), f"where did {workflow_id} end?"
            ),
        )
    except ActivityError as failed:
        workflow.logger.warning("%s not read: %s", workflow_id, kernel.describe_failure(failed))
        return RebootRunSeen(end="unread")
    return seen


REBOOTS_READ_AFTER_CANCEL: Final = 10  # a cancelled operation's reboots read past the count


async def reached_when_ended(
    err: ChildWorkflowError, reported: int | None, host_id: str, known: int
) -> tuple[int | None, RebootLeft | None]:
    """The generation an operation that did not complete reached: `reported` (its failure's
    details), or, for one cancelled or terminated (Temporal keeps no result, no details), what the
    host's reboot runs from `known + 1` on reached (`describe_reboot_run` one at a time, at most
    `REBOOTS_READ_AFTER_CANCEL`; `boot_generation.reached_by_runs` counts). None when a read fails
    (logged: the count stays; the next reboot's start still skips a used-up id).

    With it, the first of those runs that did not complete (its id and how it stands: its last
    reboot, still running, failed, cancelled or cut; None: every one read completed, or none
    read): what a terminated operation's reboot left of the host's power (`outcome.off_when_cut`),
    read by the same describes, none more."""
    if reported is not None or not isinstance(err.cause, CancelledError | TerminatedError):
        return reported, None
    return await reached_by_reboots(host_id, known)


async def reached_by_reboots(host_id: str, known: int) -> tuple[int | None, RebootLeft | None]:
    """What the host's reboot runs from `known + 1` on reached and the first that did not
    complete (`reached_when_ended`'s reads), for a run cut short (cancelled, terminated) that
    reported nothing."""
    runs: list[tuple[boot_generation.RunEnd, int | None]] = []
    last: RebootLeft | None = None
    for generation in range(known + 1, known + 1 + REBOOTS_READ_AFTER_CANCEL):
        try:
            seen = await _describe(
                host_id, generation, f"did reboot generation {generation} of {host_id} happen?"
            )
        except ActivityError as failed:
            workflow.logger.warning("reboots of %s not read: %s", host_id, kernel.describe_failure(failed))
            return None, None
        if seen.end != boot_generation.RunEnd.COMPLETED:
            if seen.end != "absent":
                last = RebootLeft(names.host_reboot_workflow_id(host_id, generation), seen)
            break
        runs.append((boot_generation.RunEnd.COMPLETED, seen.boot_generation))
    return boot_generation.reached_by_runs(known, runs), last
