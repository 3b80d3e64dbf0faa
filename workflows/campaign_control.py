"""Operator control of a campaign: `pause`, `resume`, `abort`, `retry_failed`, `skip_host` and
`set_limits`, each with a validator that refuses what does not apply now (with the reason) and an
answer saying what it did. Handlers only change the campaign's state and wake the runbook
(`workflows.campaign`), which acts at its next step; no handler awaits, so none races a start.

No cost of its own: state in the workflow, about 4 history events per update.
"""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow

from workflows import common

with workflow.unsafe.imports_passed_through():
    from contracts.models.campaign import (
        RETRY_FAILED_UPDATE,
        SET_LIMITS_UPDATE,
        SKIP_HOST_UPDATE,
        AbortRequest,
        CampaignHost,
        Deferred,
        Failure,
        InFlight,
        Limits,
        LimitsRequest,
        SkipRequest,
    )
    from contracts.models.control import (
        ABORT_UPDATE,
        PAUSE_UPDATE,
        RESUME_UPDATE,
        OperatorAnswer,
        OperatorRequest,
    )
    from contracts.wording import plural

SELECTING = "selecting"
POINTING = "pointing-deployment"
CANARY = "canary"
RUNNING = "running"
SOAKING = "soaking"
OUTSIDE_WINDOW = "outside-window"
PAUSED = "paused"
HALTED = "halted"
ABORTING = "aborting"
COMPLETED = "completed"
ABORTED = "aborted"
FINISHED = (COMPLETED, ABORTED)


