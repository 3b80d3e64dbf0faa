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
    from contracts.models.host import OperationEnd
    from contracts.wording import CANCELLED_OUTCOME, aborted_outcome, completed_outcome
    from workflows.host.takeover_rules import POWER_HOLDERS, off_when_cut  # pure: a successor's read too

__all__ = ["POWER_HOLDERS", "ended_as", "generation_reported", "off_when_cut", "outcome_of"]


def ended_as(result: OperationEnd) -> str:
    """How a child that completed ended, in the entity's words: `completed` (with the cancel it
    completed anyway, `completed_outcome`), or, aborted by an operator, `aborted by <who>: <why>...`."""
    if result.aborted:
        return aborted_outcome(result.aborted)
    return completed_outcome(result.cancelled, result.boot_generation)


def outcome_of(err: ChildWorkflowError) -> str:
    """How a child that did not complete ended, in the entity's words."""
    cause = err.cause
    if isinstance(cause, CancelledError):
        return CANCELLED_OUTCOME  # not "aborted": nobody's `host abort` (task B3)
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
