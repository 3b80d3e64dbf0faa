"""`metalflow host reset HOST --host` as a user runs it, on a host whose BMC has no PowerCycle
(the simulated site's `no-powercycle` profile: ForceOff, the power-down wait, On).

Found: `host reset --host` right after `host reset --all-dpus` ran out a 120 s test timeout. The
reset before it had nothing to do with it: `--host` is a reboot, and on such a BMC the reboot
waits the host policy's power-down wait (120 s) between Off and On. `host reset` had no
`--power-down-wait` to shorten it, and `--wait` said only "waiting for power cycle of HOST to
generation N" the whole time. Now `--power-down-wait` applies to `--host`, and `--wait` shows
the reboot's power-down wait while it runs.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator

import pytest
from cli_support import metalflow, use_site_file
from host_operation_support import worker_for
from sim_support import RunningSim, prefixed_sim
from temporalio.testing import WorkflowEnvironment

HOST = "clir-002"  # DEFAULT_ROTATION's second profile: no-powercycle


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with prefixed_sim(tmp_path_factory.mktemp("sim"), "clir", hosts=2, dpus_per_host=1) as running:
        use_site_file(running.site_file)
        yield running


@pytest.fixture
async def queue(local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str) -> AsyncIterator[str]:
    async with worker_for(local_env.client, task_queue, sim):
        yield task_queue


async def test_a_host_reset_after_a_dpu_reset_waits_the_power_down_wait_asked_and_says_so(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    dpus = await metalflow(local_env, "host", "reset", HOST, "--all-dpus", "--wait", "--task-queue", queue)
    assert dpus.status == 0, dpus.stdout + dpus.stderr
    began = time.monotonic()
    done = await metalflow(
        local_env, "host", "reset", HOST, "--host", "--power-down-wait", "4", "--wait", "--task-queue", queue
    )
    took = time.monotonic() - began
    assert done.status == 0, done.stdout + done.stderr
    assert f"reset/{HOST} completed (boot_generation 1)" in done.stdout
    # The reboot's durable Off-to-On timer, as the reset's progress (it said "power cycle" only).
    assert f"waiting for power-down wait: {HOST} is Off, On in 4 s" in done.stdout, done.stdout
    assert 4 <= took < 60, took  # the 4 s asked, not the policy's 120 s
    log = [(e["to"], e["reset_type"]) for e in sim.power_log(HOST)]
    assert log == [("Off", "ForceOff"), ("On", "On")]
    assert sim.violations() == []
