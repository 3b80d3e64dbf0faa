"""Operator control of a rollout: the `pause`, `resume`, `abort`, `rollback`, `supersede` and
`scale` updates, each with a validator that refuses what does not apply now (with the reason)
and an answer saying what it did. The handlers only record the request; the runbook
(`workflows.rollout`) acts on it at its next safe point, so a handler never races a step.

No cost of its own: state in the workflow, no activities.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from workflows import common

with workflow.unsafe.imports_passed_through():
    from contracts.models.control import (
        ABORT_UPDATE,
        PAUSE_UPDATE,
        RESUME_UPDATE,
        OperatorAnswer,
        OperatorRequest,
    )
    from contracts.models.grove import (
        ROLLBACK_UPDATE,
        SCALE_UPDATE,
        SUPERSEDE_UPDATE,
        PCSRef,
        ScaleRequest,
        StepRecord,
        SupersedeRequest,
    )
    from contracts.wording import plural

PREPARING = "preparing"
ROLLING = "rolling"
ROLLING_BACK = "rolling-back"
PAUSED = "paused"
COMPLETED = "completed"
ROLLED_BACK = "rolled-back"
ABORTED = "aborted"
FINISHED = (COMPLETED, ROLLED_BACK, ABORTED)


class RolloutControl:
    """The operator's updates, mixed into `RolloutWorkflow`."""

    _pcs: PCSRef
    _steps: list[StepRecord]

    def __init__(self) -> None:
        self._phase = PREPARING
        self._previous_hash = ""
        self._rolling_back = False
        self._paused_reason: str | None = None
        self._pause_request: OperatorRequest | None = None
        self._decision: tuple[str, OperatorRequest] | None = None
        self._abort: OperatorRequest | None = None
        self._supersede: SupersedeRequest | None = None
        self._scale: ScaleRequest | None = None

    def _enter(self, phase: str, details: str) -> None:
        """Enter `phase`: the status query, the `Phase` search attribute and the UI's details."""
        self._phase = phase
        common.enter_phase(phase, details)

    @workflow.update(name=PAUSE_UPDATE)
    def pause(self, request: OperatorRequest) -> OperatorAnswer:
        """Stop after the current step and wait for `resume`, `rollback` or `abort`."""
        self._pause_request = request
        return OperatorAnswer(accepted=True, message=f"pausing after the current step ({self._phase})")

    @pause.validator
    def _validate_pause(self, request: OperatorRequest) -> None:
        self._validate_running("pause")
        if self._phase == PAUSED or self._pause_request is not None:
            raise ValueError("the rollout is already paused or pausing")

    @workflow.update(name=RESUME_UPDATE)
    def resume(self, request: OperatorRequest) -> OperatorAnswer:
        """Go on: recreate the PodGangs that are not Available, then the next steps."""
        if self._phase != PAUSED:
            self._pause_request = None
            return OperatorAnswer(accepted=True, message="pause request withdrawn; the rollout goes on")
        self._decision = ("resume", request)
        return OperatorAnswer(accepted=True, message=f"resuming ({self._paused_reason})")

    @resume.validator
    def _validate_resume(self, request: OperatorRequest) -> None:
        self._validate_running("resume")
        if self._phase != PAUSED and self._pause_request is None:
            raise ValueError(f"the rollout is not paused (now: {self._phase})")

    @workflow.update(name=ABORT_UPDATE)
    def abort(self, request: OperatorRequest) -> OperatorAnswer:
        """Stop now: nothing more is deleted; PodGangs stay as they are (each of one hash)."""
        self._abort = request
        return OperatorAnswer(accepted=True, message=f"aborting ({self._phase}); nothing more will be rolled")

    @abort.validator
    def _validate_abort(self, request: OperatorRequest) -> None:
        self._validate_running("abort")
        if self._abort is not None:
            raise ValueError(f"already aborting (asked by {self._abort.requested_by})")

    @workflow.update(name=ROLLBACK_UPDATE)
    def rollback(self, request: OperatorRequest) -> OperatorAnswer:
        """Restore the previous template and roll back under the same rules."""
        self._decision = ("rollback", request)
        where = "now" if self._phase == PAUSED else "after the current step"
        return OperatorAnswer(accepted=True, message=f"rolling back to {self._previous_hash} {where}")

    @rollback.validator
    def _validate_rollback(self, request: OperatorRequest) -> None:
        self._validate_running("rollback")
        if self._rolling_back or (self._decision is not None and self._decision[0] == "rollback"):
            raise ValueError("the rollout is already rolling back")

    @workflow.update(name=SUPERSEDE_UPDATE)
    def supersede(self, request: SupersedeRequest) -> OperatorAnswer:
        """A newer rollout of this PodCliqueSet takes over after the current step."""
        self._supersede = request
        return OperatorAnswer(accepted=True, message="the new images take over after the current step")

    @supersede.validator
    def _validate_supersede(self, request: SupersedeRequest) -> None:
        self._validate_running("supersede")
        if self._rolling_back:
            raise ValueError("the rollout is rolling back; start the new rollout once it finished")

    @workflow.update(name=SCALE_UPDATE)
    def scale(self, request: ScaleRequest) -> OperatorAnswer:
        """Queue a new replica count; applied between steps (see the module docstring)."""
        self._scale = request
        return OperatorAnswer(
            accepted=True, message=f"scaling to {request.replicas} replicas after the current step"
        )

    @scale.validator
    def _validate_scale(self, request: ScaleRequest) -> None:
        self._validate_running("scale")

    def _validate_running(self, kind: str) -> None:
        if self._phase in FINISHED:
            raise ValueError(f"`{kind}`: the rollout has already {self._phase}")

    def _check_abort(self) -> None:
        if self._abort is not None:
            self._enter(ABORTED, f"aborted by {self._abort.requested_by}")
            raise ApplicationError(
                f"rollout of {self._pcs} aborted by {self._abort.requested_by}"
                + (f": {self._abort.reason}" if self._abort.reason else "")
                + f"; {plural(len(self._steps), 'step')} done, PodGangs left as they are",
                type="RolloutAborted",
                non_retryable=True,
            )
