"""End to end, as installed by deploy/: a worker whose Kubernetes token holds only the base's
RBAC rules provisions, reprovisions and removes hosts on the simulated site (BMC credentials
from Secrets read by name), while its health and Prometheus endpoint is scraped.

Least privilege is proven both ways: the operations succeed (an activity needing a verb the base
does not grant meets a 403 and fails its operation, non-retryably), the simulated API's audit
shows no refusal for the worker's service account, and every verb and resource the base grants
was used by some activity here, or is named in `GRANTED_BUT_NOT_EXERCISED` with the flow that
needs it."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml
from deploy_support import DEPLOY, WORKER_SA, granted_by_base, metric_sum, restricted_kubeconfig, run_kubectl
from host_operation_support import power_cycles, start_operation
from ports_support import free_port
from sim_support import RunningSim, running_sim
from takeover_support import takeover_seconds
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from contracts import names
from contracts.models.host import HostOperationKind
from contracts.models.removal import HostRemovalInput, HostRemovalResult
from drivers.settings import Settings
from metalflow.client import connect
from metalflow.runtime.observability import Observability
from metalflow.runtime.worker import build_worker, start_events

# Granted by deploy/base for what the flows here do not run: a host registered again with other
# labels (patch of its DPUDevices), a BFB or flavor campaign (the DPUDevices a deployment selects,
# a change of the DPUDeployment's BFB or flavor), and an Event that repeats (its `series`);
# tests/test_dpf_activities*.py, tests/test_campaign_targets.py and tests/test_kube_events.py
# exercise those.
GRANTED_BUT_NOT_EXERCISED = {
    ("patch", "provisioning.dpu.nvidia.com", "dpudevices"),
    ("list", "provisioning.dpu.nvidia.com", "dpudevices"),
    ("patch", "svc.dpu.nvidia.com", "dpudeployments"),
    ("patch", "events.k8s.io", "events"),
}
GROVE_GROUPS = {"grove.io", "scheduler.grove.io"}
# The rollout's pods (deploy/base/grove-access), core group: proven by tests/test_deploy_grove.py.
GROVE_CORE = {("list", "", "pods"), ("watch", "", "pods"), ("deletecollection", "", "pods")}
# The hosts' BMC credentials come from Secrets in the worker's namespace (the DPUs' from files).
SITE = {
    "name": "deployed",
    "hosts": [
        {
            "id": host,
            "bmc": {"credentials": {"secret": {"namespace": "metalflow", "name": f"bmc-{host}"}}},
            "dpus": [{"id": f"{host}-dpu-{i}", "serial": f"MT{host[-3:]}{i}"} for i in (0, 1)],
        }
        for host in ("host-001", "host-002")
    ],
}


@asynccontextmanager
async def deployed_worker(
    local_client: Client, task_queue: str, sim: RunningSim, kubeconfig: Path
) -> AsyncIterator[Observability]:
    """The worker as worker.py runs it: its own runtime exporting metrics, endpoints served."""
    observability = Observability(f"127.0.0.1:{free_port()}")
    target = local_client.service_client.config.target_host
    runtime = observability.runtime()
    client = await connect(target_host=target, namespace=local_client.namespace, runtime=runtime)
    settings = Settings(
        site_file=sim.site_file, kubeconfig=kubeconfig, worker_takeover_seconds=takeover_seconds()
    )
    worker = build_worker(client, task_queue, settings)
    emitter = start_events(settings)  # the worker's Kubernetes Events, on by default
    observability.emitter = emitter
    async with worker:
        if emitter is not None:
            await emitter.start()
        await observability.start(client, worker)
        try:
            yield observability
        finally:
            if emitter is not None:
                await emitter.stop()
            await observability.stop()


async def remove(client: Client, task_queue: str, request: HostRemovalInput) -> HostRemovalResult:
    handle = await client.start_workflow(
        "HostRemovalWorkflow", request, task_queue=task_queue, result_type=HostRemovalResult,
        id=names.host_operation_workflow_id(names.REMOVE, request.host_id) + f"-{task_queue}-{request.force}",
    )  # fmt: skip
    return await handle.result()


async def retried_workflow_tasks(handles: list[WorkflowHandle[Any, Any]]) -> int:
    """Workflow tasks of these workflows that failed or timed out (their next attempt re-runs them)."""
    retried = 0
    for handle in handles:
        async for event in handle.fetch_history_events():
            retried += event.event_type in (
                EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED, EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT
            )  # fmt: skip
    return retried


async def scrape(observability: Observability, path: str = "/metrics") -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as http:
        return await http.get(observability.url + path)


async def test_least_privilege_worker_provisions_and_reprovisions_with_metrics(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    site_file = tmp_path / "site.yaml"
    site_file.write_text(yaml.safe_dump(SITE))
    with running_sim(tmp_path / "sim", site_file=site_file) as sim:
        secrets = ["bmc-host-001", "bmc-host-002"]
        kubeconfig = await asyncio.to_thread(restricted_kubeconfig, sim, tmp_path, secrets)
        async with deployed_worker(client, task_queue, sim, kubeconfig) as observability:
            ready = await scrape(observability, "/readyz")
            live = await scrape(observability, "/livez")
            assert (ready.status_code, live.status_code) == (200, 200), ready.text
            before = (await scrape(observability)).text

            handle = await start_operation(
                client, task_queue, "host-001", HostOperationKind.PROVISION, id_suffix=f"-{task_queue}"
            )
            during = ""
            for _ in range(600):  # scraped while the operation runs
                during = (await scrape(observability)).text
                if metric_sum(during, "metalflow_operations_started_total", kind="provision") >= 1:
                    break
                await asyncio.sleep(0.1)
            provisioned = await handle.result()
            # host-002 finds the site objects there (the read-after-AlreadyExists path).
            second = await start_operation(
                client, task_queue, "host-002", HostOperationKind.PROVISION, id_suffix=f"-{task_queue}"
            )
            again = await start_operation(
                client, task_queue, "host-001", HostOperationKind.REPROVISION, id_suffix=f"-{task_queue}"
            )
            results = await asyncio.gather(second.result(), again.result())
            # Removal: one DPU of host-002, then its whole node, forced past a finalizer nobody
            # releases (the delete and finalizer-stripping paths).
            removed_dpu = await remove(client, task_queue, HostRemovalInput(
                host_id="host-002", dpu_ids=("host-002-dpu-1",), requested_by="pytest"))  # fmt: skip
            await asyncio.to_thread(
                run_kubectl, sim, "patch", "dpu", "node-host-002-device-host-002-dpu-0", "--type=merge",
                "-p", '{"metadata": {"finalizers": ["example.com/held-by-nobody"]}}',
            )  # fmt: skip
            removed_node = await remove(client, task_queue, HostRemovalInput(
                host_id="host-002", force=True, force_after_seconds=1.0, requested_by="pytest"))  # fmt: skip
            after = (await scrape(observability)).text
            retried = await retried_workflow_tasks([handle, second, again])

        audit = sim.audit()
        logs = [sim.power_log(host) for host in ("host-001", "host-002")]
        violations = sim.violations()

    # The operations succeeded with exactly one power cycle per DPF reboot request.
    assert [provisioned.reboots] + [r.reboots for r in results] == [1, 1, 1]
    assert [power_cycles(log) for log in logs] == [2, 1]
    assert violations == []
    assert not removed_dpu.forced and removed_node.forced

    # Least privilege: nothing refused, and every grant but the documented ones was used.
    user = "system:serviceaccount:{}:{}".format(*WORKER_SA)
    mine = [entry for entry in audit if entry["user"] == user]
    refused = [entry for entry in mine if not entry["allowed"]]
    assert refused == [], f"the base's RBAC refused what the worker needed: {refused}"
    used = {(e["verb"], e["group"], e["resource"]) for e in mine}
    assert ("get", "", "secrets") in used  # the BMC credentials, read by name
    # Grove's grants are proven by tests/test_deploy_grove.py (a rollout); these flows are DPF's.
    granted = granted_by_base() - granted_by_base(GROVE_GROUPS) - GROVE_CORE
    assert used <= granted
    assert granted - used == GRANTED_BUT_NOT_EXERCISED, "grant nothing the activities do not use"

    # Metrics: counted during the operation, and moved by its end.
    assert metric_sum(before, "metalflow_operations_started_total") == 0
    assert metric_sum(during, "metalflow_operations_started_total", kind="provision") == 1
    assert metric_sum(during, "metalflow_operations_finished_total") == 0  # still running then
    # A workflow's increments are skipped while it replays, but a workflow task that failed or
    # timed out (a loaded machine: the deadlock detector, the 10 s task timeout) runs its code again
    # for real on its next attempt: each such task may count once more, never otherwise.
    # Two provisions, a reprovision and two removals: every operation kind counts its end.
    finished = metric_sum(after, "metalflow_operations_finished_total", outcome="succeeded")
    assert 5 <= finished <= 5 + retried, (finished, retried)
    removals = metric_sum(after, "metalflow_operations_finished_total", kind="remove")
    assert 2 <= removals <= 2 + retried, (removals, retried)
    reprovisions = metric_sum(after, "metalflow_operations_finished_total", kind="reprovision")
    assert 1 <= reprovisions <= 1 + retried, (reprovisions, retried)
    assert metric_sum(after, "metalflow_power_cycles_total") == 3
    assert metric_sum(after, "metalflow_bmc_requests_total", bmc="host-001", status="2xx") > 0
    assert metric_sum(after, "metalflow_bmc_request_seconds_count", bmc="host-001") > 0
    completed = metric_sum(after, "metalflow_phase_entered_total", phase="completed")
    assert 3 <= completed <= 3 + retried, (completed, retried)
    assert "metalflow_hosts_in_manual_intervention" in after
    # The SDK's own runtime metrics share the endpoint.
    assert metric_sum(after, "temporal_workflow_completed_total") >= 3
    assert metric_sum(after, "temporal_activity_execution_latency_count") > 0

    # The Grafana dashboard charts only what the endpoint exports (a counter appears once it
    # moved: no watch reconnected here).
    dashboard = json.loads((DEPLOY / "grafana" / "metalflow-dashboard.json").read_text())
    charted = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\b(?:metalflow|temporal)_[a-z_]+\b", target["expr"])
    }
    exported = {line.split("{")[0].split(" ")[0] for line in after.splitlines() if not line.startswith("#")}
    assert charted - exported == {"metalflow_dpf_watch_reconnects_total"}
