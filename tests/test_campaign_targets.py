"""Campaign targets against the simulated site, each host's operation real (a worker with every
workflow and activity): hosts already at a target are counted done without being touched, a
host counts done only once it reads at the target after its operation, and a BFB campaign
changes its DPUDeployments only as it says (refusals, the canary's own deployment first,
restored on abort).

Real: everything but the one stand-in worker (`standin`), whose operations end at once without
changing anything: a host whose operation "completes" without reaching the target must fail
with what it reads. A host never asked has no entity.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from takeover_support import sticky_timeout
from temporalio import workflow

from contracts.with_start import execute_update

with workflow.unsafe.imports_passed_through():
    import pytest
    import yaml
    from campaign_support import InstantOperation, campaign_activities
    from dpf_activities_support import Api
    from host_operation_support import save_history
    from sim_support import RunningSim, running_sim
    from site_worker_support import FAST_POLICY, site_worker
    from temporalio.client import Client, WorkflowFailureError
    from temporalio.service import RPCError, RPCStatusCode
    from temporalio.testing import WorkflowEnvironment
    from temporalio.worker import Worker

    from activities.campaign import CampaignActivities
    from activities.redfish import build_redfish_client
    from contracts import names, workflow_api
    from contracts.models.campaign import (
        AbortRequest,
        CampaignInput,
        CampaignResult,
        CampaignTarget,
        ClaimResult,
        HostSelection,
        Limits,
        SelectHostsInput,
        TargetKind,
    )
    from contracts.models.control import ABORT_UPDATE, STATUS_QUERY, OperatorAnswer
    from contracts.models.host import FirmwareInput, FirmwareResult, HostStatus
    from drivers.campaign import Fleet
    from drivers.inventory import Inventory
    from drivers.kube import Kube
    from drivers.settings import Settings
    from drivers.versions import VersionReader
    from metalflow.cli import campaign_plan, host_versions
    from simulators.dpf.objects import DEFAULT_BFB, DEFAULT_FLAVOR
    from simulators.site import DPU, Host, Site, dump_site
    from workflows.campaign import admission
    from workflows.campaign.workflow import CampaignWorkflow
    from workflows.campaign_claims.workflow import CampaignClaimsWorkflow
    from workflows.host.workflow import HostWorkflow


P = f"ctg{uuid.uuid4().hex[:4]}"
NEW_FIRMWARE = "32.45.1020"
OLD_FIRMWARE = "32.43.1014"
DEPLOYMENT = "gpu-compute"  # the simulated site's DPUDeployment of the hosts' default group
# Per test: (hosts already at target, hosts not at target).
FIRMWARE = ([f"{P}-f1"], [f"{P}-f2", f"{P}-f3"])  # f2: one DPU of two at the target
BFB = ([f"{P}-b1", f"{P}-b3"], [f"{P}-b2"])
FLAVOR = ([f"{P}-v1"], [f"{P}-v2"])
REPROVISION = ([], [f"{P}-r1", f"{P}-r2"])
STANDIN = [f"{P}-s1", f"{P}-s2"]  # their firmware and BFB never change (stand-in operations)
# Groups of their own, so a DPUDeployment each (the simulated site makes one per group).
CANARY_GROUP, FLEET_GROUP, ROLLING_GROUP = "ctg-canary", "ctg-fleet", "ctg-rolling"
CANARY_HOSTS = [f"{P}-c1"]
FLEET_HOSTS = [f"{P}-c2", f"{P}-c3"]
ROLLING_HOSTS = [f"{P}-o1"]
NEW_BFB = "bf-bundle-3-0-0"


@workflow.defn(name="FirmwareWorkflow")
class InstantFirmware:
    """Ends at once, as if it staged and activated the firmware (it changes nothing)."""

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
    def host(
        host_id: str, firmware: tuple[str, str] = (OLD_FIRMWARE, OLD_FIRMWARE), group: str = DEPLOYMENT
    ) -> Host:
        return Host(
            id=host_id,
            groups=[group],
            dpus=[DPU(id=f"{host_id}-dpu-{k}", firmware=firmware[k]) for k in range(2)],
        )

    hosts = [
        host(FIRMWARE[0][0], (NEW_FIRMWARE, NEW_FIRMWARE)),
        host(FIRMWARE[1][0], (NEW_FIRMWARE, OLD_FIRMWARE)),
        host(FIRMWARE[1][1]),
    ]
    hosts += [host(h) for h in (*BFB[0], *BFB[1], *FLAVOR[0], *FLAVOR[1], *REPROVISION[1], *STANDIN)]
    hosts += [host(h, group=CANARY_GROUP) for h in CANARY_HOSTS]
    hosts += [host(h, group=FLEET_GROUP) for h in FLEET_HOSTS]
    hosts += [host(h, group=ROLLING_GROUP) for h in ROLLING_HOSTS]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "site-in.yaml"
    path.write_text(dump_site(Site(name=f"{P}-site", hosts=hosts)))
    return path


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    state = tmp_path_factory.mktemp("sim")
    with running_sim(state, site_file=_site(state / "in"), timings="zero", initialised=True) as running:
        api = Api(running)
        try:  # a second BFB, downloaded (Ready) by the simulated DPF
            spec = {"url": f"http://bfb.local/{NEW_BFB}.bfb", "fileName": f"{NEW_BFB}.bfb"}
            api.create(
                "BFB",
                {"apiVersion": "provisioning.dpu.nvidia.com/v1alpha1", "kind": "BFB",
                 "metadata": {"name": NEW_BFB}, "spec": spec},
            )  # fmt: skip
            api.patch(
                "DPUDeployment",
                ROLLING_GROUP,
                {"spec": {"dpus": {"dpuSetStrategy": {"type": "RollingUpdate"}}}},
            )
        finally:
            api.close()
        yield running


@pytest.fixture(scope="module")
async def queue(local_env: WorkflowEnvironment, sim: RunningSim) -> AsyncIterator[str]:
    """A worker with every workflow and activity (the operations real)."""
    task_queue = f"test-campaign-targets-{uuid.uuid4()}"
    async with site_worker(local_env.client, task_queue, sim):
        yield task_queue


@pytest.fixture(scope="module")
async def standin(local_env: WorkflowEnvironment, sim: RunningSim) -> AsyncIterator[str]:
    """The real campaign and its activities, but operations that end at once, changing nothing."""
    settings = Settings(site_file=sim.site_file, kubeconfig=sim.kubeconfig)
    kube = Kube(settings)
    campaign = CampaignActivities(
        Inventory(settings, kube), kube, local_env.client, build_redfish_client(settings)
    )
    task_queue = f"test-campaign-standin-{uuid.uuid4()}"
    async with Worker(
        local_env.client,
        task_queue=task_queue,
        workflows=[CampaignWorkflow, CampaignClaimsWorkflow, HostWorkflow, InstantOperation, InstantFirmware],
        activities=campaign_activities(campaign),
        sticky_queue_schedule_to_start_timeout=sticky_timeout(),
    ):
        yield task_queue


def _request(target: CampaignTarget, hosts: list[str], **options: Any) -> CampaignInput:
    name = f"t-{uuid.uuid4().hex[:8]}"
    values: dict[str, Any] = {
        "name": name,
        "target": target,
        "selection": HostSelection(hosts=tuple(hosts)),
        "canary": 0,
        "limits": Limits(batch_size=len(hosts), max_in_flight=len(hosts)),
        "requested_by": "test",
        "host_policy": FAST_POLICY,
    }
    values.update(options)
    return CampaignInput.model_validate(values)


async def _start(client: Client, queue: str, request: CampaignInput) -> Any:
    return await client.start_workflow(
        workflow_api.CampaignWorkflow.run,
        request,
        id=names.campaign_workflow_id(request.name),
        task_queue=queue,
    )


async def _run(
    client: Client, queue: str, target: CampaignTarget, hosts: list[str], history: str = "", **options: Any
) -> CampaignResult:
    handle = await _start(client, queue, _request(target, hosts, **options))
    result: CampaignResult = await handle.result()
    if history:
        await save_history(handle, history)
    return result


async def _assert_touched_only(
    client: Client, result: CampaignResult, at_target: list[str], asked: list[str]
) -> None:
    assert (result.outcome, result.failed, result.skipped) == ("completed", 0, 0), result
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
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    target = CampaignTarget(
        kind=TargetKind.FIRMWARE, value=NEW_FIRMWARE, image_uri="http://fw.local/bf-fw-32.45.1020.bfb"
    )
    hosts = [*FIRMWARE[0], *FIRMWARE[1]]
    # Its history replays a firmware at-target check and the read-back (the BMCs are read).
    result = await _run(local_env.client, queue, target, hosts, history="campaign_firmware_at_target")
    await _assert_touched_only(local_env.client, result, *FIRMWARE)
    # Done means read back: each DPU's BMC showed the new firmware running after the operation.


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
    target = CampaignTarget(
        kind=TargetKind.BFB, value=DEFAULT_BFB, deployment=DEPLOYMENT, whole_deployment=(DEPLOYMENT,)
    )
    result = await _run(local_env.client, queue, target, [*BFB[0], *BFB[1]])
    await _assert_touched_only(local_env.client, result, *BFB)


async def test_flavor_hosts_already_on_the_flavor_are_not_touched(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    for host in FLAVOR[1]:
        _outdated(sim, host, "OutdatedDPUFlavor")
    target = CampaignTarget(
        kind=TargetKind.FLAVOR, value=DEFAULT_FLAVOR, deployment=DEPLOYMENT, whole_deployment=(DEPLOYMENT,)
    )
    result = await _run(local_env.client, queue, target, [*FLAVOR[0], *FLAVOR[1]])
    await _assert_touched_only(local_env.client, result, *FLAVOR)


async def test_a_reprovision_counts_no_host_at_target(local_env: WorkflowEnvironment, queue: str) -> None:
    result = await _run(local_env.client, queue, CampaignTarget(kind=TargetKind.REPROVISION), REPROVISION[1])
    await _assert_touched_only(local_env.client, result, *REPROVISION)


async def test_a_host_whose_operation_completes_off_target_fails_with_what_it_reads(
    local_env: WorkflowEnvironment, sim: RunningSim, standin: str
) -> None:
    """Operations that end "completed" without changing anything: no host counts done."""
    firmware = CampaignTarget(
        kind=TargetKind.FIRMWARE, value=NEW_FIRMWARE, image_uri="http://fw.local/bf-fw-32.45.1020.bfb"
    )
    result = await _run(local_env.client, standin, firmware, STANDIN[:1], budget={"max_failures": 5})
    assert (result.done, result.failed) == (0, 1), result
    [failure] = result.failures
    assert f"not at firmware {NEW_FIRMWARE}" in failure.reason and f"DPU_NIC {OLD_FIRMWARE}" in failure.reason
    _drift(sim, STANDIN[1], {"bfb": "bf-bundle-2-8-0"})
    bfb = CampaignTarget(
        kind=TargetKind.BFB, value=DEFAULT_BFB, deployment=DEPLOYMENT, whole_deployment=(DEPLOYMENT,)
    )
    result = await _run(local_env.client, standin, bfb, STANDIN[1:], budget={"max_failures": 5})
    assert (result.done, result.failed) == (0, 1), result
    assert "(spec bf-bundle-2-8-0)" in result.failures[0].reason, result.failures


async def _deployment(sim: RunningSim, name: str) -> dict[str, Any]:
    api = Api(sim)
    try:
        return api.must("DPUDeployment", name)
    finally:
        api.close()


async def test_a_deployment_campaign_refuses_what_it_does_not_own_and_changes_nothing(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    before = {g: (await _deployment(sim, g))["spec"]["dpus"]["bfb"] for g in (FLEET_GROUP, ROLLING_GROUP)}
    cases = [
        (ROLLING_GROUP, ROLLING_HOSTS, "dpuSetStrategy RollingUpdate"),
        (FLEET_GROUP, FLEET_HOSTS[:1], f"also selects 1 host the campaign does not run ({FLEET_HOSTS[1]})"),
        (
            FLEET_GROUP,
            [*FLEET_HOSTS, CANARY_HOSTS[0]],
            f"{CANARY_HOSTS[0]} are not selected by DPUDeployment",
        ),
    ]
    for deployment, hosts, words in cases:
        target = CampaignTarget(kind=TargetKind.BFB, value=NEW_BFB, deployment=deployment)
        handle = await _start(local_env.client, queue, _request(target, hosts))
        with pytest.raises(WorkflowFailureError) as refused:
            await handle.result()
        assert words in str(refused.value.cause), refused.value.cause  # the admission's refusal
        status = await handle.query(STATUS_QUERY)
        assert status["phase"] == "failed"
    after = {g: (await _deployment(sim, g))["spec"]["dpus"]["bfb"] for g in (FLEET_GROUP, ROLLING_GROUP)}
    assert after == before, "a refused campaign changes nothing"


async def test_the_canary_runs_on_its_own_deployment_first_and_abort_restores_both(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    """Canary deployment pointed, its host reprovisioned to the new BFB and read back; then the
    soak, which follows the canary as it follows every batch (issue 38), and the fleet's
    deployment is not pointed before it ends (its hosts are not Outdated while the canary is
    watched). The abort in that soak puts the canary's deployment back, lists every change, and
    leaves the fleet's as it was."""
    client = local_env.client
    target = CampaignTarget(
        kind=TargetKind.BFB, value=NEW_BFB, deployment=FLEET_GROUP, canary_deployment=CANARY_GROUP
    )
    request = _request(
        target, [*CANARY_HOSTS, *FLEET_HOSTS], canary=1, limits=Limits(batch_size=1, max_in_flight=1),
        soak_seconds=3600,  # the canary, then an hour's soak: the abort comes in it
    )  # fmt: skip
    handle = await _start(client, queue, request)
    for _ in range(600):  # the canary passes and the soak begins
        status = await handle.query(STATUS_QUERY)
        if status["phase"] == "soaking":
            break
        await asyncio.sleep(0.2)
    assert status["phase"] == "soaking", status
    changes = {c["role"]: c for c in status["changes"]}
    assert changes["canary"]["pointed_at"] and not changes["fleet"]["pointed_at"], changes
    canary_pointed = datetime.fromisoformat(changes["canary"]["pointed_at"])
    canary_op = await client.get_workflow_handle(names.reprovision_workflow_id(CANARY_HOSTS[0])).describe()
    assert canary_op.start_time is not None and canary_op.close_time is not None
    assert canary_pointed <= canary_op.start_time, "the canary's deployment before its host"
    answer = await execute_update(
        handle, ABORT_UPDATE, AbortRequest(requested_by="test", reason="enough"), result_type=OperatorAnswer
    )
    assert f"then restoring {CANARY_GROUP} bfb={DEFAULT_BFB}" in answer.message, answer.message
    result: CampaignResult = await handle.result()
    assert (result.outcome, result.done, result.failed) == ("aborted", 1, 0), result
    restored = {c.role: c.restored_at for c in result.changes}
    assert restored["canary"] is not None, result.changes
    for group in (CANARY_GROUP, FLEET_GROUP):
        assert (await _deployment(sim, group))["spec"]["dpus"]["bfb"] == DEFAULT_BFB, group


