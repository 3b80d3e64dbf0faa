"""`metalflow host retry|abort|mark-rebooted` and README's `temporal workflow update execute`,
run as written, against a real Temporal, a worker with the real workflows, and the simulated site."""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import ended, metalflow, rebooting, until_shown
from host_operation_support import worker_for
from sim_support import RunningSim, running_sim, start_dev_server
from temporalio.testing import WorkflowEnvironment

from contracts import names
from metalflow.binaries import temporal_cli

README = Path(__file__).resolve().parents[1] / "README.md"
SITE: dict[str, Path] = {}


async def metalflow_here(env: WorkflowEnvironment, *args: str) -> Any:
    """`metalflow ...` against this module's Temporal, checking hosts against this module's site."""
    return await metalflow(env, *args, site_file=SITE["path"])


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with running_sim(tmp_path_factory.mktemp("sim"), hosts=3, dpus_per_host=1, timings="zero") as running:
        SITE["path"] = running.site_file
        yield running


@pytest.fixture(scope="module")
async def own_env(lifeline_bin: Path) -> AsyncIterator[WorkflowEnvironment]:
    """A Temporal of this module's own: README's command names host-001's workflows, which other
    modules' hosts share on the session's server; and `host list` lists the whole namespace."""
    env = await start_dev_server(lifeline_bin)
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture(scope="module")
async def queue(own_env: WorkflowEnvironment, sim: RunningSim) -> AsyncIterator[str]:
    # README's command names no task queue: the worker serves the default one, as `metalflow dev` does.
    async with worker_for(own_env.client, names.TASK_QUEUE, sim):
        yield names.TASK_QUEUE


def readme_update_command() -> str:
    """README's `temporal workflow update execute ...` block that answers an operation (not the
    entity's `withdraw`, shown too), continuation lines joined."""
    found = [
        match.group(0).replace("\\\n", " ").strip()
        for match in re.finditer(
            r"^temporal workflow update execute .*?[^\\]\n", README.read_text(), re.M | re.S
        )
    ]
    answers = [command for command in found if "--workflow-id host/" not in command]
    assert answers, "README shows no `temporal workflow update execute` command answering an operation"
    return answers[0]


async def host_json(own_env: WorkflowEnvironment, host: str) -> dict[str, Any]:
    shown = await metalflow_here(own_env, "host", "status", host, "--json")
    assert shown.status == 0, shown.stderr
    parsed: dict[str, Any] = json.loads(shown.stdout)
    return parsed


async def until(own_env: WorkflowEnvironment, host: str, done: Any, what: str) -> dict[str, Any]:
    """Poll in this process until `done`, then read the same through the command once."""
    await until_shown(own_env, host, done, what)
    shown = await host_json(own_env, host)
    assert done(shown), shown  # the command says what the query said
    return shown


