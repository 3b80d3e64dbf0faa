"""Issue 38: `host reboot H --power-down-wait 30 --wait`, the worker SIGKILLed during the wait
and started again: the `--wait` progress printed a stray line in the UI's format (`rebooted:
generation 1 by ForceOff+On`) and a "since" re-anchored at the restart. It keeps the CLI's
format (`T +m:ss HOST: ...`, a final phase read as `finishing`), and dates the power-down wait
from the host's Off, across the kill (`metalflow.hosts.seen_without_status`, `follow_operation`;
the words themselves: tests/fast/test_wait_words_across_a_restart.py).

The worker is a process, killed 2 s into the wait; the one started after it runs in the test's
process, 11 s later (past the CLI's 10 s query timeout: the queries meanwhile answer nothing)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import metalflow, use_site_file
from host_operation_support import worker_for
from sim_support import RunningSim, prefixed_sim
from temporalio.testing import WorkflowEnvironment
from worker_support import worker_env, worker_process

HOST = "kwait-002"  # DEFAULT_ROTATION's second profile: no-powercycle (ForceOff, the wait, On)
LINE = re.compile(rf"\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\dZ \+\d+:\d\d {HOST}: +\S")
WAIT = re.compile(rf"waiting for power-down wait: {HOST} is Off since (\S+Z)\b.* \(since (\S+Z)\)$")


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with prefixed_sim(tmp_path_factory.mktemp("sim"), "kwait", hosts=2, dpus_per_host=1) as running:
        use_site_file(running.site_file)
        yield running


async def test_wait_keeps_its_format_and_since_across_a_worker_kill(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str, tmp_path: Path
) -> None:
    reboot = ("host", "reboot", HOST, "--power-down-wait", "30", "--wait", "--task-queue", task_queue)
    with worker_process(task_queue, worker_env(local_env.client, sim), tmp_path / "worker.log") as first:
        await first.polling(local_env.client)
        waited = asyncio.ensure_future(metalflow(local_env, *reboot))
        for _ in range(300):
            status = await metalflow(local_env, "host", "status", HOST)
            if "power-down wait:" in status.stdout or waited.done():
                break
            await asyncio.sleep(0.1)
        assert "power-down wait:" in status.stdout, status.stdout
        await asyncio.sleep(2)  # the --wait has shown the wait
        first.kill()
    await asyncio.sleep(11)
    async with worker_for(local_env.client, task_queue, sim):
        done = await waited
    assert done.status == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert all(LINE.match(line) for line in lines), done.stdout  # the CLI's format, every line
    assert "**" not in done.stdout and f"{HOST}: rebooted:" not in done.stdout, done.stdout  # not the UI's
    waits = [line for line in lines if "waiting for" in line and "its run to close" not in line]
    assert waits and all(WAIT.search(line) for line in waits), done.stdout
    for line in waits:  # dated from the host's Off, not from when --wait first saw it or again
        off, since = WAIT.search(line).groups()  # type: ignore[union-attr]
        assert since == off, line
    assert lines[-1].endswith(f"reboot/{HOST}/generation-1 completed (boot_generation 1)"), done.stdout
