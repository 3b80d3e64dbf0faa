"""The monitor and the operator end to end (issue 40), on the simulated site, with a worker of
every real workflow and activity and `metalflow` commands as a user runs them:

- every pending request can be withdrawn from the CLI (`host abort` of a request awaiting
  approval), and an approval never runs a request whose reason no longer holds: the monitor
  withdraws its own once the DPU is Ready again, and `approve` says so;
- an operator's abort is sovereign: the monitor asks for no other reprovision of the host within
  its hold-back, says so in `host monitor --status`, and asks again once resumed;
- no reprovision is accepted of a DPU DPF no longer has, whoever asks: after `host remove
  --dpus`, the entity refuses the monitor's (and a script's), and the monitor stops asking; and
  `host reset --all-dpus` resets the DPUs DPF still has, leaving the removed one out and saying so.

The decisions themselves are tested one at a time in tests/fast (test_host_entity_state,
test_monitor_state)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import httpx
import pytest
from cli_support import metalflow, use_site_file
from dpf_activities_support import Api
from monitor_support import STOP, start_monitor, status_of
from sim_support import RunningSim, prefixed_sim, sim_http
from site_worker_support import FAST_POLICY, eventually, site_worker
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from contracts import names, workflow_api
from contracts.host_entity import EntityRefused, HostEntityClient
from contracts.models.host import (
    HostMonitorStatus,
    HostStatus,
    HostWorkflowInput,
    MonitorPolicy,
    OperationPolicy,
    OperationRequest,
    RebootMethod,
)
from contracts.with_start import execute_update
from contracts.wording import iso_z
from metalflow.devstack.demo import power_cycles

SITE = "mop-site"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with prefixed_sim(tmp_path_factory.mktemp("monitor-operator"), "mop", hosts=8) as running:
        use_site_file(running.site_file)
        yield running


async def entity_status(entity: WorkflowHandle[Any, Any]) -> HostStatus:
    status: HostStatus = await entity.query("status", result_type=HostStatus)
    return status


@asynccontextmanager
async def watched(
    client: Client,
    task_queue: str,
    host: str,
    policy: MonitorPolicy,
    *,
    instance: str | None = None,
    operations: OperationPolicy = FAST_POLICY,
) -> AsyncIterator[tuple[WorkflowHandle[Any, Any], WorkflowHandle[Any, Any]]]:
    """The host's entity (assigned to `instance`, if given; its operations' policy `operations`)
    and its monitor, stopped at the end."""
    entity = await client.start_workflow(
        "HostWorkflow",
        HostWorkflowInput(host_id=host, site=SITE, policy=operations, instance=instance),
        id=names.host_workflow_id(host),
        task_queue=task_queue,
    )
    monitor = await start_monitor(client, task_queue, host, policy)
    try:
        await eventually(lambda: status_of(monitor), lambda s: len(s.dpus) == 2)
        yield entity, monitor
    finally:
        await execute_update(monitor, "abort", STOP)
        await monitor.result()
        await entity.terminate("test over")


def awaits_approval(status: HostStatus) -> bool:
    return status.current is not None and status.current.outcome == "awaiting-approval"


async def test_host_abort_withdraws_the_monitors_request_awaiting_approval(
    local_env: WorkflowEnvironment, client: Client, task_queue: str, sim: RunningSim
) -> None:
    """Issue 40 item 2: `host abort` said "no operation in flight" and the host refused everything."""
    host, dpu = "mop-001", "mop-001-dpu-1"
    async with site_worker(client, task_queue, sim):
        policy = MonitorPolicy(reprovision_after_seconds=1.0)
        async with watched(client, task_queue, host, policy, instance="i-tenant") as (entity, _):
            sim.inject(f"dpus/node-{host}-device-{dpu}/node-effect")
            held = await eventually(lambda: entity_status(entity), awaits_approval)
            assert held.current is not None
            assert held.current.requested_by == names.monitor_workflow_id(host)
            shown = await metalflow(local_env, "host", "status", host)
            assert (
                f"answer with    metalflow approve {host}, or metalflow host abort {host} to withdraw it"
                in shown.stdout
            ), shown.stdout

            aborted = await metalflow(
                local_env, "host", "abort", host, "--by", "alice", "--reason", "debugging",
                "--task-queue", task_queue,
            )  # fmt: skip
            assert aborted.status == 0, aborted.stdout + aborted.stderr
            assert (
                f"{host}: reprovision/{host} (requested by monitor/host-{host}: critical DPU services "
                "down for more than 1 s) awaited approval: reprovision withdrawn by alice: debugging; "
                "nothing started"
            ) in aborted.stdout
            after = await entity_status(entity)
            withdrawn = [r for r in after.recent if r.workflow_id == f"reprovision/{host}"]
            assert [r.outcome for r in withdrawn] == ["withdrawn by alice: debugging"]
            sim.inject(f"dpus/node-{host}-device-{dpu}/recover")
        idle = await metalflow(local_env, "host", "abort", host, "--task-queue", task_queue)
        assert idle.status == 1
        nothing = f"no operation in flight on {host} and no request awaits approval: nothing to abort"
        assert nothing in idle.stderr
    assert power_cycles(sim.power_log(host)) == 0


async def test_a_request_whose_dpu_is_ready_again_is_withdrawn_and_approve_says_so(
    local_env: WorkflowEnvironment, client: Client, task_queue: str, sim: RunningSim
) -> None:
    """Issue 40 item 2: the DPU recovered, and a later `approve` reprovisioned a healthy tenant host."""
    host, dpu = "mop-002", "mop-002-dpu-1"
    monitor_id = names.monitor_workflow_id(host)
    async with site_worker(client, task_queue, sim):
        policy = MonitorPolicy(reprovision_after_seconds=1.0)
        async with watched(client, task_queue, host, policy, instance="i-tenant") as (entity, monitor):
            sim.inject(f"dpus/node-{host}-device-{dpu}/node-effect")
            await eventually(lambda: entity_status(entity), awaits_approval)
            sim.inject(f"dpus/node-{host}-device-{dpu}/recover")
            idle = await eventually(lambda: entity_status(entity), lambda s: s.current is None)
            why = f"{dpu} is Ready again: the reprovision is no longer needed"
            assert idle.recent[-1].outcome == f"withdrawn by {monitor_id}: {why}"
            # The monitor records its withdrawal when the entity's answer reaches it: after the
            # entity went idle, not with it (a full run under load read it in between).
            withdrawn = f"{dpu}: withdrawn: reprovision withdrawn by {monitor_id}: {why}; nothing started"
            shown = await eventually(lambda: status_of(monitor), lambda s: s.requests[-1] == withdrawn)
            assert shown.requests[-1] == withdrawn

            approved = await metalflow(local_env, "approve", host, "--by", "c", "--task-queue", task_queue)
            assert approved.status == 1, approved.stdout
            assert (
                f"nothing awaits approval: the last request, reprovision (reprovision/{host}) requested "
                f"by {monitor_id}, was withdrawn by {monitor_id}: {why}"
            ) in approved.stderr
    assert power_cycles(sim.power_log(host)) == 0
    assert sim.violations() == []


async def test_an_approval_racing_the_monitors_withdrawal_checks_dpf_and_starts_nothing(
    local_env: WorkflowEnvironment, client: Client, task_queue: str, sim: RunningSim
) -> None:
    """Issue 40 (the approval race): the DPU recovered and `approve` came before the monitor
    withdrew its request (here: the monitor stopped, so it never does); the reprovision ran on a
    healthy tenant host. Now the approval reads DPF first, withdraws the request and says why."""
    host, dpu = "mop-005", "mop-005-dpu-1"
    monitor_id = names.monitor_workflow_id(host)
    async with site_worker(client, task_queue, sim):
        entity = await client.start_workflow(
            "HostWorkflow",
            HostWorkflowInput(host_id=host, site=SITE, policy=FAST_POLICY, instance="i-tenant"),
            id=names.host_workflow_id(host),
            task_queue=task_queue,
        )
        monitor = await start_monitor(client, task_queue, host, MonitorPolicy(reprovision_after_seconds=1.0))
        try:
            await eventually(lambda: status_of(monitor), lambda s: dpu_ready(s, dpu))
            sim.inject(f"dpus/node-{host}-device-{dpu}/node-effect")
            await eventually(lambda: entity_status(entity), awaits_approval)
            await execute_update(monitor, "abort", STOP)  # it withdraws nothing from now on
            await monitor.result()
            sim.inject(f"dpus/node-{host}-device-{dpu}/recover")
            api = Api(sim)

            async def phase() -> str:
                found = await asyncio.to_thread(api.get, "DPU", f"node-{host}-device-{dpu}")
                return str(((found or {}).get("status") or {}).get("phase"))

            await eventually(phase, lambda p: p == "Ready")

            approved = await metalflow(
                local_env, "approve", host, "--by", "carol", "--task-queue", task_queue
            )
            why = (
                "its reason (critical DPU services down for more than 1 s) no longer holds: "
                f"DPF says {dpu} is Ready now"
            )
            assert approved.status == 1, approved.stdout + approved.stderr
            assert (
                f"reprovision of {host} (reprovision/{host}, requested by {monitor_id}) not approved: "
                f"{why}; the request is withdrawn, nothing started"
            ) in approved.stderr
            after = await entity_status(entity)
            assert after.current is None
            assert after.recent[-1].outcome == f"withdrawn at its approval by carol: {why}"
            again = await metalflow(local_env, "approve", host, "--by", "carol", "--task-queue", task_queue)
            assert again.status == 1
            assert f"was withdrawn at its approval by carol: {why}" in again.stderr
        finally:
            await entity.terminate("test over")
    assert power_cycles(sim.power_log(host)) == 0
    assert sim.violations() == []


async def test_monitor_status_shows_only_what_is_true_now(
    local_env: WorkflowEnvironment, client: Client, task_queue: str, sim: RunningSim
) -> None:
    """Issue 40: `host monitor --status` kept a hold-back past its end once the DPU recovered (the
    monitor never woke to end it) and never showed the request the entity held for it."""
    host, dpu = "mop-006", "mop-006-dpu-1"
    queue = ("--task-queue", task_queue)
    async with site_worker(client, task_queue, sim):
        policy = MonitorPolicy(reprovision_after_seconds=1.0, hold_back_seconds=3.0)
        async with watched(client, task_queue, host, policy, instance="i-tenant") as (entity, monitor):
            await eventually(lambda: status_of(monitor), lambda s: dpu_ready(s, dpu))
            sim.inject(f"dpus/node-{host}-device-{dpu}/node-effect")
            await eventually(lambda: entity_status(entity), awaits_approval)
            pending = await eventually(lambda: status_of(monitor), lambda s: s.own_request is not None)
            assert pending.own_request is not None and pending.own_request.awaiting_approval
            shown = await metalflow(local_env, "host", "monitor", host, "--status", *queue)
            assert f"  its request      reprovision/{host} of {dpu} awaits approval (asked " in shown.stdout
            # what the monitor does now, not "automatic reprovision is off" (issue 40 item 5)
            assert "automatic reprovision is off" not in shown.stdout, shown.stdout
            assert f"or the approval of it (metalflow approve {host})" in shown.stdout, shown.stdout
            # `host status` names that request in the DPU's WARNING, not "no operation runs"
            # (issue 40, L4 of its last attack)
            status = await metalflow(local_env, "host", "status", host)
            warned = (
                f"DPU node-{host}-device-{dpu} is Node Effect, not Ready; reprovision of {dpu} (reprovision/"
                f"{host}, requested by {names.monitor_workflow_id(host)}) awaits approval: `metalflow approve"
            )
            assert warned in status.stdout and "no operation runs" not in status.stdout, status.stdout
            withdrawn = await metalflow(local_env, "host", "abort", host, "--by", "alice", *queue)
            assert withdrawn.status == 0, withdrawn.stderr
            held = await eventually(lambda: status_of(monitor), lambda s: s.hold_back is not None)
            assert held.own_request is None
            sim.inject(f"dpus/node-{host}-device-{dpu}/recover")
            over = await eventually(
                lambda: status_of(monitor), lambda s: s.hold_back is None and not s.degraded, timeout=15
            )
            assert over.requests[-1].startswith(f"held back no more: the hold-back after reprovision/{host}")
            now = await metalflow(local_env, "host", "monitor", host, "--status", *queue)
            assert "holding back" not in now.stdout and "its request" not in now.stdout, now.stdout
            assert "  waiting for      a Ready DPU falling to Node Effect\n" in now.stdout
    assert power_cycles(sim.power_log(host)) == 0


async def test_monitor_status_says_the_approved_reprovision_runs(
    local_env: WorkflowEnvironment, client: Client, task_queue: str, sim: RunningSim
) -> None:
    """Issue 40 (task): after `approve` of the monitor's reprovision, `host monitor --status` kept
    saying it awaited approval ("... or the approval of it") while the reprovision ran: the
    monitor hears of its request's end, not of its approval. Now it says the approved one runs."""
    host, dpu = "mop-007", "mop-007-dpu-1"
    queue = ("--task-queue", task_queue)
    async with site_worker(client, task_queue, sim):
        policy = MonitorPolicy(reprovision_after_seconds=1.0)
        # Reboots by hand (never confirmed here): the approved reprovision runs until aborted.
        slow = FAST_POLICY.model_copy(update={"reboot_method": RebootMethod.MANUAL})
        async with watched(client, task_queue, host, policy, instance="i-tenant", operations=slow) as (
            entity,
            monitor,
        ):
            await eventually(lambda: status_of(monitor), lambda s: dpu_ready(s, dpu))
            sim.inject(f"dpus/node-{host}-device-{dpu}/node-effect")
            await eventually(lambda: entity_status(entity), awaits_approval)
            await eventually(lambda: status_of(monitor), lambda s: s.own_request is not None)
            approved = await metalflow(local_env, "approve", host, "--by", "carol", *queue)
            assert approved.status == 0, approved.stdout + approved.stderr
            await eventually(lambda: entity_status(entity), running)
            shown = await metalflow(local_env, "host", "monitor", host, "--status", *queue)
            aborted = await metalflow(local_env, "host", "abort", host, "--by", "alice", *queue)
            assert aborted.status == 0, aborted.stdout + aborted.stderr
            await eventually(lambda: entity_status(entity), lambda s: s.current is None)
    assert "awaits approval" not in shown.stdout and "the approval of it" not in shown.stdout, shown.stdout
    # the degraded DPU's line too: its answer as of now (issue 40, L7); the history keeps what was told
    [line] = [x for x in shown.stdout.splitlines() if x.startswith(f"    {dpu} ") and "; asked " in x]
    assert f": approved by carol, running: reprovision/{host};" in line, shown.stdout
    assert f"  its request      reprovision/{host} of {dpu} runs (asked " in shown.stdout, shown.stdout
    assert f"the end of reprovision/{host} (approved by carol, running" in shown.stdout, shown.stdout


