"""The input of a host operation's child, from the entity's request and what the entity knows
(`HostEntityState.child_input`, state.py; split from it by role: one builder per child kind).

Pure: no Temporal, no clock, no I/O.
"""

from __future__ import annotations

from pydantic import BaseModel

from contracts import names
from contracts.models.host import (
    FirmwareInput,
    FirmwareRequest,
    HostOperationInput,
    HostOperationKind,
    HostRebootInput,
    HostResetInput,
    PendingOperation,
    ResetRequest,
)
from contracts.models.operation_policy import OperationPolicy
from contracts.models.power_watch import PowerAtRest
from contracts.models.removal import HostRemovalInput


def child_input(
    current: PendingOperation,
    host: str,
    generation: int,
    power_before: PowerAtRest | None,
    default_policy: OperationPolicy,
) -> BaseModel:
    """The input of the operation's child, from its request and what the entity knows."""
    request, operation, requested_by = current.request, current.record.operation, current.request.requested_by
    if isinstance(request, ResetRequest):
        return HostResetInput(
            host_id=host,
            target=request.target,
            dpu_ids=request.dpu_ids or (),
            full=request.full,
            requested_by=requested_by,
            reason=request.reason,
            boot_generation=generation,
            policy=request.policy or default_policy,
            power_before=power_before,
            site_check=request.site_check,
        )
    if isinstance(request, FirmwareRequest):
        return FirmwareInput(
            host_id=host,
            target_version=request.target_version,
            image_uri=request.image_uri,
            dpu_ids=request.dpu_ids,
            requested_by=requested_by,
            boot_generation=generation,
            policy=default_policy,
            power_before=power_before,
            site_check=request.site_check,
        )
    policy = request.policy or default_policy
    if operation == names.REBOOT:  # `power_before`: its first read compared (power_rest.py)
        return HostRebootInput(
            host_id=host,
            boot_generation=generation + 1,
            requested_by=requested_by,
            reason=request.reason,
            policy=policy,
            power_before=power_before,
            site_check=request.site_check,
        )
    if operation == names.REMOVE:
        return HostRemovalInput(
            host_id=host,
            dpu_ids=request.dpu_ids,
            force=request.force,
            requested_by=requested_by,
            reason=request.reason,
            policy=policy,
        )
    return HostOperationInput(
        host_id=host,
        kind=HostOperationKind(operation),
        dpu_ids=request.dpu_ids,
        requested_by=requested_by,
        reason=request.reason,
        boot_generation=generation,
        policy=policy,
        power_before=power_before,
        site_check=request.site_check,
    )
