"""Issue 38, items 1 and 2: what an operator reads while work runs or waits, as a user runs the CLI,
against a real Temporal, a worker with every real workflow and activity, and the simulated site.

1. A running reset showed its phase as `?` (`host reset --wait` printed `now-001: ?`, `host
   status` said `now ?`): its status had no phase. Now both show the reset's phase and what it
   waits for (every operation kind's status carries them:
   tests/fast/test_every_operation_reports_its_phase.py).
2. A host a campaign put off (its entity busy) was invisible in `campaign status` and `host
   status` said nothing of it. Now `campaign status` counts it with when it is asked again and
   why, and `host status` names the campaign, the time (ISO 8601 Z) and the reason.

The DPUs boot for 8 s after a reset, so a reset stays in `waiting-for-dpu-os` long enough to be
looked at.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Iterator

import pytest
from cli_support import metalflow, use_site_file
from host_operation_support import worker_for
from sim_support import RunningSim, prefixed_sim
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from contracts import names
from contracts.models.control import ABORT_UPDATE, OperatorAnswer, OperatorRequest

ISO_Z = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with prefixed_sim(
        tmp_path_factory.mktemp("sim"), "now", hosts=2, dpus_per_host=1, timing={"dpu_boot_seconds": 8}
    ) as running:
        use_site_file(running.site_file)
        yield running


@pytest.fixture
async def queue(local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str) -> AsyncIterator[str]:
    async with worker_for(local_env.client, task_queue, sim):
        yield task_queue


async def _abort(client: Client, workflow_id: str) -> None:
    await client.get_workflow_handle(workflow_id).execute_update(
        ABORT_UPDATE,
        OperatorRequest(requested_by="pytest", reason="the test is over"),
        result_type=OperatorAnswer,
    )


async def _until_phase(client: Client, workflow_id: str, phase: str) -> None:
    """Until the workflow shows `phase` (its `Phase` search attribute: what `host list` reads)."""
    for _ in range(150):
        with contextlib.suppress(RPCError):
            described = await client.get_workflow_handle(workflow_id).describe()
            if described.typed_search_attributes.get(names.PHASE) == phase:
                return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{workflow_id} never reached {phase}")


async def test_a_running_reset_shows_its_phase_in_wait_progress_and_host_status(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    host, dpu = "now-001", "now-001-dpu-0"
    following = asyncio.ensure_future(
        metalflow(
            local_env,
            "host",
            "reset",
            host,
            "--dpu",
            dpu,
            "--wait",
            "--by",
            "alice@test",
            "--task-queue",
            queue,
        )
    )
    await _until_phase(
        local_env.client, names.host_operation_workflow_id("reset", host), "waiting-for-dpu-os"
    )
    shown = await metalflow(local_env, "host", "status", host)
    followed = await following
    assert shown.status == 0, shown.stderr
    now = re.search(r"^    now +(.*)$", shown.stdout, re.MULTILINE)
    assert now is not None, shown.stdout
    assert (
        now.group(1)
        == f"waiting-for-dpu-os; waiting for DPU {dpu} to boot its OS (OsIsRunning, at most 600 s)"
    )
    assert f"    done           {dpu}: ForceRestart" in shown.stdout
    assert followed.status == 0, followed.stdout + followed.stderr
    steps = re.findall(rf"{host}: (\S+)", followed.stdout)
    assert "?" not in steps, followed.stdout
    assert "waiting-for-dpu-os" in steps, followed.stdout
    assert f"waiting for DPU {dpu} to boot its OS" in followed.stdout
