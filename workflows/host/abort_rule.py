"""What `metalflow host abort` reaches for a host's one operation: the entity's rule, read by
the CLI (metalflow/cli/host_decide.py) and the entity's state (workflows/host/state.py, which
re-exports `AWAITING_APPROVAL`). Pure: no Temporal, no I/O. Split out of state.py (the 550-line
house rule).
"""

from __future__ import annotations

from typing import Final

from contracts.models.host import OperationRecord

AWAITING_APPROVAL: Final = "awaiting-approval"

ABORT_OPERATION: Final = "abort"  # `host abort`: the operation in flight's own `abort` update
WITHDRAW_REQUEST: Final = "withdraw"  # `host abort`: the entity's `withdraw` of a request not started


def what_abort_reaches(current: OperationRecord | None) -> str | None:
    """What `metalflow host abort` sends for the host's one operation (`HostStatus.current`):
    `abort` to an operation in flight (it stops at its next safe point), `withdraw` to the entity
    for a request awaiting approval (nothing started: the entity drops it and records who withdrew
    it), None when there is neither (idle, or an approved request whose child is being started)."""
    if current is None:
        return None
    if current.outcome == AWAITING_APPROVAL:
        return WITHDRAW_REQUEST
    if current.outcome == "running":
        return ABORT_OPERATION
    return None
