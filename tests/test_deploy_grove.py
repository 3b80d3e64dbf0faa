"""End to end, as installed by deploy/: a worker whose Kubernetes token holds only the base's RBAC
rolls the simulated site's Grove workload `default/inference` to completion.

Least privilege for rollouts is proven both ways: the rollout completes with every PodGang at
the new hash (a missing grant would meet a 403, which fails its activity non-retryably), the
simulated API's audit shows no refusal for the worker's service account, and every Grove verb
the base grants (deploy/base/grove-access/role.yaml) was used by the rollout."""

from __future__ import annotations

import asyncio
from pathlib import Path

from deploy_support import WORKER_SA, granted_by_base, restricted_kubeconfig
from rollout_support import INFERENCE, grove_site, pod_hashes, pods, start_rollout
from takeover_support import takeover_seconds
from temporalio.client import Client

from drivers.settings import Settings
from metalflow.runtime.worker import build_worker

GROVE_GROUPS = {"grove.io", "scheduler.grove.io"}  # plus pods (core), checked with the rest


async def test_least_privilege_worker_rolls_the_inference_workload(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    with grove_site(tmp_path, INFERENCE) as sim:
        before = set(pods(sim, "inference"))
        # No host reads a Secret here; one named Secret keeps that rule as narrow as installed.
        kubeconfig = await asyncio.to_thread(restricted_kubeconfig, sim, tmp_path, ["bmc-none"])
        settings = Settings(
            site_file=sim.site_file, kubeconfig=kubeconfig, worker_takeover_seconds=takeover_seconds()
        )
        async with build_worker(client, task_queue, settings):
            handle = await start_rollout(
                client, task_queue, "inference", {"decode": "registry.local/decode:2.0"}
            )
            result = await handle.result()
        audit = sim.audit()
        after = set(pods(sim, "inference"))
        final_hashes = pod_hashes(sim, "inference", "decode")
        violations = sim.violations()

    assert result.outcome == "completed"
    assert len(final_hashes) == 1
    assert {n for n in before - after if "-decode-" not in n} == set()  # only decode pods replaced
    assert len(before - after) == 6
    assert violations == []

    user = "system:serviceaccount:{}:{}".format(*WORKER_SA)
    mine = [entry for entry in audit if entry["user"] == user]
    refused = [entry for entry in mine if not entry["allowed"]]
    assert refused == [], f"the base's RBAC refused what the rollout needed: {refused}"
    used = {(e["verb"], e["group"], e["resource"]) for e in mine}
    assert used <= granted_by_base()
    grove_used = {u for u in used if u[1] in GROVE_GROUPS}
    assert grove_used == granted_by_base(GROVE_GROUPS), "grant no Grove verb a rollout does not use"
