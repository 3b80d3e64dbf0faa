"""Support for the host monitor's end-to-end tests (test_monitor, test_monitor_unplanned,
test_site_watch): a monitor started as `metalflow host monitor` starts one, its status query, and
the operator's abort request that ends it."""

from __future__ import annotations

from typing import Any

from temporalio.client import Client, WorkflowHandle

from contracts import names
from contracts.models.control import OperatorRequest
from contracts.models.host import HostMonitorInput, HostMonitorResult, HostMonitorStatus, MonitorPolicy

STOP = OperatorRequest(requested_by="test", reason="test over")


async def start_monitor(
    client: Client,
    task_queue: str,
    host: str,
    policy: MonitorPolicy,
    *,
    site: str | None = None,
    workflow_id: str | None = None,
) -> WorkflowHandle[Any, HostMonitorResult]:
    """The host's HostMonitorWorkflow, under the monitor's id unless `workflow_id` says otherwise.

    `site` (its `Site` search attribute): by default the name `sim_support.prefixed_sim` gives the
    site of a host `<prefix>-001` (`<prefix>-site`)."""
    return await client.start_workflow(
        "HostMonitorWorkflow",
        HostMonitorInput(
            host_id=host, site=site or f"{host.rsplit('-', 1)[0]}-site", requested_by="test", policy=policy
        ),
        id=workflow_id or names.monitor_workflow_id(host),
        task_queue=task_queue,
        result_type=HostMonitorResult,
    )


async def status_of(handle: WorkflowHandle[Any, Any]) -> HostMonitorStatus:
    """The monitor's `status` query."""
    status: HostMonitorStatus = await handle.query("status", result_type=HostMonitorStatus)
    return status
