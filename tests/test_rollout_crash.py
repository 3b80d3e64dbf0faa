"""Crash safety of a rollout: the worker is a separate process, SIGKILLed twice with a step in
flight and started again. The rollout must finish with every pod at the new template, each
PodGang rolled in exactly one step (none twice), and no violation recorded by the simulated site
(so no PodGang was ever mixed, and no pod was deleted twice)."""

from __future__ import annotations

import uuid
from pathlib import Path

from host_operation_support import save_history
from rollout_support import INFERENCE, gangs, grove_site, pod_hashes, start_rollout, wait_for
from temporalio.client import Client
from worker_support import worker_env, worker_process

from contracts.models.grove import RolloutStatus


def _deleted(status: RolloutStatus) -> bool:
    """A step in flight has deleted its pods (its `roll_podgang` returned): a kill now lands in
    the wait for the replacements, not in the deletion, whose retry waits out the write's
    heartbeat timeout (10 s; it was the 60 s start-to-close)."""
    return status.doing == "in-flight" and status.wake_at is not None  # else "...: deleting"


async def test_rollout_survives_worker_kills_mid_step(client: Client, tmp_path: Path) -> None:
    task_queue = f"rollout-crash-{uuid.uuid4()}"
    log = tmp_path / "worker.log"
    with grove_site(tmp_path, INFERENCE) as sim:
        before = set(gangs(sim, "inference"))
        new = {"prefill": "registry.local/worker:2", "decode": "registry.local/worker:2"}
        env = worker_env(client, sim)
        with worker_process(task_queue, env, log):
            handle = await start_rollout(client, task_queue, "inference", new)
            await wait_for(
                handle, lambda s: s.steps_done == 1 and _deleted(s), "the second step's pods deleted"
            )
        # killed with the second step's pods deleted and their replacements not yet Ready (a kill
        # inside the deletion is a retried `roll_podgang`: tests/fast/test_rollout_model.py)
        with worker_process(task_queue, env, log):
            await wait_for(
                handle, lambda s: s.steps_done == 4 and _deleted(s), "the fifth step's pods deleted"
            )
        # killed again, in the second replica
        with worker_process(task_queue, env, log):
            result = await handle.result()
            await save_history(handle, "rollout_worker_killed")
        assert result.outcome == "completed"
        assert all(s.finished_at is not None for s in result.steps)
        rolled = [g for s in result.steps for g in s.podgangs]
        assert sorted(rolled) == sorted(before)  # every PodGang in exactly one step: none twice
        assert len(pod_hashes(sim, "inference", "decode")) == 1
        assert sim.violations() == []
