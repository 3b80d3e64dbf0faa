"""The workflows, declared by name and type: what a caller starts, signals, updates and queries.

The counterpart of `activity_api` for workflows. A caller that is not the workflow's own module
(a parent workflow, an activity, the CLI, a script) starts and messages a workflow through these
declarations, so mypy checks the argument and infers the result, and the SDK takes the name and
the result type from them:

    handle = await workflow.start_child_workflow(workflow_api.HostRebootWorkflow.run, request, ...)
    result = await handle  # a HostRebootResult

Why declarations and not the classes themselves: workflows may not be imported by activities
or the CLI (the floors, docs/ARCHITECTURE.md section 1), and a workflow that imported another's
module would execute it afresh in every run's sandbox (`workflows/__init__.py`). Each
declaration has the registered name, the input and the result of its workflow, and for the host
entity, the rollout, the campaign, the site's DPF watch and the BMC lease their signals,
updates and queries;
`tests/test_workflow_api.py` checks each against the class the worker registers. A declaration
is never registered on a worker: its methods raise when called.

Cost: nothing at run time.
"""

from __future__ import annotations

from typing import NoReturn

from temporalio import workflow

from contracts.host_requests import FIRMWARE, PROVISION, REBOOT, REMOVAL, REPROVISION, RESET, declared
from contracts.models.bmc_lease import (
    BMC_LEASE_ACQUIRE_SIGNAL,
    BMC_LEASE_ACQUIRE_UPDATE,
    BMC_LEASE_RELEASE_SIGNAL,
    BMC_LEASE_STATUS_QUERY,
    BMCLeaseState,
    BMCLeaseStatus,
    LeaseAnswer,
    LeaseRelease,
    LeaseRequest,
)
from contracts.models.campaign import (
    CLAIM_UPDATE,
    DEFERRAL_QUERY,
    HELD_QUERY,
    HOSTS_QUERY,
    RECORD_UPDATE,
    RELEASE_UPDATE,
    RETRY_FAILED_UPDATE,
    SET_LIMITS_UPDATE,
    SKIP_HOST_UPDATE,
    AbortRequest,
    CampaignInput,
    CampaignResult,
    CampaignStatus,
    ClaimAnswer,
    ClaimRequest,
    ClaimsInput,
    ClaimsStatus,
    Deferred,
    HostsPage,
    HostsQuery,
    LimitsRequest,
    RecordRequest,
    ReleaseAnswer,
    ReleaseRequest,
    SkipRequest,
)
from contracts.models.control import (
    ABORT_UPDATE,
    PAUSE_UPDATE,
    RESUME_UPDATE,
    STATUS_QUERY,
    OperatorAnswer,
    OperatorRequest,
)
from contracts.models.dpf import (
    DPF_WAITER_SIGNAL,
    EPOCH_QUERY,
    EPOCH_SIGNAL,
    NEXT_WAITERS_UPDATE,
    WAITERS_QUERY,
    WORKER_STARTED_SIGNAL,
    DPFWaiter,
    SiteWatchInput,
    WaiterNews,
    WaiterPoll,
)
from contracts.models.grove import (
    ROLLBACK_UPDATE,
    SCALE_UPDATE,
    SUPERSEDE_UPDATE,
    RolloutInput,
    RolloutResult,
    RolloutStatus,
    ScaleRequest,
    SupersedeRequest,
)
from contracts.models.host import (
    APPROVE_UPDATE,
    ASSIGN_INSTANCE_UPDATE,
    MAINTENANCE_UPDATE,
    RELEASE_AUTOMATION_UPDATE,
    RELEASE_INSTANCE_UPDATE,
    WITHDRAW_UPDATE,
    ApproveRequest,
    AssignInstanceRequest,
    FirmwareInput,
    FirmwareResult,
    HostMonitorInput,
    HostMonitorResult,
    HostOperationInput,
    HostOperationResult,
    HostRebootInput,
    HostRebootResult,
    HostResetInput,
    HostResetResult,
    HostResetStatus,
    HostStatus,
    HostWorkflowInput,
    MaintenanceRequest,
    WithdrawRequest,
)
from contracts.models.removal import HostRemovalInput, HostRemovalResult


