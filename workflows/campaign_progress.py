"""What a campaign knows and tells: the hosts' outcomes (the `host_finished` signal, the failure
budget and its halt, the end's result), the `status` query and the UI's details, and the
`Progress` carried whole over continue-as-new, mixed into `CampaignWorkflow` (workflows/campaign.py,
the runbook) over `CampaignControl` (the operator's updates and the working state).

Cost: no history events of its own beyond one `host_finished` signal per host and a `Phase`
upsert per phase change; the state is O(hosts not finished + failures + skipped) in the worker's
memory and in the continue-as-new input (~100 bytes per host); `status` is O(in flight).
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from contracts.models.campaign import (
        HOST_FINISHED_SIGNAL,
        CampaignHost,
        CampaignInput,
        CampaignResult,
        CampaignStatus,
        Failure,
        HostFinished,
        Progress,
    )
    from contracts.models.control import STATUS_QUERY
    from workflows import campaign_plan as plan
    from workflows.campaign_control import (
        ABORTED,
        CANARY,
        COMPLETED,
        HALTED,
        RUNNING,
        CampaignControl,
    )

FAILURES_SHOWN: Final = 200
ABORTED_AWAITING_APPROVAL: Final = "campaign aborted while awaiting approval"


class CampaignProgress(CampaignControl):
    """The campaign's outcomes, status and carried-over progress; `CampaignWorkflow` runs it."""

    def __init__(self, start: CampaignInput) -> None:
        super().__init__()
        self._input = start
        self._name = workflow.info().workflow_id.removeprefix("campaign/")
        self._finished: list[HostFinished] = []  # signalled, absorbed at the runbook's next step
        self._next_sweep: datetime | None = None  # the sweep of in-flight hosts (the runbook's)
        self._restore(start.progress or Progress(limits=start.limits, started_at=workflow.now()))

    # -- outcomes -------------------------------------------------------------------------------------
    @workflow.signal(name=HOST_FINISHED_SIGNAL)
    def host_finished(self, finished: HostFinished) -> None:
        """A host's entity saw this campaign's operation end (handled in the runbook's next step)."""
        self._finished.append(finished)

    def _absorb(self) -> None:
        finished, self._finished = self._finished, []
        for event in finished:
            flight = self._in_flight.get(event.host_id)
            if flight is None or flight.workflow_id != event.workflow_id:
                continue  # a duplicate (signal and sweep), or another operation of that host
            del self._in_flight[event.host_id]
            self._needs_operator.pop(event.host_id, None)
            self._operator_accepted.discard(event.host_id)
            if event.outcome == "completed":
                self._done += 1
                self._attempted += 1
            elif event.outcome.startswith("expired"):
                self._skipped.append(Failure(host=flight.host, reason=f"not approved: {event.outcome}"))
            elif flight.workflow_id in self._abort_sent and event.outcome.startswith("withdrawn"):
                reason = f"{ABORTED_AWAITING_APPROVAL}: {event.outcome}"
                self._skipped.append(Failure(host=flight.host, reason=reason))  # never started
            elif flight.workflow_id in self._abort_sent:
                # The operator's abort cut it: not a failure of the host, nor of the budget's.
                self._aborted.append(Failure(host=flight.host, reason=event.outcome))
            else:
                self._record_failure(flight.host, event.outcome)
            self._abort_sent.discard(flight.workflow_id)
        if not self._in_flight:
            self._next_sweep = None

    def _record_failure(self, host: CampaignHost, reason: str) -> None:
        self._failed.append(Failure(host=host, reason=reason))
        self._attempted += 1
        self._check_budget()

    def _budget_counts(self) -> tuple[int, int]:
        """(failed, attempted) as the budget counts them: since the last resume of a halt, hosts
        waiting for an operator (not accepted by that resume) included as failed attempts."""
        waiting = len(self._needs_operator.keys() - self._operator_accepted)
        return (
            len(self._failed) - self._budget_failed_base + waiting,
            self._attempted - self._budget_attempted_base + waiting,
        )

    def _check_budget(self) -> None:
        failed, attempted = self._budget_counts()
        if self._halted_reason is None and plan.budget_exceeded(self._input.budget, failed, attempted):
            self._halt(f"failure budget spent: {plan.describe_budget(self._input.budget, failed, attempted)}")

    def _halt(self, reason: str) -> None:
        self._halted_reason = reason
        self._enter(HALTED, f"{reason}; waiting for resume, retry_failed or abort")
        workflow.logger.warning("campaign %s halted: %s", self._name, reason)

    def _over(self) -> bool:
        if self._aborting is not None:
            return not self._in_flight
        return not (self._pending or self._deferred or self._in_flight) and self._halted_reason is None

    def _finish(self) -> CampaignResult:
        outcome = ABORTED if self._aborting is not None else COMPLETED
        # Hosts an abort left unstarted are skipped: the last details and `status` count them too.
        self._skipped += [Failure(host=h, reason="not started: aborted") for h in self._not_started()]
        self._pending, self._deferred = [], []
        self._enter(outcome, self._counts())
        return CampaignResult(
            name=self._name,
            outcome=outcome,
            total=self._total,
            done=self._done,
            already_at_target=self._at_target_count,
            failed=tuple(self._failed),
            skipped=tuple(self._skipped),
            runs=self._runs,
            finished_at=workflow.now(),
            aborted=tuple(self._aborted),
        )

    def _not_started(self) -> list[CampaignHost]:
        return self._pending + [d.host for d in self._deferred]

    # -- visibility -----------------------------------------------------------------------------------
    def _counts(self) -> str:
        return (
            f"{self._done + self._at_target_count}/{self._total} done ({self._at_target_count} already "
            f"at target), {len(self._in_flight)} in flight, {len(self._failed)} failed, "
            f"{len(self._skipped)} skipped" + (f", {len(self._aborted)} aborted" if self._aborted else "")
        )

    def _show_running(self) -> None:
        phase = CANARY if not self._canary_passed else RUNNING
        self._enter(phase, f"batch {self._batch}: {self._counts()}")

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> CampaignStatus:
        """Done / in flight / failed with reasons / skipped / remaining, batch, window, budget."""
        now = workflow.now()
        failed, attempted = self._budget_counts()
        windows = self._input.windows
        return CampaignStatus(
            name=self._name,
            target=self._input.target.describe(),
            phase=self._phase,
            total=self._total,
            done=self._done,
            already_at_target=self._at_target_count,
            in_flight=tuple(sorted(k for k, f in self._in_flight.items() if not f.awaiting_approval)),
            awaiting_approval=tuple(sorted(k for k, f in self._in_flight.items() if f.awaiting_approval)),
            failed=len(self._failed),
            failures=tuple(self._failed[-FAILURES_SHOWN:]),
            skipped=len(self._skipped),
            skipped_hosts=tuple(self._skipped[-FAILURES_SHOWN:]),
            deferred=tuple(d.host.host_id for d in self._deferred),
            remaining=len(self._pending) + len(self._deferred) + len(self._in_flight),
            batch=self._batch,
            canary_passed=self._canary_passed,
            window_open=plan.window_open(windows, now),
            next_window=plan.next_window_open(windows, now) if windows else None,
            soak_until=self._soak_until,
            budget=plan.describe_budget(self._input.budget, failed, attempted),
            halted_reason=self._halted_reason,
            paused_by=self._paused_by,
            aborting=self._aborting,
            limits=self._limits,
            runs=self._runs,
            needs_operator=tuple(self._needs_operator.values()),
            aborted=len(self._aborted),
            aborted_hosts=tuple(self._aborted[-FAILURES_SHOWN:]),
        )

    # -- continue-as-new ------------------------------------------------------------------------------
    def _history_is_long(self) -> bool:
        info = workflow.info()
        return info.is_continue_as_new_suggested() or (
            info.get_current_history_length() > self._input.policy.max_history_events
        )

    def _snapshot(self) -> Progress:
        return Progress(
            phase=self._phase,
            total=self._total,
            pending=tuple(self._pending),
            in_flight=tuple(self._in_flight.values()),
            deferred=tuple(self._deferred),
            done=self._done,
            already_at_target=self._at_target_count,
            failed=tuple(self._failed),
            skipped=tuple(self._skipped),
            attempted=self._attempted,
            budget_failed_base=self._budget_failed_base,
            budget_attempted_base=self._budget_attempted_base,
            canary_hosts=tuple(sorted(self._canary_hosts)),
            canary_passed=self._canary_passed,
            batch=self._batch,
            batch_left=self._batch_left,
            soak_until=self._soak_until,
            halted_reason=self._halted_reason,
            paused_by=self._paused_by,
            aborting=self._aborting,
            cancel_running=self._cancel_running,
            deployment_pointed=self._deployment_pointed,
            runs=self._runs + 1,
            started_at=self._started_at,
            limits=self._limits,
            next_sweep=self._next_sweep,
            needs_operator=tuple(self._needs_operator.values()),
            operator_accepted=tuple(sorted(self._operator_accepted)),
            aborted=tuple(self._aborted),
            abort_sent=tuple(sorted(self._abort_sent)),
        )

    def _restore(self, p: Progress) -> None:
        self._phase = p.phase
        self._total = p.total
        self._pending = list(p.pending)
        self._in_flight = {f.host.host_id: f for f in p.in_flight}
        self._deferred = list(p.deferred)
        self._done = p.done
        self._at_target_count = p.already_at_target
        self._failed = list(p.failed)
        self._skipped = list(p.skipped)
        self._attempted = p.attempted
        self._budget_failed_base = p.budget_failed_base
        self._budget_attempted_base = p.budget_attempted_base
        self._canary_hosts: set[str] = set(p.canary_hosts)
        self._canary_passed = p.canary_passed
        self._batch = p.batch
        self._batch_left = p.batch_left
        self._soak_until = p.soak_until
        self._halted_reason = p.halted_reason
        self._paused_by = p.paused_by
        self._aborting = p.aborting
        self._cancel_running = p.cancel_running
        self._deployment_pointed = p.deployment_pointed
        self._runs = p.runs
        self._started_at = p.started_at
        self._limits = p.limits
        self._next_sweep = p.next_sweep
        self._needs_operator = {f.host.host_id: f for f in p.needs_operator}
        self._operator_accepted = set(p.operator_accepted)
        self._aborted = list(p.aborted)
        self._abort_sent = set(p.abort_sent)
