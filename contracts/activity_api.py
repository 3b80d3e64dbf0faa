"""The activities workflows call, declared by name and type: the contract between the two layers.

Workflows may not import `activities` (docs/ARCHITECTURE.md section 1), yet a call by a bare
name string with an untyped result is a call mypy cannot check. So each activity a workflow
calls is declared here once, with the name the worker registers and its input and result models:

    state = await workflow.execute_activity(activity_api.read_host_dpf_state, host, **KUBE_READ)

mypy then checks the argument's type and infers the result's, and the SDK takes the activity's
name and result type from the declaration. The implementations are the methods of the activity
classes in `activities/`, registered by `activities.build_activities`;
`tests/test_activity_api.py` checks that every declaration here has an implementation of the
same name with the same input and result types. A declaration is never registered on a worker:
calling one directly raises.

Cost: nothing at run time (a declaration is a name and two types).
"""

from __future__ import annotations

from typing import NoReturn

from temporalio import activity

from contracts.models.bmc_lease import (
    LeaseHostBMCInput,
    LeaseHostBMCResult,
    RebootRunInput,
    RebootRunSeen,
    RequestLeaseInput,
    RequestLeaseResult,
    WorkflowRunRefs,
)
from contracts.models.campaign import (
    AbortHostsInput,
    AbortHostsResult,
    CheckHostsInput,
    CheckHostsResult,
    ClaimInput,
    ClaimResult,
    DeploymentChange,
    DeploymentsInput,
    DeploymentsRead,
    HostRequestsInput,
    HostRequestsResult,
    PointInput,
    RecordInput,
    ReleaseInput,
    SelectHostsInput,
    SelectHostsResult,
    SweepInput,
    SweepResult,
)
from contracts.models.dpf import (
    ChangeResult,
    DeleteDPUInput,
    DeleteNodeInput,
    DeploymentBFBInput,
    DeploymentFlavorInput,
    DevicesGoneInput,
    HostDPFState,
    HostRef,
    JoinSiteWatchInput,
    MarkRebootedInput,
    ObjectsResult,
    RegisterHostInput,
    ReprovisionInput,
    SiteSetupInput,
    SiteWatchInput,
)
from contracts.models.dpf_answers import RebootAcknowledged
from contracts.models.grove import (
    ForeignEditsInput,
    PCSRef,
    PCSState,
    ProgressInput,
    RestoreInput,
    RollGangInput,
    RollGangResult,
    ScalePCSInput,
    SetImagesInput,
    TemplateChange,
    TemplateChangeInput,
    TemplateResult,
    WatchPCSInput,
)
from contracts.models.host import (
    EntityPredecessor,
    OperationRun,
    OwnerOperationInput,
    OwnerOperationResult,
    OwnerReprovisionInput,
    OwnerReprovisionResult,
    PoolStateResult,
    RunEnd,
    SetPoolStateInput,
)
from contracts.models.inventory import (
    HostInventory,
    HostLookup,
    HostVersions,
    HostVersionsBrief,
    ReadVersionsInput,
)
from contracts.models.monitor import OwnerWithdrawInput
from contracts.models.redfish import (
    DPUResetInput,
    DPUResetResult,
    DPUSystemState,
    FirmwareVersions,
    PowerCycleInput,
    PowerCycleResult,
    ReadDPUInput,
    ReadFirmwareInput,
    ReadPowerStateInput,
    SetPowerInput,
    SetPowerResult,
    StageFirmwareInput,
    StageFirmwareResult,
    SystemPower,
    WaitDPUOSInput,
    WaitPowerInput,
)


def _declared_only(name: str) -> NoReturn:
    raise NotImplementedError(
        f"{name} is a declaration for workflows; the worker runs the implementation in activities/"
    )


# -- inventory ---------------------------------------------------------------------------------------
@activity.defn(name="resolve_host_inventory")
async def resolve_host_inventory(lookup: HostLookup) -> HostInventory:
    """The host's BMC, credential reference, DPUs, groups and instance."""
    _declared_only("resolve_host_inventory")


# -- BMC lease (fleet-wide per-BMC limit) ------------------------------------------------------------
@activity.defn(name="request_bmc_lease")
async def request_bmc_lease(request: RequestLeaseInput) -> RequestLeaseResult:
    """Queue a run at its BMC's lease workflow (signal-with-start of `acquire`)."""
    _declared_only("request_bmc_lease")


@activity.defn(name="lease_host_bmc")
async def lease_host_bmc(request: LeaseHostBMCInput) -> LeaseHostBMCResult:
    """Resolve the host's inventory and ask its BMC's lease for a slot (granted now, or queued)."""
    _declared_only("lease_host_bmc")


