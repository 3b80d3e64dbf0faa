"""Orchestration only: deterministic workflow definitions, no I/O, no clocks, no randomness.

`ALL` is the one list the worker registers; a new workflow is added there.
"""

from __future__ import annotations

from workflows.bmc_lease import BMCLeaseWorkflow
from workflows.campaign import CampaignWorkflow
from workflows.firmware import FirmwareWorkflow
from workflows.host import HostWorkflow
from workflows.host_operation import HostOperationWorkflow
from workflows.host_reboot import HostRebootWorkflow
from workflows.monitor import HostMonitorWorkflow
from workflows.removal import HostRemovalWorkflow
from workflows.rollout import RolloutWorkflow
from workflows.site_watch import SiteDPFWatchWorkflow

ALL: list[type] = [
    HostWorkflow,
    HostOperationWorkflow,
    HostRebootWorkflow,
    FirmwareWorkflow,
    HostMonitorWorkflow,
    HostRemovalWorkflow,
    RolloutWorkflow,
    SiteDPFWatchWorkflow,
    BMCLeaseWorkflow,
    CampaignWorkflow,
]