def dpu_ready(status: HostMonitorStatus, dpu: str) -> bool:
    return any(d.dpu_id == dpu and d.phase == "Ready" for d in status.dpus)


def running(status: HostStatus) -> bool:
    return status.current is not None and status.current.outcome == "running"


async def test_an_operators_abort_of_the_monitors_reprovision_holds_the_monitor_back(
    local_env: WorkflowEnvironment, client: Client, task_queue: str, sim: RunningSim
) -> None:
    """Issue 40 item 3: the operator aborted the monitor's reprovision ("do not reprovision,
    debugging") and 12 s later the monitor started another, which power-cycled the host."""
    host, dpu = "mop-003", "mop-003-dpu-1"
    monitor_id, queue = names.monitor_workflow_id(host), ("--task-queue", task_queue)
    async with site_worker(client, task_queue, sim):
        policy = MonitorPolicy(reprovision_after_seconds=1.0)  # the hold-back: its default, an hour
        # Reboots by hand (`host-rebooted`, never sent here): the reprovision cannot end before
        # the abort (the simulated site's reprovision takes well under a second otherwise).
        slow = FAST_POLICY.model_copy(update={"reboot_method": RebootMethod.MANUAL})
        async with watched(client, task_queue, host, policy, operations=slow) as (entity, monitor):
            sim.inject(f"dpus/node-{host}-device-{dpu}/node-effect")
            first = await eventually(lambda: entity_status(entity), running)
            assert first.current is not None and first.current.requested_by == monitor_id
            why = "do not reprovision, debugging"
            aborted = await metalflow(
                local_env, "host", "abort", host, "--by", "alice", "--reason", why, *queue
            )
            assert aborted.status == 0, aborted.stdout + aborted.stderr
            await eventually(lambda: entity_status(entity), lambda s: s.current is None)
            # The DPU is still down; or, when the abort came after the reprovision recreated it,
            # Ready: then it falls again. Either way the monitor asks nothing while it holds back.
            settled = await eventually(
                lambda: status_of(monitor),
                lambda s: bool(s.degraded) or (dpu_ready(s, dpu) and not s.degraded),
            )
            if not settled.degraded:
                sim.inject(f"dpus/node-{host}-device-{dpu}/node-effect")
                await eventually(lambda: status_of(monitor), lambda s: bool(s.degraded))
            await asyncio.sleep(3)  # three of the monitor's 1 s deadlines
            after = await entity_status(entity)
            assert after.current is None, after.current
            assert [r.operation for r in after.recent] == ["reprovision"]
            assert after.recent[0].outcome.startswith(f"aborted by alice: {why}")

            held = await status_of(monitor)
            assert held.hold_back is not None and held.hold_back.why.startswith(
                f"reprovision/{host} aborted by alice: {why}"
            )
            assert held.hold_back.until - held.hold_back.since == timedelta(hours=1)
            shown = await metalflow(local_env, "host", "monitor", host, "--status", *queue)
            assert f"holding back     until {iso_z(held.hold_back.until)}: no reprovision asked after " in (
                shown.stdout
            ), shown.stdout
            assert f"(resume: metalflow host monitor {host} --resume)" in shown.stdout
            mixed = await metalflow(
                local_env, "host", "monitor", host, "--status", "--hold-back", "5", *queue
            )
            assert mixed.status == 1 and "--hold-back is a policy of a monitor being started" in mixed.stderr
            host_shown = await metalflow(local_env, "host", "status", host)
            assert f"monitor holds back until {iso_z(held.hold_back.until)}: " in host_shown.stdout

            resumed = await metalflow(
                local_env, "host", "monitor", host, "--resume", "--by", "alice", "--reason", "done", *queue
            )
            assert resumed.status == 0, resumed.stderr
            assert f"{host}: monitor {monitor_id}: resumed by alice: done (held back after" in resumed.stdout
            again = await eventually(lambda: entity_status(entity), running)
            assert again.current is not None and again.current.requested_by == monitor_id
            nothing = await metalflow(local_env, "host", "monitor", host, "--resume", *queue)
            assert nothing.status == 1 and "is not holding back: nothing to resume" in nothing.stderr
            # Clean up: the second is ended (terminated: what this test shows is done), the DPU
            # recovers unless the reprovision recreated it (then no injected failure is left).
            with contextlib.suppress(RPCError):
                await client.get_workflow_handle(f"reprovision/{host}").terminate("test over")
            await eventually(lambda: entity_status(entity), lambda s: s.current is None)
            with contextlib.suppress(httpx.HTTPStatusError):
                sim.inject(f"dpus/node-{host}-device-{dpu}/recover")


