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
from sim_support import RunningSim, running_sim
from temporalio.testing import WorkflowEnvironment
from test_cli_host import metalflow

from metalflow.binaries import temporal_cli
from metalflow.settings import Settings
from metalflow.worker import build_worker

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with running_sim(tmp_path_factory.mktemp("sim"), hosts=3, dpus_per_host=1, timings="zero") as running:
        yield running


@pytest.fixture
async def queue(local_env: WorkflowEnvironment, sim: RunningSim) -> AsyncIterator[str]:
    # README's command names no task queue: the worker serves the default one, as `metalflow dev` does.
    settings = Settings(site_file=sim.site_file, kubeconfig=sim.kubeconfig)
    async with build_worker(local_env.client, "metalflow", settings):
        yield "metalflow"


def readme_update_command() -> str:
    """The `temporal workflow update execute ...` block of README, continuation lines joined."""
    match = re.search(r"^temporal workflow update execute .*?[^\\]\n", README.read_text(), re.M | re.S)
    assert match, "README shows no `temporal workflow update execute` command"
    return match.group(0).replace("\\\n", " ").strip()


async def host_json(local_env: WorkflowEnvironment, host: str) -> dict[str, Any]:
    shown = await metalflow(local_env, "host", "status", host, "--json")
    assert shown.status == 0, shown.stderr
    parsed: dict[str, Any] = json.loads(shown.stdout)
    return parsed


async def until(local_env: WorkflowEnvironment, host: str, done: Any, what: str) -> dict[str, Any]:
    for _ in range(300):
        shown = await host_json(local_env, host)
        if done(shown):
            return shown
        await asyncio.sleep(0.2)
    raise AssertionError(f"{host} never {what}: {shown}")


def rebooting(shown: dict[str, Any]) -> bool:
    return (shown["operation"] or {}).get("phase") == "rebooting-host"


def ended(shown: dict[str, Any]) -> bool:
    return shown["host"]["current"] is None


@pytest.mark.slow
async def test_operator_answers_from_the_metalflow_cli_and_from_readmes_temporal_command(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    for host in ("host-001", "host-002", "host-003"):
        started = await metalflow(
            local_env, "host", "provision", host, "--manual-reboot", "--task-queue", queue
        )
        assert started.status == 0, started.stderr
    for host in ("host-001", "host-002", "host-003"):
        await until(local_env, host, rebooting, "waited for its manual reboot")

    # `retry` does not fit a reboot wait: the workflow's validator says why, nothing changes.
    retry = await metalflow(local_env, "host", "retry", "host-002", "--task-queue", queue)
    assert retry.status == 1
    assert "refused `retry`" in retry.stderr and "manual-intervention-required" in retry.stderr, retry.stderr
    assert rebooting(await host_json(local_env, "host-002"))

    # README's Temporal CLI command, run exactly as written.
    command = readme_update_command()
    assert "--workflow-id provision/host-host-001" in command, command
    env = {key: value for key, value in os.environ.items() if not key.startswith("TEMPORAL_")}
    env["TEMPORAL_ADDRESS"] = local_env.client.service_client.config.target_host
    env["PATH"] = f"{temporal_cli().parent}{os.pathsep}{env.get('PATH', '')}"
    process = await asyncio.create_subprocess_exec(
        "bash", "-c", command, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    output, _ = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0, output.decode()

    marked = await metalflow(
        local_env, "host", "mark-rebooted", "host-002", "--by", "dc-tech", "--reason", "by hand",
        "--task-queue", queue,
    )  # fmt: skip
    assert marked.status == 0, marked.stderr
    assert "host-002: provision/host-host-002: reboot confirmation passed to" in marked.stdout

    aborted = await metalflow(
        local_env, "host", "abort", "host-003", "--reason", "wrong rack", "--task-queue", queue
    )
    assert aborted.status == 0, aborted.stderr
    assert "host-003: provision/host-host-003: aborting at the next safe point" in aborted.stdout

    for host in ("host-001", "host-002"):
        shown = await until(local_env, host, ended, "finished")
        assert shown["host"]["recent"][-1]["outcome"] == "completed", shown
    shown = await until(local_env, "host-003", ended, "stopped")
    assert shown["host"]["recent"][-1]["outcome"] != "completed", shown

    # Nothing in flight any more: a clear refusal, exit 1.
    late = await metalflow(local_env, "host", "abort", "host-001", "--task-queue", queue)
    assert late.status == 1 and "no operation in flight on host-001" in late.stderr, late.stderr
