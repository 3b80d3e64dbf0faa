"""Hosts already at a campaign's target are counted done without being touched, for each of the
four target kinds, against the simulated site (DPF objects and the DPUs' own BMCs over HTTP).

Real: the campaign, the hosts' entities, the campaign activities (the at-target check reads the
DPUs from the site's Kubernetes API, and the DPU firmware from each DPU's BMC), the DPUDeployment
edit. Stand-in: the operations a host not at target runs (they end at once): what is checked
here is which hosts the campaign asks at all. A host never asked has no entity.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    import pytest
    from campaign_support import InstantOperation
    from host_operation_support import save_history
    from sim_support import RunningSim, running_sim
    from temporalio.client import Client
    from temporalio.service import RPCError, RPCStatusCode
    from temporalio.testing import WorkflowEnvironment
    from temporalio.worker import Worker
    from test_dpf_activities_support import Api

    from activities.campaign import CampaignActivities
    from activities.dpf import DPFActivities
    from activities.redfish import build_redfish_client
    from contracts import names, workflow_api
    from contracts.models.campaign import (
        CampaignInput,
        CampaignResult,
        CampaignTarget,
        HostSelection,
        Limits,
        TargetKind,
    )
    from contracts.models.control import STATUS_QUERY
    from contracts.models.host import FirmwareInput, FirmwareResult, HostStatus
    from drivers.inventory import Inventory
    from drivers.kube import Kube
    from drivers.settings import Settings
    from simulators.dpf.objects import DEFAULT_BFB, DEFAULT_FLAVOR
    from simulators.site import DPU, Host, Site, dump_site
    from workflows.campaign import CampaignWorkflow
    from workflows.host import HostWorkflow

pytestmark = pytest.mark.slow

P = f"ctg{uuid.uuid4().hex[:4]}"
NEW_FIRMWARE = "32.45.1020"
OLD_FIRMWARE = "32.43.1014"
DEPLOYMENT = "gpu-compute"  # the simulated site's DPUDeployment of the hosts' default group
# Per test: (hosts already at target, hosts not at target).
FIRMWARE = ([f"{P}-f1"], [f"{P}-f2", f"{P}-f3"])  # f2: one DPU of two at the target
BFB = ([f"{P}-b1", f"{P}-b3"], [f"{P}-b2"])
FLAVOR = ([f"{P}-v1"], [f"{P}-v2"])
REPROVISION = ([], [f"{P}-r1", f"{P}-r2"])


@workflow.defn(name="FirmwareWorkflow")
class InstantFirmware:
    """Ends at once, as if it staged and activated the firmware."""

    @workflow.run
    async def run(self, request: FirmwareInput) -> FirmwareResult:
        return FirmwareResult(
            host_id=request.host_id,
            target_version=request.target_version,
            staged=(),
            already_running=(),
            reboots=1,
            boot_generation=request.boot_generation + 1,
            finished_at=workflow.now(),
        )


def _site(directory: Path) -> Path:
    def host(host_id: str, firmware: tuple[str, str] = (OLD_FIRMWARE, OLD_FIRMWARE)) -> Host:
        return Host(id=host_id, dpus=[DPU(id=f"{host_id}-dpu-{k}", firmware=firmware[k]) for k in range(2)])

    hosts = [
        host(FIRMWARE[0][0], (NEW_FIRMWARE, NEW_FIRMWARE)),
        host(FIRMWARE[1][0], (NEW_FIRMWARE, OLD_FIRMWARE)),
        host(FIRMWARE[1][1]),
    ]
    hosts += [host(h) for h in (*BFB[0], *BFB[1], *FLAVOR[0], *FLAVOR[1], *REPROVISION[1])]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "site-in.yaml"
    path.write_text(dump_site(Site(name=f"{P}-site", hosts=hosts)))
    return path


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    state = tmp_path_factory.mktemp("sim")
    with running_sim(state, site_file=_site(state / "in"), timings="zero", initialised=True) as running:
        yield running


@pytest.fixture(scope="module")
async def queue(local_env: WorkflowEnvironment, sim: RunningSim) -> AsyncIterator[str]:
    settings = Settings(site_file=sim.site_file, kubeconfig=sim.kubeconfig)
    kube = Kube(settings)
    campaign = CampaignActivities(
        Inventory(settings, kube), kube, local_env.client, build_redfish_client(settings)
    )
    dpf = DPFActivities(settings, kube)
    task_queue = f"test-campaign-targets-{uuid.uuid4()}"
    async with Worker(
        local_env.client,
        task_queue=task_queue,
        workflows=[CampaignWorkflow, HostWorkflow, InstantOperation, InstantFirmware],
        activities=[
            campaign.select_campaign_hosts,
            campaign.check_campaign_hosts,
            campaign.request_campaign_hosts,
            campaign.sweep_campaign_hosts,
            campaign.abort_campaign_hosts,
            dpf.update_deployment_bfb,
            dpf.update_deployment_flavor,
        ],
    ):
        yield task_queue


async def _run(
    client: Client, queue: str, target: CampaignTarget, hosts: list[str], history: str = ""
) -> CampaignResult:
    name = f"t-{uuid.uuid4().hex[:8]}"
    request = CampaignInput(
        name=name,
        target=target,
        selection=HostSelection(hosts=tuple(hosts)),
        canary=0,
        limits=Limits(batch_size=len(hosts), max_in_flight=len(hosts)),
        requested_by="test",
    )
    handle = await client.start_workflow(
        workflow_api.CampaignWorkflow.run,
        request,
        id=names.campaign_workflow_id(name),
        task_queue=queue,
    )
    result = await handle.result()
    if history:
        await save_history(handle, history)
    return result


async def _assert_touched_only(
    client: Client, result: CampaignResult, at_target: list[str], asked: list[str]
) -> None:
    assert (result.outcome, result.failed, result.skipped) == ("completed", (), ())
    assert (result.already_at_target, result.done) == (len(at_target), len(asked))
    assert result.all_succeeded
    for host in at_target:  # never asked: the campaign made no entity for it
        with pytest.raises(RPCError) as never:
            await client.get_workflow_handle(names.host_workflow_id(host)).query(
                STATUS_QUERY, result_type=HostStatus
            )
        assert never.value.status == RPCStatusCode.NOT_FOUND, host
    for host in asked:
        status = await client.get_workflow_handle(names.host_workflow_id(host)).query(
            STATUS_QUERY, result_type=HostStatus
        )
        assert [r.outcome for r in status.recent] == ["completed"], host


async def test_firmware_hosts_whose_every_dpu_runs_the_version_are_not_touched(
    local_env: WorkflowEnvironment, queue: str
) -> None:
    target = CampaignTarget(
        kind=TargetKind.FIRMWARE, value=NEW_FIRMWARE, image_uri="http://fw.local/bf-fw-32.45.1020.bfb"
    )
    hosts = [*FIRMWARE[0], *FIRMWARE[1]]
    # Its history replays a firmware at-target check (the BMCs are read).
    result = await _run(local_env.client, queue, target, hosts, history="campaign_firmware_at_target")
    await _assert_touched_only(local_env.client, result, *FIRMWARE)


def _drift(sim: RunningSim, host: str, spec: dict[str, Any]) -> None:
    """Give the host's DPUs another BFB than the deployment's (as before an upgrade)."""
    api = Api(sim)
    try:
        for k in range(2):
            api.patch("DPU", f"node-{host}-device-{host}-dpu-{k}", {"spec": spec})
    finally:
        api.close()


def _outdated(sim: RunningSim, host: str, reason: str) -> None:
    """Mark the host's DPUs `Outdated` as DPF does when their deployment moved on (a DPU's
    flavor is immutable: DPF recreates the DPU to change it)."""
    api = Api(sim)
    try:
        for k in range(2):
            name = f"node-{host}-device-{host}-dpu-{k}"
            conditions = (api.must("DPU", name).get("status") or {}).get("conditions") or []
            conditions = [c for c in conditions if c.get("type") != "Outdated"]
            conditions.append(
                {"type": "Outdated", "status": "True", "reason": reason, "message": "test",
                 "lastTransitionTime": "2026-11-23T00:00:00Z"}
            )  # fmt: skip
            api.patch("DPU", f"{name}/status", {"status": {"conditions": conditions}})
    finally:
        api.close()


async def test_bfb_hosts_already_on_the_bfb_are_not_touched(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    for host in BFB[1]:
        _drift(sim, host, {"bfb": "bf-bundle-2-8-0"})
    target = CampaignTarget(kind=TargetKind.BFB, value=DEFAULT_BFB, deployment=DEPLOYMENT)
    result = await _run(local_env.client, queue, target, [*BFB[0], *BFB[1]])
    await _assert_touched_only(local_env.client, result, *BFB)


async def test_flavor_hosts_already_on_the_flavor_are_not_touched(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    for host in FLAVOR[1]:
        _outdated(sim, host, "OutdatedDPUFlavor")
    target = CampaignTarget(kind=TargetKind.FLAVOR, value=DEFAULT_FLAVOR, deployment=DEPLOYMENT)
    result = await _run(local_env.client, queue, target, [*FLAVOR[0], *FLAVOR[1]])
    await _assert_touched_only(local_env.client, result, *FLAVOR)


async def test_a_reprovision_counts_no_host_at_target(local_env: WorkflowEnvironment, queue: str) -> None:
    result = await _run(local_env.client, queue, CampaignTarget(kind=TargetKind.REPROVISION), REPROVISION[1])
    await _assert_touched_only(local_env.client, result, *REPROVISION)
