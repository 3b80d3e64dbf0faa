"""How an operation's child ended, in the host entity's words (`workflows/host/workflow.py`).

Temporal's errors are read here, so that the entity's state (`state.py`) stays free of Temporal:
an operator's abort is not a failure (the child completes, its result's `aborted` saying who and
why; a run of older code failed with `OperationAborted`), a terminated or cancelled child says
so, and a failed operation's reboots still count (its failure's details carry the boot
generation it reached).
Pure functions; no Temporal commands.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError, CancelledError, ChildWorkflowError, TerminatedError

with workflow.unsafe.imports_passed_through():
    from contracts.errors import OperationAborted, cause_in_words
    from contracts.models.host import MANUAL_INTERVENTION_REQUIRED, OperationEnd
    from contracts.wording import aborted_outcome
    from workflows.parts.boot_generation import UNKNOWN_ENDS
    from workflows.parts.host_power import HOST_IS_OFF
    from workflows.parts.reboot_rounds import RebootLeft

POWER_HOLDERS = (
    "reboot",
    "reset",
)  # operations that enter manual-intervention-required only with the host OFF


def ended_as(result: OperationEnd) -> str:
    """How a child that completed ended, in the entity's words: `completed`, or, aborted by an
    operator, `aborted by <who>: <why>...`."""
    return aborted_outcome(result.aborted) if result.aborted else "completed"


def outcome_of(err: ChildWorkflowError) -> str:
    """How a child that did not complete ended, in the entity's words."""
    cause = err.cause
    if isinstance(cause, CancelledError):
        return "aborted"
    if isinstance(cause, TerminatedError):
        return "terminated"
    if isinstance(cause, ApplicationError) and cause.type == OperationAborted.__name__:
        return aborted_outcome(cause.message)  # an operator's abort is not a failure
    return f"failed: {cause_in_words(err)}"  # the cause in words, not "Activity task failed"


def generation_reported(err: ChildWorkflowError) -> int | None:
    """The boot generation a failed operation reached, from its failure's details."""
    cause = err.cause
    if not isinstance(cause, ApplicationError):
        return None
    for detail in cause.details:
        if isinstance(detail, dict) and isinstance(detail.get("boot_generation"), int):
            return int(detail["boot_generation"])
    return None


def off_when_cut(
    outcome: str, operation: str, last_phase: str, host_id: str, reboot: RebootLeft | None = None
) -> str:
    """The outcome of an operation terminated by hand (`terminated`, which says nothing of the
    host's power: no code of the run ran after it), with what its last status and its last reboot
    said. The host was OFF by its hand when:

    - a reboot or reset's own last Phase was `manual-intervention-required` (they enter it only
      then: `PowerCustody.hand_over_words`);
    - its last reboot run (`reboot`: the first of the host's reboot runs after the known
      generation that did not complete, `reached_when_ended`) waits, or was cut, in
      `manual-intervention-required` (a reboot enters it only with the host OFF by its hand; a
      firmware run's reboot is abandoned with it and still waits), or failed saying the host is OFF
      (`BMCRebootFailed`: a reprovision's, provision's or reset's reboot that escalated; its
      operation then waited for a person with the host OFF).

    Then the outcome says the host is OFF, exactly as a run that ended saying so (the entity
    marks `left_off_by`). Anything else (a reboot still running that its parent's close cancels
    powers the host on itself or ends saying OFF; one that completed left it On) is returned as
    it was."""
    if outcome != "terminated":
        return outcome  # a cancelled run powers the host on itself first (`PowerCustody.cancelled`)
    power_on = f"power it on (`metalflow bmc power {host_id} on`)"
    if operation in POWER_HOLDERS and last_phase == MANUAL_INTERVENTION_REQUIRED:
        off = f"the host {host_id} {HOST_IS_OFF}: {power_on}"
        return f"terminated while the host was OFF ({last_phase}); {off}"
    if reboot is None:
        return outcome
    rid, seen = reboot
    if seen.phase == MANUAL_INTERVENTION_REQUIRED and seen.end in ("running", *UNKNOWN_ENDS):
        still = (
            f"; {rid} still waits for a person: `temporal workflow cancel --workflow-id {rid}` ends it "
            "(a cancel tries On afresh)"
            if seen.end == "running"
            else ""
        )
        return (
            f"terminated while its reboot {rid} waited for a person with the host OFF ({seen.phase}); "
            f"the host {host_id} {HOST_IS_OFF}: {power_on}{still}"
        )
    if seen.end == "failed" and HOST_IS_OFF in seen.said:
        return (
            f"terminated after its reboot {rid} failed leaving the host OFF; "
            f"the host {host_id} {HOST_IS_OFF}: {power_on}"
        )
    return outcome