@activity.defn(name="find_closed_workflow_runs")
async def find_closed_workflow_runs(runs: WorkflowRunRefs) -> WorkflowRunRefs:
    """The given runs that are no longer running."""
    _declared_only("find_closed_workflow_runs")


@activity.defn(name="describe_reboot_run")
async def describe_reboot_run(request: RebootRunInput) -> RebootRunSeen:
    """How the run holding a reboot id stands, and the generation a completed one reached."""
    _declared_only("describe_reboot_run")


# -- DPF -----------------------------------------------------------------------------------------------
@activity.defn(name="create_site_objects")
async def create_site_objects(setup: SiteSetupInput) -> ObjectsResult:
    """The site's BFB, DPUFlavor and DPUDeployments (existing ones are left)."""
    _declared_only("create_site_objects")


@activity.defn(name="register_host_dpus")
async def register_host_dpus(request: RegisterHostInput) -> ObjectsResult:
    """The host's DPUDevices and DPUNode."""
    _declared_only("register_host_dpus")


@activity.defn(name="release_node_effect_hold")
async def release_node_effect_hold(host: HostRef) -> ChangeResult:
    """Let DPF start the node effect."""
    _declared_only("release_node_effect_hold")


@activity.defn(name="mark_dpu_node_rebooted")
async def mark_dpu_node_rebooted(request: MarkRebootedInput) -> RebootAcknowledged:
    """Remove the reboot-required annotation (after a power cycle only), once per token; the
    DPUNode as left, with its resourceVersion."""
    _declared_only("mark_dpu_node_rebooted")


@activity.defn(name="read_host_dpf_state")
async def read_host_dpf_state(host: HostRef) -> HostDPFState:
    """The host's DPUNode, DPUs and hold as they are now."""
    _declared_only("read_host_dpf_state")


@activity.defn(name="reprovision_dpu")
async def reprovision_dpu(request: ReprovisionInput) -> ChangeResult:
    """Delete the DPU object with the given uid; DPF recreates it."""
    _declared_only("reprovision_dpu")


@activity.defn(name="update_deployment_bfb")
async def update_deployment_bfb(request: DeploymentBFBInput) -> ChangeResult:
    """Point a DPUDeployment at another BFB (its DPUs then report Outdated; OnDelete waits)."""
    _declared_only("update_deployment_bfb")


@activity.defn(name="update_deployment_flavor")
async def update_deployment_flavor(request: DeploymentFlavorInput) -> ChangeResult:
    """Point a DPUDeployment at another DPUFlavor."""
    _declared_only("update_deployment_flavor")


@activity.defn(name="delete_dpu")
async def delete_dpu(request: DeleteDPUInput) -> ObjectsResult:
    """Take a DPU off its node and delete its DPUDevice (and finalizers, with force)."""
    _declared_only("delete_dpu")


@activity.defn(name="delete_dpu_node")
async def delete_dpu_node(request: DeleteNodeInput) -> ObjectsResult:
    """Delete the host's DPUNode (and finalizers, with force)."""
    _declared_only("delete_dpu_node")


@activity.defn(name="wait_until_dpu_devices_gone")
async def wait_until_dpu_devices_gone(request: DevicesGoneInput) -> ObjectsResult:
    """Each DPUDevice `gone`, or `present` once the deadline passed (polls inside the activity)."""
    _declared_only("wait_until_dpu_devices_gone")


@activity.defn(name="watch_site_dpf")
async def watch_site_dpf(request: SiteWatchInput) -> None:
    """One list+watch of a namespace's DPF objects; signals each host's changes to the workflows
    registered for it."""
    _declared_only("watch_site_dpf")


@activity.defn(name="join_site_dpf_watch")
async def join_site_dpf_watch(request: JoinSiteWatchInput) -> HostDPFState:
    """Register the calling workflow for the host with the site's watch (started if need be); the
    host's state now, with its version."""
    _declared_only("join_site_dpf_watch")


# -- pool and owner ------------------------------------------------------------------------------------
@activity.defn(name="set_host_pool_state")
async def set_host_pool_state(request: SetPoolStateInput) -> PoolStateResult:
    """Label the host's DPUNode in or out of the pool."""
    _declared_only("set_host_pool_state")


@activity.defn(name="read_host_pool_state")
async def read_host_pool_state(request: SetPoolStateInput) -> PoolStateResult:
    """The pool label of the host's DPUNode."""
    _declared_only("read_host_pool_state")


