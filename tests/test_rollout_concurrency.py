"""End to end: a second rollout of the same PodCliqueSet (refused, or superseding after the
current step), a scale request mid-rollout (applied between steps), and replicas > 1 rolled
together when every replica holds two MPGs. No violation in the simulated site, in every test."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from host_operation_support import save_history
from rollout_support import (
    INFERENCE,
    gangs,
    grove_site,
    hashes,
    pcs_object,
    start_rollout,
    wait_for,
    worker_for,
)
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import WorkflowAlreadyStartedError

from contracts.models.control import OperatorAnswer
from contracts.models.grove import (
    SCALE_UPDATE,
    SUPERSEDE_UPDATE,
    RolloutPolicy,
    ScaleRequest,
    SupersedeRequest,
)


def router_image(sim: object) -> str:
    cliques = pcs_object(sim, "inference")["spec"]["template"]["cliques"]  # type: ignore[arg-type]
    return str(next(c for c in cliques if c["name"] == "router")["spec"]["podSpec"]["containers"][0]["image"])


async def test_a_second_rollout_is_refused_and_a_superseding_one_takes_over(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    with grove_site(tmp_path, INFERENCE) as sim:
        async with worker_for(client, task_queue, sim):
            first = await start_rollout(
                client, task_queue, "inference", {"router": "registry.local/router:2"}
            )
            await wait_for(first, lambda s: s.phase == "rolling", "the first rollout rolling")
            with pytest.raises(WorkflowAlreadyStartedError) as refused:
                await start_rollout(client, task_queue, "inference", {"router": "registry.local/router:3"})
            assert refused.value.workflow_id == "rollout/default/inference"
            reply = await first.execute_update(
                SUPERSEDE_UPDATE,
                SupersedeRequest(requested_by="pytest", images={"router": "registry.local/router:3"}),
                result_type=OperatorAnswer,
            )
            assert "after the current step" in reply.message
            result = await first.result()
            await save_history(first, "rollout_superseded")
        assert result.outcome == "completed"
        assert router_image(sim) == "registry.local/router:3"
        assert set(hashes(sim, "inference").values()) == {result.target_hash}
        assert len({s.target_hash for s in result.steps}) == 2  # the first target, then the new one
        assert sim.violations() == []


async def test_a_scale_request_mid_rollout_is_applied_between_steps(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    with grove_site(tmp_path, INFERENCE) as sim:
        async with worker_for(client, task_queue, sim):
            handle = await start_rollout(
                client, task_queue, "inference", {"router": "registry.local/router:2"}
            )
            await wait_for(handle, lambda s: s.phase == "rolling", "the rollout rolling")
            reply = await handle.execute_update(
                SCALE_UPDATE, ScaleRequest(requested_by="pytest", replicas=3), result_type=OperatorAnswer
            )
            assert "after the current step" in reply.message
            result = await handle.result()
            with pytest.raises(Exception, match="already completed|Workflow update failed"):
                await handle.execute_update(SCALE_UPDATE, ScaleRequest(requested_by="pytest", replicas=1))
        assert pcs_object(sim, "inference")["spec"]["replicas"] == 3
        assert len(gangs(sim, "inference")) == 9
        assert set(hashes(sim, "inference").values()) == {result.target_hash}
        assert sim.violations() == []


async def test_two_replicas_at_once_when_concurrency_allows(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    with grove_site(tmp_path, INFERENCE) as sim:
        async with worker_for(client, task_queue, sim):
            handle = await start_rollout(
                client,
                task_queue,
                "inference",
                {"router": "registry.local/router:2"},
                RolloutPolicy(replica_concurrency=2, step_deadline_seconds=30),
            )
            result = await handle.result()
        assert [s.podgangs for s in result.steps] == [
            ("inference-0-mpg-0", "inference-1-mpg-0"),
            ("inference-0-mpg-1", "inference-1-mpg-1"),
            ("inference-0-workers-2", "inference-1-workers-2"),
        ]
        assert sim.violations() == []


async def test_validation_errors_change_nothing(client: Client, task_queue: str, tmp_path: Path) -> None:
    with grove_site(tmp_path, INFERENCE) as sim:
        before = pcs_object(sim, "inference")["metadata"]["generation"]
        async with worker_for(client, task_queue, sim):
            handle = await start_rollout(client, task_queue, "inference", {"gpu": "registry.local/gpu:1"})
            with pytest.raises(WorkflowFailureError) as failed:
                await handle.result()
        message = str(failed.value.cause.cause)  # type: ignore[union-attr]
        assert "has no clique gpu" in message and "router" in message
        assert pcs_object(sim, "inference")["metadata"]["generation"] == before
        assert sim.violations() == []


async def test_a_scale_by_hand_mid_rollout_is_taken_in_between_steps(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    with grove_site(tmp_path, INFERENCE) as sim:
        async with worker_for(client, task_queue, sim):
            handle = await start_rollout(
                client, task_queue, "inference", {"router": "registry.local/router:2"}
            )
            await wait_for(handle, lambda s: any(x.finished_at for x in s.steps), "the first step done")
            httpx.patch(  # as `kubectl scale` would
                f"{sim.url}/apis/grove.io/v1alpha1/namespaces/default/podcliquesets/inference",
                json={"spec": {"replicas": 3}},
                headers={**sim.headers, "Content-Type": "application/merge-patch+json"},
                timeout=10,
            ).raise_for_status()
            result = await handle.result()
        assert result.outcome == "completed"
        assert len(gangs(sim, "inference")) == 9
        assert set(hashes(sim, "inference").values()) == {result.target_hash}
        assert sim.violations() == []
