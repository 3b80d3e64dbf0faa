"""`metalflow host maintenance` as an operator uses it, against a real Temporal, the product's
worker and the simulated site: bad input changes nothing; in maintenance an operator's reboot is
refused naming the maintenance and who set it, and runs with `--in-maintenance` (recorded with
the operation); status shows it; off ends it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from cli_support import metalflow
from events_support import emitting_worker
from host_operation_support import worker_for
from monitor_support import STOP, start_monitor, status_of
from sim_support import RunningSim, prefixed_sim, running_sim, start_dev_server
from site_worker_support import FAST_POLICY, eventually, site_worker
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from contracts import names, workflow_api
from contracts.host_entity import HostEntityClient
from contracts.models.control import OperatorAnswer
from contracts.models.host import (
    MAINTENANCE_UPDATE,
    AssignInstanceRequest,
    HostStatus,
    HostWorkflowInput,
    MaintenanceRequest,
    MonitorPolicy,
    OperationRequest,
)
from contracts.with_start import execute_update
from metalflow.hosts import host_status
from metalflow.runtime.observability import Observability

HOST = "host-001"
SITE: dict[str, Path] = {}
QUEUE = "maintenance-e2e"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with running_sim(
        tmp_path_factory.mktemp("sim"), hosts=2, dpus_per_host=1, timings="zero", initialised=True
    ) as running:
        SITE["path"] = running.site_file
        yield running


@pytest.fixture(scope="module")
async def own_env(lifeline_bin: Path) -> AsyncIterator[WorkflowEnvironment]:
    """A Temporal of this module's own: host-001's entity is shared by other modules' hosts."""
    env = await start_dev_server(lifeline_bin)
    try:
        yield env
    finally:
        await env.shutdown()


async def run(env: WorkflowEnvironment, *args: str) -> tuple[int, str, str]:
    shown = await metalflow(env, *args, site_file=SITE["path"])
    return shown.status, shown.stdout, shown.stderr


async def test_an_operators_reboot_is_refused_in_maintenance_and_runs_with_in_maintenance(
    own_env: WorkflowEnvironment, sim: RunningSim
) -> None:
    async with emitting_worker(own_env.client, QUEUE, sim):  # the worker with its Kubernetes Events
        queue = ("--task-queue", QUEUE)
        # Bad input: a clear error, nothing changes (no entity is created).
        status, _, err = await run(own_env, "host", "maintenance", HOST, "on", "--by", "alice", *queue)
        assert status == 2 and "maintenance on needs --reason" in err, err
        status, _, err = await run(own_env, "host", "maintenance", "host-099", "on", "--reason", "x", *queue)
        assert status == 2 and "host-099" in err, err
        handle = own_env.client.get_workflow_handle(names.host_workflow_id(HOST))
        with pytest.raises(Exception):  # noqa: B017 - no entity: nothing was created
            await handle.describe()
        status, out, err = await run(own_env, "host", "maintenance", HOST)  # read only: creates none
        assert status == 0 and out.strip() == f"{HOST} is not in maintenance", (out, err)

        status, out, err = await run(
            own_env, "host", "maintenance", HOST, "on", "--reason", "replacing a fan", "--by", "alice",
            "--json", *queue,
        )  # fmt: skip
        assert status == 0, err
        shown = json.loads(out)
        assert shown["maintenance"]["by"] == "alice" and shown["maintenance"]["reason"] == "replacing a fan"
        assert shown["maintenance"]["since"].endswith("Z")

        # An operator's reboot without the flag: refused, naming the maintenance and who set it.
        status, out, err = await run(own_env, "host", "reboot", HOST, "--by", "carol", *queue)
        assert status == 1, (out, err)
        assert "in maintenance since" in err and "set by alice: replacing a fan" in err, err
        assert f"metalflow host reboot {HOST} --in-maintenance" in err, err
        assert (await host_status(own_env.client, HOST)).current is None  # nothing started

        # With --in-maintenance it runs, and the operation records the maintenance it ran in.
        status, out, err = await run(
            own_env, "host", "reboot", HOST, "--by", "carol", "--in-maintenance", "--power-down-wait", "0",
            "--wait", *queue,
        )  # fmt: skip
        assert status == 0, (out, err)
        entity = await host_status(own_env.client, HOST)
        assert entity.recent[-1].operation == "reboot" and entity.recent[-1].outcome == "completed"
        assert "set by alice: replacing a fan" in entity.recent[-1].in_maintenance

        status, out, err = await run(own_env, "host", "status", HOST)
        assert status == 0, err
        assert "maintenance      on since" in out and "set by alice: replacing a fan" in out, out
        status, out, err = await run(own_env, "host", "versions", HOST, "--json")
        assert status == 0, err
        assert json.loads(out)["hosts"][0]["maintenance"]["by"] == "alice", out
        status, out, err = await run(own_env, "host", "list")
        assert status == 0 and "MAINTENANCE" in out and "on (alice)" in out, (out, err)
        # /metrics: the count and since when, from visibility (what the alert compares)
        observed = Observability(None)
        observed._client = own_env.client
        page = await observed._maintenance()
        assert "metalflow_hosts_in_maintenance 1\n" in page, page
        assert 'metalflow_host_maintenance_since_seconds{host_id="host-001",by="alice"} ' in page, page

        status, out, err = await run(own_env, "host", "maintenance", HOST, "off", "--by", "alice", *queue)
        assert status == 0 and "maintenance ended by alice" in out, (out, err)
        # The Events on the host's DPUNode say it: on, the --in-maintenance start, off.
        for _ in range(50):
            status, out, err = await run(own_env, "events", HOST)
            if "MaintenanceOff" in out:
                break
            await asyncio.sleep(0.2)
        assert "MaintenanceOn" in out and "set by alice: replacing a fan" in out, (out, err)
        assert "asked with --in-maintenance while in maintenance since" in out, out
        assert "MaintenanceOff" in out, out
        assert (await host_status(own_env.client, HOST)).maintenance is None
        described = await handle.describe()
        assert described.typed_search_attributes.get(names.MAINTENANCE) is None

        # On while an operation runs: it is not stopped, and the answer says how to stop it.
        status, out, err = await run(own_env, "host", "reboot", HOST, "--manual-reboot", *queue)
        assert status == 0, err
        status, out, err = await run(own_env, "host", "maintenance", HOST, "on", "--reason", "cable", *queue)
        assert status == 0, err
        assert "reboot (reboot/host-001/generation-2) is in flight and is not stopped by maintenance" in out
        assert f"(stop it with: metalflow host abort {HOST})" in out, out
        running = await host_status(own_env.client, HOST)
        assert running.current is not None and running.current.outcome == "running"
        status, out, err = await run(own_env, "host", "abort", HOST, *queue)
        assert status == 0, err
        status, out, err = await run(own_env, "host", "maintenance", HOST, "off", *queue)
        assert status == 0, err


