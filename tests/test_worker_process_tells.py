"""What the worker process itself tells an operator (issue 38 item 7, and the metrics of item 3),
read as an operator reads them: `python worker.py` as deploy/ runs it, its log file and its
Prometheus `/metrics`, against the session's Temporal and a simulated site, driven by the CLI.

- Every line of the worker's log starts with its time in ISO 8601 UTC with `Z`.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from cli_support import use_site_file
from sim_support import RunningSim, prefixed_sim
from temporalio.testing import WorkflowEnvironment
from worker_support import WorkerProcess, worker_env, worker_process

from metalflow.runtime.ports import free_port

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
