"""End to end: a rollout paused by a PodGang that never becomes Available or falls back, and the
operator's answers (resume, rollback, abort, pause), against the simulated site's Grove. Every
test asserts the simulator recorded no violation."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from host_operation_support import save_history
from rollout_support import (
    INFERENCE,
    gangs,
    grove_site,
    hashes,
    pcs_object,
    start_rollout,
    status_of,
    wait_for,
    worker_for,
)
from sim_support import RunningSim
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle, WorkflowUpdateFailedError

from contracts.errors import RolloutAborted, matches
from contracts.models.control import (
    ABORT_UPDATE,
    PAUSE_UPDATE,
    RESUME_UPDATE,
    OperatorAnswer,
    OperatorRequest,
)
from contracts.models.grove import ROLLBACK_UPDATE, RolloutPolicy

SHORT = RolloutPolicy(step_deadline_seconds=4)
NEW = {"router": "registry.local/router:2.0"}
OPERATOR = OperatorRequest(requested_by="pytest", reason="test")


async def answer(handle: WorkflowHandle[Any, Any], update: str) -> OperatorAnswer:
    result: OperatorAnswer = await handle.execute_update(update, OPERATOR, result_type=OperatorAnswer)
    return result


async def refusal(handle: WorkflowHandle[Any, Any], update: str) -> str:
    """The validator's message when `update` is refused."""
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await answer(handle, update)
    return str(refused.value.cause)


async def test_never_available_pauses_then_resume_after_the_fix_completes(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    with grove_site(tmp_path, INFERENCE) as sim:
        sim.inject("podgangs/inference-0-mpg-1/never-available")
        async with worker_for(client, task_queue, sim):
            handle = await start_rollout(client, task_queue, "inference", NEW, SHORT)
            paused = await wait_for(handle, lambda s: s.phase == "paused", "the rollout paused")
            assert "inference-0-mpg-1" in (paused.paused_reason or "")
            assert [s.podgangs for s in paused.steps if s.finished_at] == [("inference-0-mpg-0",)]
            # The annotation is written just before the phase is entered: once the status says
            # paused, the annotation does too.
            annotation = await published(sim, '"phase": "paused"')
            assert '"phase": "paused"' in annotation
            sim.inject("podgangs/inference-0-mpg-1/clear")
            reply = await answer(handle, RESUME_UPDATE)
            assert reply.accepted and "resuming" in reply.message
            result = await handle.result()
        assert result.outcome == "completed"
        assert set(hashes(sim, "inference").values()) == {result.target_hash}
        assert sim.violations() == []


async def test_never_available_pauses_then_rollback_restores_the_old_hash(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    with grove_site(tmp_path, INFERENCE) as sim:
        old = set(hashes(sim, "inference").values())
        old_image = pcs_object(sim, "inference")["spec"]["template"]["cliques"][0]["spec"]["podSpec"]
        sim.inject("podgangs/inference-0-mpg-1/never-available")
        async with worker_for(client, task_queue, sim):
            handle = await start_rollout(client, task_queue, "inference", NEW, SHORT)
            await wait_for(handle, lambda s: s.phase == "paused", "the rollout paused")
            sim.inject("podgangs/inference-0-mpg-1/clear")
            reply = await answer(handle, ROLLBACK_UPDATE)
            assert reply.accepted
            assert "already rolling back" in await refusal(handle, ROLLBACK_UPDATE)
            result = await handle.result()
            await save_history(handle, "rollout_never_available_rolled_back")
        assert result.outcome == "rolled-back"
        assert {result.target_hash} == old == set(hashes(sim, "inference").values())
        # The stuck MPG is taken back first, then the one that had been rolled.
        back = [s.podgangs for s in result.steps if s.target_hash in old]
        assert back[:2] == [("inference-0-mpg-1",), ("inference-0-mpg-0",)]
        assert pcs_object(sim, "inference")["spec"]["template"]["cliques"][0]["spec"]["podSpec"] == old_image
        assert sim.violations() == []


async def test_a_podgang_falling_back_after_ready_pauses_until_resumed(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    with grove_site(tmp_path, INFERENCE) as sim:
        async with worker_for(client, task_queue, sim):
            handle = await start_rollout(client, task_queue, "inference", NEW, SHORT)
            await wait_for(handle, lambda s: any(x.finished_at for x in s.steps), "the first step done")
            sim.inject("podgangs/inference-0-mpg-0/fall-back")
            paused = await wait_for(handle, lambda s: s.phase == "paused", "the rollout paused")
            assert "inference-0-mpg-0" in (paused.paused_reason or "")
            await answer(handle, RESUME_UPDATE)
            result = await handle.result()
            await save_history(handle, "rollout_fell_back_resumed")
        assert result.outcome == "completed"
        assert set(hashes(sim, "inference").values()) == {result.target_hash}
        assert sim.violations() == []


async def test_operator_pause_stops_after_the_step_and_resume_goes_on(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    with grove_site(tmp_path, INFERENCE) as sim:
        async with worker_for(client, task_queue, sim):
            handle = await start_rollout(client, task_queue, "inference", NEW, SHORT)
            await wait_for(handle, lambda s: s.phase == "rolling", "the rollout rolling")
            reply = await answer(handle, PAUSE_UPDATE)
            assert "pausing" in reply.message
            paused = await wait_for(handle, lambda s: s.phase == "paused", "the rollout paused")
            assert paused.paused_reason == "paused by pytest: test"
            assert paused.in_flight == ()
            done = len(paused.steps)
            assert "already paused" in await refusal(handle, PAUSE_UPDATE)
            # Paused means nothing moves: the PodGangs keep their hashes.
            before = hashes(sim, "inference")
            assert len((await status_of(handle)).steps) == done
            assert hashes(sim, "inference") == before
            await answer(handle, RESUME_UPDATE)
            result = await handle.result()
        assert result.outcome == "completed"
        assert sorted(g for s in result.steps for g in s.podgangs) == sorted(gangs(sim, "inference"))
        assert sim.violations() == []


async def test_abort_stops_with_every_podgang_of_one_hash(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    with grove_site(tmp_path, INFERENCE) as sim:
        async with worker_for(client, task_queue, sim):
            handle = await start_rollout(client, task_queue, "inference", NEW, SHORT)
            await wait_for(handle, lambda s: any(x.finished_at for x in s.steps), "the first step done")
            reply = await answer(handle, ABORT_UPDATE)
            assert reply.accepted
            with pytest.raises(WorkflowFailureError) as failure:
                await handle.result()
            await save_history(handle, "rollout_aborted")
            ended = await handle.describe()
        assert list(ended.raw_description.pending_activities) == []  # the watcher ended with it
        cause = failure.value.cause
        assert matches(cause, RolloutAborted)
        assert len(set(hashes(sim, "inference").values())) == 2  # some rolled, the rest not
        assert "metalflow.io/rollout" not in (
            pcs_object(sim, "inference")["metadata"].get("annotations") or {}
        )
        assert sim.violations() == []


async def published(sim: RunningSim, wanted: str, timeout: float = 30) -> str:
    """The PCS's `metalflow.io/rollout` annotation once it holds `wanted` (the last one read past
    `timeout`, for the assertion to show)."""
    deadline = time.monotonic() + timeout
    while True:
        annotations = pcs_object(sim, "inference")["metadata"].get("annotations") or {}
        annotation = str(annotations.get("metalflow.io/rollout", ""))
        if wanted in annotation or time.monotonic() > deadline:
            return annotation
        await asyncio.sleep(0.1)