@activity.defn(name="request_host_reprovision")
async def request_host_reprovision(request: OwnerReprovisionInput) -> OwnerReprovisionResult:
    """Ask the host's entity workflow for a reprovision."""
    _declared_only("request_host_reprovision")


@activity.defn(name="withdraw_host_request")
async def withdraw_host_request(request: OwnerWithdrawInput) -> OwnerReprovisionResult:
    """Withdraw the monitor's own request awaiting approval on the host's entity (`withdraw`)."""
    _declared_only("withdraw_host_request")


@activity.defn(name="read_entity_predecessor")
async def read_entity_predecessor(request: HostLookup) -> EntityPredecessor:
    """The last closed run of the host's entity and what its memo carried (a new entity's start)."""
    _declared_only("read_entity_predecessor")


@activity.defn(name="await_operation_end")
async def await_operation_end(run: OperationRun) -> RunEnd:
    """How a run of the host's operation ended, waited for (heartbeating) while it runs: a new
    entity's adopted operation (workflows/host/takeover.py)."""
    _declared_only("await_operation_end")


@activity.defn(name="find_host_operation")
async def find_host_operation(request: OwnerOperationInput) -> OwnerOperationResult:
    """The host entity's operation running now or ended since `request.since` (the monitor's
    test of whether a reset was metalflow's own)."""
    _declared_only("find_host_operation")


# -- campaigns -------------------------------------------------------------------------------------------
@activity.defn(name="select_campaign_hosts")
async def select_campaign_hosts(request: SelectHostsInput) -> SelectHostsResult:
    """The hosts of a campaign's selection, from the inventory (InvalidInput if none or unknown),
    and what was read of them (unknown to DPF, assigned, the site's rules broken)."""
    _declared_only("select_campaign_hosts")


@activity.defn(name="check_campaign_hosts")
async def check_campaign_hosts(request: CheckHostsInput) -> CheckHostsResult:
    """Which of the hosts already run the target (every DPU on the BFB or flavor, or running the
    firmware as its BMC says)."""
    _declared_only("check_campaign_hosts")


@activity.defn(name="request_campaign_hosts")
async def request_campaign_hosts(request: HostRequestsInput) -> HostRequestsResult:
    """Ask each host's entity for the campaign's operation (update-with-start)."""
    _declared_only("request_campaign_hosts")


@activity.defn(name="sweep_campaign_hosts")
async def sweep_campaign_hosts(request: SweepInput) -> SweepResult:
    """The in-flight operations whose end the entities show (a signal may have been lost)."""
    _declared_only("sweep_campaign_hosts")


@activity.defn(name="abort_campaign_hosts")
async def abort_campaign_hosts(request: AbortHostsInput) -> AbortHostsResult:
    """Withdraw the requests awaiting approval and send `abort` to each running host operation;
    how each took it (one whose DPUs install refuses and finishes its reboot round)."""
    _declared_only("abort_campaign_hosts")


@activity.defn(name="read_campaign_deployments")
async def read_campaign_deployments(request: DeploymentsInput) -> DeploymentsRead:
    """The DPUDeployments a BFB or flavor campaign would point, as read (strategy, value, the
    roster's hosts each selects, those outside it); decides nothing, changes nothing."""
    _declared_only("read_campaign_deployments")


@activity.defn(name="point_campaign_deployment")
async def point_campaign_deployment(request: PointInput) -> DeploymentChange:
    """Point a DPUDeployment at the campaign's value, or put its previous value back."""
    _declared_only("point_campaign_deployment")


@activity.defn(name="claim_campaign_hosts")
async def claim_campaign_hosts(request: ClaimInput) -> ClaimResult:
    """Claim the hosts and deployments in the campaign registry; those another running campaign
    holds, by holder; the changes of campaigns that no longer run, taken over to be put back."""
    _declared_only("claim_campaign_hosts")


@activity.defn(name="record_campaign_changes")
async def record_campaign_changes(request: RecordInput) -> None:
    """Record the deployment changes the campaign is about to make (what it found there)."""
    _declared_only("record_campaign_changes")


@activity.defn(name="release_campaign_hosts")
async def release_campaign_hosts(request: ReleaseInput) -> None:
    """Release every host the campaign holds in the registry."""
    _declared_only("release_campaign_hosts")


@activity.defn(name="read_host_versions")
async def read_host_versions(request: ReadVersionsInput) -> HostVersions:
    """What the host runs, from DPF and its BMCs (unreadable sources named in `errors`)."""
    _declared_only("read_host_versions")


@activity.defn(name="read_host_versions_brief")
async def read_host_versions_brief(request: ReadVersionsInput) -> HostVersionsBrief:
    """What the host runs without the DPUs' identity, and the site's targets (the entity's memo)."""
    _declared_only("read_host_versions_brief")


