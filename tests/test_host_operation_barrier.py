"""The stuck reboot barrier and an abort during a power cycle, on the time-skipping test server.

The scripted DPF and BMC of `tests/host_operation_fakes.py` stand in for the site, changed here:
its hold release activity is replaced (it leaves one DPU installing: DPF never brings it to
`Rebooting`), and its BMC power cycles (`cycled`, `power_set`: the cycle, or a ForceOff, can be
held between Off and On until the test lets it go on).
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from host_operation_fakes import DPUS, HOST, FakeSite
from host_operation_support import aborted_run, save_history, start_operation, status_of
from takeover_support import sticky_timeout
from temporalio import activity
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

import workflows
from contracts import names
from contracts.models.control import ABORT_UPDATE, RETRY_UPDATE, OperatorAnswer, OperatorRequest
from contracts.models.dpf import ChangeResult, HostRef
from contracts.models.host import (
    MANUAL_INTERVENTION_REQUIRED,
    HostOperationKind,
    HostOperationResult,
    HostOperationStatus,
    OperationPolicy,
)
from contracts.models.redfish import PowerCycleInput
from contracts.with_start import execute_update

PHASE_TIMEOUT = 900.0
POLICY = OperationPolicy(
    power_down_wait_seconds=60, reboot_wait_seconds=1800, max_power_cycle_retries=2,
    force_off_from_retry=2, phase_timeout_seconds=PHASE_TIMEOUT,
)  # fmt: skip
ALICE = OperatorRequest(requested_by="alice", reason="looked at the host")
STUCK, FINE = DPUS[1], DPUS[0]
WAITING_FOR_REBOOT_REQUEST = "waiting-for-reboot-request"


class StuckSite(FakeSite):
    """The fake site, with the replacements described in the module docstring."""

    stuck_in: dict[str, str]
    cycle_may_finish: asyncio.Event
    # A BMC that power cycles: an abort's stop reads it while the cycle is held.
    allowed_reset_types = ("PowerCycle", "ForceOff", "On")
    power_cycle_method = "PowerCycle"

    def activity_table(self) -> dict[str, Callable[..., Any]]:
        return {**super().activity_table(), **self._replacements()}

    def _replacements(self) -> dict[str, Callable[..., Any]]:
        site = self

        @activity.defn(name="release_node_effect_hold")
        async def release(host: HostRef) -> ChangeResult:
            site.holding = False
            for dpu, phase in site.phases.items():
                if phase == "Node Effect":
                    site.phases[dpu] = site.stuck_in.get(dpu, "Rebooting")
            site.annotation = True  # DPF asks as soon as the FIRST DPU reaches Rebooting
            await site.changed()
            return ChangeResult(name="hold", changed=True)

        return {"release_node_effect_hold": release}

    async def held(self) -> None:
        """Until the test says so; heartbeats keep the (power) activity's attempt alive meanwhile."""
        while not self.cycle_may_finish.is_set():
            activity.heartbeat()
            await asyncio.sleep(0.05)

    async def cycled(self, request: PowerCycleInput) -> None:
        self.power.append("Off")
        await self.held()
        self.power.append("On")

    async def power_set(self, reset_type: str) -> None:
        self.power.append(reset_type)
        if reset_type == "ForceOff":
            await self.held()

    def reads_off(self) -> bool:
        # What an abort's stop reads while the cycle is held: Off once the cycle turned it off.
        return bool(self.power) and self.power[-1] in ("Off", "ForceOff")


Start = Callable[[OperationPolicy], Awaitable[WorkflowHandle[Any, HostOperationResult]]]
# Boot generations far above the escalation tests' (they share the test server and the host id,
# and a reboot's id, its generation, is spent once used), so neither file depends on the order.
_GENERATIONS = itertools.count(1000, 100)


@asynccontextmanager
async def stuck_site(
    env: WorkflowEnvironment, stuck_in: dict[str, str], hold_cycle: bool = False
) -> AsyncIterator[tuple[StuckSite, Start]]:
    """The site, and how to start the operation on it (an id of its own, fresh generations)."""
    task_queue = f"barrier-{uuid.uuid4()}"
    suffix = f"-barrier-{uuid.uuid4().hex[:8]}"
    site = StuckSite(client=env.client, workflow_id=names.reprovision_workflow_id(HOST) + suffix)
    site.stuck_in = stuck_in
    site.cycle_may_finish = asyncio.Event()
    if not hold_cycle:
        site.cycle_may_finish.set()

    async def start(policy: OperationPolicy) -> WorkflowHandle[Any, HostOperationResult]:
        return await start_operation(
            env.client, task_queue, HOST, HostOperationKind.REPROVISION, policy=policy,
            boot_generation=next(_GENERATIONS), id_suffix=suffix,
        )  # fmt: skip

    activities = site.activities()
    async with Worker(
        env.client,
        task_queue=task_queue,
        workflows=workflows.ALL,
        activities=activities,
        sticky_queue_schedule_to_start_timeout=sticky_timeout(),
    ):
        yield site, start


async def until(
    env: WorkflowEnvironment, handle: WorkflowHandle[Any, Any], check: Callable[[HostOperationStatus], bool]
) -> HostOperationStatus:
    """Skip time a minute at a time until the status satisfies `check`."""
    for _ in range(100):
        status = await status_of(handle)
        if check(status):
            return status
        await env.sleep(60)
    raise AssertionError(f"condition never met; last status: {status}")


