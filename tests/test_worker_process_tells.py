"""What the worker process itself tells an operator (issue 38 item 7, and the metrics of item 3),
read as an operator reads them: `python worker.py` as deploy/ runs it, its log file and its
Prometheus `/metrics`, against the session's Temporal and a simulated site, driven by the CLI.

- Every line of the worker's log starts with its time in ISO 8601 UTC with `Z`.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from cli_support import ended, metalflow, until_shown, use_site_file
from deploy_support import metric_sum
from ports_support import free_port
from sim_support import RunningSim, prefixed_sim
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from worker_support import WorkerProcess, worker_env, worker_process

from contracts import names

PREFIX = f"tell{uuid.uuid4().hex[:4]}"
LOG_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z [A-Z]+ ")


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with prefixed_sim(tmp_path_factory.mktemp("sim"), PREFIX, hosts=4, dpus_per_host=1) as running:
        use_site_file(running.site_file)
        yield running


@pytest.fixture(scope="module")
def worker(
    local_env: WorkflowEnvironment, sim: RunningSim, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[WorkerProcess, int]]:
    """`worker.py` on a queue of the module's, serving /metrics; (the process, its metrics port)."""
    port = free_port()
    env = worker_env(local_env.client, sim, METALFLOW_METRICS_ADDRESS=f"127.0.0.1:{port}")
    log = tmp_path_factory.mktemp("worker") / "worker.log"
    with worker_process(f"tell-{uuid.uuid4().hex[:8]}", env, log) as process:
        yield process, port


@pytest.fixture
async def queue(local_env: WorkflowEnvironment, worker: tuple[WorkerProcess, int]) -> AsyncIterator[str]:
    process, _ = worker
    await process.polling(local_env.client)
    yield process.task_queue


def log_lines(process: WorkerProcess) -> list[str]:
    """The worker's log lines that start a record (a traceback's lines follow one)."""
    return [line for line in process.output().splitlines() if line.strip()]


async def test_every_line_of_the_worker_log_starts_with_its_time_in_iso_8601_z(
    worker: tuple[WorkerProcess, int], queue: str
) -> None:
    process, _ = worker
    lines = log_lines(process)
    assert lines, "the worker logged nothing"
    assert [line for line in lines if not LOG_TIME.match(line)] == [], Path(process.log).read_text()


async def until_phase(client: Client, workflow_id: str, phases: tuple[str, ...]) -> str:
    """Until the workflow shows one of `phases` (its `Phase` search attribute); which."""
    for _ in range(300):
        with contextlib.suppress(RPCError):
            described = await client.get_workflow_handle(workflow_id).describe()
            if (phase := described.typed_search_attributes.get(names.PHASE)) in phases:
                return phase
        await asyncio.sleep(0.2)
    raise AssertionError(f"{workflow_id} never reached {phases}")


async def scrape(port: int) -> str:
    async with httpx.AsyncClient() as http:
        return (await http.get(f"http://127.0.0.1:{port}/metrics", timeout=10)).text


async def test_wrong_bmc_credentials_are_one_line_of_the_worker_log_said_once(
    local_env: WorkflowEnvironment, sim: RunningSim, worker: tuple[WorkerProcess, int], queue: str
) -> None:
    """The BMC's password changes once it took the host Off (`rotate-after-forceoff`): the power
    cycle's On is refused (401) and the host waits for a person. The SDK logged that activity's
    failure with a ~38-line traceback of the driver's internals; now one line, each line saying
    the 401 once."""
    process, _ = worker
    host = f"{PREFIX}-002"  # a BMC without a native PowerCycle: ForceOff, then On
    sim.inject(f"bmcs/{host}/rotate-after-forceoff")
    asked = await metalflow(local_env, "host", "reboot", host, "--by", "dave@test", "--task-queue", queue)
    assert asked.status == 0, asked.stdout + asked.stderr
    reboot = names.host_reboot_workflow_id(host, 1)
    await until_phase(local_env.client, reboot, ("manual-intervention-required", "waiting-for-manual-reboot"))
    log = process.output()
    assert "Traceback" not in log, log
    said = [line for line in log_lines(process) if "401" in line]
    assert [line for line in said if line.count("401") > 1] == [], said  # each line says it once
    # Each failed activity (the cycle's On, then each attempt to power the host back on): one
    # line with its reason, nothing after it.
    failed = [line for line in said if "Completing activity as failed: BMCAuthenticationFailed: " in line]
    assert failed and all(LOG_TIME.match(line) for line in failed), log
    assert "they changed during the operation" in failed[0], failed  # the cycle's own failure
    aborted = await metalflow(
        local_env, "host", "abort", host, "--by", "dave@test", "--reason", "done", "--task-queue", queue
    )
    assert aborted.status == 0, aborted.stdout + aborted.stderr
    sim.inject(f"bmcs/{host}/clear")


async def test_every_operation_kind_counts_its_end_with_its_outcome(
    local_env: WorkflowEnvironment, sim: RunningSim, worker: tuple[WorkerProcess, int], queue: str
) -> None:
    """`metalflow_operations_finished_total` counted only `kind="reprovision"`: a firmware update,
    a reset and a reboot ended uncounted, and an abort was no `outcome="aborted"`."""
    _, port = worker
    firmware_host, reset_host, reboot_host = (f"{PREFIX}-{n:03d}" for n in (1, 3, 4))
    before = await scrape(port)
    firmware = await metalflow(
        local_env, "host", "firmware", firmware_host, "--version", "32.45.1020",
        "--image", "http://firmware.example.test/bf-fw-32.45.1020.bfb", "--wait", "--task-queue", queue,
    )  # fmt: skip
    assert firmware.status == 0, firmware.stdout + firmware.stderr
    reset = await metalflow(local_env, "host", "reset", reset_host, "--host", "--wait", "--task-queue", queue)
    assert reset.status == 0, reset.stdout + reset.stderr
    manual = ["host", "reboot", reboot_host, "--manual-reboot", "--task-queue", queue]
    assert (waiting := await metalflow(local_env, *manual)).status == 0, waiting.stdout + waiting.stderr
    reboot = names.host_reboot_workflow_id(reboot_host, 1)
    await until_phase(local_env.client, reboot, ("waiting-for-manual-reboot",))
    by = ["--by", "erin@test", "--reason", "not now", "--task-queue", queue]
    assert (aborted := await metalflow(local_env, "host", "abort", reboot_host, *by)).status == 0, aborted
    await until_shown(local_env, reboot_host, ended, "ended")

    after = await scrape(port)
    finished, started = "metalflow_operations_finished_total", "metalflow_operations_started_total"

    def counted(name: str, **labels: str) -> float:
        return metric_sum(after, name, **labels) - metric_sum(before, name, **labels)

    for kind, outcome in (("firmware", "succeeded"), ("reset", "succeeded"), ("reboot", "aborted")):
        assert counted(finished, kind=kind, outcome=outcome) == 1, (kind, outcome, after)
        assert counted(started, kind=kind) == 1, (kind, after)
    # The firmware update's and the reset's power cycles are their steps, not reboots of their own.
    assert counted(finished, kind="reboot") == 1, after
