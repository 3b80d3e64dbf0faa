"""CampaignWorkflow under the time-skipping server: canary, batches, soak, windows, the failure
budget and its halt, continue-as-new with exact counts, busy and assigned hosts.

Real: the campaign, each host's entity `host/<id>` (requests, refusals, the `Campaign` attribute,
the `host_finished` signal), the campaign activities (inventory from a site file, requests
through the worker's client). Stand-in: the operation itself (tests/campaign_support.py), which
takes 10 minutes of workflow time. Assertions read the operations' own start and close times
from Temporal, never the wall clock.

Why every campaign here sweeps once a day (`SWEEP`), not every 600 s (the default). The
time-skipping server refuses a workflow task whose commands cancel a timer that fired while the
task ran ("invalid history builder state for action"; temporalio/sdk-java#2606 and #3088), and
the run then never gets another task: it hangs. The real server accepts that cancel. A default
sweep alarm is due 600 s after a host starts, a fraction of a second after its 10-minute stand-in
operation ends; the campaign cancels that alarm in the task that absorbs the end (nothing left in
flight). On an idle machine the task finishes first; on a loaded one the alarm fired during the
task, and the campaign hung (CI: past 300 s, twice). Reproduced with a loaded machine's delays
made explicit (the campaign's `host_finished` handling taking 3-4 s of real time, the request
activity answering 2 s late): the 600-s sweep hung 3 runs of 3 with the server's refusal logged;
a day's sweep passed every test of this module under the same delays. No test here is about the
sweep, and a day keeps every alarm that gets cancelled hours from its due time. The windows test
also starts at a fixed time of day (`_at_time_of_day`), so its schedule is the same whenever it
runs, and no start falls a fraction of a second from a window's edge.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from campaign_support import (
    OPERATION_MINUTES,
    OPERATOR_ANSWERED,
    OperatorWaitOperation,
    campaign_worker,
    host_ids,
    write_site,
)
from host_operation_support import save_history
from sim_support import time_skipping_server
from temporalio.client import Client, WorkflowExecutionDescription, WorkflowFailureError, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from contracts import names, workflow_api
from contracts.models.campaign import (
    CampaignInput,
    CampaignPolicy,
    CampaignResult,
    CampaignStatus,
    CampaignTarget,
    FailureBudget,
    HostSelection,
    Limits,
    TargetKind,
    Window,
)
from contracts.models.control import RESUME_UPDATE, STATUS_QUERY, OperatorAnswer, OperatorRequest
from contracts.models.control import STATUS_QUERY as HOST_STATUS_QUERY
from contracts.models.host import (
    ASSIGN_INSTANCE_UPDATE,
    REQUEST_REPROVISION_UPDATE,
    AssignInstanceRequest,
    HostStatus,
    HostWorkflowInput,
    OperationAccepted,
    OperationRequest,
)
from contracts.with_start import execute_update

REPROVISION = CampaignTarget(kind=TargetKind.REPROVISION)
SWEEP = 86400.0  # see the module docstring: far from every stand-in operation's end


@pytest.fixture(scope="module")
async def time_skipping_env(lifeline_bin: Path) -> AsyncIterator[WorkflowEnvironment]:
    """This module's own time-skipping server: its campaigns skip hours of soak and windows, which
    timed out (300 s) on the session's server when other modules' runs were left on it under load."""
    async with time_skipping_server(lifeline_bin) as env:
        yield env


def _input(hosts: list[str], **options: object) -> CampaignInput:
    values: dict[str, object] = {
        "name": "x",
        "target": REPROVISION,
        "selection": HostSelection(hosts=tuple(hosts)),
        "requested_by": "test",
        "policy": CampaignPolicy(sweep_seconds=SWEEP),
    }
    values.update(options)
    return CampaignInput.model_validate(values)


async def _at_time_of_day(env: WorkflowEnvironment, hour: int, minute: int) -> datetime:
    """Skip the server's clock to the next `hour:minute` UTC (it starts at the wall clock's time)."""
    now = (await env.get_current_time()).astimezone(UTC)
    target = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if target <= now:
        target += timedelta(days=1)
    await env.sleep(target - now)
    return target


async def _start(
    client: Client, task_queue: str, request: CampaignInput
) -> WorkflowHandle[object, CampaignResult]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    return await client.start_workflow(
        workflow_api.CampaignWorkflow.run,
        request.model_copy(update={"name": name}),
        id=names.campaign_workflow_id(name),
        task_queue=task_queue,
    )


async def _operation(client: Client, host: str) -> WorkflowExecutionDescription:
    return await client.get_workflow_handle(names.reprovision_workflow_id(host)).describe()


async def _status(handle: WorkflowHandle[object, CampaignResult]) -> CampaignStatus:
    status: CampaignStatus = await handle.query(STATUS_QUERY, result_type=CampaignStatus)
    return status


async def _until_phase(
    env: WorkflowEnvironment, handle: WorkflowHandle[object, CampaignResult], phase: str
) -> CampaignStatus:
    for _ in range(200):  # each round skips 5 minutes of workflow time
        status = await _status(handle)
        if status.phase == phase:
            return status
        await env.sleep(timedelta(minutes=5))
    raise AssertionError(f"the campaign never reached {phase}; last: {status}")


async def test_canary_then_batches_with_soak_inside_windows(
    time_skipping_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    client = time_skipping_env.client
    hosts = host_ids(f"cw{uuid.uuid4().hex[:4]}", 7)
    window = Window(start_minute=2 * 60, end_minute=5 * 60)  # 02:00-05:00 UTC every day
    request = _input(
        hosts,
        canary=1,
        limits=Limits(batch_size=3, max_in_flight=2),
        soak_seconds=3600,
        windows=(window,),
    )
    await _at_time_of_day(time_skipping_env, 0, 30)  # the window opens 90 minutes later
    async with campaign_worker(client, task_queue, write_site(tmp_path, hosts)):
        handle = await _start(client, task_queue, request)
        result = await handle.result()
    assert (result.outcome, result.done, result.failed, result.skipped) == ("completed", 7, 0, 0)
    ops = sorted([await _operation(client, h) for h in hosts], key=lambda d: d.start_time or datetime.min)
    for op in ops:
        started = op.start_time.astimezone(UTC) if op.start_time else None
        assert started is not None and 2 <= started.hour < 5, f"{op.id} started outside the window: {started}"
        assert op.search_attributes.get(names.CAMPAIGN.name) == [handle.id.removeprefix("campaign/")]
    canary, batch1, batch2 = ops[0], ops[1:4], ops[4:]
    assert canary.close_time is not None
    assert all(op.start_time and op.start_time >= canary.close_time for op in ops[1:]), "canary first"
    assert all(
        op.start_time and op.start_time >= canary.close_time + timedelta(seconds=3600) for op in batch1
    ), "the soak follows the canary too (issue 38)"
    batch1_end = max(op.close_time for op in batch1 if op.close_time)
    assert all(op.start_time and op.start_time >= batch1_end + timedelta(seconds=3600) for op in batch2), (
        "soak"
    )
    for op in ops:  # never more than max_in_flight at once
        overlapping = [
            o
            for o in ops
            if o.start_time <= op.start_time < (o.close_time or datetime.max.replace(tzinfo=UTC))
        ]  # type: ignore[operator]
        assert len(overlapping) <= 2


async def test_failure_budget_halts_until_resume(
    time_skipping_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    client = time_skipping_env.client
    hosts = host_ids(f"cb{uuid.uuid4().hex[:4]}", 8, failing=(2, 3))
    request = _input(
        hosts, canary=1, limits=Limits(batch_size=5, max_in_flight=5), budget=FailureBudget(max_failures=1)
    )
    async with campaign_worker(client, task_queue, write_site(tmp_path, hosts)):
        handle = await _start(client, task_queue, request)
        halted = await _until_phase(time_skipping_env, handle, "halted")
        assert halted.failed == 2 and "failure budget" in (halted.halted_reason or "")
        assert {f.host_id for f in halted.failures} == {hosts[2], hosts[3]}
        assert all("injected" in f.reason for f in halted.failures)
        await time_skipping_env.sleep(timedelta(hours=5))  # a halt waits for an operator, however long
        for late in hosts[6:]:
            with pytest.raises(RPCError) as missing:
                await _operation(client, late)
            assert missing.value.status == RPCStatusCode.NOT_FOUND, "nothing starts while halted"
        answer = await execute_update(
            handle, RESUME_UPDATE, OperatorRequest(requested_by="test"), result_type=OperatorAnswer
        )
        assert "failure budget counts from now" in answer.message
        result = await handle.result()
        await save_history(handle, "campaign_budget_halted_resumed")
    assert (result.outcome, result.done, result.failed) == ("completed", 6, 2)
    assert not result.all_succeeded


async def test_continue_as_new_keeps_exact_counts(
    time_skipping_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    client = time_skipping_env.client
    hosts = host_ids(f"cn{uuid.uuid4().hex[:4]}", 12, failing=(5,))
    request = _input(
        hosts,
        canary=0,
        limits=Limits(batch_size=12, max_in_flight=3),
        budget=FailureBudget(max_failures=3),
        policy=CampaignPolicy(max_history_events=20, sweep_seconds=SWEEP),
    )
    async with campaign_worker(client, task_queue, write_site(tmp_path, hosts)):
        handle = await _start(client, task_queue, request)
        result = await handle.result()
        for host in hosts:  # each host ran exactly once: its entity recorded one operation
            entity = client.get_workflow_handle(names.host_workflow_id(host))
            status = await entity.query(HOST_STATUS_QUERY, result_type=HostStatus)
            assert [r.workflow_id for r in status.recent] == [names.reprovision_workflow_id(host)]
    assert result.runs >= 3, f"expected at least two continue-as-new, got {result.runs} runs"
    assert (result.total, result.done, [f.host_id for f in result.failures]) == (12, 11, [hosts[5]])


async def test_busy_host_waits_and_assigned_host_is_skipped(
    time_skipping_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    client = time_skipping_env.client
    busy, assigned, plain = host_ids(f"cy{uuid.uuid4().hex[:4]}", 3)
    request = _input(
        [busy, assigned, plain],
        canary=0,
        limits=Limits(batch_size=3, max_in_flight=3),
        policy=CampaignPolicy(busy_retry_seconds=120, sweep_seconds=SWEEP),
    )
    async with campaign_worker(client, task_queue, write_site(tmp_path, [busy, assigned, plain])):
        reprovision = OperationRequest(requested_by="operator")
        assign = AssignInstanceRequest(instance="vm-1", requested_by="op")
        for host, update, body, kind in (
            (busy, REQUEST_REPROVISION_UPDATE, reprovision, OperationAccepted),
            (assigned, ASSIGN_INSTANCE_UPDATE, assign, OperatorAnswer),
        ):
            entity = await client.start_workflow(
                workflow_api.HostWorkflow.run,
                HostWorkflowInput(host_id=host),
                id=names.host_workflow_id(host),
                task_queue=task_queue,
            )
            await execute_update(entity, update, body, result_type=kind)
        first = await _operation(client, busy)
        handle = await _start(client, task_queue, request)
        result = await handle.result()
        await save_history(
            client.get_workflow_handle(names.host_workflow_id(busy)), "host_entity_campaign_request"
        )
        second = await _operation(client, busy)
        first = await client.get_workflow_handle(first.id, run_id=first.run_id).describe()
    assert result.done == 2
    assert [(s.host_id, "instance assigned" in s.reason) for s in result.skipped_hosts] == [(assigned, True)]
    assert second.run_id != first.run_id, "the campaign ran the busy host once it was free"
    assert first.close_time is not None and second.start_time is not None
    assert second.start_time >= first.close_time, "never two operations on one host at once"
    assert second.start_time - first.start_time >= timedelta(minutes=OPERATION_MINUTES)  # type: ignore[operator]


async def test_a_host_waiting_for_an_operator_counts_against_the_budget(
    time_skipping_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    client = time_skipping_env.client
    prefix = f"co{uuid.uuid4().hex[:4]}"
    hosts = [f"{prefix}-ok-000", f"{prefix}-operator-001", f"{prefix}-ok-002"]
    request = _input(
        hosts,
        canary=0,
        limits=Limits(batch_size=3, max_in_flight=3),
        budget=FailureBudget(max_failures=0),
        policy=CampaignPolicy(sweep_seconds=1800),  # the sweep finds it; never near an operation's end
    )
    async with campaign_worker(client, task_queue, write_site(tmp_path, hosts), [OperatorWaitOperation]):
        handle = await _start(client, task_queue, request)
        halted = await _until_phase(time_skipping_env, handle, "halted")
        assert [(f.host_id, f.reason) for f in halted.needs_operator] == [
            (hosts[1], "needs an operator: the BMC refused the reset (stand-in)")
        ]
        assert "failure budget spent" in (halted.halted_reason or "")
        assert (halted.done, halted.failed, halted.in_flight) == (2, 0, (hosts[1],)), "still in flight"
        answer = await execute_update(
            handle, RESUME_UPDATE, OperatorRequest(requested_by="test"), result_type=OperatorAnswer
        )
        assert "failure budget counts from now" in answer.message
        await time_skipping_env.sleep(timedelta(hours=1))  # a sweep later: accepted, no new halt
        waiting = await _status(handle)
        assert waiting.phase != "halted" and [f.host_id for f in waiting.needs_operator] == [hosts[1]]
        operation = client.get_workflow_handle(names.reprovision_workflow_id(hosts[1]))
        await operation.signal(OPERATOR_ANSWERED)
        result = await handle.result()
    assert (result.outcome, result.done, result.failed, result.skipped) == ("completed", 3, 0, 0)


async def _past_selecting(handle: WorkflowHandle[object, CampaignResult]) -> CampaignStatus:
    for _ in range(100):
        status = await _status(handle)
        if status.phase not in ("starting", "selecting"):
            return status
        await asyncio.sleep(0.1)
    raise AssertionError(f"still selecting: {status}")


async def test_one_campaign_per_host_a_second_skips_what_the_first_holds(
    time_skipping_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    """Two campaigns over overlapping hosts (a schedule's run and a manual one alike): the second
    skips the hosts the first holds, naming it; each host runs once. A holder that was
    terminated (it never released) is taken over. Every ending releases the claims."""
    client = time_skipping_env.client
    hosts = host_ids(f"cc{uuid.uuid4().hex[:4]}", 6)
    first_hosts, second_hosts = hosts[:4], hosts[2:]
    limits = Limits(batch_size=4, max_in_flight=4)
    async with campaign_worker(client, task_queue, write_site(tmp_path, hosts)):
        first = await _start(client, task_queue, _input(first_hosts, canary=0, limits=limits))
        await _past_selecting(first)
        second = await _start(client, task_queue, _input(second_hosts, canary=0, limits=limits))
        results = [await first.result(), await second.result()]
        registry = client.get_workflow_handle(names.campaign_claims_workflow_id(task_queue))
        assert (await registry.query(workflow_api.CampaignClaimsWorkflow.status)).holders == {}
        # A holder terminated mid-campaign never releases: the next campaign takes its hosts.
        # (Its window is closed: it holds its hosts and starts none.)
        hour = ((await time_skipping_env.get_current_time()).astimezone(UTC).hour + 6) % 24
        closed = Window(start_minute=hour * 60, end_minute=hour * 60 + 60)
        stuck = await _start(
            client, task_queue, _input(hosts[:2], canary=0, limits=limits, windows=(closed,))
        )
        assert (await _past_selecting(stuck)).phase == "outside-window"
        await stuck.terminate("test: a campaign that never releases")
        after = await _start(client, task_queue, _input(hosts[:2], canary=0, limits=limits))
        taken_over = await after.result()
        await save_history(registry, "campaign_claims_take_over")
    assert (results[0].done, results[0].skipped) == (4, 0)
    assert (results[1].done, results[1].skipped) == (2, 2)
    assert sorted(s.host_id for s in results[1].skipped_hosts) == hosts[2:4]
    assert all(f"claimed by running campaign {first.id}" in s.reason for s in results[1].skipped_hosts)
    assert (taken_over.done, taken_over.skipped) == (2, 0), taken_over


async def test_hosts_dpf_does_not_know_are_refused_naming_provision(
    time_skipping_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    client = time_skipping_env.client
    known, unknown = host_ids(f"cp{uuid.uuid4().hex[:4]}", 2)
    site = write_site(tmp_path, [known, unknown])
    async with campaign_worker(client, task_queue, site, unknown_to_dpf=frozenset({unknown})):
        result = await (await _start(client, task_queue, _input([known, unknown], canary=0))).result()
        assert (result.done, result.skipped) == (1, 1)
        [left_out] = result.skipped_hosts
        assert left_out.host_id == unknown and f"metalflow host provision {unknown}" in left_out.reason
        refused = await _start(client, task_queue, _input([unknown], canary=0))
        with pytest.raises(WorkflowFailureError) as failed:
            await refused.result()
        assert "DPF knows none of the 1 selected hosts" in str(failed.value.cause)  # the admission refuses
        assert (await _status(refused)).phase == "failed"
        with pytest.raises(RPCError):  # nothing asked: no entity
            await client.get_workflow_handle(names.host_workflow_id(unknown)).describe()


async def test_a_round_of_only_skipped_hosts_ends_the_campaign(
    time_skipping_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    """Its only host is refused by its entity (an instance assigned there, not in the inventory):
    the campaign ends at once, it never sleeps waiting for nothing."""
    client = time_skipping_env.client
    [host] = host_ids(f"ck{uuid.uuid4().hex[:4]}", 1)
    async with campaign_worker(client, task_queue, write_site(tmp_path, [host])):
        entity = await client.start_workflow(
            workflow_api.HostWorkflow.run,
            HostWorkflowInput(host_id=host),
            id=names.host_workflow_id(host),
            task_queue=task_queue,
        )
        await execute_update(
            entity,
            ASSIGN_INSTANCE_UPDATE,
            AssignInstanceRequest(instance="vm-1", requested_by="op"),
            result_type=OperatorAnswer,
        )
        handle = await _start(client, task_queue, _input([host], canary=0))
        result = await asyncio.wait_for(handle.result(), 60)
    assert (result.outcome, result.done, result.skipped) == ("completed", 0, 1)