async def test_a_campaign_and_its_plan_skip_a_host_in_maintenance_naming_who_set_it(
    own_env: WorkflowEnvironment, sim: RunningSim
) -> None:
    async with worker_for(own_env.client, QUEUE, sim):
        queue = ("--task-queue", QUEUE)
        status, out, err = await run(
            own_env, "host", "maintenance", "host-002", "on", "--reason", "BMC swap", "--by", "bob", *queue
        )
        assert status == 0, err
        args = ["--hosts", "host-001,host-002", "--reprovision", "--power-down-wait", "0", *queue]
        status, out, err = await run(own_env, "campaign", "plan", "mnt-c", *args, "--json")
        assert status == 0, err
        plan = json.loads(out)
        assert [g["host_ids"] for g in plan["left_out"]] == [["host-002"]], plan
        reason = plan["left_out"][0]["reason"]
        assert reason.startswith("in maintenance since ") and "set by bob" in reason, reason
        assert plan["canary"] + [h for batch in plan["batches"] for h in batch] == ["host-001"], plan
        status, out, err = await run(own_env, "campaign", "start", "mnt-c", *args, "--wait")
        # a host skipped by the campaign's rules is no failure (issue 40): --wait exits 0, saying so
        assert status == 0 and "completed: 1 done, 0 already at target, 0 failed" in out, (out, err)
        assert "1 host skipped (named above, each with why" in out, out
        assert "1 skipped of 2" in out and "skipped host-002: in maintenance since" in out, out
        assert "set by bob" in out, out
        entity = await host_status(own_env.client, "host-002")
        assert entity.current is None and entity.recent == ()  # the campaign never asked it
        status, out, err = await run(own_env, "host", "maintenance", "host-002", "off", *queue)
        assert status == 0, err


