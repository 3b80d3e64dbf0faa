"""Operator control of a campaign, mostly under the time-skipping server: hosts with an instance waiting
for approval (one approved, one left to expire), `retry_failed`, `skip_host`, and a lost
`host_finished` signal found by the sweep.

Real: the campaign, each host's entity `host/<id>` (approvals, refusals, the `host_finished`
signal), the campaign activities (inventory from a site file). Stand-in: the operation itself,
which takes OPERATION_MINUTES of workflow time and fails, by its host's id, always (`fail`) or
on its first run only (`flaky`: it reports the boot generation it reached, as a real failed
operation does, and the entity hands the next run that generation).

Time moves only when a test says so (`auto_time_skipping_disabled` plus `env.sleep`): an
automatic skip under load could jump past the moment a test means to look at.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import timedelta
from pathlib import Path

from takeover_support import takeover_seconds
from temporalio import workflow

from contracts.with_start import execute_update
from workflows.parts.host_power import HOST_IS_ON

with workflow.unsafe.imports_passed_through():
    import pytest
    from campaign_support import (
        OPERATION_MINUTES,
        GatedOperation,
        campaign_worker,
        operation_result,
        write_site,
    )
    from dpf_activities_support import REBOOT, Api, annotation
    from host_operation_support import save_history
    from sim_support import RunningSim, prefixed_sim, time_skipping_server
    from temporalio.api.sdk.v1 import WorkflowMetadata
    from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
    from temporalio.exceptions import ApplicationError
    from temporalio.service import RPCError, RPCStatusCode
    from temporalio.testing import WorkflowEnvironment

    import activities.campaign as campaign_activities
    from contracts import names, workflow_api
    from contracts.models.campaign import (
        RETRY_FAILED_UPDATE,
        SKIP_HOST_UPDATE,
        AbortRequest,
        CampaignInput,
        CampaignPolicy,
        CampaignResult,
        CampaignStatus,
        CampaignTarget,
        FailureBudget,
        HostSelection,
        Limits,
        SkipRequest,
        TargetKind,
    )
    from contracts.models.control import ABORT_UPDATE, STATUS_QUERY, OperatorAnswer, OperatorRequest
    from contracts.models.control import STATUS_QUERY as HOST_STATUS_QUERY
    from contracts.models.host import (
        APPROVE_UPDATE,
        ASSIGN_INSTANCE_UPDATE,
        AssignInstanceRequest,
        HostOperationInput,
        HostOperationResult,
        HostStatus,
        HostWorkflowInput,
        OperationPolicy,
    )
    from drivers.settings import Settings
    from metalflow.runtime.worker import build_worker


METADATA_QUERY = "__temporal_workflow_metadata"  # what the UI reads: the current details
PREFIX = f"cc{uuid.uuid4().hex[:4]}"
APPROVAL_HOURS = 6  # the assigned hosts' entities let a request wait this long for approval
HOSTS = {
    "approval": [f"{PREFIX}-ok-a{i}" for i in range(3)],
    "retry": [f"{PREFIX}-ok-r0", f"{PREFIX}-flaky-r1", f"{PREFIX}-flaky-r2", f"{PREFIX}-ok-r3"],
    "skip": [f"{PREFIX}-ok-s{i}" for i in range(4)],
    "sweep": [f"{PREFIX}-ok-w{i}" for i in range(2)],  # on the dev server
    "prompt": [f"{PREFIX}-ok-p{i}" for i in range(3)],  # on the dev server
    "silent": [f"{PREFIX}-ok-u{i}" for i in range(3)],  # on the dev server
}


@workflow.defn(name="HostOperationWorkflow")
class FlakyOperation:
    """OPERATION_MINUTES of workflow time; `fail` in the host id fails it, `flaky` fails its
    first run (boot generation 0), reporting generation 1 as a failed real operation would."""

    @workflow.run
    async def run(self, request: HostOperationInput) -> HostOperationResult:
        await workflow.sleep(timedelta(minutes=OPERATION_MINUTES))
        reached = request.boot_generation + 1
        if "fail" in request.host_id or ("flaky" in request.host_id and request.boot_generation == 0):
            raise ApplicationError(
                f"DPU {request.host_id}-dpu-0 in Error (injected); {HOST_IS_ON}",  # its finaliser's words
                {"boot_generation": reached},
                non_retryable=True,
            )
        return operation_result(request, reached)


@pytest.fixture(scope="module")
async def env(lifeline_bin: Path) -> AsyncIterator[WorkflowEnvironment]:
    async with time_skipping_server(lifeline_bin) as server:
        yield server


@pytest.fixture(scope="module")
async def queue(env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    """One worker for the module (the hosts' entities live on its queue), clock moved by hand."""
    task_queue = f"test-campaign-control-{uuid.uuid4()}"
    site = write_site(tmp_path_factory.mktemp("site"), [h for hosts in HOSTS.values() for h in hosts])
    async with campaign_worker(env.client, task_queue, site, workflows=[FlakyOperation]):
        with env.auto_time_skipping_disabled():
            yield task_queue


def _input(hosts: list[str], **options: object) -> CampaignInput:
    values: dict[str, object] = {
        "name": f"t-{uuid.uuid4().hex[:8]}",
        "target": CampaignTarget(kind=TargetKind.REPROVISION),
        "selection": HostSelection(hosts=tuple(hosts)),
        "requested_by": "test",
        "canary": 0,
    }
    values.update(options)
    return CampaignInput.model_validate(values)


async def _start(
    client: Client, queue: str, request: CampaignInput
) -> WorkflowHandle[object, CampaignResult]:
    return await client.start_workflow(
        workflow_api.CampaignWorkflow.run,
        request,
        id=names.campaign_workflow_id(request.name),
        task_queue=queue,
    )


async def _status(handle: WorkflowHandle[object, CampaignResult]) -> CampaignStatus:
    status: CampaignStatus = await handle.query(STATUS_QUERY, result_type=CampaignStatus)
    return status


async def _until(
    env: WorkflowEnvironment,
    handle: WorkflowHandle[object, CampaignResult],
    check: Callable[[CampaignStatus], bool],
    what: str,
    step: timedelta = timedelta(minutes=1),
) -> CampaignStatus:
    """Move the clock `step` at a time until the campaign's status passes `check`."""
    for _ in range(300):
        status = await _status(handle)
        if check(status):
            return status
        await env.sleep(step)
    raise AssertionError(f"the campaign never reached {what}; last: {status}")


async def _result(env: WorkflowEnvironment, handle: WorkflowHandle[object, CampaignResult]) -> CampaignResult:
    await _until(env, handle, lambda s: s.phase in ("completed", "aborted"), "its end", timedelta(minutes=5))
    return await handle.result()


async def _entity(client: Client, host: str) -> HostStatus:
    entity = client.get_workflow_handle(names.host_workflow_id(host))
    status: HostStatus = await entity.query(HOST_STATUS_QUERY, result_type=HostStatus)
    return status


async def _assign(client: Client, queue: str, host: str) -> None:
    entity = await client.start_workflow(
        workflow_api.HostWorkflow.run,
        HostWorkflowInput(
            host_id=host, policy=OperationPolicy(approval_timeout_seconds=APPROVAL_HOURS * 3600)
        ),
        id=names.host_workflow_id(host),
        task_queue=queue,
    )
    assign = AssignInstanceRequest(instance=f"vm-{host}", requested_by="tenant-admin")
    await execute_update(entity, ASSIGN_INSTANCE_UPDATE, assign, result_type=OperatorAnswer)


async def test_assigned_hosts_wait_for_approval_and_an_unapproved_one_expires(
    env: WorkflowEnvironment, queue: str
) -> None:
    client = env.client
    approved, expiring, plain = HOSTS["approval"]
    for host in (approved, expiring):
        await _assign(client, queue, host)
    request = _input(
        [approved, expiring, plain],
        limits=Limits(batch_size=3, max_in_flight=3),
        policy=CampaignPolicy(assigned="wait-for-approval"),
    )
    handle = await _start(client, queue, request)
    waiting = await _until(
        env, handle, lambda s: len(s.awaiting_approval) == 2 and s.done == 1, "two hosts awaiting approval"
    )
    assert waiting.awaiting_approval == tuple(sorted([approved, expiring]))
    assert waiting.phase == "running" and waiting.remaining == 2
    for host in (approved, expiring):  # asked, held by the entity: nothing runs on it yet
        entity = await _entity(client, host)
        assert entity.current is not None and entity.current.outcome == "awaiting-approval"
        assert entity.recent == ()
    approve = OperatorRequest(requested_by="tenant-admin", reason="maintenance agreed")
    answer = await execute_update(
        client.get_workflow_handle(names.host_workflow_id(approved)),
        APPROVE_UPDATE,
        approve,
        result_type=OperatorAnswer,
    )
    assert "approved reprovision" in answer.message
    result = await _result(env, handle)
    assert (result.outcome, result.done, result.failed) == ("completed", 2, 0)
    assert [(s.host_id, s.reason.startswith("not approved: expired")) for s in result.skipped_hosts] == [
        (expiring, True)
    ]
    ran = await _entity(client, approved)
    assert [(r.outcome, r.approved_by) for r in ran.recent] == [("completed", "tenant-admin")]
    expired = await _entity(client, expiring)
    assert [r.outcome for r in expired.recent] == [f"expired: not approved within {timedelta(hours=6)}"]
    assert expired.current is None and expired.instance == f"vm-{expiring}"


async def test_retry_failed_runs_only_the_failed_hosts_again(env: WorkflowEnvironment, queue: str) -> None:
    client = env.client
    hosts = HOSTS["retry"]
    flaky = [h for h in hosts if "flaky" in h]
    request = _input(
        hosts,
        canary=1,
        limits=Limits(batch_size=3, max_in_flight=3),
        budget=FailureBudget(max_failures=1),
    )
    handle = await _start(client, queue, request)
    halted = await _until(env, handle, lambda s: s.phase == "halted", "the halt")
    assert sorted(f.host_id for f in halted.failures) == flaky and halted.done == 2
    refused = await _refused(handle, SKIP_HOST_UPDATE, SkipRequest(requested_by="test", host_id="nobody"))
    assert "host nobody is not waiting in this campaign" in refused
    answer = await execute_update(
        handle, RETRY_FAILED_UPDATE, OperatorRequest(requested_by="test"), result_type=OperatorAnswer
    )
    assert answer.message == "retrying 2 failed hosts"
    result = await _result(env, handle)
    assert (result.outcome, result.done, result.failed, result.skipped) == ("completed", 4, 0, 0)
    assert result.all_succeeded
    for host in hosts:  # the flaky hosts ran twice (failed, then succeeded); the others once
        outcomes = [r.outcome.split(":")[0] for r in (await _entity(client, host)).recent]
        assert outcomes == (["failed", "completed"] if host in flaky else ["completed"]), host


async def test_skip_host_leaves_a_waiting_host_out_and_refuses_a_running_one(
    env: WorkflowEnvironment, queue: str
) -> None:
    client = env.client
    hosts = HOSTS["skip"]
    request = _input(hosts, limits=Limits(batch_size=4, max_in_flight=1))
    handle = await _start(client, queue, request)
    first = await _until(env, handle, lambda s: len(s.in_flight) == 1, "a host in flight")
    running = first.in_flight[0]
    refused = await _refused(handle, SKIP_HOST_UPDATE, SkipRequest(requested_by="test", host_id=running))
    assert f"host {running} is in flight" in refused and "abort that operation instead" in refused
    waiting = hosts[-1]
    answer = await execute_update(
        handle,
        SKIP_HOST_UPDATE,
        SkipRequest(requested_by="alice", reason="hardware ticket 42", host_id=waiting),
        result_type=OperatorAnswer,
    )
    assert answer.message == f"{waiting} skipped by alice: hardware ticket 42"
    twice = await _refused(handle, SKIP_HOST_UPDATE, SkipRequest(requested_by="alice", host_id=waiting))
    assert "(done, skipped or unknown)" in twice
    result = await _result(env, handle)
    assert (result.outcome, result.done, result.failed) == ("completed", 3, 0)
    assert [(s.host_id, s.reason) for s in result.skipped_hosts] == [
        (waiting, "skipped by alice: hardware ticket 42")
    ]
    assert not result.all_succeeded
    with pytest.raises(RPCError) as never:  # a skipped host is never touched: no entity was made
        await _entity(client, waiting)
    assert never.value.status == RPCStatusCode.NOT_FOUND


async def test_the_sweep_finds_an_operation_whose_end_was_never_signalled(
    local_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """The host's entity is terminated while its operation runs (an operator's `temporal workflow
    terminate`): nobody signals the operation's end, the sweep must see it. On the dev server: the
    time-skipping server stops skipping time once an orphaned child ends."""
    client = local_env.client
    orphaned, plain = HOSTS["sweep"]
    request = _input(
        [orphaned, plain],
        limits=Limits(batch_size=2, max_in_flight=2),
        policy=CampaignPolicy(sweep_seconds=1),
    )
    task_queue = f"test-campaign-sweep-{uuid.uuid4()}"
    site = write_site(tmp_path, [orphaned, plain])
    async with campaign_worker(client, task_queue, site, workflows=[GatedOperation]):
        handle = await _start(client, task_queue, request)
        await _until_real(handle, lambda s: len(s.in_flight) == 2, "both hosts in flight")
        await client.get_workflow_handle(names.host_workflow_id(orphaned)).terminate("operator: entity reset")
        for host in (plain, orphaned):
            await client.get_workflow_handle(names.reprovision_workflow_id(host)).signal("finish")
        result = await handle.result()
    assert (result.outcome, result.done, result.failed, result.skipped) == ("completed", 2, 0, 0)
    history = await handle.fetch_history()
    sweeps = [
        e
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "sweep_campaign_hosts"
    ]
    assert sweeps, "the orphaned host's end came from a sweep"
    signals = [e for e in history.events if e.HasField("workflow_execution_signaled_event_attributes")]
    assert len(signals) == 1, "only the plain host's entity signalled"


async def _until_real(
    handle: WorkflowHandle[object, CampaignResult], check: Callable[[CampaignStatus], bool], what: str
) -> CampaignStatus:
    for _ in range(600):
        status = await _status(handle)
        if check(status):
            return status
        await asyncio.sleep(0.1)
    raise AssertionError(f"the campaign never reached {what}; last: {status}")


async def _refused(handle: WorkflowHandle[object, CampaignResult], update: str, body: object) -> str:
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await execute_update(handle, update, body, result_type=OperatorAnswer)
    return str(refused.value.cause)


ABORT_PREFIX = f"cab{uuid.uuid4().hex[:4]}"
POWER_DOWN_WAIT = 8.0  # the abort lands while the hosts are Off; their round then finishes


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    """The simulated site for the end-to-end test: 7 hosts; the 2nd and 7th have `no-powercycle`
    BMCs (a cycle is ForceOff, the power-down wait, On), so a long wait holds them Off."""
    with prefixed_sim(tmp_path_factory.mktemp("sim"), ABORT_PREFIX, hosts=7, dpus_per_host=1) as running:
        yield running


async def test_abort_with_cancel_running_lets_a_reboot_round_finish_and_withdraws_the_waiting(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    """End to end: two hosts Off in their reprovision's power-down wait (their DPUs installed and
    asked for the reboot) and a third, assigned to an instance, awaiting approval when the
    campaign is aborted with `cancel_running`. The two are past the point of no return (issue 35
    item 5: cut now, their DPUs would wait for a reboot nobody gives): each refuses the
    campaign's abort, finishes its reboot round (one Off, one On, never a second cycle, DPF told),
    and counts as it ended, done; the status names them `finishing` meanwhile. The third's
    request is withdrawn: nothing is left pending for an approval to start later, and it is never
    touched; the fourth host is never asked."""
    client = local_env.client
    held = [f"{ABORT_PREFIX}-002", f"{ABORT_PREFIX}-007"]
    assigned, untouched = f"{ABORT_PREFIX}-003", f"{ABORT_PREFIX}-001"
    request = _input(
        [*held, assigned, untouched],
        limits=Limits(batch_size=4, max_in_flight=3),
        budget=FailureBudget(max_failures=0),  # an abort counted as failures would halt it
        policy=CampaignPolicy(assigned="wait-for-approval"),
        host_policy=OperationPolicy(power_down_wait_seconds=POWER_DOWN_WAIT, max_dpu_error_reprovisions=0),
    )
    settings = Settings(
        site_file=sim.site_file, kubeconfig=sim.kubeconfig, worker_takeover_seconds=takeover_seconds()
    )
    async with build_worker(client, task_queue, settings):
        await _assign(client, task_queue, assigned)
        handle = await _start(client, task_queue, request)
        for _ in range(1200):  # both hosts Off, in the middle of their power cycle; one awaiting
            if all(_offs(sim, h) == 1 for h in held) and (await _status(handle)).awaiting_approval:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"the hosts never went Off: {[sim.power_log(h) for h in held]}")
        assert (await _entity(client, assigned)).current is not None, "its request awaits approval"
        answer = await execute_update(
            handle,
            ABORT_UPDATE,
            AbortRequest(requested_by="test", reason="bad BFB", cancel_running=True),
            result_type=OperatorAnswer,
        )
        assert answer.message.startswith("aborting: no new host starts; 3 in flight, aborting them")
        for _ in range(300):  # the abort was sent: the two refused it, finishing their round
            aborting = await _status(handle)
            if aborting.finishing or aborting.phase == "aborted":
                break
            await asyncio.sleep(0.1)
        result = await handle.result()
        status = await _status(handle)
        shown = await handle.query(METADATA_QUERY, result_type=WorkflowMetadata)  # the UI's details
        await save_history(handle, "campaign_abort_running_withdrawn")
        entities = {h: await _entity(client, h) for h in [*held, assigned]}
        late = await _refused_approval(client, assigned)
    assert sorted(f.host_id for f in aborting.finishing) == sorted(held), aborting
    assert all("finishes its reboot round" in f.reason for f in aborting.finishing), aborting.finishing
    assert result.outcome == "aborted" and (result.done, result.failed, result.aborted) == (2, 0, 0), result
    assert (status.phase, status.failed, status.skipped, status.aborted, status.remaining) == (
        "aborted",
        0,
        2,
        0,
        0,
    )
    assert status.budget == "0 failures counted; halts past 0"
    assert shown.current_details.endswith("0 failed, 2 skipped"), shown.current_details
    assert [(s.host_id, s.reason) for s in result.skipped_hosts] == [
        (assigned, "campaign aborted while awaiting approval: withdrawn by test: campaign "
         f"{request.name} aborted"),
        (untouched, "not started: aborted"),
    ]  # fmt: skip
    assert not result.all_succeeded
    for host in held:  # cycled once: one Off, one On; DPF told, the DPUs Ready, nothing owed
        assert [e["to"] for e in sim.power_log(host)] == ["Off", "On"], sim.power_log(host)
        assert entities[host].current is None and [r.outcome for r in entities[host].recent] == ["completed"]
        node = Api(sim).must("DPUNode", f"node-{host}")
        assert annotation(node, REBOOT) is None, f"{host}'s DPUs still wait for a reboot"
    # Withdrawn: nothing pending at its entity, an approval now starts nothing, never touched.
    withdrawn = entities[assigned]
    assert withdrawn.current is None and withdrawn.phase == "idle", withdrawn
    assert [r.outcome for r in withdrawn.recent] == [f"withdrawn by test: campaign {request.name} aborted"]
    assert "nothing awaits approval" in late
    assert sim.power_log(assigned) == [] and await _described(client, assigned) is None
    assert sim.power_log(untouched) == []
    with pytest.raises(RPCError) as never:
        await _entity(client, untouched)
    assert never.value.status == RPCStatusCode.NOT_FOUND
    assert sim.violations() == []


async def _refused_approval(client: Client, host: str) -> str:
    entity = client.get_workflow_handle(names.host_workflow_id(host))
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await execute_update(
            entity, APPROVE_UPDATE, OperatorRequest(requested_by="tenant-admin"), result_type=OperatorAnswer
        )
    return str(refused.value.cause)


def _offs(sim: RunningSim, host: str) -> int:
    return sum(1 for entry in sim.power_log(host) if entry.get("to") == "Off")


async def test_abort_answers_at_once_while_an_entity_holds_the_request(
    local_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """One host's entity runs on a task queue nobody serves (a worker fleet half down), so the
    campaign's request to it hangs (up to a minute a try, retried for 5 minutes). An abort with
    `cancel_running` cancels that request: the two hosts that answered are aborted, the silent one
    is reported by name, and the campaign ends without waiting the request out."""
    client = local_env.client
    silent, *answering = HOSTS["prompt"]
    await _start_entity_nobody_serves(client, silent)
    task_queue = f"test-campaign-prompt-{uuid.uuid4()}"
    request = _input([silent, *answering], limits=Limits(batch_size=3, max_in_flight=3))
    try:
        async with campaign_worker(
            client, task_queue, write_site(tmp_path, HOSTS["prompt"]), [GatedOperation]
        ):
            handle = await _start(client, task_queue, request)
            for _ in range(600):  # the two served hosts' operations run
                described = [await _described(client, h) for h in answering]
                if all(d is not None for d in described):
                    break
                await asyncio.sleep(0.1)
            answer = await execute_update(
                handle,
                ABORT_UPDATE,
                AbortRequest(requested_by="test", cancel_running=True),
                result_type=OperatorAnswer,
            )
            assert answer.message.startswith("aborting: no new host starts")
            result = await handle.result()
            await save_history(handle, "campaign_abort_cancels_the_request")
    finally:
        await client.get_workflow_handle(names.host_workflow_id(silent)).terminate("test over")
    assert result.outcome == "aborted" and (result.done, result.failed) == (0, 0)
    assert sorted(a.host_id for a in result.aborted_hosts) == sorted(answering)
    assert all("aborted by" in a.reason for a in result.aborted_hosts), result.aborted
    [(host, reason)] = [(s.host_id, s.reason) for s in result.skipped_hosts]
    assert host == silent and reason.startswith("asked, but no answer before the abort"), reason
    history = await handle.fetch_history()
    assert any(e.HasField("activity_task_cancel_requested_event_attributes") for e in history.events)
    tries = [e for e in history.events if e.HasField("activity_task_started_event_attributes")]
    assert all(e.activity_task_started_event_attributes.attempt == 1 for e in tries), "not waited out"


async def test_an_entity_that_does_not_answer_puts_off_its_host_only(
    local_env: WorkflowEnvironment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One host's entity runs on a task queue nobody serves, so its request times out. Before,
    that failed the whole request activity, which asked every host of the round again, attempt
    after attempt, while the two hosts that answered were not counted in flight. Now the silent
    host alone is put off (asked again after `busy_retry_seconds`) and the round succeeds."""
    monkeypatch.setattr(campaign_activities, "UPDATE_TIMEOUT", timedelta(seconds=2))
    client = local_env.client
    silent, *answering = HOSTS["silent"]
    await _start_entity_nobody_serves(client, silent)
    task_queue = f"test-campaign-silent-{uuid.uuid4()}"
    request = _input([silent, *answering], limits=Limits(batch_size=3, max_in_flight=3))
    try:
        async with campaign_worker(
            client, task_queue, write_site(tmp_path, HOSTS["silent"]), [GatedOperation]
        ):
            handle = await _start(client, task_queue, request)
            status = await _status(handle)
            for _ in range(600):
                if sorted(status.in_flight) == sorted(answering) and status.deferred == (silent,):
                    break
                await asyncio.sleep(0.1)
                status = await _status(handle)
            assert sorted(status.in_flight) == sorted(answering), status
            assert status.deferred == (silent,) and status.failed == 0, status
            history = await handle.fetch_history()
            asks = [
                e.activity_task_started_event_attributes.attempt
                for e in history.events
                if e.HasField("activity_task_started_event_attributes")
            ]
            assert asks and all(attempt == 1 for attempt in asks), f"asked again: attempts {asks}"
            await execute_update(
                handle,
                ABORT_UPDATE,
                AbortRequest(requested_by="test", cancel_running=True),
                result_type=OperatorAnswer,
            )
            result = await handle.result()
    finally:
        await client.get_workflow_handle(names.host_workflow_id(silent)).terminate("test over")
    assert result.outcome == "aborted"


async def _start_entity_nobody_serves(client: Client, host: str) -> None:
    """The host's entity on a task queue no worker polls: updates to it time out (a fleet half down)."""
    await client.start_workflow(
        workflow_api.HostWorkflow.run,
        HostWorkflowInput(host_id=host),
        id=names.host_workflow_id(host),
        task_queue=f"nobody-serves-{uuid.uuid4()}",
    )


async def _described(client: Client, host: str) -> object | None:
    try:
        return await client.get_workflow_handle(names.reprovision_workflow_id(host)).describe()
    except RPCError:
        return None