# -- Redfish ---------------------------------------------------------------------------------------------
@activity.defn(name="read_power_state")
async def read_power_state(request: ReadPowerStateInput) -> SystemPower:
    """The host's PowerState and the reset types its BMC allows."""
    _declared_only("read_power_state")


@activity.defn(name="set_power_state")
async def set_power_state(request: SetPowerInput) -> SetPowerResult:
    """One reset, and a wait for its power state."""
    _declared_only("set_power_state")


@activity.defn(name="wait_for_power_state")
async def wait_for_power_state(request: WaitPowerInput) -> SystemPower:
    """The host's power once it is the target, or as it is at the deadline (polls inside)."""
    _declared_only("wait_for_power_state")


@activity.defn(name="power_cycle_host")
async def power_cycle_host(request: PowerCycleInput) -> PowerCycleResult:
    """Power cycle the host exactly once for a boot generation."""
    _declared_only("power_cycle_host")


@activity.defn(name="read_dpu_firmware_versions")
async def read_dpu_firmware_versions(request: ReadFirmwareInput) -> FirmwareVersions:
    """A DPU's running and staged firmware versions."""
    _declared_only("read_dpu_firmware_versions")


@activity.defn(name="stage_dpu_firmware")
async def stage_dpu_firmware(request: StageFirmwareInput) -> StageFirmwareResult:
    """Stage a firmware image on a DPU's BMC."""
    _declared_only("stage_dpu_firmware")


@activity.defn(name="read_dpu_system")
async def read_dpu_system(request: ReadDPUInput) -> DPUSystemState:
    """A DPU's PowerState, Arm stage (BootProgress) and reset marks, from its own BMC."""
    _declared_only("read_dpu_system")


@activity.defn(name="reset_dpu")
async def reset_dpu(request: DPUResetInput) -> DPUResetResult:
    """Reset a DPU through its BMC exactly once (ForceRestart, PowerCycle or SOC.ForceReset)."""
    _declared_only("reset_dpu")


@activity.defn(name="wait_for_dpu_os")
async def wait_for_dpu_os(request: WaitDPUOSInput) -> DPUSystemState:
    """A DPU once its Arm OS runs, or as it is at the deadline (polls inside)."""
    _declared_only("wait_for_dpu_os")


# -- Grove (the rollout) -------------------------------------------------------------------------------
@activity.defn(name="read_pcs_state")
async def read_pcs_state(pcs: PCSRef) -> PCSState:
    """The PodCliqueSet, its PodGangs and their pods (`summary.exists=False` once gone)."""
    _declared_only("read_pcs_state")


@activity.defn(name="set_pcs_images")
async def set_pcs_images(request: SetImagesInput) -> TemplateResult:
    """Set images ("clique/container") in the template; refused unless the PCS is OnDelete."""
    _declared_only("set_pcs_images")


@activity.defn(name="restore_pcs_template")
async def restore_pcs_template(request: RestoreInput) -> TemplateResult:
    """Write every clique back as it was before the rollout; someone else's edits are recorded."""
    _declared_only("restore_pcs_template")


@activity.defn(name="put_back_foreign_edits")
async def put_back_foreign_edits(request: ForeignEditsInput) -> TemplateResult:
    """Put back, dormant, the cliques someone else edited, where they still hold the original."""
    _declared_only("put_back_foreign_edits")


@activity.defn(name="describe_template_change")
async def describe_template_change(request: TemplateChangeInput) -> TemplateChange:
    """The template fields changed since the rollout's write, and who changed them."""
    _declared_only("describe_template_change")


@activity.defn(name="roll_podgang")
async def roll_podgang(request: RollGangInput) -> RollGangResult:
    """Delete the PodGang's pods not at their clique's target (Grove recreates them)."""
    _declared_only("roll_podgang")


@activity.defn(name="publish_rollout_progress")
async def publish_rollout_progress(request: ProgressInput) -> None:
    """Write where the rollout is as the PodCliqueSet annotation `metalflow.io/rollout`."""
    _declared_only("publish_rollout_progress")


@activity.defn(name="scale_pcs")
async def scale_pcs(request: ScalePCSInput) -> int:
    """Set `spec.replicas`; returns the generation written."""
    _declared_only("scale_pcs")


@activity.defn(name="watch_pcs")
async def watch_pcs(request: WatchPCSInput) -> None:
    """Follow a PodCliqueSet, its PodGangs and pods; signal what changed to the calling workflow."""
    _declared_only("watch_pcs")
