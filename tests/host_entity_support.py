"""Stand-ins under the real type names for the tests of the host entity (HostWorkflow) on a real
Temporal (test_host_entity, test_cli_input_bounds): an operation that waits until the test tells it
to end (signal `finish`), so a test decides when an operation is in flight; a reboot that ends at
once; and the entity's read of the host's versions after an operation (a host without DPUs)."""

from __future__ import annotations

from temporalio import activity, workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from contracts.models.host import (
        HostOperationInput,
        HostOperationResult,
        HostRebootInput,
        HostRebootResult,
    )
    from contracts.models.host_records import EntityPredecessor
    from contracts.models.inventory import HostLookup, HostVersions, HostVersionsBrief, ReadVersionsInput


@workflow.defn(name="HostOperationWorkflow")
class StandInOperation:
    """Ends when told: `finish("ok")` completes with one more boot generation, else it fails."""

    @workflow.init
    def __init__(self, request: HostOperationInput) -> None:
        self._how: str | None = None

    @workflow.run
    async def run(self, request: HostOperationInput) -> HostOperationResult:
        await workflow.wait_condition(lambda: self._how is not None)
        if self._how != "ok":
            raise ApplicationError(f"DPU {request.host_id}-dpu-0 in Error: {self._how}", non_retryable=True)
        return HostOperationResult(
            host_id=request.host_id,
            operation=request.kind.value,
            dpu_ids=request.dpu_ids or (),
            reboots=1,
            boot_generation=request.boot_generation + 1,
            started_at=workflow.now(),
            finished_at=workflow.now(),
        )

    @workflow.signal(name="finish")
    def finish(self, how: str) -> None:
        self._how = how

    @workflow.query(name="status")
    def status(self) -> dict[str, object]:
        return {"phase": "waiting-for-test", "waiting_for": "the test's finish signal"}


@workflow.defn(name="HostRebootWorkflow")
class StandInReboot:
    @workflow.run
    async def run(self, request: HostRebootInput) -> HostRebootResult:
        return HostRebootResult(
            host_id=request.host_id,
            boot_generation=request.boot_generation,
            method="stand-in",
            finished_at=workflow.now(),
        )


@activity.defn(name="read_host_versions_brief")
async def stand_in_versions(request: ReadVersionsInput) -> HostVersionsBrief:
    """The entity's versions read after each operation: a host without DPUs. (Without it the read
    is never answered and the entity, which continues-as-new only once no read is in flight,
    waits for its 5-minute bound.)"""
    return HostVersionsBrief(versions=HostVersions(host_id=request.host_id))


@activity.defn(name="read_entity_predecessor")
async def no_predecessor(request: HostLookup) -> EntityPredecessor:
    """A new entity's read of its predecessor (workflows/host/takeover.py): none closed. (Without
    it on a worker that serves no activities, the read is never answered and the entity's
    handlers wait behind it.)"""
    return EntityPredecessor()
