"""Shared pieces of the campaign tests: a site file of N hosts, a worker with the real campaign,
the real host entity and the real campaign activities (inventory from that file, requests through
the worker's client), and a stand-in operation under the real type name whose duration and fate
the host's id decides (a `fail` in the id fails it), so the tests decide how the fleet behaves.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import workflow
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from activities.campaign import CampaignActivities
    from contracts.models.control import STATUS_QUERY as HOST_STATUS_QUERY
    from contracts.models.host import MANUAL_INTERVENTION_REQUIRED, HostOperationInput, HostOperationStatus
    from drivers.inventory import Inventory
    from drivers.kube import Kube
    from drivers.settings import Settings
    from workflows.campaign import CampaignWorkflow
    from workflows.host import HostWorkflow

OPERATION_MINUTES = 10


@workflow.defn(name="HostOperationWorkflow")
class TimedOperation:
    """Takes OPERATION_MINUTES of workflow time; fails when the host id contains `fail`."""

    @workflow.run
    async def run(self, request: HostOperationInput) -> dict[str, object]:
        await workflow.sleep(timedelta(minutes=OPERATION_MINUTES))
        if "fail" in request.host_id:
            raise ApplicationError(f"DPU {request.host_id}-dpu-0 in Error (injected)", non_retryable=True)
        now = workflow.now().isoformat()
        return {  # a whole HostOperationResult: the entity decodes its child's result as one
            "host_id": request.host_id, "operation": request.kind.value, "dpu_ids": [], "reboots": 1,
            "boot_generation": request.boot_generation + 1, "started_at": now, "finished_at": now,
        }  # fmt: skip


@workflow.defn(name="HostOperationWorkflow")
class InstantOperation:
    """Ends at once (for the dev server, whose clock is real); fails when the id contains `fail`."""

    @workflow.run
    async def run(self, request: HostOperationInput) -> dict[str, object]:
        if "fail" in request.host_id:
            raise ApplicationError(f"DPU {request.host_id}-dpu-0 in Error (injected)", non_retryable=True)
        now = workflow.now().isoformat()
        return {  # a whole HostOperationResult: the entity decodes its child's result as one
            "host_id": request.host_id, "operation": request.kind.value, "dpu_ids": [], "reboots": 1,
            "boot_generation": request.boot_generation + 1, "started_at": now, "finished_at": now,
        }  # fmt: skip


OPERATOR_ANSWERED = "operator_answered"


@workflow.defn(name="HostOperationWorkflow")
class OperatorWaitOperation:
    """A stand-in that ends after OPERATION_MINUTES, except on a host whose id carries `operator`:
    there it waits in `manual-intervention-required` (as the real operation does when a BMC cannot
    reboot the host) until the signal `operator_answered`."""

    @workflow.init
    def __init__(self, request: HostOperationInput) -> None:
        self._started = workflow.now()
        waits = "operator" in request.host_id
        self._phase = MANUAL_INTERVENTION_REQUIRED if waits else "waiting-for-dpf-after-reboot"
        self._reason = "the BMC refused the reset (stand-in)" if waits else None

    @workflow.run
    async def run(self, request: HostOperationInput) -> dict[str, object]:
        if self._reason is None:
            await workflow.sleep(timedelta(minutes=OPERATION_MINUTES))
        await workflow.wait_condition(lambda: self._phase != MANUAL_INTERVENTION_REQUIRED)
        return {"host_id": request.host_id, "reboots": 1, "boot_generation": request.boot_generation + 1}

    @workflow.signal(name=OPERATOR_ANSWERED)
    def operator_answered(self) -> None:
        self._phase = "waiting-for-dpf-after-reboot"

    @workflow.query(name=HOST_STATUS_QUERY)
    def status(self) -> HostOperationStatus:
        return HostOperationStatus(
            host_id=workflow.info().workflow_id.split("/")[-1],
            operation="reprovision",
            phase=self._phase,
            waiting_for="an operator" if self._reason else "DPF",
            manual_intervention_reason=self._reason if self._phase == MANUAL_INTERVENTION_REQUIRED else None,
            started_at=self._started,
        )


def write_site(directory: Path, hosts: list[str], groups: dict[str, str] | None = None) -> Path:
    """A site file with these hosts, each on its own BMC endpoint (in `groups[host]` or rack-a)."""
    credentials = directory / "bmc.json"
    credentials.write_text('{"username": "u", "password": "p"}')
    lines = ["name: campaign-test", "hosts:"]
    for host in hosts:
        group = (groups or {}).get(host, "rack-a")
        lines += [
            f"  - id: {host}",
            f"    groups: [{group}]",
            f"    labels: {{rack: {group}}}",
            f"    bmc: {{endpoint: 'http://127.0.0.1:9/{host}', credentials: {{file: '{credentials}'}}}}",
        ]
    path = directory / f"site-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


@asynccontextmanager
async def campaign_worker(
    client: Client, task_queue: str, site_file: Path, workflows: list[type] | None = None
) -> AsyncIterator[Worker]:
    settings = Settings(site_file=site_file, inventory="site")
    kube = Kube(settings)
    acts = CampaignActivities(Inventory(settings, kube), kube, client)
    activities: list[Any] = [
        acts.select_campaign_hosts,
        acts.check_campaign_hosts,
        acts.request_campaign_hosts,
        acts.sweep_campaign_hosts,
        acts.abort_campaign_hosts,
    ]
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[CampaignWorkflow, HostWorkflow, *(workflows or [TimedOperation])],
        activities=activities,
    ) as worker:
        yield worker


def host_ids(prefix: str, count: int, failing: tuple[int, ...] = ()) -> list[str]:
    """`count` host ids unique to one test; those at `failing` positions carry `fail`."""
    return [f"{prefix}-{'fail' if i in failing else 'ok'}-{i:03d}" for i in range(count)]
