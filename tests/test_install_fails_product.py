"""The operator's path of fault `install-fails` (simulators/dpf/BEHAVIOUR.md F5): armed through
`metalflow sim fault`, met by a product reprovision (`host reprovision --wait`). DPF ends the
DPU's install in Error (BFBTransferred: FailToInstall) and the operation reprovisions it once more
(`max_dpu_error_reprovisions`), so the run completes; the Error passes between two polls of the
follower, which once showed nothing of it ("the fault was used up with no visible effect"). The
summary now says it, from the ended run's status."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cli_support import metalflow, run_metalflow, use_site_file
from host_operation_support import worker_for
from sim_support import RunningSim, prefixed_sim
from temporalio.testing import WorkflowEnvironment

HOST, DPU = "inf-001", "inf-001-dpu-1"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with prefixed_sim(tmp_path_factory.mktemp("sim"), "inf", hosts=1, dpus_per_host=2) as running:
        use_site_file(running.site_file)
        yield running


async def test_a_reprovision_meets_the_failed_install_and_says_it_reprovisioned_the_dpu(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    armed = run_metalflow("sim", "fault", "dpu", DPU, "install-fails", "--state-dir", sim.state_dir)
    assert armed.returncode == 0, armed.stderr
    async with worker_for(local_env.client, task_queue, sim):
        followed = await metalflow(
            local_env, "host", "reprovision", HOST, "--wait", "--by", "alice@test", "--task-queue", task_queue
        )
    said = followed.stdout + followed.stderr
    assert followed.status == 0, said
    assert f"reprovisioned {DPU} 1x for Error: DPU node-{HOST}-device-{DPU} was in Error" in said, said
    assert "injected: the BFB installation failed" in said, said
    # Used up by the install it failed: nothing is left to disarm.
    left = run_metalflow("sim", "fault", "dpu", DPU, "recover", "--state-dir", sim.state_dir)
    assert left.returncode != 0, left.stdout
