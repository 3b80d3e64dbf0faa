"""Issue 40, an attack's finding: `host abort HOST` and `host retry HOST` sent within the same
instant to a run in manual-intervention-required were both answered "accepted"; the abort won
and the retry's sender was told a lie. One answer wins; the other is refused naming it
(`contracts/operator_answers.py`).

Both answers are sent while no worker runs, so they reach the run in one workflow task (the
same-second race, made certain): a real Temporal, the product's worker, the simulated site, a
host whose BMC rotates its password right after metalflow's ForceOff (the named fault
`rotate-after-forceoff`), so the run waits for a person with the host OFF.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from cli_support import metalflow, shown_state
from host_operation_support import worker_for
from module_site_support import ModuleSite
from sim_support import RunningSim, sim_http
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from contracts import names
from contracts.models.control import ABORT_UPDATE, RETRY_UPDATE, OperatorAnswer, OperatorRequest
from contracts.models.host import HostWorkflowInput, OperationPolicy
from contracts.with_start import execute_update
from metalflow.hosts import ensure_entity
from metalflow.operation_progress import operation_progress

RESET_HOST = "race-001"  # profile powercycle: a reset --both
REBOOT_HOST = "race-002"  # profile no-powercycle: a reboot is ForceOff, then On
SITE = ModuleSite("race", hosts=2, for_metalflow=True, timing={"dpu_boot_seconds": 0.2})
sim = SITE.fixtures()[0]
POLICY = OperationPolicy(power_down_wait_seconds=1.0, power_on_retry_seconds=(0.5, 1.0))


def _fault(sim: RunningSim, bmc: str, fault: str) -> None:
    sim_http().post(f"{sim.url}/sim/faults/bmcs/{bmc}/{fault}").raise_for_status()


async def _until_off_said(env: WorkflowEnvironment, host: str, workflow_id: str) -> None:
    """Until the run waits for a person saying the host is OFF."""
    seen = None
    for _ in range(300):
        seen = await operation_progress(env.client, workflow_id, host)
        said = "" if seen is None else f"{seen.details} {seen.waiting_for}"
        if seen is not None and seen.phase == "manual-intervention-required" and "is OFF" in said:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{workflow_id} never said the host is OFF: {seen}")


async def _both_at_once(client: Client, workflow_id: str) -> dict[str, Any]:
    """`retry` from bob and `abort` from carol, sent while no worker runs: what each was answered
    (an `OperatorAnswer`, or the refusal's words) once a worker takes them."""
    handle = client.get_workflow_handle(workflow_id)

    async def send(update: str, by: str) -> Any:
        try:
            request = OperatorRequest(requested_by=by, reason="race")
            return await execute_update(handle, update, request, result_type=OperatorAnswer)
        except WorkflowUpdateFailedError as err:
            return str(getattr(err.cause, "message", err.cause))

    retry = asyncio.create_task(send(RETRY_UPDATE, "bob@test"))
    await asyncio.sleep(0.5)  # the retry first, then the abort: both admitted, no worker yet
    abort = asyncio.create_task(send(ABORT_UPDATE, "carol@test"))
    await asyncio.sleep(1.0)
    return {"retry": retry, "abort": abort}


async def _ended_in(client: Client, workflow_id: str) -> str:
    """The run's final Phase, once it ended (whichever answer won)."""
    handle = client.get_workflow_handle(workflow_id)
    for _ in range(600):
        described = await handle.describe()
        if described.status != WorkflowExecutionStatus.RUNNING:
            return str(described.typed_search_attributes.get(names.PHASE))
        await asyncio.sleep(0.1)
    raise AssertionError(f"{workflow_id} never ended")


async def _race(
    env: WorkflowEnvironment, sim: RunningSim, task_queue: str, host: str, *ask: str
) -> tuple[Any, Any, str]:
    await ensure_entity(env.client, HostWorkflowInput(host_id=host, policy=POLICY), task_queue)
    _fault(sim, host, "rotate-after-forceoff")
    try:
        async with worker_for(env.client, task_queue, sim):
            done = await metalflow(env, "host", *ask, host, "--by", "alice@test", "--task-queue", task_queue)
            assert done.status == 0, done.stdout + done.stderr
            current = (await shown_state(env, host))["host"]["current"]
            workflow_id = current["workflow_id"]
            await _until_off_said(env, host, workflow_id)
        _fault(sim, host, "clear")  # the secrets store caught up: a retry can power it on
        sent = await _both_at_once(env.client, workflow_id)
        async with worker_for(env.client, task_queue, sim):
            retry, abort = await sent["retry"], await sent["abort"]
            phase = await _ended_in(env.client, workflow_id)
    finally:
        _fault(sim, host, "clear")
    return retry, abort, phase


@pytest.mark.parametrize(
    ("host", "ask"), [(RESET_HOST, ("reset", "--both")), (REBOOT_HOST, ("reboot",))], ids=["reset", "reboot"]
)
async def test_a_retry_and_an_abort_sent_at_once_one_wins_the_other_is_refused_naming_it(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str, host: str, ask: tuple[str, ...]
) -> None:
    """Before: both answered accepted, and the abort ended the run. Now the retry, accepted
    first, wins (the run powers the host on and goes on); the abort is refused naming it."""
    retry, abort, ended = await _race(local_env, sim, task_queue, host, *ask)
    assert isinstance(retry, OperatorAnswer) and retry.accepted, retry
    assert isinstance(abort, str), abort  # refused, not accepted
    assert abort.startswith("abort refused: retry by bob@test accepted at "), abort
    assert abort.endswith("Z already"), abort
    assert ended != "aborted", ended  # the retry won: the run powered the host on and went on
    assert sim.power_log(host)[-1]["to"] == "On"
