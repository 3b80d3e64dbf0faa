"""Issue 40: `metalflow host abort HOST` is taken in every phase where a host operation waits;
here the one a firmware run refused: after its power cycle, waiting for its DPUs.

A DPU whose critical services are down (the named fault `node-effect`: DPF keeps it in Node
Effect) is not Ready after the firmware's power cycle, so the run waits in `waiting-for-dpus`
(an hour by default). Before, `host abort` was refused there ("the power cycle has started"):
nothing could stop the wait. Now the abort ends the run, saying the host was power-cycled. A
real Temporal, the product's worker, the simulated site, the CLI as a user runs it.
(The rule for every phase: tests/fast/test_abort_every_phase.py.)
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from cli_support import ended, metalflow, until_shown, use_site_file
from host_operation_support import worker_for
from sim_support import RunningSim, prefixed_sim, sim_http
from temporalio.testing import WorkflowEnvironment

PREFIX = f"fwa{uuid.uuid4().hex[:5]}"
HOST = f"{PREFIX}-001"
TARGET = "32.45.1020"
IMAGE = f"http://firmware.example.test/bf-fw-{TARGET}.bfb"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with prefixed_sim(
        tmp_path_factory.mktemp("sim"), PREFIX, hosts=1, dpus_per_host=1, timing={"dpu_boot_seconds": 0.2}
    ) as running:
        use_site_file(running.site_file)
        yield running


def _waiting_for_dpus(shown: dict[str, object]) -> bool:
    operation = shown["operation"]
    return isinstance(operation, dict) and operation.get("phase") == "waiting-for-dpus"


async def test_a_firmware_run_waiting_for_its_dpus_after_the_power_cycle_takes_host_abort(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    sim_http().post(f"{sim.url}/sim/faults/dpus/{HOST}-dpu-0/node-effect").raise_for_status()
    async with worker_for(local_env.client, task_queue, sim):
        started = await metalflow(
            local_env, "host", "firmware", HOST, "--version", TARGET, "--image", IMAGE,
            "--by", "alice@test", "--task-queue", task_queue,
        )  # fmt: skip
        assert started.status == 0, started.stdout + started.stderr
        await until_shown(local_env, HOST, _waiting_for_dpus, "waited for its DPUs")
        aborted = await metalflow(
            local_env, "host", "abort", HOST, "--by", "bob@test", "--reason", "debugging",
            "--task-queue", task_queue,
        )  # fmt: skip
        assert aborted.status == 0, aborted.stdout + aborted.stderr
        # As a reboot's or a reset's answer reads: `aborting (PHASE: ...): what it leaves`.
        assert f"{HOST}: firmware/{HOST}: aborting (waiting-for-dpus: " in aborted.stdout, aborted.stdout
        shown = await until_shown(local_env, HOST, ended, "ended the firmware run")
    outcome = shown["host"]["recent"][-1]["outcome"]
    assert outcome == (
        f"aborted by bob@test: debugging; stopped in phase waiting-for-dpus. "
        f"Left behind: the host was power-cycled to generation 1, which activated {TARGET} staged on "
        f"{HOST}-dpu-0; their versions were not verified"
    ), outcome
    assert [e["to"] for e in sim.power_log(HOST)][-1] == "On"  # cycled once, and on
