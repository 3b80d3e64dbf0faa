"""Issue 40, task B3: a cancel stays a cancel, in words. `temporal workflow cancel --workflow-id
reset/HOST` during a `--both` reset's `resetting-dpu`, as an operator runs it against a real
Temporal, the product's worker and the simulated site. README, "Abort means stop" and the exit
statuses.

Before: the host came back On, but `host reset --both --wait` said `failed: CancelledError:
Workflow cancelled` (exit 1), and the entity recorded `aborted` (`recent`: "reset aborted by
alice", an abort nobody made) with nothing of what the run did and left. Now `--wait` says it was
cancelled in Temporal, not by an operator's abort, with the run's own final words (each DPU's
fate, the host's power), exit 4 as an abort (stopped as asked: not a failure), and the entity
records it as cancelled, no operator's abort. The pure words: tests/fast/test_host_entity_state.py.

The host starts OFF as an earlier reset left it (its BMC's password rotated after the ForceOff,
then that reset aborted: `host list` `idle (host OFF)`). The cancel powers it back on, and its
final words ("...; the host is on") are the entity's record too, so the mark goes. Before, the
record said only `cancelled (...)` and the host stayed marked OFF although On
(tests/fast/test_off_mark_follows_the_truth.py holds the rule).
"""

from __future__ import annotations

import asyncio

from cli_support import metalflow, shown_state
from host_operation_support import worker_for
from module_site_support import ModuleSite
from sim_support import RunningSim, sim_http
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from contracts.models.host import HostWorkflowInput, OperationPolicy
from contracts.names import PHASE
from metalflow.hosts import ensure_entity
from metalflow.operation_progress import operation_progress

HOST = "cancel-001"
SITE = ModuleSite(
    "cancel",
    hosts=1,
    dpus_per_host=2,
    for_metalflow=True,
    timing={"dpu_boot_seconds": 0.2, "power_transition_seconds": 1.0},
)
sim = SITE.fixtures()[0]
POLICY = OperationPolicy(power_down_wait_seconds=1.0, power_on_retry_seconds=(0.5, 1.0))


async def _phase(env: WorkflowEnvironment, workflow_id: str) -> str:
    try:
        described = await env.client.get_workflow_handle(workflow_id).describe()
    except RPCError:  # not started yet
        return ""
    return str(described.typed_search_attributes.get(PHASE) or "")


def _fault(sim: RunningSim, bmc: str, fault: str) -> None:
    """`metalflow sim fault bmc BMC FAULT` (the endpoint it posts to)."""
    sim_http().post(f"{sim.url}/sim/faults/bmcs/{bmc}/{fault}").raise_for_status()


async def _left_off_by_an_aborted_reset(env: WorkflowEnvironment, sim: RunningSim, task_queue: str) -> None:
    """A `--both` reset whose host BMC rejects the password after its ForceOff waits for a person
    saying the host is OFF; aborted, it ends so, and the entity marks the host OFF."""
    _fault(sim, HOST, "rotate-after-forceoff")
    try:
        asked = "host", "reset", HOST, "--both", "--by", "alice", "--task-queue", task_queue
        assert (await metalflow(env, *asked)).status == 0
        for _ in range(300):
            seen = await operation_progress(env.client, f"reset/{HOST}", HOST)
            if seen is not None and seen.phase == "manual-intervention-required":
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"reset/{HOST} never handed the host over: {seen}")
    finally:
        _fault(sim, HOST, "clear")
    aborted = await metalflow(env, "host", "abort", HOST, "--by", "bob", "--task-queue", task_queue)
    assert aborted.status == 0, aborted.stdout + aborted.stderr
    for _ in range(300):
        if (await shown_state(env, HOST))["host"]["left_off_by"] == f"reset/{HOST}":
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{HOST} never marked OFF: {await shown_state(env, HOST)}")


async def test_a_both_reset_cancelled_in_resetting_dpu_says_it_was_cancelled_with_what_it_did_and_left(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    env, reset, stuck = local_env, f"reset/{HOST}", f"{HOST}-dpu-1"
    try:
        async with worker_for(env.client, task_queue, sim):
            await ensure_entity(env.client, HostWorkflowInput(host_id=HOST, policy=POLICY), task_queue)
            await _left_off_by_an_aborted_reset(env, sim, task_queue)
            assert [e["to"] for e in sim.power_log(HOST)][-1] == "Off"
            asked = "host", "reset", HOST, "--both", "--wait", "--by", "alice", "--task-queue", task_queue
            waited = asyncio.create_task(metalflow(env, *asked))
            # Once its BMCs were checked and the host goes off (a 1 s transition here): the second
            # DPU's BMC stops answering, so its PowerCycle call retries, in resetting-dpu.
            for _ in range(600):
                if await _phase(env, reset) == "powering-host-off":
                    break
                await asyncio.sleep(0.02)
            else:
                raise AssertionError(f"{reset} never powered the host off")
            _fault(sim, stuck, "unreachable")
            for _ in range(150):
                seen = await operation_progress(env.client, reset, HOST)
                if (
                    seen is not None
                    and seen.phase == "resetting-dpu"
                    and stuck in f"{seen.text} {seen.waiting_for}"
                ):
                    break
                await asyncio.sleep(0.2)
            else:
                raise AssertionError(f"{reset} never reached the PowerCycle of {stuck}: {seen}")
            await env.client.get_workflow_handle(reset).cancel()
            done = await asyncio.wait_for(waited, 60)
            shown = (await shown_state(env, HOST))["host"]
    finally:
        _fault(sim, stuck, "clear")
    said = done.stdout + done.stderr
    assert done.status == 4, said  # before: 1, "failed: CancelledError: Workflow cancelled"
    assert "CancelledError" not in said and "failed" not in said, said
    assert f"{reset} cancelled in Temporal" in said and "not by an operator's abort" in said, said
    assert f"Done: host {HOST}: ForceOff, On around the DPU resets" not in said  # it was cut before
    assert f"{HOST}-dpu-0: PowerCycle" in said and f"not reset: {stuck}" in said, said
    assert "the host is on" in said, said
    assert [e["to"] for e in sim.power_log(HOST)][-1] == "On"
    last = shown["recent"][-1]
    assert last["workflow_id"] == reset, last
    assert last["outcome"].startswith("cancelled (the workflow was cancelled"), last  # before: "aborted"
    assert "no operator's abort" in last["outcome"], last
    # Its own final words are the record's too, so the OFF mark the earlier reset left is gone.
    assert last["outcome"].endswith("the host is on"), last  # before: the cancel's words only
    assert f"not reset: {stuck}" in last["outcome"], last
    assert shown["left_off_by"] == "", shown  # before: reset/HOST, `idle (host OFF)`, a WARNING
