"""Whether an approval re-reads DPF before it starts a request, and what DPF says when the
request's reason no longer holds: the part of the host entity's state (`HostEntityState`
inherits `ApprovalReason`) that keeps an approval from running the monitor's reprovision of a
healthy host. Split from state.py by meaning. Pure: no Temporal, no clock, no I/O."""

from __future__ import annotations

from typing import TYPE_CHECKING

from contracts import names
from contracts.errors import ReasonNoLongerHolds
from contracts.models.dpf import PAST_NODE_EFFECT, PHASE_READY, HostDPFState
from contracts.models.host import PendingOperation


class ApprovalReason:
    """The approval's check of the monitor's reason (see the module docstring)."""

    if TYPE_CHECKING:

        @property
        def host_id(self) -> str: ...

    def reason_to_check(self, current: PendingOperation) -> bool:
        """Whether an approval re-reads DPF before it starts `current`: the monitor's own
        (automatic) reprovision, whose reason is a DPU's state (its critical services down). The
        request's origin is who is told how it ends (`campaign_workflow_id`): the monitor names
        itself there (`activities/pool.py`), a person's request (CLI, script) names nobody and a
        campaign names itself. A person's reason is theirs: it is not checked against DPF."""
        return current.record.operation == names.REPROVISION and (
            current.request.campaign_workflow_id == names.monitor_workflow_id(self.host_id)
        )

    def reason_gone(self, current: PendingOperation, dpf: HostDPFState) -> str | None:
        """What DPF says now (read at the approval) of the DPUs the monitor's request named, when
        its reason no longer holds: none of them is degraded any more (each `Ready`, past Node
        Effect on its way there, or gone from DPF). None: a DPU it named is still down (Node
        Effect, Error, being installed): the reason holds."""
        named = current.request.dpu_ids or tuple(d.dpu_id for d in dpf.dpus if d.dpu_id)
        now: list[str] = []
        for dpu_id in named:
            dpu = dpf.dpu(dpu_id)
            if dpu is None:
                now.append(f"{dpu_id} is gone")
            elif dpu.phase in PAST_NODE_EFFECT:
                now.append(f"{dpu_id} is in {dpu.phase} (past Node Effect, on its way to Ready)")
            elif dpu.phase == PHASE_READY:
                now.append(f"{dpu_id} is Ready")
            else:
                return None
        reason = current.record.reason or "its DPUs degraded"
        return (
            f"its reason ({reason}) no longer holds: DPF says {', '.join(now) or 'the host has no DPU'} now"
        )

    @staticmethod
    def withdrawn_at_approval(by: str, why: str) -> str:
        """The outcome of a request an approval found stale (`reason_gone`): withdrawn, unstarted,
        the approval refused (`refuse_stale_approval`). It reads `withdrawn at its approval by
        WHO: ...`: not an operator's no (the monitor does not hold back), and a later `approve`
        names it (`nothing_awaits`)."""
        return f"withdrawn at its approval by {by}: {why}"

    def refuse_stale_approval(self, current: PendingOperation, why: str) -> ReasonNoLongerHolds:
        """The refusal `approve` answers once it withdrew `current` (`withdrawn_at_approval`)."""
        record = current.record
        return ReasonNoLongerHolds(
            f"{record.operation} of {self.host_id} ({record.workflow_id}, requested by "
            f"{record.requested_by}) not approved: {why}; the request is withdrawn, nothing started"
        )