class CampaignControl:
    """The operator's updates and the campaign's working state, mixed into `CampaignWorkflow`."""

    def __init__(self) -> None:
        self._phase = SELECTING
        self._pending: list[CampaignHost] = []
        self._in_flight: dict[str, InFlight] = {}
        self._deferred: list[Deferred] = []
        self._failed: list[Failure] = []
        self._skipped: list[Failure] = []
        self._limits = Limits()
        self._paused_by: str | None = None
        self._halted_reason: str | None = None
        self._aborting: str | None = None
        self._cancel_running = False
        self._canary_passed = False
        self._batch_left = 0
        self._soak_until: datetime | None = None
        self._budget_failed_base = 0
        self._budget_attempted_base = 0
        self._attempted = 0
        self._needs_operator: dict[str, Failure] = {}  # in flight, waiting for an operator (the sweep)
        self._operator_accepted: set[str] = set()  # of those, accepted by a resume: not counted
        self._poked = False  # a handler changed something the runbook must look at

    def _enter(self, phase: str, details: str) -> None:
        """Enter `phase`: the status query, the `Phase` search attribute and the UI's details."""
        if phase != self._phase:
            self._phase = phase
            common.enter_phase(phase, details)
        else:
            common.set_details(phase, details)

    @workflow.update(name=PAUSE_UPDATE)
    def pause(self, request: OperatorRequest) -> OperatorAnswer:
        """Start no new host; running ones finish. `resume` goes on."""
        self._paused_by = request.requested_by
        self._poked = True
        return OperatorAnswer(
            accepted=True,
            message=f"paused: no new host starts; {plural(len(self._in_flight), 'host')} in flight "
            + ("finishes" if len(self._in_flight) == 1 else "finish"),
        )

    @pause.validator
    def _validate_pause(self, request: OperatorRequest) -> None:
        self._validate_running("pause")
        if self._paused_by is not None:
            raise ValueError(f"already paused by {self._paused_by}")

    @workflow.update(name=RESUME_UPDATE)
    def resume(self, request: OperatorRequest) -> OperatorAnswer:
        """Go on after a pause or a halt (the failure budget then counts from here)."""
        message = "resumed"
        if self._halted_reason is not None:
            message = f"resumed after the halt ({self._halted_reason}); the failure budget counts from now"
            self._halted_reason = None
            self._budget_failed_base = len(self._failed)
            self._budget_attempted_base = self._attempted
            self._operator_accepted |= self._needs_operator.keys()  # they wait for people: accepted
            if not self._canary_passed and self._batch_left == 0 and not self._in_flight:
                self._canary_passed = True  # the operator accepts the canary's outcome
        self._paused_by = None
        self._poked = True
        return OperatorAnswer(accepted=True, message=message)

    @resume.validator
    def _validate_resume(self, request: OperatorRequest) -> None:
        self._validate_running("resume")
        if self._paused_by is None and self._halted_reason is None:
            raise ValueError(f"the campaign is neither paused nor halted (now: {self._phase})")

    @workflow.update(name=ABORT_UPDATE)
    def abort(self, request: AbortRequest) -> OperatorAnswer:
        """Start no new host; let running ones finish, or abort them (`cancel_running`)."""
        self._aborting = request.requested_by
        self._cancel_running = request.cancel_running
        self._poked = True
        running = len(self._in_flight)
        fate = "aborting them" if request.cancel_running else "letting them finish"
        return OperatorAnswer(
            accepted=True, message=f"aborting: no new host starts; {running} in flight, {fate}"
        )

    @abort.validator
    def _validate_abort(self, request: AbortRequest) -> None:
        self._validate_running("abort")
        if self._aborting is not None and not (request.cancel_running and not self._cancel_running):
            raise ValueError(f"already aborting (asked by {self._aborting})")

    @workflow.update(name=RETRY_FAILED_UPDATE)
    def retry_failed(self, request: OperatorRequest) -> OperatorAnswer:
        """Put every failed host back at the front of the queue; clears a halt."""
        hosts = [f.host for f in self._failed]
        self._failed.clear()
        self._pending[:0] = hosts
        self._budget_failed_base = 0
        self._budget_attempted_base = self._attempted
        if not self._canary_passed:
            self._batch_left += len(hosts)  # a failed canary is retried as the canary
        self._halted_reason = None
        self._poked = True
        return OperatorAnswer(accepted=True, message=f"retrying {len(hosts)} failed hosts")

    @retry_failed.validator
    def _validate_retry_failed(self, request: OperatorRequest) -> None:
        self._validate_running("retry_failed")
        if self._aborting is not None:
            raise ValueError(f"the campaign is aborting (asked by {self._aborting})")
        if not self._failed:
            raise ValueError("no host has failed")

    @workflow.update(name=SKIP_HOST_UPDATE)
    def skip_host(self, request: SkipRequest) -> OperatorAnswer:
        """Leave a host that has not started (or failed) out of the campaign."""
        reason = f"skipped by {request.requested_by}" + (f": {request.reason}" if request.reason else "")
        for queue in (self._pending, self._deferred, self._failed):
            for entry in queue:
                host = entry if isinstance(entry, CampaignHost) else entry.host
                if host.host_id == request.host_id:
                    queue.remove(entry)  # type: ignore[arg-type]
                    self._skipped.append(Failure(host=host, reason=reason))
                    self._poked = True
                    return OperatorAnswer(accepted=True, message=f"{request.host_id} {reason}")
        raise ValueError(f"host {request.host_id} is not waiting in this campaign")  # the validator ran

    @skip_host.validator
    def _validate_skip(self, request: SkipRequest) -> None:
        self._validate_running("skip_host")
        if request.host_id in self._in_flight:
            raise ValueError(
                f"host {request.host_id} is in flight ({self._in_flight[request.host_id].workflow_id}); "
                "abort that operation instead"
            )
        waiting = {h.host_id for h in self._pending} | {d.host.host_id for d in self._deferred}
        waiting |= {f.host.host_id for f in self._failed}
        if request.host_id not in waiting:
            raise ValueError(
                f"host {request.host_id} is not waiting in this campaign (done, skipped or unknown)"
            )

    @workflow.update(name=SET_LIMITS_UPDATE)
    def set_limits(self, request: LimitsRequest) -> OperatorAnswer:
        """New limits; the next start obeys them (a new batch size applies from the next batch)."""
        old, self._limits = self._limits, request.limits
        self._poked = True
        return OperatorAnswer(
            accepted=True, message=f"limits {_limits_text(old)} -> {_limits_text(request.limits)}"
        )

    @set_limits.validator
    def _validate_limits(self, request: LimitsRequest) -> None:
        self._validate_running("set_limits")

    def _validate_running(self, kind: str) -> None:
        if self._phase in FINISHED:
            raise ValueError(f"`{kind}`: the campaign has already {self._phase}")


def _limits_text(limits: Limits) -> str:
    return (
        f"(batch {limits.batch_size}, in flight {limits.max_in_flight}, per group "
        f"{limits.max_per_group or '-'}, per BMC {limits.max_per_bmc or '-'})"
    )
