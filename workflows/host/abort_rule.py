"""What `metalflow host abort` reaches for a host's one operation: the entity's rule, read by
the CLI (metalflow/cli/host_decide.py) and the entity's state (workflows/host/state.py, which
re-exports `AWAITING_APPROVAL`). Pure: no Temporal, no I/O. Split out of state.py (the 550-line
house rule).
"""

from __future__ import annotations

from typing import Final

from contracts.models.host import OperationRecord

AWAITING_APPROVAL: Final = "awaiting-approval"
STARTING: Final = "starting"  # approved; the entity is starting its child (one workflow task)

ABORT_OPERATION: Final = "abort"  # `host abort`: the operation in flight's own `abort` update
WITHDRAW_REQUEST: Final = "withdraw"  # `host abort`: the entity's `withdraw` of a request not started
WAIT_FOR_START: Final = "wait-for-start"  # any answer: the approved operation's child is being started


def what_abort_reaches(current: OperationRecord | None) -> str | None:
    """What `metalflow host abort` sends for the host's one operation (`HostStatus.current`):
    `abort` to an operation in flight (it stops at its next safe point), `withdraw` to the entity
    for a request awaiting approval (nothing started: the entity drops it and records who withdrew
    it), `WAIT_FOR_START` for an approved request whose child the entity is starting (one
    workflow task: the CLI waits it out, then asks again, `host_decide.started`; before, the
    abort was refused as "nothing to abort" and the operation ran on), None when idle."""
    if current is None:
        return None
    if current.outcome == AWAITING_APPROVAL:
        return WITHDRAW_REQUEST
    if current.outcome == "running":
        return ABORT_OPERATION
    if current.outcome == STARTING:
        return WAIT_FOR_START
    return None