async def test_no_reprovision_of_a_removed_dpu_is_accepted_and_the_monitor_stops_asking(
    local_env: WorkflowEnvironment, client: Client, task_queue: str, sim: RunningSim
) -> None:
    """Issue 40 item 3: after `host remove --dpus` of the DPU the monitor wanted, its request was
    accepted (the CLI refuses the same), waited for a hold that never came, and came back."""
    host, dpu = "mop-004", "mop-004-dpu-1"
    monitor_id = names.monitor_workflow_id(host)
    async with site_worker(client, task_queue, sim):
        policy = MonitorPolicy(reprovision_after_seconds=4.0)
        async with watched(client, task_queue, host, policy) as (entity, monitor):
            sim.inject(f"dpus/node-{host}-device-{dpu}/node-effect")
            await eventually(lambda: status_of(monitor), lambda s: bool(s.degraded))
            removed = await metalflow(
                local_env, "host", "remove", host, "--dpus", dpu, "--wait", "--task-queue", task_queue
            )
            assert removed.status == 0, removed.stdout + removed.stderr

            told = await eventually(
                lambda: status_of(monitor), lambda s: any("gone" in r for r in s.requests)
            )
            refusal = (
                f"host {host}: DPF no longer has {dpu} (removed by remove/{host}); reprovision refused "
                f"(bring it back with: metalflow host provision {host} --dpus {dpu})"
            )
            assert f"{dpu}: gone: {refusal}; {dpu} not asked for again" in told.requests
            assert told.degraded == () and told.reprovisions_requested == 0
            assert [d.dpu_id for d in told.dpus] == [f"{host}-dpu-0"]
            await eventually(lambda: status_of(monitor), lambda s: s.pool_state == "in-pool")
            shown = await entity_status(entity)
            assert shown.current is None and [r.operation for r in shown.recent] == ["remove"]
            assert all(r.requested_by != monitor_id for r in shown.recent)

            # Whoever asks: a script's update straight to the entity is refused the same.
            script = OperationRequest(requested_by="script", dpu_ids=(dpu,))
            with pytest.raises(EntityRefused) as refused:
                await HostEntityClient(client, task_queue).update(
                    host, workflow_api.HostWorkflow.request_reprovision, script
                )
            assert str(refused.value) == refusal and refused.value.kind == "DPUsRemoved"
    assert sim.violations() == []


