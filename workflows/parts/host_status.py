"""The `status` query of a host operation: per-DPU phase and time in phase, built from the
workflow's own observations (the watcher's signals), so a query never does I/O."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from contracts.models.host import DPUProgress, HostOperationInput, HostOperationStatus
    from workflows.parts.dpf_watch import DPUClock


def build_status(
    *,
    request: HostOperationInput,
    dpu_ids: Iterable[str],
    phase: str,
    waiting_for: str,
    clock: DPUClock,
    error_reprovisions: Mapping[str, int],
    reboots_requested: int,
    power_cycles: int,
    generation: int,
    reboot_attempts: int = 0,
    rebooting_to: int | None = None,
    intervention: str | None,
    started_at: datetime,
) -> HostOperationStatus:
    """The query's answer."""
    dpus = []
    for dpu_id in dpu_ids:
        dpu_phase, since = clock.phases.get(dpu_id, ("", started_at))
        dpus.append(
            DPUProgress(
                dpu_id=dpu_id,
                phase=dpu_phase,
                since=since,
                error_reprovisions=error_reprovisions.get(dpu_id, 0),
            )
        )
    return HostOperationStatus(
        host_id=request.host_id,
        operation=request.kind.value,
        phase=phase,
        waiting_for=waiting_for,
        dpus=tuple(dpus),
        reboots_requested=reboots_requested,
        power_cycles_issued=power_cycles,
        reboot_attempts=reboot_attempts,
        rebooting_to=rebooting_to,
        boot_generation=generation,
        manual_intervention_reason=intervention,
        started_at=started_at,
    )