async def real_time_until(check: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.05)


def _intervention(status: HostOperationStatus) -> bool:
    return status.phase == MANUAL_INTERVENTION_REQUIRED


async def test_a_dpu_that_never_reaches_rebooting_asks_an_operator_and_retry_waits_again(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    env = time_skipping_env
    async with stuck_site(env, {STUCK: "OS Installing"}) as (site, start):
        handle = await start(POLICY)
        waiting = await until(env, handle, lambda s: s.phase == WAITING_FOR_REBOOT_REQUEST)
        assert "Rebooting (1 of 2)" in waiting.waiting_for

        stuck = await until(env, handle, _intervention)
        # The sibling writes its OS: the annotation is there, but the host must not be cycled.
        assert site.power == [] and site.annotation
        reason = stuck.manual_intervention_reason or ""
        assert f"nothing changed for {PHASE_TIMEOUT:g} s" in reason
        assert f"{STUCK} in OS Installing" in reason and FINE not in reason
        assert f"{STUCK} in OS Installing" in stuck.waiting_for and "retry" in stuck.waiting_for
        assert [(d.dpu_id, d.phase) for d in stuck.dpus] == [(FINE, "Rebooting"), (STUCK, "OS Installing")]
        assert stuck.reboots_requested == 0 and stuck.power_cycles_issued == 0

        answer = await execute_update(handle, RETRY_UPDATE, ALICE, result_type=OperatorAnswer)
        assert answer.accepted and "alice" in answer.message
        # The wait starts over: the barrier again, with a whole phase timeout before the next escalation.
        again = await status_of(handle)
        assert again.phase == WAITING_FOR_REBOOT_REQUEST and again.manual_intervention_reason is None
        await env.sleep(PHASE_TIMEOUT - 120)
        assert (await status_of(handle)).phase == WAITING_FOR_REBOOT_REQUEST
        stuck_again = await until(env, handle, _intervention)
        assert stuck_again.manual_intervention_reason and STUCK in stuck_again.manual_intervention_reason
        assert site.power == []

        # The install finally ends: after a retry, the barrier is reached, one power cycle, done.
        await execute_update(handle, RETRY_UPDATE, ALICE, result_type=OperatorAnswer)
        site.phases[STUCK] = "Rebooting"
        await site.changed()
        result = await handle.result()
    assert site.power == ["Off", "On"] and result.reboots == 1
    assert sorted(site.phases.values()) == ["Ready", "Ready"] and not site.annotation


async def test_abort_of_a_stuck_barrier_fails_cleanly_without_a_reboot(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    env = time_skipping_env
    async with stuck_site(env, {STUCK: "Prepare BFB"}) as (site, start):
        handle = await start(POLICY)
        stuck = await until(env, handle, _intervention)
        assert f"{STUCK} in Prepare BFB" in (stuck.manual_intervention_reason or "")
        answer = await execute_update(handle, ABORT_UPDATE, ALICE, result_type=OperatorAnswer)
        assert answer.accepted
        aborted = await aborted_run(handle)
        final = await status_of(handle)
    assert "aborted by alice: looked at the host" in aborted
    assert final.phase == "aborted" and "released the Node Effect hold" in final.waiting_for
    # No reboot happened, so DPF's request is left standing: nobody may claim the host was rebooted.
    assert site.power == [] and site.annotation and site.annotation_removals == 0


@pytest.mark.parametrize(
    ("force_off_from_retry", "cycle"),
    [(1, ["Off", "On"]), (0, ["ForceOff", "On"])],
    ids=["power-cycle", "force-off-then-on"],
)
async def test_abort_during_a_power_cycle_lets_it_finish_first(
    time_skipping_env: WorkflowEnvironment, force_off_from_retry: int, cycle: list[str]
) -> None:
    env = time_skipping_env
    policy = POLICY.model_copy(update={"force_off_from_retry": force_off_from_retry})
    async with stuck_site(env, {}, hold_cycle=True) as (site, start):
        handle = await start(policy)
        await real_time_until(lambda: site.power[:1] == cycle[:1], "the host powered off")
        await execute_update(handle, ABORT_UPDATE, ALICE, result_type=OperatorAnswer)
        # The abort is taken: a PowerCycle is cut short once the BMC reads Off (the activity is
        # cancelled and On sent at once); a ForceOff in flight is let finish, its wait then cut.
        assert site.power[:1] == cycle[:1]
        if cycle[0] == "Off":  # the PowerCycle is cut short without being let go: On comes first
            await real_time_until(lambda: site.power == cycle, "the host on again")
        site.cycle_may_finish.set()
        await aborted_run(handle)  # the host came back on before the operation completed, aborted
        final = await status_of(handle)
        if force_off_from_retry == 0:
            child = env.client.get_workflow_handle(f"reboot/{HOST}/generation-{final.boot_generation}")
            await save_history(child, "host_reboot_force_off_cancelled_midway")
            await save_history(handle, "host_operation_aborted_during_power_cycle")
    assert site.power == cycle  # the host came back on before the operation ended
    assert final.phase == "aborted" and final.power_cycles_issued == 1
    # The reboot DPF asked for happened: it is acknowledged, or DPF would wait for it forever.
    assert site.annotation_removals == 1 and not site.annotation
