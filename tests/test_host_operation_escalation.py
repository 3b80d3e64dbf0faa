"""Time limits and escalation on the time-skipping test server: a scripted DPF and BMC
(`tests/host_operation_fakes.py`) stand in for the site, so hours of DPF silence take no time."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from host_operation_fakes import HOST, FakeSite
from host_operation_support import aborted_run, start_operation, status_of
from takeover_support import sticky_timeout
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

import workflows
from contracts import names
from contracts.models.control import ABORT_UPDATE, RETRY_UPDATE, OperatorAnswer, OperatorRequest
from contracts.models.dpf import DPF_STATE_CHANGED_SIGNAL
from contracts.models.host import (
    HOST_REBOOTED_UPDATE,
    MANUAL_INTERVENTION_REQUIRED,
    MARK_REBOOTED_UPDATE,
    HostOperationKind,
    HostOperationStatus,
    OperationPolicy,
)
from contracts.with_start import execute_update
from workflows.host_operation.workflow import worst_case_events

POLICY = OperationPolicy(
    power_down_wait_seconds=60,
    reboot_wait_seconds=1800,
    max_power_cycle_retries=2,
    force_off_from_retry=2,
    phase_timeout_seconds=3600,
)
ALICE = OperatorRequest(requested_by="alice", reason="checked the host")


@asynccontextmanager
async def fake_site(env: WorkflowEnvironment, **options: Any) -> AsyncIterator[tuple[FakeSite, str]]:
    task_queue = f"escalation-{uuid.uuid4()}"
    workflow_id = names.reprovision_workflow_id(HOST)
    site = FakeSite(client=env.client, workflow_id=workflow_id, **options)
    async with Worker(
        env.client,
        task_queue=task_queue,
        workflows=workflows.ALL,
        activities=site.activities(),
        sticky_queue_schedule_to_start_timeout=sticky_timeout(),
    ):
        yield site, task_queue


async def until_phase(
    env: WorkflowEnvironment, handle: WorkflowHandle[Any, Any], phase: str
) -> HostOperationStatus:
    for _ in range(200):
        status = await status_of(handle)
        if status.phase == phase:
            return status
        await env.sleep(60)  # skips time on the test server
    raise AssertionError(f"never reached {phase}; last {status.phase}: {status.waiting_for}")


async def test_dpf_silence_reissues_cycles_then_asks_an_operator(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    env = time_skipping_env
    async with fake_site(env, moves_after_reboot=False) as (site, queue):
        handle = await start_operation(env.client, queue, HOST, HostOperationKind.REPROVISION, policy=POLICY)
        status = await until_phase(env, handle, MANUAL_INTERVENTION_REQUIRED)
        # One cycle, a re-issued PowerCycle (retry 1), then ForceOff and On (retry 2 >= force_off_from_retry).
        assert site.power == ["cycle:1", "cycle:2", "ForceOff", "On"]
        assert status.power_cycles_issued == 3 and status.boot_generation == 3
        assert status.manual_intervention_reason and "did not move on" in status.manual_intervention_reason
        # `retry` starts the wait over: after the next silence, cycles are re-issued again.
        answer = await execute_update(handle, RETRY_UPDATE, ALICE, result_type=OperatorAnswer)
        assert answer.accepted
        await until_phase(env, handle, MANUAL_INTERVENTION_REQUIRED)
        assert site.power[4:] == ["cycle:4", "ForceOff", "On"]  # retry 1 (PowerCycle), retry 2 (ForceOff+On)
        # The operator fixed the host by hand: mark_rebooted lets DPF go on.
        site.moves_after_reboot = True
        await execute_update(handle, MARK_REBOOTED_UPDATE, ALICE, result_type=OperatorAnswer)
        result = await handle.result()
        events, changes = await history_cost(env.client, handle)
    assert result.reboots == 5 and result.boot_generation == 5
    # The worst case the workflow states: every reboot re-issued, two operator answers.
    bound = worst_case_events(power_cycles=result.reboots, dpf_changes=changes, answers=2)
    print(f"history: {events} events (run and its reboot children), {changes} DPF changes; bound {bound}")
    assert events <= bound, f"{events} events > {bound}"
    assert sorted(site.phases.values()) == ["Ready", "Ready"]


async def history_cost(client: Client, handle: WorkflowHandle[Any, Any]) -> tuple[int, int]:
    """Events of the run and of every child it started, and the DPF changes it was signalled."""
    events = (await handle.fetch_history()).events
    total = len(events)
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED:
            child = event.child_workflow_execution_started_event_attributes.workflow_execution
            total += len((await client.get_workflow_handle(child.workflow_id).fetch_history()).events)
    changes = sum(
        1
        for e in events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
        and e.workflow_execution_signaled_event_attributes.signal_name == DPF_STATE_CHANGED_SIGNAL
    )
    return total, changes


async def test_retry_is_refused_unless_waiting_for_an_operator(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    env = time_skipping_env
    async with fake_site(env, moves_after_reboot=False) as (_, queue):
        handle = await start_operation(env.client, queue, HOST, HostOperationKind.REPROVISION, policy=POLICY)
        await until_phase(env, handle, "waiting-for-dpf-after-reboot")
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await execute_update(handle, RETRY_UPDATE, ALICE, result_type=OperatorAnswer)
        assert MANUAL_INTERVENTION_REQUIRED in str(refused.value.cause)
        await execute_update(handle, ABORT_UPDATE, ALICE, result_type=OperatorAnswer)
        aborted = await aborted_run(handle)
    assert aborted.startswith("aborted by alice"), aborted


async def test_abort_in_manual_intervention_fails_cleanly(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    env = time_skipping_env
    async with fake_site(env, moves_after_reboot=False) as (site, queue):
        handle = await start_operation(env.client, queue, HOST, HostOperationKind.REPROVISION, policy=POLICY)
        await until_phase(env, handle, MANUAL_INTERVENTION_REQUIRED)
        await execute_update(handle, ABORT_UPDATE, ALICE, result_type=OperatorAnswer)
        await aborted_run(handle)
        final = await status_of(handle)
    assert final.phase == "aborted"
    assert site.annotation_removals == 1  # acknowledged once after the first cycle; never without one


async def test_a_bmc_rejecting_the_credentials_asks_an_operator_at_once_and_host_rebooted_answers(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    env = time_skipping_env
    async with fake_site(env, bmc_fails=True) as (site, queue):
        handle = await start_operation(env.client, queue, HOST, HostOperationKind.REPROVISION, policy=POLICY)
        status = await until_phase(env, handle, MANUAL_INTERVENTION_REQUIRED)
        reason = status.manual_intervention_reason or ""
        assert f"the BMC of {HOST} rejected the credentials (BMCAuthenticationFailed: 401" in reason
        assert f"metalflow host mark-rebooted {HOST}" in status.waiting_for  # what the operator can answer
        answer = await execute_update(handle, HOST_REBOOTED_UPDATE, ALICE, result_type=OperatorAnswer)
        result = await handle.result()
        # Generations earlier tests on this server used are spent: the operation took the next.
        child = env.client.get_workflow_handle(f"reboot/{HOST}/generation-{result.boot_generation}")
        with pytest.raises(WorkflowFailureError) as failed:
            await child.result()
    assert answer.accepted and "mark_rebooted accepted from alice" in answer.message
    assert site.power == []  # the BMC never cycled it; the person did
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "BMCRebootFailed"


async def test_two_refused_reboots_then_a_real_one_count_one_power_cycle_and_one_generation(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    """Issue 29 item 4: two reboots the BMC refused, then one real cycle, ended as `reboots 3`,
    `boot_generation +3` and `3 power cycles` (one in the BMC's log); `power cycles issued 1`
    showed before anything was cycled. Attempts are attempts; the generation moves once per reset
    that happened (the refused generation is rebooted to on the retry)."""
    env, start = time_skipping_env, 5000  # generations no other test of this server reaches
    async with fake_site(env, bmc_fails=True) as (site, queue):
        handle = await start_operation(
            env.client, queue, HOST, HostOperationKind.REPROVISION, policy=POLICY, boot_generation=start
        )
        first = await until_phase(env, handle, MANUAL_INTERVENTION_REQUIRED)
        assert (first.reboot_attempts, first.power_cycles_issued, first.boot_generation) == (1, 0, start)
        await execute_update(handle, RETRY_UPDATE, ALICE, result_type=OperatorAnswer)  # still refused
        for _ in range(200):
            second = await status_of(handle)
            if second.reboot_attempts == 2 and second.phase == MANUAL_INTERVENTION_REQUIRED:
                break
            await asyncio.sleep(0.05)
        assert (second.reboot_attempts, second.power_cycles_issued, second.boot_generation) == (2, 0, start)
        site.bmc_fails = False  # the operator fixed the credentials
        await execute_update(handle, RETRY_UPDATE, ALICE, result_type=OperatorAnswer)
        result = await handle.result()
        final = await status_of(handle)
    assert site.power == [f"cycle:{start + 1}"]  # exactly one cycle, after the fix
    assert (result.reboots, result.boot_generation) == (1, start + 1)
    assert (final.reboot_attempts, final.power_cycles_issued) == (3, 1)


async def test_host_rebooted_is_refused_naming_the_phase_when_no_reboot_is_awaited(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    env = time_skipping_env
    async with fake_site(env, moves_after_reboot=False) as (site, queue):
        handle = await start_operation(env.client, queue, HOST, HostOperationKind.REPROVISION, policy=POLICY)
        await until_phase(env, handle, "waiting-for-dpf-after-reboot")
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await execute_update(handle, HOST_REBOOTED_UPDATE, ALICE, result_type=OperatorAnswer)
        await execute_update(handle, ABORT_UPDATE, ALICE, result_type=OperatorAnswer)
        await aborted_run(handle)
    cause = refused.value.cause
    assert isinstance(cause, ApplicationError)
    assert "is not waiting for a reboot: it is waiting-for-dpf-after-reboot: DPF to move the DPUs on" in (
        cause.message
    )


async def test_abort_in_the_power_down_wait_of_force_off_then_on_cuts_the_wait_and_powers_on(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    env = time_skipping_env
    policy = POLICY.model_copy(update={"force_off_from_retry": 0, "power_down_wait_seconds": 3600})
    async with fake_site(env) as (site, queue):
        handle = await start_operation(env.client, queue, HOST, HostOperationKind.REPROVISION, policy=policy)
        status = await until_phase(env, handle, "rebooting-host")
        for _ in range(100):
            if site.power:
                break
            await asyncio.sleep(0.1)  # real time: the test server skips none while the test waits
        assert site.power == ["ForceOff"]  # the host is off, its hour-long wait begun
        await execute_update(handle, ABORT_UPDATE, ALICE, result_type=OperatorAnswer)
        aborted = await aborted_run(handle)
        final = await status_of(handle)
        # The cut-short cycle is a reboot that happened: the generation moved to the child's.
        assert final.boot_generation > status.boot_generation and final.power_cycles_issued == 1
        reboot = env.client.get_workflow_handle(f"reboot/{HOST}/generation-{final.boot_generation}")
        history = (await reboot.fetch_history()).events
        events = [event.event_type for event in history]
    assert site.power == ["ForceOff", "On"]  # on again, once
    assert EventType.EVENT_TYPE_TIMER_CANCELED in events  # the wait was cut, not waited out
    # Its timers end at each power read (every 30 s); together far short of the hour.
    took = history[-1].event_time.ToDatetime() - history[0].event_time.ToDatetime()
    assert took.total_seconds() < 600, took
    assert aborted.startswith("aborted by alice") and "removed the reboot-required annotation" in aborted
    assert final.phase == "aborted" and "removed the reboot-required annotation" in final.waiting_for
