"""`metalflow host ...`, `host-rebooted`, `approve` as a user runs them, against a real Temporal, a
worker with every real workflow and activity, and the simulated site. Each command runs in a
command server (tests/cli_support.py): a process of its own with its own environment, as a
subprocess, without an interpreter's imports per command."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterator

import pytest
from cli_support import ended, metalflow, rebooting, until_shown, use_site_file
from host_operation_support import worker_for
from ports_support import free_port
from sim_support import RunningSim, prefixed_sim
from site_worker_support import eventually
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from contracts import names
from metalflow.cli.host_phases import ENDINGS, OPERATION_PHASES
from metalflow.devstack.demo import power_cycles


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    # Host ids of this module's own (clih-001...): the session's dev server is shared with other
    # modules (in any order under xdist), and a host's entity and boot generations live there.
    with prefixed_sim(
        tmp_path_factory.mktemp("sim"), "clih", hosts=4, serials=True, initialised=False
    ) as running:
        use_site_file(running.site_file)
        yield running


@pytest.fixture
async def queue(local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str) -> AsyncIterator[str]:
    async with worker_for(local_env.client, task_queue, sim):
        yield task_queue


async def test_provision_wait_follows_the_operation_and_power_cycles_once(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    done = await metalflow(
        local_env, "host", "provision", "clih-001", "--wait", "--power-down-wait", "0",
        "--by", "alice@test", "--task-queue", queue,
    )  # fmt: skip
    assert done.status == 0, done.stdout + done.stderr
    assert "clih-001: started provision as provision/clih-001" in done.stdout
    # Phase changes as the follower's poll sees them: at least one step between start and end
    # (which ones depends on how long each lasts; a reboot of the simulated BMC can be shorter
    # than one poll).
    steps = set(re.findall(r"clih-001: ([a-z-]+)", done.stdout))
    assert steps & (OPERATION_PHASES - ENDINGS), done.stdout
    assert "clih-001: provision/clih-001 completed (reboots 1, boot_generation 1)" in done.stdout
    assert power_cycles(sim.power_log("clih-001")) == 1  # BF3: DPF asked for one reboot
    assert sim.violations() == []

    status = await metalflow(local_env, "host", "status", "clih-001", "--json")
    assert status.status == 0, status.stderr
    shown = json.loads(status.stdout)["host"]
    assert shown["phase"] == "idle" and shown["boot_generation"] == 1
    assert [(r["operation"], r["outcome"], r["requested_by"]) for r in shown["recent"]] == [
        ("provision", "completed", "alice@test")
    ]
    text = await metalflow(local_env, "host", "status", "clih-001")
    # the site file's name (issue 36 low findings item 4: it said "default")
    site = sim.site["name"]
    assert f"host clih-001 (site {site}): idle" in text.stdout and "boot generation  1" in text.stdout
    assert site != "default" and shown["site"] == site


async def test_a_busy_host_refuses_and_a_manual_reboot_is_reported_with_host_rebooted(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    started = await metalflow(
        local_env, "host", "provision", "clih-002", "--manual-reboot", "--task-queue", queue
    )
    assert started.status == 0, started.stderr

    busy = await metalflow(local_env, "host", "reprovision", "clih-002", "--task-queue", queue)
    assert busy.status == 1
    assert "provision is in flight (workflow provision/clih-002" in busy.stderr
    assert "reprovision refused" in busy.stderr

    # The operation waits for someone else to reboot the host; status says so.
    await until_shown(local_env, "clih-002", rebooting, "waited for the reboot")
    status = await metalflow(local_env, "host", "status", "clih-002", "--json")
    assert rebooting(json.loads(status.stdout)), status.stdout  # the command says what the query said
    text = await metalflow(local_env, "host", "status", "clih-002")
    assert "running provision" in text.stdout and "power cycles issued" in text.stdout

    told = await metalflow(
        local_env, "host-rebooted", "clih-002", "--by", "dc-tech", "--task-queue", queue, "--json"
    )
    assert told.status == 0, told.stderr
    answer = json.loads(told.stdout)  # issue 38: `--json` as its siblings, one document
    assert (answer["host_id"], answer["workflow_id"], answer["accepted"]) == (
        "clih-002",
        "provision/clih-002",
        True,
    )
    assert "reboot confirmation passed to reboot/clih-002/generation-" in answer["message"], answer
    await until_shown(local_env, "clih-002", ended, "finished")
    shown = json.loads((await metalflow(local_env, "host", "status", "clih-002", "--json")).stdout)["host"]
    assert shown["current"] is None and shown["recent"][-1]["outcome"] == "completed", shown
    assert power_cycles(sim.power_log("clih-002")) == 0  # metalflow never touched its power

    idle = await metalflow(local_env, "host-rebooted", "clih-002", "--task-queue", queue)
    assert idle.status == 1 and "no operation in flight on clih-002" in idle.stderr
    refused = await metalflow(local_env, "host-rebooted", "clih-002", "--task-queue", queue, "--json")
    assert refused.status == 1 and json.loads(refused.stdout) == {
        "error": "no operation in flight on clih-002: nothing waits for a reboot",
        "exit_status": 1,
    }, refused.stdout


async def test_an_assigned_host_waits_for_approve(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    assigned = await metalflow(local_env, "host", "assign", "clih-004", "i-42", "--task-queue", queue)
    assert assigned.status == 0 and "assigned to i-42" in assigned.stdout
    held = await metalflow(
        local_env, "host", "provision", "clih-004", "--power-down-wait", "0", "--task-queue", queue
    )
    assert held.status == 0
    assert "awaits approval: the host is assigned to instance i-42" in held.stdout
    assert sim.power_log("clih-004") == []

    approved = await metalflow(
        local_env, "approve", "clih-004", "--by", "carol", "--wait", "--task-queue", queue
    )
    assert approved.status == 0, approved.stdout + approved.stderr
    assert "approved provision; started provision/clih-004" in approved.stdout
    assert "provision/clih-004 completed (reboots 1" in approved.stdout
    assert power_cycles(sim.power_log("clih-004")) == 1

    again = await metalflow(local_env, "approve", "clih-004", "--task-queue", queue)
    assert again.status == 1 and "nothing awaits approval" in again.stderr


async def test_clear_errors(local_env: WorkflowEnvironment) -> None:
    unknown = await metalflow(local_env, "host", "status", "host-never-seen")
    assert unknown.status == 2 and "unknown host 'host-never-seen': not in the site file" in unknown.stderr
    dead = f"127.0.0.1:{free_port()}"
    unreachable = await metalflow(local_env, "host", "status", "clih-001", address=dead)
    assert unreachable.status == 3
    assert (
        f"cannot reach Temporal at {dead}" in unreachable.stderr and "TEMPORAL_ADDRESS" in unreachable.stderr
    )
    bad = await metalflow(local_env, "host", "provision", "host/../x")
    assert bad.status == 2 and "invalid host id" in bad.stderr


async def test_reboot_wait_shows_its_phases_and_the_manual_reboot_it_waits_for(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    waiting = asyncio.create_task(
        metalflow(
            local_env, "host", "reboot", "clih-003", "--wait", "--manual-reboot", "--by", "bob",
            "--task-queue", queue,
        )
    )  # fmt: skip
    # Waited for through the client, not by polling `host status` (~1.3 s of CPU per subprocess):
    # the reboot's Phase, which the command shows for a workflow without a status query.
    reboot = local_env.client.get_workflow_handle("reboot/clih-003/generation-1")

    async def phase() -> str | None:
        try:
            return (await reboot.describe()).typed_search_attributes.get(names.PHASE)
        except RPCError:  # not started yet
            return None

    await eventually(phase, lambda shown: shown == "waiting-for-manual-reboot", timeout=120)
    # `host status` of a running reboot (a workflow without a status query) shows its phase.
    status = await metalflow(local_env, "host", "status", "clih-003", "--json")
    assert status.status == 0, status.stderr
    shown = json.loads(status.stdout)
    assert shown["operation"]["phase"] == "waiting-for-manual-reboot", shown
    assert shown["operation"]["waiting_for"].startswith("`metalflow host-rebooted clih-003`")
    text = await metalflow(local_env, "host", "status", "clih-003")
    assert "running reboot" in text.stdout and "now            waiting-for-manual-reboot" in text.stdout
    assert "waiting for    `metalflow host-rebooted clih-003`" in text.stdout

    told = await metalflow(local_env, "host-rebooted", "clih-003", "--by", "dc-tech", "--task-queue", queue)
    assert told.status == 0, told.stderr
    done = await waiting
    assert done.status == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    # Not a terminal: every line stamped with the UTC time and the time since the command began.
    assert all(re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \+\d+:\d\d clih-003: ", line) for line in lines), (
        lines
    )
    assert "run `metalflow host-rebooted clih-003`" in done.stdout  # said before anything waits
    assert "clih-003: waiting-for-manual-reboot" in done.stdout
    assert re.search(
        r"clih-003:   waiting for `metalflow host-rebooted clih-003`.*"
        r" \(since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\)",
        done.stdout,
    )
    assert "reboot/clih-003/generation-1 completed (boot_generation 1)" in done.stdout
    assert sim.power_log("clih-003") == []  # a manual reboot: metalflow never touched its power
