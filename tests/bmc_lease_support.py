"""Support for the tests of the fleet-wide per-BMC limit (workflows/bmc_lease/workflow.py): a
simulated site whose hosts share one multi-system BMC, the lease's handle and status, a reboot
stopped while it waits or steps (abort or cancel), and a stand-in workflow that takes the
lease's one slot and never gives it back."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from host_operation_support import wait_for_query
from sim_support import RunningSim, running_sim
from takeover_support import sticky_timeout
from temporalio import workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

import workflows
from activities import build_activities
from contracts import names
from contracts.models.bmc_lease import (
    BMC_LEASE_GRANTED_SIGNAL,
    BMC_LEASE_STATUS_QUERY,
    BMCLeaseStatus,
    LeaseGrant,
)
from contracts.models.control import ABORT_UPDATE, OperatorAnswer, OperatorRequest
from contracts.models.host import HostRebootResult
from contracts.models.inventory import BMCAccess, CredentialRef
from contracts.with_start import execute_update
from drivers.settings import Settings
from workflows.parts.bmc_lease_holder import BMCLeaseHolder

HOSTS = ("chassis-a-1", "chassis-a-2", "chassis-a-3")


def shared_bmc_sim(
    tmp_path: Path, hosts: tuple[str, ...], timings: str
) -> AbstractContextManager[RunningSim]:
    """A site whose hosts are Systems of one multi-system BMC (one endpoint, one account)."""
    site = {
        "name": "chassis",
        "hosts": [{"id": h, "bmc": {"profile": "multi-system", "group": "chassis-a"}} for h in hosts],
    }
    (tmp_path / "site.yaml").write_text(yaml.safe_dump(site))
    return running_sim(tmp_path / "sim", site_file=tmp_path / "site.yaml", timings=timings)


def lease_of(
    client: Client, sim: RunningSim, host: str, task_queue: str
) -> WorkflowHandle[object, BMCLeaseStatus]:
    endpoint = sim.host(host)["bmc"]["endpoint"]
    lease_id = names.bmc_lease_workflow_id(endpoint, task_queue)
    return client.get_workflow_handle(lease_id, result_type=BMCLeaseStatus)


async def lease_status(handle: WorkflowHandle[object, BMCLeaseStatus]) -> BMCLeaseStatus | None:
    """The lease's `status`, or None before it started (a request starts it)."""
    try:
        return await handle.query(BMC_LEASE_STATUS_QUERY, result_type=BMCLeaseStatus)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise


async def stop_reboot(reboot: WorkflowHandle[object, HostRebootResult], how: str) -> None:
    """`abort`: the reboot's abort update, as an operator sends it (accepted); `cancel`: a cancel,
    as its parent's abort sends it."""
    if how == "abort":
        answer = await execute_update(
            reboot,
            ABORT_UPDATE,
            OperatorRequest(requested_by="test", reason="wrong host"),
            result_type=OperatorAnswer,
        )
        assert answer.accepted, answer
    else:
        await reboot.cancel()


@workflow.defn(name="HoldBMCLeaseForever", sandboxed=False)
class HoldBMCLeaseForever:
    """Takes a slot of the BMC's lease and never gives it back (until terminated)."""

    def __init__(self) -> None:
        self._leases = BMCLeaseHolder()

    @workflow.signal(name=BMC_LEASE_GRANTED_SIGNAL)
    def bmc_lease_granted(self, grant: LeaseGrant) -> None:
        self._leases.granted(grant)

    @workflow.run
    async def run(self, bmc: BMCAccess) -> None:
        async with self._leases.hold(bmc, "hold forever"):
            await workflow.wait_condition(lambda: False)


@dataclass
class HeldSlot:
    lease: WorkflowHandle[object, BMCLeaseStatus]
    bmc: BMCAccess  # only its endpoint names the lease: the stand-in holders never touch the BMC
    holder: WorkflowHandle[Any, Any]  # a `HoldBMCLeaseForever` run holding the one slot


@asynccontextmanager
async def one_slot_held(
    client: Client, task_queue: str, sim: RunningSim, **settings: Any
) -> AsyncIterator[HeldSlot]:
    """A worker (every workflow, and `HoldBMCLeaseForever`) for HOSTS[0], one BMC request at a time
    (`settings` change more), and a `HoldBMCLeaseForever` run that holds that slot."""
    host = HOSTS[0]
    worker_settings = Settings(site_file=sim.site_file, kubeconfig=sim.kubeconfig, bmc_max_in_flight=1)
    worker_settings = worker_settings.model_copy(update=settings)
    lease = lease_of(client, sim, host, task_queue)
    bmc = BMCAccess(
        bmc_id=host, endpoint=sim.host(host)["bmc"]["endpoint"], credentials=CredentialRef(file="/none")
    )
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[*workflows.ALL, HoldBMCLeaseForever],
        activities=build_activities(temporal_client=client, settings=worker_settings),
        sticky_queue_schedule_to_start_timeout=sticky_timeout(),
    ):
        holder = await client.start_workflow(
            HoldBMCLeaseForever.run, bmc, id=f"hold-{task_queue}", task_queue=task_queue
        )
        await wait_for_query(
            lambda: lease_status(lease), lambda s: s is not None and len(s.holders) == 1, "a holder", 60
        )
        yield HeldSlot(lease=lease, bmc=bmc, holder=holder)