def _declared_only(name: str) -> NoReturn:
    raise NotImplementedError(f"{name} is a declaration for callers; the worker runs the class in workflows/")


@workflow.defn(name="HostWorkflow")
class HostWorkflow:
    """`host/<id>`: the one owner of a host (`workflows/host/workflow.py`)."""

    @workflow.run
    async def run(self, start: HostWorkflowInput) -> None:
        _declared_only("HostWorkflow.run")

    # The operation requests, one per row of `contracts.host_requests` (its update, payload, answer).
    request_provision = declared(PROVISION)
    request_reprovision = declared(REPROVISION)
    request_reboot = declared(REBOOT)
    request_firmware_update = declared(FIRMWARE)
    request_removal = declared(REMOVAL)
    request_reset = declared(RESET)

    @workflow.update(name=APPROVE_UPDATE)
    async def approve(self, request: ApproveRequest) -> OperatorAnswer:
        _declared_only("HostWorkflow.approve")

    @workflow.update(name=WITHDRAW_UPDATE)
    async def withdraw(self, request: WithdrawRequest) -> OperatorAnswer:
        _declared_only("HostWorkflow.withdraw")

    @workflow.update(name=ASSIGN_INSTANCE_UPDATE)
    async def assign_instance(self, request: AssignInstanceRequest) -> OperatorAnswer:
        _declared_only("HostWorkflow.assign_instance")

    @workflow.update(name=RELEASE_INSTANCE_UPDATE)
    async def release_instance(self, request: AssignInstanceRequest) -> OperatorAnswer:
        _declared_only("HostWorkflow.release_instance")

    @workflow.update(name=MAINTENANCE_UPDATE)
    async def set_maintenance(self, request: MaintenanceRequest) -> OperatorAnswer:
        _declared_only("HostWorkflow.set_maintenance")

    @workflow.update(name=RELEASE_AUTOMATION_UPDATE)
    async def release_automation(self, request: OperatorRequest) -> OperatorAnswer:
        _declared_only("HostWorkflow.release_automation")

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> HostStatus:
        _declared_only("HostWorkflow.status")


@workflow.defn(name="HostOperationWorkflow")
class HostOperationWorkflow:
    """`provision/<id>`, `reprovision/<id>` (`workflows/host_operation/workflow.py`)."""

    @workflow.run
    async def run(self, request: HostOperationInput) -> HostOperationResult:
        _declared_only("HostOperationWorkflow.run")


@workflow.defn(name="HostRebootWorkflow")
class HostRebootWorkflow:
    """`reboot/<id>/generation-<n>` (`workflows/host_reboot/workflow.py`)."""

    @workflow.run
    async def run(self, request: HostRebootInput) -> HostRebootResult:
        _declared_only("HostRebootWorkflow.run")


@workflow.defn(name="FirmwareWorkflow")
class FirmwareWorkflow:
    """`firmware/<id>` (`workflows/firmware/workflow.py`)."""

    @workflow.run
    async def run(self, request: FirmwareInput) -> FirmwareResult:
        _declared_only("FirmwareWorkflow.run")


@workflow.defn(name="HostRemovalWorkflow")
class HostRemovalWorkflow:
    """`remove/<id>` (`workflows/removal/workflow.py`)."""

    @workflow.run
    async def run(self, request: HostRemovalInput) -> HostRemovalResult:
        _declared_only("HostRemovalWorkflow.run")


@workflow.defn(name="HostResetWorkflow")
class HostResetWorkflow:
    """`reset/<id>` (`workflows/host_reset/workflow.py`)."""

    @workflow.run
    async def run(self, request: HostResetInput) -> HostResetResult:
        _declared_only("HostResetWorkflow.run")

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> HostResetStatus:
        _declared_only("HostResetWorkflow.status")


@workflow.defn(name="HostMonitorWorkflow")
class HostMonitorWorkflow:
    """`monitor/host-<id>` (`workflows/monitor/workflow.py`)."""

    @workflow.run
    async def run(self, request: HostMonitorInput) -> HostMonitorResult:
        _declared_only("HostMonitorWorkflow.run")


