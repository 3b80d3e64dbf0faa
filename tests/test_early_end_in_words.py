"""Issue 40, "What broke" 4 and Deliver 2: an early end says its cause in words and what it had
done, as a user runs the CLI, against a real Temporal, a worker with every real workflow and
activity, and the simulated site.

A full reset of both DPUs of a host whose second DPU's BMC rejects the credentials (the named
fault `wrong-credentials`, simulators/redfish/BEHAVIOUR.md): the host is turned off, the first DPU
power cycled, the second refused. Before, `host reset --wait` ended `reset failed: Activity task
failed` and `host status` recorded the same (the cause only in the history, nothing of the DPU
already cycled). Now both name the BMC's refusal by its error type and message, and what the
reset had done (the first DPU's PowerCycle) and left (the host on).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from cli_support import metalflow, use_site_file
from host_operation_support import worker_for
from sim_support import RunningSim, prefixed_sim, sim_http
from temporalio.testing import WorkflowEnvironment

HOST, FIRST, SECOND = "why-001", "why-001-dpu-0", "why-001-dpu-1"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with prefixed_sim(
        tmp_path_factory.mktemp("sim"), "why", hosts=1, dpus_per_host=2, timing={"dpu_boot_seconds": 0.2}
    ) as running:
        use_site_file(running.site_file)
        yield running


async def test_a_reset_ended_by_rejected_credentials_says_so_and_what_it_had_done(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    sim_http().post(f"{sim.url}/sim/faults/bmcs/{SECOND}/wrong-credentials").raise_for_status()
    cause = "BMCAuthenticationFailed: "
    # The reset reads every chosen DPU's BMC before it sends anything (issue 36 point 1): the
    # second DPU's rejected credentials end it there, nothing reset, the host never turned off.
    done = "Done: nothing was reset; host power not touched by this run"
    async with worker_for(local_env.client, task_queue, sim):
        followed = await metalflow(
            local_env, "host", "reset", HOST, "--all-dpus", "--full", "--wait", "--by", "alice@test",
            "--task-queue", task_queue,
        )  # fmt: skip
        shown = await metalflow(local_env, "host", "status", HOST)
    said = followed.stdout + followed.stderr
    assert followed.status == 1, said
    assert "Activity task failed" not in said, said
    assert re.search(rf"reset/{HOST} failed: {cause}BMC {SECOND}: .* 401 ", said), said
    assert done in said, said
    assert shown.status == 0, shown.stderr
    assert "Activity task failed" not in shown.stdout, shown.stdout
    assert re.search(rf"  reset +failed: {cause}BMC {SECOND}: .* 401 ", shown.stdout), shown.stdout
    assert done in shown.stdout, shown.stdout
    power = [(e["to"], e["reset_type"]) for e in sim.power_log(HOST)]
    assert power == []  # as the status says: nothing was sent
