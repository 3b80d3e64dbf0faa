"""Issue 38, items 1 and 2: what an operator reads while work runs or waits, as a user runs the CLI,
against a real Temporal, a worker with every real workflow and activity, and the simulated site.

1. A running reset showed its phase as `?` (`host reset --wait` printed `now-001: ?`, `host
   status` said `now ?`): its status had no phase. Now both show the reset's phase and what it
   waits for (every operation kind's status carries them:
   tests/fast/test_every_operation_reports_its_phase.py).
2. A host a campaign put off (its entity busy) was invisible in `campaign status` and `host
   status` said nothing of it. Now `campaign status` counts it with when it is asked again and
   why, and `host status` names the campaign, the time (ISO 8601 Z) and the reason.

The DPUs boot for 8 s after a reset, so a reset stays in `waiting-for-dpu-os` long enough to be
looked at.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid

from cli_support import metalflow
from module_site_support import ModuleSite
from sim_support import RunningSim
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from contracts import names, workflow_api
from contracts.models.campaign import AbortRequest
from contracts.models.control import ABORT_UPDATE, OperatorAnswer, OperatorRequest
from contracts.with_start import execute_update
from metalflow.cli import exits

ISO_Z = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"
# The DPUs boot for 8 s after a reset (the module docstring).
SITE = ModuleSite("now", hosts=3, for_metalflow=True, timing={"dpu_boot_seconds": 8})
sim, queue = SITE.fixtures()


async def _abort(client: Client, workflow_id: str) -> None:
    await execute_update(
        client.get_workflow_handle(workflow_id),
        ABORT_UPDATE,
        OperatorRequest(requested_by="pytest", reason="the test is over"),
        result_type=OperatorAnswer,
    )


async def _until_phase(client: Client, workflow_id: str, phase: str) -> None:
    """Until the workflow shows `phase` (its `Phase` search attribute: what `host list` reads)."""
    for _ in range(150):
        with contextlib.suppress(RPCError):
            described = await client.get_workflow_handle(workflow_id).describe()
            if described.typed_search_attributes.get(names.PHASE) == phase:
                return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{workflow_id} never reached {phase}")


async def test_a_running_reset_shows_its_phase_in_wait_progress_and_host_status(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    host, dpu = "now-001", "now-001-dpu-0"
    following = asyncio.ensure_future(
        metalflow(
            local_env,
            "host",
            "reset",
            host,
            "--dpu",
            dpu,
            "--wait",
            "--by",
            "alice@test",
            "--task-queue",
            queue,
        )
    )
    await _until_phase(
        local_env.client, names.host_operation_workflow_id("reset", host), "waiting-for-dpu-os"
    )
    shown = await metalflow(local_env, "host", "status", host)
    followed = await following
    assert shown.status == 0, shown.stderr
    now = re.search(r"^    now +(.*)$", shown.stdout, re.MULTILINE)
    assert now is not None, shown.stdout
    assert (
        now.group(1)
        == f"waiting-for-dpu-os; waiting for DPU {dpu} to boot its OS (OsIsRunning, at most 600 s)"
    )
    assert f"    done           {dpu}: ForceRestart" in shown.stdout
    assert followed.status == 0, followed.stdout + followed.stderr
    steps = re.findall(rf"{host}: (\S+)", followed.stdout)
    assert "?" not in steps, followed.stdout
    assert "waiting-for-dpu-os" in steps, followed.stdout
    assert f"waiting for DPU {dpu} to boot its OS" in followed.stdout


async def _until_deferred(client: Client, workflow_id: str, host: str) -> None:
    """Until the campaign has put `host` off (its entity was busy when asked)."""
    for _ in range(150):
        with contextlib.suppress(RPCError):
            status = await client.get_workflow_handle(workflow_id).query(workflow_api.CampaignWorkflow.status)
            if status.deferred == (host,):
                return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{workflow_id} never put {host} off")


async def _busy_with_a_held_reset(
    env: WorkflowEnvironment, queue: str, host: str, dpu: str, vm: str, *by: str
) -> None:
    """The host assigned to `vm`, then a reset of its DPU `dpu` (`by`: who asks) that awaits
    approval, as the command says: the host's entity is busy."""
    assigned = await metalflow(env, "host", "assign", host, vm, "--task-queue", queue)
    assert assigned.status == 0, assigned.stderr
    held = await metalflow(env, "host", "reset", host, "--dpu", dpu, *by, "--task-queue", queue)
    assert held.status == 0 and "awaits approval" in held.stdout, held.stdout + held.stderr


async def _campaign_put_off(
    env: WorkflowEnvironment, queue: str, name: str, host: str, *options: str
) -> None:
    """`campaign start NAME --hosts HOST --reprovision --canary 0 OPTIONS`, until it puts the (busy)
    host off."""
    started = await metalflow(
        env, "campaign", "start", name, "--hosts", host, "--reprovision", "--canary", "0", *options,
        "--task-queue", queue,
    )  # fmt: skip
    assert started.status == 0, started.stdout + started.stderr
    await _until_deferred(env.client, f"campaign/{name}", host)