async def test_plan_shows_what_start_would_do_and_starts_nothing(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    """`campaign plan`'s reads (metalflow/cli/campaign_plan.py), through the same code the
    campaign's activities adapt: the canary on its own deployment, the batches, the changes, a
    refusal in start's words, and no workflow started."""
    settings = Settings(site_file=sim.site_file, kubeconfig=sim.kubeconfig)
    kube = Kube(settings)
    fleet = Fleet(Inventory(settings, kube), kube)
    target = CampaignTarget(
        kind=TargetKind.BFB, value=NEW_BFB, deployment=FLEET_GROUP, canary_deployment=CANARY_GROUP
    )
    request = _request(target, [*FLEET_HOSTS, *CANARY_HOSTS], canary=1, limits=Limits(batch_size=1))
    # The previous test put the deployments back: the hosts it upgraded read Outdated only until
    # their deployment is pointed; plan judges them as the run will (at the target), so the canary
    # cannot run and plan refuses as the run would stop (an independent reviewer's attack: plan
    # said "canary (2)", the run stopped at once).
    with pytest.raises(campaign_plan.PlanRefused, match="the canary cannot run") as stopped:
        await campaign_plan.build(local_env.client, fleet, request, queue)
    planned = stopped.value.plan
    assert set(CANARY_HOSTS) <= set(planned.at_target) and planned.canary == planned.batches == ()
    assert f"{CANARY_HOSTS[0]}: already at the target" in stopped.value.reason
    assert [(c.role, c.deployment, c.previous, c.value) for c in planned.changes] == [
        ("canary", CANARY_GROUP, DEFAULT_BFB, NEW_BFB),
        ("fleet", FLEET_GROUP, DEFAULT_BFB, NEW_BFB),
    ]
    text = campaign_plan.render(planned)
    assert f"would change: fleet DPUDeployment {FLEET_GROUP} bfb {DEFAULT_BFB} -> {NEW_BFB}: planned" in text
    refused = request.model_copy(update={"target": target.model_copy(update={"deployment": ROLLING_GROUP})})
    with pytest.raises(campaign_plan.PlanRefused, match="dpuSetStrategy RollingUpdate"):
        await campaign_plan.build(local_env.client, fleet, refused, queue)
    with pytest.raises(RPCError) as never:
        await local_env.client.get_workflow_handle(names.campaign_workflow_id(request.name)).describe()
    assert never.value.status == RPCStatusCode.NOT_FOUND


async def test_versions_side_by_side_and_a_compatibility_rule_refuses_before_anything_changes(
    sim: RunningSim, tmp_path: Path
) -> None:
    """`host versions`' reads (drivers/versions.py) of a host: identity and firmware from each
    DPU's BMC, BFB and flavor from DPF; the host BMC serves no FirmwareInventory here, which is
    said, not hidden. A site rule (a BFB needs DPU BMC firmware >= X) refuses the campaign's
    selection, naming the DPUs, before anything is asked."""
    site_file = tmp_path / "site.yaml"
    targets = {"bfb": DEFAULT_BFB, "dpu_firmware": NEW_FIRMWARE}
    rules = [{"bfb": NEW_BFB, "min_dpu_bmc_firmware": "BF-25.04-7"}]
    site_file.write_text(
        sim.site_file.read_text() + yaml.safe_dump({"versions": {"targets": targets, "rules": rules}})
    )
    settings = Settings(site_file=site_file, kubeconfig=sim.kubeconfig)
    kube = Kube(settings)
    inventory = Inventory(settings, kube)
    redfish = build_redfish_client(settings)
    reader = VersionReader(kube, redfish)
    on_target, off_target = [
        await reader.host(await inventory.resolve(h)) for h in (FIRMWARE[0][0], STANDIN[0])
    ]
    assert [
        (d.model, d.serial, d.bfb, d.flavor, d.dpu_firmware, d.dpu_bmc_firmware) for d in on_target.dpus
    ] == [
        (
            "BlueField-3 DPU",
            f"SN-{FIRMWARE[0][0]}-dpu-{k}",
            DEFAULT_BFB,
            DEFAULT_FLAVOR,
            NEW_FIRMWARE,
            "BF-24.10-24",
        )
        for k in range(2)
    ]
    assert on_target.host_bmc_firmware and not on_target.errors  # its BMC's FirmwareInventory
    both = [on_target, off_target]
    text = host_versions.render(
        both, inventory.site_file.site().versions.targets, host_versions.fleet_summary(both)
    )
    assert f"{OLD_FIRMWARE}*" in text and f"{NEW_FIRMWARE}*" not in text
    assert f"dpu_firmware: {OLD_FIRMWARE} on 1 host, {NEW_FIRMWARE} on 1 host" in text
    fleet = Fleet(inventory, kube, redfish)
    target = CampaignTarget(kind=TargetKind.BFB, value=NEW_BFB, deployment=FLEET_GROUP)
    selection = HostSelection(hosts=tuple(FLEET_HOSTS))
    selected = await fleet.select(SelectHostsInput(selection=selection, target=target))
    assert len(selected.rule_breaks) == 4 and selected.rule_breaks[0].startswith(f"{FLEET_HOSTS[0]} ")
    start = CampaignInput(name="rules", target=target, selection=selection, canary=0, requested_by="test")
    decided = admission.admit(start, selected, ClaimResult(), None, datetime.now(UTC))
    assert decided.refusal is not None
    assert f"breaks the site's compatibility rule on 4 DPUs: {FLEET_HOSTS[0]} " in decided.refusal