async def test_operator_answers_from_the_metalflow_cli_and_from_readmes_temporal_command(
    own_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    for host in ("host-001", "host-002", "host-003"):
        started = await metalflow_here(
            own_env, "host", "provision", host, "--manual-reboot", "--task-queue", queue
        )
        assert started.status == 0, started.stderr
    for host in ("host-001", "host-002", "host-003"):
        await until(own_env, host, rebooting, "waited for its manual reboot")

    # The fleet view: every host, its operation in flight and that operation's phase.
    listed = await metalflow_here(own_env, "host", "list")
    assert listed.status == 0, listed.stderr
    header, *lines = listed.stdout.splitlines()
    assert header.split() == [
        "HOST", "SITE", "PHASE", "FOR", "INSTANCE", "MAINTENANCE", "OPERATION", "OPERATION", "PHASE"
    ]  # fmt: skip
    assert [line.split()[0] for line in lines] == ["host-001", "host-002", "host-003"], listed.stdout
    first = lines[0].split()
    assert first[2:4] == ["running", "provision"] and first[5:] == [
        "-",
        "-",  # not in maintenance
        "provision/host-001",
        "rebooting-host",
    ]
    assert re.fullmatch(r"\d+:\d\d:\d\d", first[4]), listed.stdout
    assert "3 hosts, 3 with an operation in flight (3 visibility requests)" in listed.stderr
    as_json = await metalflow_here(own_env, "host", "list", "--json", "--phase", "rebooting-host")
    rows = json.loads(as_json.stdout)
    assert [row["host"] for row in rows] == ["host-001", "host-002", "host-003"]
    # Filtered by the server: entities in the phase, operations in it, all operations in flight,
    # then the matched operations' entities by id (one request for three ids).
    assert "3 hosts, 3 with an operation in flight (4 visibility requests)" in as_json.stderr
    assert rows[1]["phase"] == "running provision"
    assert rows[1]["operation"]["workflow_id"] == "provision/host-002"
    assert rows[1]["operation"]["operation"] == "provision"
    assert rows[1]["operation"]["started_at"].endswith("Z") and rows[1]["phase_since"].endswith("Z")
    bad = await metalflow_here(own_env, "host", "list", "--phase", "Idle;rm")
    assert bad.status == 2 and "unknown phase 'Idle;rm'" in bad.stderr and "rebooting-host" in bad.stderr

    # `retry` does not fit a reboot wait: the workflow's validator says why, nothing changes.
    retry = await metalflow_here(own_env, "host", "retry", "host-002", "--task-queue", queue)
    assert retry.status == 1
    assert "refused `retry`" in retry.stderr and "manual-intervention-required" in retry.stderr, retry.stderr
    assert rebooting(await host_json(own_env, "host-002"))

    # README's Temporal CLI command, run exactly as written.
    command = readme_update_command()
    assert "--workflow-id provision/host-001" in command, command
    env = {key: value for key, value in os.environ.items() if not key.startswith("TEMPORAL_")}
    env["TEMPORAL_ADDRESS"] = own_env.client.service_client.config.target_host
    env["PATH"] = f"{temporal_cli().parent}{os.pathsep}{env.get('PATH', '')}"
    process = await asyncio.create_subprocess_exec(
        "bash", "-c", command, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    output, _ = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0, output.decode()

    marked = await metalflow_here(
        own_env, "host", "mark-rebooted", "host-002", "--by", "dc-tech", "--reason", "by hand",
        "--task-queue", queue,
    )  # fmt: skip
    assert marked.status == 0, marked.stderr
    assert "host-002: provision/host-002: reboot confirmation passed to" in marked.stdout

    aborted = await metalflow_here(
        own_env, "host", "abort", "host-003", "--reason", "wrong rack", "--task-queue", queue
    )
    assert aborted.status == 0, aborted.stderr
    assert "host-003: provision/host-003: aborting at the next safe point" in aborted.stdout

    for host in ("host-001", "host-002"):
        shown = await until(own_env, host, ended, "finished")
        assert shown["host"]["recent"][-1]["outcome"] == "completed", shown
    shown = await until(own_env, "host-003", ended, "stopped")
    # An abort is recorded as such, with who and why, not as a failure.
    outcome = shown["host"]["recent"][-1]["outcome"]
    assert outcome.startswith("aborted by ") and ": wrong rack" in outcome, shown  # then what it left
    # Issue 29 item 6: the entity reads idle, but its DPU still waits in Rebooting for the reboot
    # the abort left undone; `host status` says so (and nothing for the hosts that completed).
    status = await metalflow_here(own_env, "host", "status", "host-003")
    assert status.status == 0, status.stderr
    assert status.stdout.splitlines()[0].endswith("): idle"), status.stdout
    warning = "WARNING          DPU node-host-003-device-host-003-dpu-0 is Rebooting: DPF waits for a reboot"
    assert warning in status.stdout, status.stdout
    assert (await host_json(own_env, "host-001"))["warnings"] == []

    idle = json.loads((await metalflow_here(own_env, "host", "list", "--json", "--phase", "idle")).stdout)
    assert [(row["host"], row["operation"]) for row in idle] == [
        (h, None) for h in ("host-001", "host-002", "host-003")
    ]
    # An idle host: how long it has been idle, and its instance, from the same listing.
    assigned = await metalflow_here(own_env, "host", "assign", "host-001", "i-7", "--task-queue", queue)
    assert assigned.status == 0, assigned.stderr
    for _ in range(50):  # visibility follows the entity's upsert a moment later
        shown = (await metalflow_here(own_env, "host", "list")).stdout
        if re.search(r"^host-001 .* i-7 ", shown, re.M):
            break
        await asyncio.sleep(0.2)
    assert re.search(r"^host-001 +\S+ +idle +\d+:\d\d:\d\d +i-7 +- +- +-$", shown, re.M), shown
    assert re.search(r"^host-002 +\S+ +idle +\d+:\d\d:\d\d +- +- +- +-$", shown, re.M), shown
    listed_json = json.loads((await metalflow_here(own_env, "host", "list", "--json")).stdout)
    assert listed_json[0]["instance"] == "i-7" and listed_json[1]["instance"] is None

    # Issue 38: a host awaiting approval named no operation (OPERATION `-`); it names the one it
    # would run, and `--phase awaiting-approval` finds it.
    held = await metalflow_here(own_env, "host", "reprovision", "host-001", "--task-queue", queue)
    assert held.status == 0 and "awaits approval" in held.stdout, (held.stdout, held.stderr)
    for _ in range(50):  # visibility follows the entity's memo a moment later
        shown = (await metalflow_here(own_env, "host", "list", "--phase", "awaiting-approval")).stdout
        if "reprovision (awaiting approval)" in shown:
            break
        await asyncio.sleep(0.2)
    assert re.search(r"^host-001 +\S+ +awaiting-approval .* i-7 +- +reprovision \(awaiting approval\) +-$",
                     shown, re.M), shown  # fmt: skip
    assert [line.split()[0] for line in shown.splitlines()[1:]] == ["host-001"], shown
    rows = json.loads((await metalflow_here(own_env, "host", "list", "--json")).stdout)
    assert [(row["host"], row["awaiting_approval"], row["operation"]) for row in rows] == [
        ("host-001", "reprovision", None), ("host-002", None, None), ("host-003", None, None)
    ]  # fmt: skip
    withdrawn = await metalflow_here(own_env, "host", "abort", "host-001", "--task-queue", queue)
    assert withdrawn.status == 0, withdrawn.stderr
    for _ in range(50):
        rows = json.loads((await metalflow_here(own_env, "host", "list", "--json")).stdout)
        if rows[0]["awaiting_approval"] is None:
            break
        await asyncio.sleep(0.2)
    assert (rows[0]["phase"], rows[0]["awaiting_approval"]) == ("idle", None), rows[0]
    await metalflow_here(own_env, "host", "release", "host-001", "i-7", "--task-queue", queue)

    # Nothing in flight any more: a clear refusal, exit 1.
    late = await metalflow_here(own_env, "host", "abort", "host-001", "--task-queue", queue)
    assert late.status == 1 and "no operation in flight on host-001" in late.stderr, late.stderr
