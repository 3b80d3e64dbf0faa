"""Orchestration only: deterministic workflow definitions, no I/O, no clocks, no randomness.

`ALL` is the one list the worker registers; a new workflow is added there (in `_all`).

Why `ALL` is built on first use rather than at import: Temporal's sandbox executes a workflow's
module, and so this package's `__init__`, afresh for every workflow run it starts (and every
replay after the sticky cache evicts one). Importing every workflow module here made each run
of any workflow execute all of them, their `workflow.defn` decorators included: about half of
the worker's CPU on the 200-host fleet benchmark (py-spy, bench/README.md). Now a run executes
only its own module and what that imports.
"""

from __future__ import annotations

from typing import Any

ALL: list[type]  # every workflow class the worker registers (built by `_all` on first use)


def _all() -> list[type]:
    from workflows.bmc_lease.workflow import BMCLeaseWorkflow
    from workflows.campaign.workflow import CampaignWorkflow
    from workflows.campaign_claims.workflow import CampaignClaimsWorkflow
    from workflows.firmware.workflow import FirmwareWorkflow
    from workflows.host.workflow import HostWorkflow
    from workflows.host_operation.workflow import HostOperationWorkflow
    from workflows.host_reboot.workflow import HostRebootWorkflow
    from workflows.host_reset.workflow import HostResetWorkflow
    from workflows.monitor.workflow import HostMonitorWorkflow
    from workflows.removal.workflow import HostRemovalWorkflow
    from workflows.rollout.workflow import RolloutWorkflow
    from workflows.site_watch.workflow import SiteDPFWatchWorkflow

    return [
        HostWorkflow,
        HostOperationWorkflow,
        HostRebootWorkflow,
        HostResetWorkflow,
        FirmwareWorkflow,
        HostMonitorWorkflow,
        HostRemovalWorkflow,
        RolloutWorkflow,
        SiteDPFWatchWorkflow,
        BMCLeaseWorkflow,
        CampaignWorkflow,
        CampaignClaimsWorkflow,
    ]


def __getattr__(name: str) -> Any:
    if name == "ALL":
        return _all()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