@workflow.defn(name="RolloutWorkflow")
class RolloutWorkflow:
    """`rollout/<namespace>/<pcs>` (`workflows/rollout/workflow.py`)."""

    @workflow.run
    async def run(self, request: RolloutInput) -> RolloutResult:
        _declared_only("RolloutWorkflow.run")

    @workflow.update(name=PAUSE_UPDATE)
    async def pause(self, request: OperatorRequest) -> OperatorAnswer:
        _declared_only("RolloutWorkflow.pause")

    @workflow.update(name=RESUME_UPDATE)
    async def resume(self, request: OperatorRequest) -> OperatorAnswer:
        _declared_only("RolloutWorkflow.resume")

    @workflow.update(name=ABORT_UPDATE)
    async def abort(self, request: OperatorRequest) -> OperatorAnswer:
        _declared_only("RolloutWorkflow.abort")

    @workflow.update(name=ROLLBACK_UPDATE)
    async def rollback(self, request: OperatorRequest) -> OperatorAnswer:
        _declared_only("RolloutWorkflow.rollback")

    @workflow.update(name=SUPERSEDE_UPDATE)
    async def supersede(self, request: SupersedeRequest) -> OperatorAnswer:
        _declared_only("RolloutWorkflow.supersede")

    @workflow.update(name=SCALE_UPDATE)
    async def scale(self, request: ScaleRequest) -> OperatorAnswer:
        _declared_only("RolloutWorkflow.scale")

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> RolloutStatus:
        _declared_only("RolloutWorkflow.status")


@workflow.defn(name="CampaignWorkflow")
class CampaignWorkflow:
    """`campaign/<name>` (`workflows/campaign/workflow.py`)."""

    @workflow.run
    async def run(self, start: CampaignInput) -> CampaignResult:
        _declared_only("CampaignWorkflow.run")

    # The campaign's handlers are plain `def`s, so are these: a caller's update answers the model.
    @workflow.update(name=PAUSE_UPDATE)
    def pause(self, request: OperatorRequest) -> OperatorAnswer:
        _declared_only("CampaignWorkflow.pause")

    @workflow.update(name=RESUME_UPDATE)
    def resume(self, request: OperatorRequest) -> OperatorAnswer:
        _declared_only("CampaignWorkflow.resume")

    @workflow.update(name=ABORT_UPDATE)
    def abort(self, request: AbortRequest) -> OperatorAnswer:
        _declared_only("CampaignWorkflow.abort")

    @workflow.update(name=RETRY_FAILED_UPDATE)
    def retry_failed(self, request: OperatorRequest) -> OperatorAnswer:
        _declared_only("CampaignWorkflow.retry_failed")

    @workflow.update(name=SKIP_HOST_UPDATE)
    def skip_host(self, request: SkipRequest) -> OperatorAnswer:
        _declared_only("CampaignWorkflow.skip_host")

    @workflow.update(name=SET_LIMITS_UPDATE)
    def set_limits(self, request: LimitsRequest) -> OperatorAnswer:
        _declared_only("CampaignWorkflow.set_limits")

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> CampaignStatus:
        _declared_only("CampaignWorkflow.status")

    @workflow.query(name=HOSTS_QUERY)
    def hosts(self, page: HostsQuery) -> HostsPage:
        _declared_only("CampaignWorkflow.hosts")

    @workflow.query(name=DEFERRAL_QUERY)
    def deferral(self, host_id: str) -> tuple[Deferred, ...]:
        _declared_only("CampaignWorkflow.deferral")


