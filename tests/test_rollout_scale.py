"""Bounded history at fleet size: PodGangs (replicas x an anchor and two tails) rolled against
the simulated Grove with zero delays: 60 in `make test` (20 replicas), 300 at fleet size with
`METALFLOW_ROLLOUT_SCALE_REPLICAS=100 pytest -s tests/test_rollout_scale.py` (about 7 minutes on
the 2-core machine, most of it the simulated Grove creating the pods; figures in
bench/README.md). The history limit scales with the size (25 events a replica, at least 500).
The rollout must continue as new (the limit is set low so it happens more than once), carry its
state (every PodGang rolled exactly once overall, none twice), and stay within the events per
PodGang its docstring states (<= 40, measured over every run). Temporal's limits: 50k events and
50 MB per run; each run here stays under its `history_limit` plus one step's worth, and the
largest signal payload is reported."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from rollout_support import create_pcs, grove_site, pcs_body, pod_hashes, start_rollout, worker_for
from temporalio.client import Client

from contracts import names
from contracts.models.grove import RolloutPolicy

EVENTS_PER_GANG = 40
REPLICAS = int(os.environ.get("METALFLOW_ROLLOUT_SCALE_REPLICAS", "20"))  # 3 PodGangs each


@pytest.mark.timeout(1200)
async def test_podgangs_roll_within_temporals_limits(client: Client, task_queue: str, tmp_path: Path) -> None:
    with grove_site(tmp_path, timings="zero") as sim:
        t0 = time.monotonic()
        create_pcs(
            sim,
            pcs_body(
                "fleet", REPLICAS, [("router", 1, 1), ("prefill", 1, 1)], [("workers", ["prefill"], 3, 1)]
            ),
            600,
        )
        print(f"created in {time.monotonic() - t0:.1f} s")
        policy = RolloutPolicy(
            step_deadline_seconds=120, replica_concurrency=10, history_limit=max(500, 25 * REPLICAS)
        )
        async with worker_for(client, task_queue, sim):
            started = time.monotonic()
            handle = await start_rollout(
                client, task_queue, "fleet", {"prefill": "registry.local/p:2"}, policy
            )
            result = await handle.result()
            took = time.monotonic() - started
        assert result.outcome == "completed" and result.steps_done == 3 * REPLICAS
        assert len(pod_hashes(sim, "fleet", "prefill")) == 1
        workflow_id = names.rollout_workflow_id("default", "fleet")
        runs, events, biggest = 0, [], 0
        async for execution in client.list_workflows(f'WorkflowId="{workflow_id}"'):
            runs += 1
            history = await client.get_workflow_handle(workflow_id, run_id=execution.run_id).fetch_history()
            events.append(len(history.events))
            for e in history.events:
                if e.HasField("workflow_execution_signaled_event_attributes"):
                    size = sum(
                        len(p.data) for p in e.workflow_execution_signaled_event_attributes.input.payloads
                    )
                    biggest = max(biggest, size)
        gangs = 3 * REPLICAS
        print(f"{gangs} PodGangs: {took:.1f} s, {runs} runs, events per run {events}, "
              f"{sum(events) / gangs:.1f} events per PodGang, largest signal {biggest} bytes")  # fmt: skip
        assert runs >= 2, "the rollout never continued as new"
        assert max(events) < policy.history_limit + 1500
        assert sum(events) / (3 * REPLICAS) <= EVENTS_PER_GANG
        assert sim.violations() == []
