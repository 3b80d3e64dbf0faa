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
    from workflows.parts.host_power import HOST_IS_OFF

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


def off_when_cut(outcome: str, operation: str, last_phase: str, host_id: str) -> str:
    """The outcome of an operation terminated by hand (`terminated`, which says nothing of the
    host's power: no code of the run ran after it), with what its last status said: a
    reboot or reset whose last Phase was `manual-intervention-required` had the host OFF by its
    hand (they enter it only then: `PowerCustody.hand_over_words`), so the outcome says the host
    is OFF, exactly as a run that ended saying so (the entity marks `left_off_by`). Anything else
    is returned as it was."""
    if outcome != "terminated" or operation not in POWER_HOLDERS:
        return outcome  # a cancelled run powers the host on itself first (`PowerCustody.cancelled`)
    if last_phase != MANUAL_INTERVENTION_REQUIRED:
        return outcome
    return (
        f"terminated while the host was OFF ({last_phase}); the host {host_id} {HOST_IS_OFF}: "
        f"power it on (`metalflow bmc power {host_id} on`)"
    )
