"""Issue 38: after a worker is killed with `kill -9`, `host status` showed the DPU phases of the
site watch's last beat, with no hint, until another worker took the watch over (the heartbeat
timeout plus the retry backoff: 160 s by default, README "N workers"). Now, while the watch is
not beating, `host status` (and `host list`, on stderr) say the DPU phases are from its last beat
and by when the takeover is expected; once another worker has it, the line goes.

Two workers on the test's task queue (a process, and one in the test's process), the site
watch's heartbeat timeout 40 s (`METALFLOW_SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS`: the line
shows from 20 s after the last beat until the takeover, a window that `host status`, `host list`
and `host status --json` in a row fit in even when a full run makes each take ~10 s): a
reprovision with `--manual-reboot` waits with its DPUs shown; the worker running the watch's
activity is SIGKILLed. Once the line was seen, `start_site_watch` (what a starting worker does)
has the watch take the silent attempt for dead after its probe (5 s), not at the heartbeat
timeout (~30 s later): the line's going is what is asserted, not which takeover ends it.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import Result, metalflow, use_site_file
from host_operation_support import worker_for
from sim_support import RunningSim, prefixed_sim
from temporalio.testing import WorkflowEnvironment
from worker_support import worker_env, worker_process

from contracts import names
from contracts.models.inventory import DPF_NAMESPACE
from drivers.settings import Settings
from metalflow.runtime.worker import start_site_watch

HOST = "lapse-001"
LINE = re.compile(
    r"    site watch     the DPU phases shown are from (\S+Z): the site watch dpf-watch/\S+ has not "
    r"beaten since \(its worker stopped\) and is being taken over by another worker \(expected by (\S+Z)\)"
)


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with prefixed_sim(tmp_path_factory.mktemp("sim"), "lapse", hosts=1, dpus_per_host=1) as running:
        use_site_file(running.site_file)
        yield running


async def _until(env: WorkflowEnvironment, accept: object, timeout: float, *args: str) -> Result:
    deadline = time.monotonic() + timeout
    while True:
        shown = await metalflow(env, *args)
        if accept(shown) or time.monotonic() > deadline:  # type: ignore[operator]
            return shown
        await asyncio.sleep(0.3)


async def test_dpu_phases_from_a_dead_workers_watch_say_how_old_they_are(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str, tmp_path: Path
) -> None:
    env = worker_env(local_env.client, sim, METALFLOW_SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS="40")
    watch = local_env.client.get_workflow_handle(names.dpf_watch_workflow_id(DPF_NAMESPACE, task_queue))
    with worker_process(task_queue, env, tmp_path / "a.log") as first:
        await first.polling(local_env.client)
        started = await metalflow(
            local_env, "host", "reprovision", HOST, "--manual-reboot", "--task-queue", task_queue
        )
        assert started.status == 0, started.stdout + started.stderr
        waiting = await _until(local_env, lambda s: "host-rebooted" in s.stdout, 60, "host", "status", HOST)
        assert f"{HOST}-dpu-0" in waiting.stdout and "site watch " not in waiting.stdout, waiting.stdout
        async with worker_for(local_env.client, task_queue, sim):  # the worker left running
            described = await watch.describe()
            (pending,) = described.raw_description.pending_activities
            assert pending.last_worker_identity.startswith(f"{first.pid}@"), pending
            first.kill()
            stale = await _until(local_env, lambda s: LINE.search(s.stdout), 45, "host", "status", HOST)
            said = LINE.search(stale.stdout)
            # Seen before the takeover: once another worker has the watch the line goes, and its
            # "being taken over" words are said only until the expected time. (A wall-clock bound
            # here measured the CLI's speed: a quiet full run's `host status` calls took 20 s.)
            assert said is not None, stale.stdout
            listed = await metalflow(local_env, "host", "list")
            assert f"WARNING: the DPU phases shown are from {said.group(1)}: the site watch" in listed.stderr
            as_json = json.loads((await metalflow(local_env, "host", "status", HOST, "--json")).stdout)
            assert as_json["site_watch_lapse"]["dpu_phases_from"] == said.group(1), as_json
            assert as_json["site_watch_lapse"]["takeover_expected_by"] == said.group(2), as_json
            # Taken over by the second worker: the phases are live again, and the line goes. A
            # worker's start (`run_worker`'s `start_site_watch`, as a restarted one announces
            # itself) has the watch replace the silent attempt within SITE_WATCH_PROBE_SECONDS
            # instead of at the heartbeat timeout, which the test would otherwise sit out; the
            # heartbeat timeout's own takeover, should it come first, ends the same way.
            settings = Settings(site_file=sim.site_file, kubeconfig=sim.kubeconfig)
            await start_site_watch(local_env.client, settings, task_queue)
            fresh = await _until(
                local_env, lambda s: "site watch " not in s.stdout, 60, "host", "status", HOST
            )
            assert "site watch " not in fresh.stdout and f"{HOST}-dpu-0" in fresh.stdout, fresh.stdout
            aborted = await metalflow(
                local_env, "host", "abort", HOST, "--by", "alice@test", "--task-queue", task_queue
            )
            assert aborted.status == 0, aborted.stdout + aborted.stderr