@workflow.defn(name="CampaignClaimsWorkflow")
class CampaignClaimsWorkflow:
    """`campaign-claims` (`workflows/campaign_claims/`): which running campaign holds which host."""

    @workflow.run
    async def run(self, start: ClaimsInput) -> None:
        _declared_only("CampaignClaimsWorkflow.run")

    @workflow.update(name=CLAIM_UPDATE)
    def claim(self, request: ClaimRequest) -> ClaimAnswer:
        _declared_only("CampaignClaimsWorkflow.claim")

    @workflow.update(name=RECORD_UPDATE)
    def record(self, request: RecordRequest) -> int:
        _declared_only("CampaignClaimsWorkflow.record")

    @workflow.update(name=RELEASE_UPDATE)
    def release(self, request: ReleaseRequest) -> ReleaseAnswer:
        _declared_only("CampaignClaimsWorkflow.release")

    @workflow.query(name=HELD_QUERY)
    def held(self, request: ClaimRequest) -> ClaimAnswer:
        _declared_only("CampaignClaimsWorkflow.held")

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> ClaimsStatus:
        _declared_only("CampaignClaimsWorkflow.status")


@workflow.defn(name="SiteDPFWatchWorkflow")
class SiteDPFWatchWorkflow:
    """`dpf-watch/<namespace>` (`workflows/site_watch/workflow.py`): the site's one DPF watch and the
    registry of the workflows waiting on its hosts."""

    @workflow.run
    async def run(self, request: SiteWatchInput) -> None:
        _declared_only("SiteDPFWatchWorkflow.run")

    @workflow.signal(name=DPF_WAITER_SIGNAL)
    def dpf_waiter(self, waiter: DPFWaiter) -> None:
        """Register a workflow run for a host (the join), or remove it (`gone`: it has closed)."""
        _declared_only("SiteDPFWatchWorkflow.dpf_waiter")

    @workflow.signal(name=EPOCH_SIGNAL)
    def epoch_raised(self, epoch: int) -> None:
        """The watch activity saw the API server restart (resourceVersions went backwards)."""
        _declared_only("SiteDPFWatchWorkflow.epoch_raised")

    @workflow.signal(name=WORKER_STARTED_SIGNAL)
    def worker_started(self) -> None:
        """A worker of the watch's task queue started: the watch checks its running attempt is alive."""
        _declared_only("SiteDPFWatchWorkflow.worker_started")

    @workflow.update(name=NEXT_WAITERS_UPDATE)
    def next_waiters(self, poll: WaiterPoll) -> WaiterNews:
        """The watch activity's long poll: the registrations after `poll.after`, once there are.
        (Declared without `async`, though the handler awaits: so a caller's result type is
        `WaiterNews` to mypy, not a coroutine.)"""
        _declared_only("SiteDPFWatchWorkflow.next_waiters")

    @workflow.query(name=EPOCH_QUERY)
    def epoch(self) -> int:
        """The watch's epoch (a join reads it from the memo instead: no workflow task)."""
        _declared_only("SiteDPFWatchWorkflow.epoch")

    @workflow.query(name=WAITERS_QUERY)
    def waiters(self) -> list[DPFWaiter]:
        """The registry: every workflow run waiting on a host of the site."""
        _declared_only("SiteDPFWatchWorkflow.waiters")


@workflow.defn(name="BMCLeaseWorkflow")
class BMCLeaseWorkflow:
    """`bmc-lease/<digest>` (`workflows/bmc_lease/workflow.py`)."""

    @workflow.run
    async def run(self, state: BMCLeaseState) -> BMCLeaseStatus:
        _declared_only("BMCLeaseWorkflow.run")

    @workflow.signal(name=BMC_LEASE_ACQUIRE_SIGNAL)
    def acquire(self, request: LeaseRequest) -> None:
        _declared_only("BMCLeaseWorkflow.acquire")

    @workflow.update(name=BMC_LEASE_ACQUIRE_UPDATE)
    def acquire_now(self, request: LeaseRequest) -> LeaseAnswer:
        _declared_only("BMCLeaseWorkflow.acquire_now")

    @workflow.signal(name=BMC_LEASE_RELEASE_SIGNAL)
    def release(self, release: LeaseRelease) -> None:
        _declared_only("BMCLeaseWorkflow.release")

    @workflow.query(name=BMC_LEASE_STATUS_QUERY)
    def status(self) -> BMCLeaseStatus:
        _declared_only("BMCLeaseWorkflow.status")