async def test_a_reset_of_every_dpu_leaves_out_the_one_dpf_no_longer_has(
    local_env: WorkflowEnvironment, client: Client, task_queue: str, sim: RunningSim
) -> None:
    """L8 of issue 40's last attack: `host reset HOST --all-dpus` after `host remove HOST --dpus D`
    sent ForceRestart to the removed D through its BMC."""
    host, dpu = "mop-008", "mop-008-dpu-1"
    queue = ("--task-queue", task_queue)
    try:
        async with site_worker(client, task_queue, sim):
            removed = await metalflow(local_env, "host", "remove", host, "--dpus", dpu, "--wait", *queue)
            assert removed.status == 0, removed.stdout + removed.stderr
            reset = await metalflow(
                local_env, "host", "reset", host, "--all-dpus", "--by", "bob", "--wait", *queue
            )
            assert reset.status == 0, reset.stdout + reset.stderr
            # the run's final details (a query of the ended run, served by the worker's replay)
            ended = await client.get_workflow_handle(f"reset/{host}").query(
                "__temporal_workflow_metadata", result_type=WorkflowMetadata
            )
    finally:
        with contextlib.suppress(RPCError):
            await client.get_workflow_handle(names.host_workflow_id(host)).terminate("test over")
    resets = {d: sim_dpu_bmc(sim, d)["resets"] for d in (f"{host}-dpu-0", dpu)}
    assert resets == {f"{host}-dpu-0": {"ForceRestart": 1}, dpu: {}}, resets
    left = f"left out {dpu}: DPF no longer has it (removed by remove/{host})"
    assert f"started reset as reset/{host}; {left}" in reset.stdout, reset.stdout
    assert ended.current_details == f"**completed**: {host}-dpu-0: ForceRestart; {left}", ended


def sim_dpu_bmc(sim: RunningSim, dpu_id: str) -> dict[str, Any]:
    response = sim_http().get(f"{sim.url}/sim/dpu-bmcs/{dpu_id}")
    response.raise_for_status()
    found: dict[str, Any] = response.json()
    return found
