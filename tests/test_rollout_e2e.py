"""End to end: RolloutWorkflow on a real dev server and worker against the simulated site's Grove
(a separate process over HTTP, Grove pinned at 6eaa77f0). Asserted: the workflow's result, the
pods' template hashes (what runs), and the simulator's violations.

The three shapes issue 30 names: (a) 2 replicas, a router and a tail scaling group, a change of
the scaling group's cliques (the anchor is the replica's one minimum-viable PodGang; its scaling-
group replica 0 goes while replicas 1 and 2, in tail PodGangs, keep the replica serving);
(b) Grove's default shape (minAvailable = replicas) with `allow_replica_outage`; (c) a change of
one clique, which replaces that clique's pods only."""

from __future__ import annotations

from pathlib import Path

from host_operation_support import save_history
from rollout_support import (
    INFERENCE,
    OUTAGE,
    create_pcs,
    gangs,
    grove_site,
    pcs_body,
    pcs_object,
    pod_hashes,
    pods,
    start_rollout,
    status_of,
    worker_for,
)
from temporalio.client import Client

NEW = "registry.local/worker:2.0"


async def test_a_scaling_group_change_rolls_anchor_then_tails_without_outage(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    with grove_site(tmp_path, INFERENCE) as sim:
        before = {n: p["metadata"]["uid"] for n, p in pods(sim, "inference").items()}
        routers = {n for n in before if "-router-" in n}
        old = pod_hashes(sim, "inference", "decode")
        async with worker_for(client, task_queue, sim):
            handle = await start_rollout(client, task_queue, "inference", {"prefill": NEW, "decode": NEW})
            result = await handle.result()
            await save_history(handle, "rollout_inference_completed")
            final = await status_of(handle)
            ended = await handle.describe()
        assert list(ended.raw_description.pending_activities) == []  # the watcher ended with it
        assert result.outcome == "completed" and final.done == final.total == 6
        assert final.updated_replicas == 2
        roles = [(s.replica, s.role) for s in result.steps]
        assert roles == [(0, "Anchor"), (0, "Tail"), (0, "Tail"), (1, "Anchor"), (1, "Tail"), (1, "Tail")]
        assert sorted(g for s in result.steps for g in s.podgangs) == sorted(gangs(sim, "inference"))
        after = pods(sim, "inference")
        assert routers <= set(after)  # the router did not change: its pods were not touched
        assert (
            pod_hashes(sim, "inference", "decode").isdisjoint(old)
            and len(pod_hashes(sim, "inference", "decode")) == 1
        )
        assert "metalflow.io/rollout" not in (
            pcs_object(sim, "inference")["metadata"].get("annotations") or {}
        )
        assert sim.violations() == []


async def test_b_default_shape_needs_allow_replica_outage(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    with grove_site(tmp_path) as sim:
        create_pcs(sim, pcs_body("dflt", 2, [("leader", 1, 1), ("worker", 2, 2)]))
        async with worker_for(client, task_queue, sim):
            refused = await start_rollout(client, task_queue, "dflt", {"worker": NEW})
            try:
                await refused.result()
                raise AssertionError("a replica outage was taken without being allowed")
            except Exception as err:  # noqa: BLE001 - the workflow failure carries the reason
                assert "allow-replica-outage" in str(err.__cause__ or err)
            assert pod_hashes(sim, "dflt", "worker") == pod_hashes(sim, "dflt", "worker")  # nothing written
            assert pcs_object(sim, "dflt")["metadata"]["generation"] == 1
            handle = await start_rollout(client, task_queue, "dflt", {"worker": NEW}, OUTAGE)
            result = await handle.result()
        assert result.outcome == "completed" and [s.role for s in result.steps] == ["Anchor", "Anchor"]
        kinds = {v["kind"] for v in sim.violations()}
        # The outage it was allowed to take, and nothing else: never two replicas down.
        assert kinds == {"podclique-below-min-available"}
        assert {v["subject"] for v in sim.violations()} == {"default/dflt-0-worker", "default/dflt-1-worker"}


async def test_c_one_clique_changes_replace_only_its_pods(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    with grove_site(tmp_path, INFERENCE) as sim:
        before = pods(sim, "inference")
        async with worker_for(client, task_queue, sim):
            handle = await start_rollout(client, task_queue, "inference", {"decode": NEW})
            result = await handle.result()
        after = pods(sim, "inference")
        replaced = set(before) - set(after)
        assert replaced and all("-decode-" in n for n in replaced)
        assert all(
            before[n]["metadata"]["uid"] == after[n]["metadata"]["uid"] for n in set(before) & set(after)
        )
        assert sum(len(s.deleted) for s in result.steps) == 6  # 2 replicas x 3 decode pods
        assert sim.violations() == []
