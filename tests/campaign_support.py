"""Shared pieces of the campaign tests: a site file of N hosts, a worker with the real campaign,
the real host entity and the real campaign activities (inventory from that file, requests through
the worker's client), and a stand-in operation under the real type name whose duration and fate
the host's id decides (a `fail` in the id fails it), so the tests decide how the fleet behaves;
and one that runs until it is signalled `finish` or aborted (`GatedOperation`, on the dev server).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from takeover_support import sticky_timeout
from temporalio import workflow
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from workflows.parts.host_power import POWER_NOT_TOUCHED

with workflow.unsafe.imports_passed_through():
    from activities.campaign import CampaignActivities
    from contracts.models.control import STATUS_QUERY as HOST_STATUS_QUERY
    from contracts.models.control import OperatorAnswer, OperatorRequest
    from contracts.models.host import (
        MANUAL_INTERVENTION_REQUIRED,
        HostOperationInput,
        HostOperationResult,
        HostOperationStatus,
    )
    from drivers.inventory import Inventory
    from drivers.kube import Kube
    from drivers.settings import Settings
    from workflows.campaign.workflow import CampaignWorkflow
    from workflows.campaign_claims.workflow import CampaignClaimsWorkflow
    from workflows.host.workflow import HostWorkflow

OPERATION_MINUTES = 10
# A stand-in's end says the host's power, as every real operation's finaliser does: an end that says
# none makes the entity read the host's power once (`takeover_rules.power_to_read`), from BMCs these
# sites do not serve.
UNTOUCHED = f"; {POWER_NOT_TOUCHED}"


def operation_result(request: HostOperationInput, boot_generation: int) -> HostOperationResult:
    """A stand-in operation's answer, in the real operation's result model (the entity reads it)."""
    return HostOperationResult(
        host_id=request.host_id,
        operation=request.kind.value,
        dpu_ids=request.dpu_ids or (),
        reboots=1,
        boot_generation=boot_generation,
        started_at=workflow.info().start_time,
        finished_at=workflow.now(),
    )


@workflow.defn(name="HostOperationWorkflow")
class TimedOperation:
    """Takes OPERATION_MINUTES of workflow time; fails when the host id contains `fail`."""

    @workflow.run
    async def run(self, request: HostOperationInput) -> HostOperationResult:
        await workflow.sleep(timedelta(minutes=OPERATION_MINUTES))
        if "fail" in request.host_id:
            error = f"DPU {request.host_id}-dpu-0 in Error (injected){UNTOUCHED}"
            raise ApplicationError(error, non_retryable=True)
        return operation_result(request, request.boot_generation + 1)


@workflow.defn(name="HostOperationWorkflow")
class InstantOperation:
    """Ends at once (for the dev server, whose clock is real); fails when the id contains `fail`."""

    @workflow.run
    async def run(self, request: HostOperationInput) -> HostOperationResult:
        if "fail" in request.host_id:
            error = f"DPU {request.host_id}-dpu-0 in Error (injected){UNTOUCHED}"
            raise ApplicationError(error, non_retryable=True)
        return operation_result(request, request.boot_generation + 1)


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
    async def run(self, request: HostOperationInput) -> HostOperationResult:
        if self._reason is None:
            await workflow.sleep(timedelta(minutes=OPERATION_MINUTES))
        await workflow.wait_condition(lambda: self._phase != MANUAL_INTERVENTION_REQUIRED)
        return operation_result(request, request.boot_generation + 1)

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


@workflow.defn(name="HostOperationWorkflow")
class GatedOperation:
    """Runs until signalled `finish` or aborted (for the dev server, whose clock is real)."""

    def __init__(self) -> None:
        self._finish = False
        self._aborted_by = ""

    @workflow.run
    async def run(self, request: HostOperationInput) -> HostOperationResult:
        await workflow.wait_condition(lambda: self._finish)
        if self._aborted_by:  # as the product's: an abort completes the run, its result says so
            aborted = operation_result(request, request.boot_generation)
            return aborted.model_copy(update={"aborted": f"aborted by {self._aborted_by}{UNTOUCHED}"})
        return operation_result(request, request.boot_generation + 1)

    @workflow.signal
    def finish(self) -> None:
        self._finish = True

    @workflow.update(name="abort")
    def abort(self, request: OperatorRequest) -> OperatorAnswer:
        self._aborted_by = request.requested_by
        self._finish = True
        return OperatorAnswer(accepted=True, message="aborting")


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


def campaign_activities(acts: CampaignActivities) -> list[Any]:
    """Every campaign activity of `acts` (the worker's list, activities/__init__.py)."""
    return [
        acts.select_campaign_hosts,
        acts.check_campaign_hosts,
        acts.request_campaign_hosts,
        acts.sweep_campaign_hosts,
        acts.abort_campaign_hosts,
        acts.read_campaign_deployments,
        acts.point_campaign_deployment,
        acts.claim_campaign_hosts,
        acts.record_campaign_changes,
        acts.release_campaign_hosts,
    ]


@asynccontextmanager
async def campaign_worker(
    client: Client,
    task_queue: str,
    site_file: Path,
    workflows: list[type] | None = None,
    unknown_to_dpf: frozenset[str] = frozenset(),
) -> AsyncIterator[Worker]:
    """A worker of the real campaign, entity and claims registry over a site file. There is no
    DPF here: every host of the site file has DPF objects but `unknown_to_dpf` (the real read,
    one list of the DPUNodes, is tested against the simulated site in test_campaign_targets.py)."""
    settings = Settings(site_file=site_file, inventory="site")
    kube = Kube(settings)
    acts = CampaignActivities(Inventory(settings, kube), kube, client)

    async def dpf_hosts() -> set[str]:
        return {h.id for h in acts.inventory.site_file.site().hosts} - unknown_to_dpf

    acts.dpf_hosts = dpf_hosts
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[CampaignWorkflow, CampaignClaimsWorkflow, HostWorkflow, *(workflows or [TimedOperation])],
        activities=campaign_activities(acts),
        sticky_queue_schedule_to_start_timeout=sticky_timeout(),
    ) as worker:
        yield worker


def host_ids(prefix: str, count: int, failing: tuple[int, ...] = ()) -> list[str]:
    """`count` host ids unique to one test; those at `failing` positions carry `fail`."""
    return [f"{prefix}-{'fail' if i in failing else 'ok'}-{i:03d}" for i in range(count)]
