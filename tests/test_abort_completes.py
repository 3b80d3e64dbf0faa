"""An operator's abort of any host operation ends as asked for, not as a failure (issue 38 item 4):
for each kind (provision, reprovision, reboot, reset, firmware, removal), `metalflow host abort`
leaves the run Completed in Temporal (`describe().status`, what the UI and an alert on failed
workflows read), its Phase `aborted`, its result's `aborted` saying who and why; the entity
records `aborted by <who>: ...` and `host status` says so. Through the real CLI against a real
Temporal, the product's workflows and activities, and the simulated site.

Each operation is caught at its first step: the real activity (`resolve_host_inventory`, or a
reboot's `lease_host_bmc`) is held until the abort is accepted (its timing cannot be caught
else: the simulated site answers at once), then runs; nothing else is stood in for.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from host_operation_support import aborted_run
from lease_step_worker import activity_name
from module_site_support import ModuleSite
from sim_support import RunningSim
from takeover_support import sticky_timeout
from temporalio import activity
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

import workflows
from activities import build_activities
from activities.heartbeat import beats_while_running
from contracts.models.bmc_lease import LeaseHostBMCInput, LeaseHostBMCResult
from contracts.models.inventory import HostInventory, HostLookup
from drivers.settings import Settings
from metalflow.hosts import host_status

PREFIX = f"abc{uuid.uuid4().hex[:5]}"
KINDS: dict[str, tuple[str, ...]] = {  # the command after `host`, then the host (its index)
    "provision": ("provision",),
    "reprovision": ("reprovision",),
    "reboot": ("reboot",),
    "reset": ("reset", "--host"),
    "firmware": ("firmware", "--version", "24.99.9999", "--image", "http://images.example/fw.bin"),
    "removal": ("remove",),
}
HOSTS = {kind: f"{PREFIX}-{index:03d}" for index, kind in enumerate(KINDS, start=1)}
SITE = ModuleSite(PREFIX, hosts=len(HOSTS))
sim = SITE.fixtures()[0]  # the queue (below) is a worker whose first steps the test holds
cli = SITE.cli


class Holds:
    """The held first steps: a step for a host of `HOSTS` waits until that host is released."""

    def __init__(self) -> None:
        self.started: dict[str, asyncio.Event] = {h: asyncio.Event() for h in HOSTS.values()}
        self.released: dict[str, asyncio.Event] = {h: asyncio.Event() for h in HOSTS.values()}

    async def hold(self, host: str) -> None:
        if host in self.started and not self.released[host].is_set():
            self.started[host].set()
            await self.released[host].wait()

    def steps(self, every: list[Any]) -> list[Any]:
        """`every` activity, the first steps held."""
        resolve = next(f for f in every if activity_name(f) == "resolve_host_inventory")
        lease = next(f for f in every if activity_name(f) == "lease_host_bmc")

        # Held, each beats as the real one does, so its heartbeat timeout never cuts the hold.
        @activity.defn(name="resolve_host_inventory")
        @beats_while_running
        async def held_resolve(lookup: HostLookup) -> HostInventory:
            await self.hold(lookup.host_id)
            found: HostInventory = await resolve(lookup)
            return found

        @activity.defn(name="lease_host_bmc")
        @beats_while_running
        async def held_lease(request: LeaseHostBMCInput) -> LeaseHostBMCResult:
            await self.hold(request.lookup.host_id)
            got: LeaseHostBMCResult = await lease(request)
            return got

        kept = [f for f in every if activity_name(f) not in ("resolve_host_inventory", "lease_host_bmc")]
        return [*kept, held_resolve, held_lease]


@pytest.fixture(scope="module")
def holds() -> Holds:
    return Holds()


@pytest.fixture
async def queue(
    local_env: WorkflowEnvironment, sim: RunningSim, holds: Holds, task_queue: str
) -> AsyncIterator[str]:
    settings = Settings(site_file=sim.site_file, kubeconfig=sim.kubeconfig)
    every = holds.steps(build_activities(temporal_client=local_env.client, settings=settings))
    async with Worker(
        local_env.client,
        task_queue=task_queue,
        workflows=workflows.ALL,
        activities=every,
        sticky_queue_schedule_to_start_timeout=sticky_timeout(),
    ):
        yield task_queue


@pytest.mark.parametrize("kind", list(KINDS))
async def test_an_aborted_operation_completes_aborted_and_says_who(
    local_env: WorkflowEnvironment, queue: str, holds: Holds, kind: str
) -> None:
    host = HOSTS[kind]
    asked = await cli(local_env, "host", *KINDS[kind][:1], host, *KINDS[kind][1:], "--task-queue", queue)
    assert asked.status == 0, asked.stdout + asked.stderr
    await asyncio.wait_for(holds.started[host].wait(), 60)  # its first step runs, held
    entity = await host_status(local_env.client, host)
    assert entity.current is not None, entity
    operation = entity.current.workflow_id
    stop = await cli(
        local_env, "host", "abort", host, "--by", "alice", "--reason", f"no {kind}", "--task-queue", queue
    )
    assert stop.status == 0, stop.stdout + stop.stderr
    holds.released[host].set()

    # Temporal: Completed, not Failed (the UI, an alert on failed workflows); Phase `aborted`.
    words = await aborted_run(local_env.client.get_workflow_handle(operation))
    assert f"aborted by alice: no {kind}" in words, words
    for _ in range(300):  # the entity records the end a moment later
        entity = await host_status(local_env.client, host)
        if entity.current is None:
            break
        await asyncio.sleep(0.2)
    last = entity.recent[-1]
    assert last.workflow_id == operation and last.outcome.startswith("aborted"), last
    assert f"aborted by alice: no {kind}" in last.outcome and "failed" not in last.outcome, last
    shown = await cli(local_env, "host", "status", host)
    assert shown.status == 0, shown.stderr
    assert f"aborted by alice: no {kind}" in shown.stdout, shown.stdout
