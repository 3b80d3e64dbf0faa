"""The approval's check of the monitor's reason against DPF (the base of `HostWorkflow`,
workflow.py, split from its runbook by role; the decision is `approval_reason.py`'s): an approval
never runs the monitor's reprovision of a host whose DPUs are Ready again."""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api
    from contracts.errors import KubernetesUnavailable
    from contracts.models.dpf import HostRef
    from contracts.models.host import PendingOperation
    from contracts.models.inventory import HostLookup
    from workflows import kernel
    from workflows.host.state import HostEntityState

REASON_CHECK_SECONDS = 30.0
"""An approval's check of the monitor's reason against DPF gives up after this (and refuses)."""


class ApprovalCheck(kernel.Runbook):
    """`_reason_gone`, for `approve`. The workflow sets `state` in its `__init__`."""

    state: HostEntityState

    async def _reason_gone(self, current: PendingOperation) -> str | None:
        """The monitor's reprovision awaiting approval: DPF read now (the host's namespace from its
        inventory, as the reprovision would read it), and what DPF says when its reason no longer
        holds (`HostEntityState.reason_gone`). A read that fails refuses the approval (the request
        stays pending: approve again), so none starts unchecked. Cost: two activities (about 6
        history events) per approval of a monitor's request; none for a person's."""
        host = self.state.host_id
        try:
            inventory = await self.call(
                activity_api.resolve_host_inventory,
                HostLookup(host_id=host),
                kernel.options(kernel.bounded(kernel.INVENTORY, REASON_CHECK_SECONDS), f"resolve {host}"),
                abortable=False,
            )
            dpf = await self.call(
                activity_api.read_host_dpf_state,
                HostRef.of(inventory),
                kernel.options(
                    kernel.bounded(kernel.KUBE_READ, REASON_CHECK_SECONDS),
                    f"does the reason of {current.record.workflow_id} still hold?",
                ),
                abortable=False,
            )
        except ActivityError as err:
            raise KubernetesUnavailable(
                f"{current.record.operation} of {host} ({current.record.workflow_id}) not approved: "
                f"its reason ({current.record.reason}) could not be checked against DPF "
                f"({kernel.describe_failure(err)}); it still awaits approval: approve again"
            ) from None
        return self.state.reason_gone(current, dpf)
