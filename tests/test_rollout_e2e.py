"""End to end: RolloutWorkflow on a real dev server and worker against the simulated site's Grove
(a separate process over HTTP). Asserted: the workflow's result and status, the PodGangs' hashes
and the simulator's violations (none, in every test)."""

from __future__ import annotations

from pathlib import Path

from host_operation_support import save_history
from rollout_support import (
    INFERENCE,
    PLAIN,
    gangs,
    grove_site,
    hashes,
    pcs_object,
    start_rollout,
    status_of,
    worker_for,
)
from temporalio.client import Client


async def test_rollout_of_the_inference_shape_rolls_every_podgang_once(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    with grove_site(tmp_path, INFERENCE) as sim:
        before = {n: g["metadata"]["uid"] for n, g in gangs(sim, "inference").items()}
        old = set(hashes(sim, "inference").values())
        async with worker_for(client, task_queue, sim):
            handle = await start_rollout(
                client, task_queue, "inference", {"router": "registry.local/router:2.0"}
            )
            result = await handle.result()
            await save_history(handle, "rollout_inference_completed")
            final = await status_of(handle)
            ended = await handle.describe()
        assert list(ended.raw_description.pending_activities) == []  # the watcher ended with it
        assert final.phase == "completed" and final.done == final.total == 6
        assert final.updated_replicas == 2
        assert final.members_total == final.members_updated == 16  # 2 x (router, 3 x 2 pclqs, pcsg)
        assert result.outcome == "completed"
        assert set(hashes(sim, "inference").values()) == {result.target_hash}
        assert {result.target_hash} != old
        rolled = [g for s in result.steps for g in s.podgangs]
        assert sorted(rolled) == sorted(before)  # each PodGang in exactly one step
        assert [s.podgangs for s in result.steps] == [
            ("inference-0-mpg-0",),
            ("inference-0-mpg-1",),
            ("inference-0-workers-2",),
            ("inference-1-mpg-0",),
            ("inference-1-mpg-1",),
            ("inference-1-workers-2",),
        ]
        after = {n: g["metadata"]["uid"] for n, g in gangs(sim, "inference").items()}
        assert all(after[n] != before[n] for n in before)
        assert "metalflow.io/rollout" not in (
            pcs_object(sim, "inference")["metadata"].get("annotations") or {}
        )
        assert sim.violations() == []


async def test_rollout_without_scaling_groups(client: Client, task_queue: str, tmp_path: Path) -> None:
    with grove_site(tmp_path, PLAIN) as sim:
        async with worker_for(client, task_queue, sim):
            handle = await start_rollout(client, task_queue, "plain", {"backend": "registry.local/backend:7"})
            result = await handle.result()
        assert [s.podgangs for s in result.steps] == [
            ("plain-0-mpg-0",),
            ("plain-0-mpg-1",),
            ("plain-1-mpg-0",),
            ("plain-1-mpg-1",),
        ]
        assert set(hashes(sim, "plain").values()) == {result.target_hash}
        assert sim.violations() == []