async def test_a_request_awaiting_approval_and_a_host_a_campaign_put_off_say_until_when_and_why(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    host, dpu = "now-002", "now-002-dpu-0"
    name = f"now38-{uuid.uuid4().hex[:6]}"
    client = local_env.client
    try:
        await _busy_with_a_held_reset(local_env, queue, host, dpu, "vm-38", "--by", "bob@test")
        waiting = await metalflow(local_env, "host", "status", host)
        assert re.search(
            rf"^    waiting for    `metalflow approve {host}` until {ISO_Z}, then the request expires$",
            waiting.stdout,
            re.MULTILINE,
        ), waiting.stdout

        await _campaign_put_off(local_env, queue, name, host, "--assigned", "wait-for-approval")
        campaign = await metalflow(local_env, "campaign", "status", name)
        assert campaign.status == 0, campaign.stderr
        assert re.search(rf"1 deferred \({host} until {ISO_Z}\)", campaign.stdout), campaign.stdout
        put_off = re.search(rf"^  deferred {host} until ({ISO_Z}): (.+)$", campaign.stdout, re.MULTILINE)
        assert put_off is not None and f"host {host} is busy" in put_off.group(2), campaign.stdout

        shown = await metalflow(local_env, "host", "status", host)
        assert shown.status == 0, shown.stderr
        line = f"  deferred by      campaign/{name} until {put_off.group(1)}: {put_off.group(2)}"
        assert line in shown.stdout.splitlines(), shown.stdout
    finally:
        with contextlib.suppress(RPCError):
            await execute_update(
                client.get_workflow_handle(f"campaign/{name}"),
                ABORT_UPDATE,
                AbortRequest(requested_by="pytest", reason="the test is over"),
                result_type=OperatorAnswer,
            )
        with contextlib.suppress(RPCError):
            await client.get_workflow_handle(names.host_workflow_id(host)).terminate("the test is over")


async def test_an_aborted_campaign_says_who_aborted_and_why_and_exits_4(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    """Issue 38 item 4 for `campaign status`: a campaign an operator aborted exited 0 and its
    reason appeared nowhere, `--json` included; now it says `aborted by <who>: <reason>`, exit 4
    (README's table), as `rollout status` and `--wait` do. The host it was waiting for (busy)
    read as skipped; it stays deferred, with no retry time (it is never asked again)."""
    host, dpu = "now-003", "now-003-dpu-0"
    name = f"stop38-{uuid.uuid4().hex[:6]}"
    client = local_env.client
    try:
        await _busy_with_a_held_reset(local_env, queue, host, dpu, "vm-39")
        await _campaign_put_off(local_env, queue, name, host)
        running = await metalflow(local_env, "campaign", "status", name)
        assert running.status == 0 and "0 skipped" in running.stdout, running.stdout
        assert re.search(rf"1 deferred \({host} until {ISO_Z}\)", running.stdout), running.stdout

        by = ["--by", "carol@test", "--reason", "stop it"]
        aborted = await metalflow(local_env, "campaign", "abort", name, *by)
        assert aborted.status == 0, aborted.stdout + aborted.stderr
        assert (await client.get_workflow_handle(f"campaign/{name}").result())["outcome"] == "aborted"

        said = f"campaign/{name} aborted by carol@test: stop it"
        shown = await metalflow(local_env, "campaign", "status", name)
        assert shown.status == exits.ABORTED, shown
        assert said in shown.stdout and said in shown.stderr, shown
        assert shown.stdout.count("stop it") == 1, shown.stdout  # said once
        assert "failed" not in shown.stderr and "aborting" not in shown.stdout, shown
        # The host it waited for was never left out: deferred, not skipped; with no retry time
        # (issue 38 deliver 2: `until <time>` promised a retry an ended campaign never makes).
        assert "0 skipped" in shown.stdout, shown.stdout
        assert f"1 deferred ({host} left with no retry)" in shown.stdout, shown.stdout
        assert f"  deferred {host} left with no retry: " in shown.stdout, shown.stdout
        as_json = await metalflow(local_env, "campaign", "status", name, "--json")
        assert as_json.status == exits.ABORTED, as_json
        document = json.loads(as_json.stdout)
        assert (document["phase"], document["ended"]) == ("aborted", said), document
        assert (document["aborting"], document["abort_reason"]) == ("carol@test", "stop it"), document
        assert (document["skipped"], document["deferred"]) == (0, [host]), document
        assert [(d["host_id"], d["retry_at"]) for d in document["deferred_hosts"]] == [(host, None)], document
    finally:
        with contextlib.suppress(RPCError):
            await client.get_workflow_handle(names.host_workflow_id(host)).terminate("the test is over")
