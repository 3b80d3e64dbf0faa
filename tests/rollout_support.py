"""Helpers of the rollout tests: a simulated site with chosen Grove workloads, a worker, starting
a rollout and waiting on its status; PodGangs read from the simulated API over HTTP."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml
from host_operation_support import wait_for_query
from sim_support import RunningSim, running_sim
from temporalio.client import Client, WorkflowHandle

from contracts import names, workflow_api
from contracts.models.control import STATUS_QUERY
from contracts.models.grove import PCSRef, RolloutInput, RolloutPolicy, RolloutResult, RolloutStatus
from drivers.settings import Settings
from metalflow.runtime.worker import build_worker

INFERENCE = {
    "name": "inference",
    "replicas": 2,
    "cliques": ["router"],
    "scaling_groups": [
        {"name": "workers", "cliques": ["prefill", "decode"], "replicas": 3, "min_available": 1}
    ],
}
PLAIN = {"name": "plain", "replicas": 2, "cliques": ["frontend", "backend"]}
HASH = "grove.io/podcliqueset-generation-hash"
FAST = RolloutPolicy(step_deadline_seconds=30)


@contextlib.contextmanager
def grove_site(tmp_path: Path, *workloads: dict[str, Any], timings: str = "demo") -> Iterator[RunningSim]:
    """A simulated site with no hosts and the given Grove workloads, created at start."""
    site = tmp_path / "site.yaml"
    site.write_text(
        yaml.safe_dump({"name": "grove", "hosts": [], "workloads": list(workloads or [INFERENCE])})
    )
    with running_sim(tmp_path / "sim", site_file=site, timings=timings, initialised=True) as sim:
        deadline = time.monotonic() + 60
        for workload in workloads or [INFERENCE]:
            while not (found := gangs(sim, workload["name"])) or not all(
                available(g) for g in found.values()
            ):
                if time.monotonic() > deadline:
                    raise AssertionError(f"the PodGangs of {workload['name']} did not become Available")
                time.sleep(0.1)
        yield sim


@contextlib.asynccontextmanager
async def worker_for(client: Client, task_queue: str, sim: RunningSim) -> AsyncIterator[None]:
    """A worker for the test; at the end, a rollout still running on its queue (a test that
    failed midway) is terminated: rollout ids are per PodCliqueSet, and the session's server is
    shared, so a run left behind would refuse every later test's rollout of the same name."""
    settings = Settings(site_file=sim.site_file, kubeconfig=sim.kubeconfig)
    try:
        async with build_worker(client, task_queue, settings):
            yield
    finally:
        query = f'TaskQueue="{task_queue}" AND ExecutionStatus="Running"'
        async for execution in client.list_workflows(query):
            await client.get_workflow_handle(execution.id, run_id=execution.run_id).terminate(
                reason="left running by a test that ended"
            )


async def start_rollout(
    client: Client, task_queue: str, pcs: str, images: dict[str, str], policy: RolloutPolicy = FAST
) -> WorkflowHandle[Any, RolloutResult]:
    ref = PCSRef(namespace="default", name=pcs)
    return await client.start_workflow(
        workflow_api.RolloutWorkflow.run,
        RolloutInput(pcs=ref, images=images, requested_by="pytest", policy=policy),
        id=names.rollout_workflow_id(ref.namespace, ref.name),
        task_queue=task_queue,
        static_summary=f"roll {ref} for pytest",
    )


async def status_of(handle: WorkflowHandle[Any, Any]) -> RolloutStatus:
    result: RolloutStatus = await handle.query(STATUS_QUERY, result_type=RolloutStatus)
    return result


async def wait_for(
    handle: WorkflowHandle[Any, Any],
    predicate: Callable[[RolloutStatus], bool],
    what: str,
    timeout: float = 90,
) -> RolloutStatus:
    return await wait_for_query(lambda: status_of(handle), predicate, what, timeout)


def gangs(sim: RunningSim, pcs: str) -> dict[str, dict[str, Any]]:
    """The PodGangs of `pcs`, read from the simulated API."""
    response = httpx.get(
        f"{sim.url}/apis/scheduler.grove.io/v1alpha1/namespaces/default/podgangs",
        params={"labelSelector": f"app.kubernetes.io/part-of={pcs}"},
        headers=sim.headers,
        timeout=10,
    )
    response.raise_for_status()
    return {o["metadata"]["name"]: o for o in response.json()["items"]}


def pcs_object(sim: RunningSim, pcs: str) -> dict[str, Any]:
    response = httpx.get(
        f"{sim.url}/apis/grove.io/v1alpha1/namespaces/default/podcliquesets/{pcs}",
        headers=sim.headers,
        timeout=10,
    )
    response.raise_for_status()
    found: dict[str, Any] = response.json()
    return found


def hashes(sim: RunningSim, pcs: str) -> dict[str, str]:
    return {n: g["metadata"]["labels"][HASH] for n, g in gangs(sim, pcs).items()}


def available(gang: dict[str, Any]) -> bool:
    conditions = (gang.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)
