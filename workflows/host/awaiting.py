"""What the request awaiting approval acts on, as the entity's status shows it (pure)."""

from __future__ import annotations

from contracts.models.host import AwaitingRequest, PendingOperation, ResetRequest, ResetTarget
from contracts.models.operation_policy import RebootMethod


def awaiting_request(current: PendingOperation | None) -> AwaitingRequest | None:
    """The operation awaiting approval and the components it touches (None: nothing awaits):
    `metalflow approve` judges it by the kept site check as the request's own command did."""
    if current is None or current.approved:
        return None
    request = current.request
    policy = getattr(request, "policy", None)
    reset = request if isinstance(request, ResetRequest) else None
    named = request.dpu_ids is not None and (reset is None or reset.target == ResetTarget.DPU)
    return AwaitingRequest(
        operation=current.record.operation,
        dpu_ids=tuple(request.dpu_ids or ()) if named else None,
        target=str(reset.target) if reset else "",
        full=reset.full if reset else False,
        manual_reboot=policy is not None and policy.reboot_method == RebootMethod.MANUAL,
    )
