"""The input of a host operation's child, from the entity's request and what the entity knows
(`HostEntityState.child_input`, state.py; split from it by role: one builder per child kind).

`reboot_held_first`: the first boot generation an operation's own reboot would take, for every
child that will reboot the host (a reprovision, provision, firmware run, a reset of the host),
read by the entity before it starts it: a reboot of that generation still waiting for a person
(`boot_generation.waits_for_a_person`: a firmware run terminated by hand abandoned it, the host
OFF) refuses the start with the words `host reboot` gets, before the operation changed anything.

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
    ResetTarget,
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
    *,
    left_out: dict[str, str] | None = None,
) -> BaseModel:
    """The input of the operation's child, from its request and what the entity knows
    (`left_out`: the DPUs a reset of every DPU leaves out, DPF no longer having them)."""
    request, operation, requested_by = current.request, current.record.operation, current.request.requested_by
    if isinstance(request, ResetRequest):
        return HostResetInput(
            host_id=host,
            target=request.target,
            dpu_ids=request.dpu_ids or (),
            full=request.full,
            left_out=left_out or {},
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
            reason=request.reason,
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


def reboot_held_first(child: BaseModel) -> int | None:
    """The first boot generation the reboot of `child` (an operation's input) would take, None
    for a child that never reboots the host through a reboot run of its own generation (a
    removal, a reset of DPUs only) or that checks itself (a `host reboot`: `start_next_reboot`).
    A reset of the host and its DPUs (`both`, `--full`) cycles the host under its own id, but a
    reboot waiting for a person holds the host as well: it is checked too."""
    if isinstance(child, HostRebootInput | HostRemovalInput):
        return None
    if isinstance(child, HostResetInput):
        if child.target not in (ResetTarget.HOST, ResetTarget.BOTH):
            return None
        return child.boot_generation + 1
    if isinstance(child, FirmwareInput | HostOperationInput):
        return child.boot_generation + 1
    return None