async def test_a_campaigns_plan_leaves_out_a_host_held_back_as_its_start_does_and_picks_the_same_canary(
    own_env: WorkflowEnvironment, sim: RunningSim
) -> None:
    """An attack found it (issue 40): `campaign plan` named host-001, whose automation an operator
    held back (a `host abort` of the monitor's request), as the canary; `campaign start` then asked
    it, was refused and skipped it. Both read the hold with the selection now and leave it out
    alike, naming who and why; the canary is host-002 in both."""
    host, monitor = HOST, names.monitor_workflow_id(HOST)
    entities = HostEntityClient(own_env.client, QUEUE)
    async with worker_for(own_env.client, QUEUE, sim):
        queue = ("--task-queue", QUEUE)
        entity = HostWorkflowInput(host_id=host, policy=FAST_POLICY)
        await entities.ask(entity, workflow_api.HostWorkflow.assign_instance,
                           AssignInstanceRequest(instance="tenant-7", requested_by="ops"))  # fmt: skip
        asked = OperationRequest(requested_by=monitor, campaign_workflow_id=monitor, reason="DPU down")
        waits = await entities.ask(entity, workflow_api.HostWorkflow.request_reprovision, asked)
        assert waits.awaiting_approval, waits  # assigned: it waits, nothing starts
        status, out, err = await run(
            own_env, "host", "abort", host, "--by", "carol", "--reason", "debugging", *queue
        )
        assert status == 0, err  # withdrawn by carol: automation held back
        await entities.update(host, workflow_api.HostWorkflow.release_instance,
                              AssignInstanceRequest(instance="tenant-7", requested_by="ops"))  # fmt: skip
        args = ["--hosts", "host-001,host-002", "--reprovision", "--power-down-wait", "0", *queue]
        status, out, err = await run(own_env, "campaign", "plan", "held-c", *args, "--json")
        assert status == 0, err
        plan = json.loads(out)
        assert [g["host_ids"] for g in plan["left_out"]] == [[host]], plan
        reason = plan["left_out"][0]["reason"]
        assert reason.startswith("automation held back by carol since ") and ": debugging;" in reason, reason
        assert plan["canary"] == ["host-002"] and plan["batches"] == [], plan
        status, out, err = await run(own_env, "campaign", "start", "held-c", *args, "--wait")
        assert status == 0 and "skipped host-001: automation held back by carol" in out, (out, err)
        assert "completed: 1 done" in out, out
        # its only host held back: the campaign did nothing, rightly; no failure of the command
        only = ["--hosts", host, "--reprovision", "--power-down-wait", "0", *queue]
        status, out, err = await run(own_env, "campaign", "start", "held-only", *only, "--wait")
        assert status == 0, (out, err)
        assert "completed: 0 done, 0 already at target, 0 failed, 1 skipped of 1" in out, out
        assert "nothing to do: every host was skipped" in out and "not a failure (exit 0)" in out, out
        held = await host_status(own_env.client, host)
        assert held.recent[-1].outcome.startswith("withdrawn by carol"), held.recent  # never asked again
        status, out, err = await run(own_env, "host", "retry", host, "--by", "carol", "--json", *queue)
        assert status == 0, err  # `host retry --json` (issue 40): one document, as its neighbours'
        answer = json.loads(out)
        assert (answer["host_id"], answer["workflow_id"], answer["accepted"]) == (
            host,
            names.host_workflow_id(host),
            True,
        ), answer
        assert answer["message"].startswith("automation no longer held back: host retry by carol"), answer


@pytest.fixture(scope="module")
def mnt_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with prefixed_sim(tmp_path_factory.mktemp("mnt-sim"), "mnt", hosts=2) as running:
        yield running


async def test_the_monitor_records_the_reprovision_it_would_have_asked_for_and_asks_none(
    client: Client, task_queue: str, mnt_sim: RunningSim
) -> None:
    host, dpu = "mnt-001", "mnt-001-dpu-1"
    async with site_worker(client, task_queue, mnt_sim):
        entity = await client.start_workflow(
            "HostWorkflow",
            HostWorkflowInput(host_id=host, site="mnt-site", policy=FAST_POLICY),
            id=names.host_workflow_id(host),
            task_queue=task_queue,
        )
        on = MaintenanceRequest(on=True, requested_by="alice", reason="reseating a DPU")
        answer = await execute_update(entity, MAINTENANCE_UPDATE, on, result_type=OperatorAnswer)
        assert "in maintenance since" in answer.message
        monitor = await start_monitor(client, task_queue, host, MonitorPolicy(reprovision_after_seconds=1.0))
        try:
            await eventually(lambda: status_of(monitor), lambda s: len(s.dpus) == 2)
            mnt_sim.inject(f"dpus/node-{host}-device-{dpu}/node-effect")
            shown = await eventually(
                lambda: status_of(monitor), lambda s: any("would have asked" in r for r in s.requests)
            )
            assert shown.reprovisions_requested == 0
            assert (
                f"{dpu}: would have asked for a reprovision; not asked: host {host} is in maintenance"
                in (shown.requests[0])
            )
            assert "set by alice: reseating a DPU" in shown.requests[0]
            status = await entity.query("status", result_type=HostStatus)
            assert status.current is None and status.recent == ()  # nothing started

            # Off replays nothing: the entity starts nothing of what it refused.
            off = MaintenanceRequest(on=False, requested_by="alice")
            ended = await execute_update(entity, MAINTENANCE_UPDATE, off, result_type=OperatorAnswer)
            assert "nothing skipped is replayed" in ended.message
            assert (await entity.query("status", result_type=HostStatus)).current is None
        finally:
            await execute_update(monitor, "abort", STOP)
            await monitor.result()
            await entity.terminate("test over")
