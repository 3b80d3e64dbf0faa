"""A firmware run's progress as its `firmware_status` query shows it (`FirmwareWorkflow`,
workflows/firmware/workflow.py; `metalflow host status` of a firmware run). Split out of
contracts/models/host.py (the 550-line house rule), which re-exports both names.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Frozen(BaseModel):
    # Unknown fields are ignored, never refused: older workers read what newer ones wrote (versioning.py).
    model_config = ConfigDict(frozen=True)


class DPUFirmwareProgress(_Frozen):
    dpu_id: str
    running: str | None = None  # as last read from the DPU's BMC
    staged: str | None = None
    outcome: str = "pending"  # pending, staged, already_staged, already_running, failed: ..., verified


class FirmwareStatus(_Frozen):
    """The `firmware_status` query of a `FirmwareWorkflow` (its `status` is a `HostOperationStatus`)."""

    host_id: str
    target_version: str
    phase: str
    dpus: tuple[DPUFirmwareProgress, ...] = ()
    power_cycle_started: bool = False
