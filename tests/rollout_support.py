"""Helpers of the rollout tests: a simulated site with chosen Grove workloads, a worker, starting
a rollout and waiting on its status; PodGangs read from the simulated API over HTTP."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import yaml
from host_operation_support import wait_for_query
from sim_support import RunningSim, running_sim, sim_http
from takeover_support import takeover_seconds
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
FAST = RolloutPolicy(step_deadline_seconds=30)
OUTAGE = RolloutPolicy(step_deadline_seconds=30, allow_replica_outage=True)
POD_HASH = "grove.io/pod-template-hash"


@contextlib.contextmanager
def grove_site(
    tmp_path: Path, *workloads: dict[str, Any], timings: str = "demo", timing: dict[str, float] | None = None
) -> Iterator[RunningSim]:
    """A simulated site with no hosts and the given Grove workloads, created at start; `timing`
    overrides single durations of the `timings` profile (`running_sim`)."""
    site = tmp_path / "site.yaml"
    site.write_text(yaml.safe_dump({"name": "grove", "hosts": [], "workloads": list(workloads)}))
    with running_sim(
        tmp_path / "sim", site_file=site, timings=timings, timing=timing, initialised=True
    ) as sim:
        for workload in workloads:
            wait_serving(sim, workload["name"])
        yield sim


def wait_serving(sim: RunningSim, pcs: str, timeout: float = 60) -> None:
    """Until every pod of `pcs` exists and is Ready (and there are some)."""
    deadline = time.monotonic() + timeout
    while True:
        found = pods(sim, pcs)
        gang_list = gangs(sim, pcs)
        want = sum(len(pg["podReferences"]) for g in gang_list.values() for pg in g["spec"]["podgroups"])
        if found and gang_list and len(found) == want and all(ready(p) for p in found.values()):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the pods of {pcs} did not become Ready")
        time.sleep(0.1)


def create_pcs(sim: RunningSim, body: dict[str, Any], timeout: float = 60) -> None:
    """Create a PodCliqueSet through the simulated API (as `kubectl apply` would), then wait."""
    response = sim_http().post(
        f"{sim.url}/apis/grove.io/v1alpha1/namespaces/default/podcliquesets",
        json=body,
        headers=sim.headers,
        timeout=10,
    )
    response.raise_for_status()
    wait_serving(sim, body["metadata"]["name"], timeout)


def pcs_body(
    name: str,
    replicas: int,
    cliques: list[tuple[str, int, int]],
    groups: list[tuple[str, list[str], int, int]] = (),  # type: ignore[assignment]
    *,
    image: str = "registry.local/app:1",
    containers: int = 1,
    strategy: str = "OnDelete",
    termination_delay: str | None = None,
) -> dict[str, Any]:
    """A PodCliqueSet: cliques as (name, replicas, minAvailable); groups (name, cliques, replicas, min)."""
    template: dict[str, Any] = {
        "cliques": [
            {
                "name": c,
                "spec": {
                    "roleName": c,
                    "replicas": n,
                    "minAvailable": m,
                    "podSpec": {"containers": [{"name": f"c{i}", "image": image} for i in range(containers)]},
                },
            }
            for c, n, m in cliques
        ],
        "podCliqueScalingGroups": [
            {"name": g, "cliqueNames": members, "replicas": r, "minAvailable": m}
            for g, members, r, m in groups
        ],
    }
    if termination_delay:
        template["terminationDelay"] = termination_delay
    return {
        "apiVersion": "grove.io/v1alpha1",
        "kind": "PodCliqueSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"replicas": replicas, "updateStrategy": {"type": strategy}, "template": template},
    }


@contextlib.asynccontextmanager
async def worker_for(client: Client, task_queue: str, sim: RunningSim) -> AsyncIterator[None]:
    """A worker for the test; at the end, a rollout still running on its queue (a test that
    failed midway) is terminated: rollout ids are per PodCliqueSet, and the session's server is
    shared, so a run left behind would refuse every later test's rollout of the same name."""
    settings = Settings(
        site_file=sim.site_file, kubeconfig=sim.kubeconfig, worker_takeover_seconds=takeover_seconds()
    )
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


def _list(sim: RunningSim, path: str, selector: str) -> dict[str, dict[str, Any]]:
    response = sim_http().get(
        f"{sim.url}{path}", params={"labelSelector": selector}, headers=sim.headers, timeout=10
    )
    response.raise_for_status()
    return {o["metadata"]["name"]: o for o in response.json()["items"]}


def gangs(sim: RunningSim, pcs: str) -> dict[str, dict[str, Any]]:
    """The PodGangs of `pcs`, read from the simulated API."""
    return _list(
        sim,
        "/apis/scheduler.grove.io/v1alpha1/namespaces/default/podgangs",
        f"app.kubernetes.io/part-of={pcs}",
    )


def pods(sim: RunningSim, pcs: str, selector: str = "") -> dict[str, dict[str, Any]]:
    """The pods of `pcs` (and `selector`), read from the simulated API."""
    extra = f",{selector}" if selector else ""
    return _list(sim, "/api/v1/namespaces/default/pods", f"app.kubernetes.io/part-of={pcs}{extra}")


def pod_hashes(sim: RunningSim, pcs: str, clique: str) -> set[str]:
    """The pod-template hashes the pods of one clique run."""
    return {
        p["metadata"]["labels"][POD_HASH]
        for p in pods(sim, pcs).values()
        if p["metadata"]["labels"]["grove.io/podclique"].endswith(f"-{clique}")
    }


def pcs_object(sim: RunningSim, pcs: str) -> dict[str, Any]:
    response = sim_http().get(
        f"{sim.url}/apis/grove.io/v1alpha1/namespaces/default/podcliquesets/{pcs}",
        headers=sim.headers,
        timeout=10,
    )
    response.raise_for_status()
    found: dict[str, Any] = response.json()
    return found


def delete_pod(sim: RunningSim, name: str) -> None:
    """The pod-replacement fault: delete a pod as an eviction would (Grove replaces it)."""
    sim_http().delete(
        f"{sim.url}/api/v1/namespaces/default/pods/{name}", headers=sim.headers, timeout=10
    ).raise_for_status()


def ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
