"""DPF activities under concurrent edits, on the deployment and deletion paths, with typed errors
and the per-host limit, against the simulated site (a real subprocess)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from dpf_activities_support import REBOOT, Api, acked, dpf_activities, host, run
from kubernetes.client.exceptions import ApiException
from sim_support import RunningSim, running_sim

from contracts.errors import (
    ConflictRetriesExhausted,
    InvalidInput,
    KubernetesAccessDenied,
    KubernetesUnavailable,
    ObjectNotFound,
)
from contracts.models.dpf import (
    BFBSpec,
    DeleteDPUInput,
    DeleteNodeInput,
    DeploymentBFBInput,
    DeploymentFlavorInput,
    DPURef,
    GroupSpec,
    SiteSetupInput,
)
from drivers.kube import Kind, translate

NEW_BFB = {
    "apiVersion": "provisioning.dpu.nvidia.com/v1alpha1",
    "kind": "BFB",
    "metadata": {"name": "bf-bundle-3-0-0"},
    "spec": {"url": "http://bfb.local/bf-bundle-3.0.0.bfb"},
}
NEW_FLAVOR = {
    "apiVersion": "provisioning.dpu.nvidia.com/v1alpha1",
    "kind": "DPUFlavor",
    "metadata": {"name": "carbide-dpu-flavor-2"},
    "spec": {"dpuMode": "dpu"},
}


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[RunningSim]:
    with running_sim(tmp_path / "sim", hosts=2, dpus_per_host=2, initialised=True) as running:
        yield running


@pytest.fixture
def api(sim: RunningSim) -> Iterator[Api]:
    client = Api(sim)
    yield client
    client.close()


def _rv(obj: dict[str, Any] | None) -> str:
    assert obj is not None
    return str(obj["metadata"]["resourceVersion"])


async def test_a_late_retry_of_the_acknowledgement_leaves_dpfs_next_request(
    sim: RunningSim, api: Api
) -> None:
    """The retry that lands late: attempt 1 removed the annotation (its answer was lost), DPF
    asked again for its next round, attempt 2 runs: with its token it changes nothing; without
    a token (the call before tokens) it would clear DPF's new request without a reboot."""
    acts = dpf_activities(sim)
    api.patch("DPUNode", "node-host-001", {"metadata": {"annotations": {REBOOT: "true"}}})
    first = await run(acts.mark_dpu_node_rebooted, acked(host("host-001"), "reprovision/host-001#g3.1"))
    assert first.changed and first.detail == "removed"
    api.patch("DPUNode", "node-host-001", {"metadata": {"annotations": {REBOOT: "true"}}})  # DPF's next round
    late = await run(acts.mark_dpu_node_rebooted, acked(host("host-001"), "reprovision/host-001#g3.1"))
    assert late.detail == "already acknowledged; DPF asks again: left for the next acknowledgement"
    assert api.must("DPUNode", "node-host-001")["metadata"]["annotations"][REBOOT] == "true"
    # The next acknowledgement (a new token, after its own reboot) removes it.
    assert (
        await run(acts.mark_dpu_node_rebooted, acked(host("host-001"), "reprovision/host-001#g4.2"))
    ).changed
    # Deliberate break: the same late retry without a token clears DPF's request.
    api.patch("DPUNode", "node-host-001", {"metadata": {"annotations": {REBOOT: "true"}}})
    assert (await run(acts.mark_dpu_node_rebooted, acked(host("host-001")))).changed
    assert REBOOT not in (api.must("DPUNode", "node-host-001")["metadata"].get("annotations") or {})


async def test_a_concurrent_edit_between_read_and_write_is_reread_and_kept(sim: RunningSim, api: Api) -> None:
    acts = dpf_activities(sim)
    reads: list[str] = []

    def concurrent_edit(kind: Kind, obj: dict[str, Any]) -> None:
        reads.append(_rv(obj))
        if len(reads) == 1:  # an operator annotates the node between our read and our write
            api.patch(
                "DPUNode", obj["metadata"]["name"], {"metadata": {"annotations": {"ops/ticket": "T-1"}}}
            )

    api.patch("DPUNode", "node-host-001", {"metadata": {"annotations": {REBOOT: "true"}}})
    acts.kube.after_read = concurrent_edit
    result = await run(acts.mark_dpu_node_rebooted, acked(host("host-001")))
    assert result.changed
    assert len(reads) == 2 and reads[0] != reads[1]  # the first write met 409 and read again
    annotations = api.must("DPUNode", "node-host-001")["metadata"]["annotations"]
    assert annotations["ops/ticket"] == "T-1"  # the concurrent edit survived
    assert REBOOT not in annotations


async def test_an_edit_that_always_meets_conflicts_gives_up_retryably(sim: RunningSim, api: Api) -> None:
    acts = dpf_activities(sim)
    reads = 0

    def always_edit(kind: Kind, obj: dict[str, Any]) -> None:
        nonlocal reads
        reads += 1
        api.patch("DPUDeployment", "gpu-compute", {"metadata": {"annotations": {"ops/touch": str(reads)}}})

    api.create("BFB", NEW_BFB)
    acts.kube.after_read = always_edit
    with pytest.raises(
        ConflictRetriesExhausted, match="kept changing under us: 6 writes met a conflict"
    ) as caught:
        await run(
            acts.update_deployment_bfb, DeploymentBFBInput(deployment="gpu-compute", bfb="bf-bundle-3-0-0")
        )
    assert not caught.value.non_retryable
    assert reads == 6
    assert api.must("DPUDeployment", "gpu-compute")["spec"]["dpus"]["bfb"] == "bf-bundle-2-9-0"


async def test_bfb_and_flavor_updates_mark_dpus_outdated_once(sim: RunningSim, api: Api) -> None:
    acts = dpf_activities(sim)
    bfb = DeploymentBFBInput(deployment="gpu-compute", bfb="bf-bundle-3-0-0")
    with pytest.raises(ObjectNotFound, match="BFB dpf-operator-system/bf-bundle-3-0-0 not found"):
        await run(acts.update_deployment_bfb, bfb)
    api.create("BFB", NEW_BFB)
    assert (await run(acts.update_deployment_bfb, bfb)).changed
    rv = _rv(api.get("DPUDeployment", "gpu-compute"))
    assert not (await run(acts.update_deployment_bfb, bfb)).changed
    assert _rv(api.get("DPUDeployment", "gpu-compute")) == rv
    for k in (0, 1):
        dpu = api.wait(
            "DPU",
            f"node-host-001-device-host-001-dpu-{k}",
            lambda o: _cond_reason(o, "Outdated") == "OutdatedBFB",
        )
        assert dpu is not None and dpu["status"]["phase"] == "Ready"  # OnDelete: nothing else happens

    flavor = DeploymentFlavorInput(deployment="gpu-compute", flavor="carbide-dpu-flavor-2")
    with pytest.raises(ObjectNotFound, match="DPUFlavor"):
        await run(acts.update_deployment_flavor, flavor)
    api.create("DPUFlavor", NEW_FLAVOR)
    assert (await run(acts.update_deployment_flavor, flavor)).changed
    assert not (await run(acts.update_deployment_flavor, flavor)).changed
    assert api.must("DPUDeployment", "gpu-compute")["spec"]["dpus"]["flavor"] == "carbide-dpu-flavor-2"
    with pytest.raises(ObjectNotFound, match="DPUDeployment dpf-operator-system/nope not found"):
        await run(
            acts.update_deployment_flavor,
            DeploymentFlavorInput(deployment="nope", flavor="carbide-dpu-flavor-2"),
        )


def _cond_reason(obj: dict[str, Any] | None, ctype: str) -> str | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == ctype:
            return str(cond.get("reason"))
    return None


async def test_delete_dpu_removes_device_and_dpu_and_is_idempotent(sim: RunningSim, api: Api) -> None:
    acts = dpf_activities(sim)
    ref = DPURef(host_id="host-001", dpu_id="host-001-dpu-1")
    result = await run(acts.delete_dpu, DeleteDPUInput(dpu=ref))
    assert [(o.kind, o.outcome) for o in result.objects] == [("DPUNode", "updated"), ("DPUDevice", "deleted")]
    api.wait("DPUDevice", ref.device_name(), lambda o: o is None)
    api.wait("DPU", ref.dpu_name(), lambda o: o is None)
    assert api.must("DPUNode", "node-host-001")["spec"]["dpus"] == [{"name": "device-host-001-dpu-0"}]
    again = await run(acts.delete_dpu, DeleteDPUInput(dpu=ref))
    assert [(o.kind, o.outcome) for o in again.objects] == [("DPUDevice", "gone")]
    assert api.must("DPU", "node-host-001-device-host-001-dpu-0")["status"]["phase"] == "Ready"


async def test_force_delete_dpu_leaves_nothing_behind_at_once(sim: RunningSim, api: Api) -> None:
    acts = dpf_activities(sim)
    ref = DPURef(host_id="host-002", dpu_id="host-002-dpu-0")
    assert api.must("DPU", ref.dpu_name())["metadata"]["finalizers"] == [
        "provisioning.dpu.nvidia.com/dpu-protection"
    ]
    result = await run(acts.delete_dpu, DeleteDPUInput(dpu=ref, force=True))
    outcomes = {(o.kind, o.outcome) for o in result.objects}
    assert ("DPUDevice", "deleted") in outcomes
    assert api.get("DPU", ref.dpu_name()) is None and api.get("DPUDevice", ref.device_name()) is None
    again = await run(acts.delete_dpu, DeleteDPUInput(dpu=ref, force=True))
    assert {o.outcome for o in again.objects} == {"gone"}


async def test_delete_and_force_delete_dpu_node(sim: RunningSim, api: Api) -> None:
    acts = dpf_activities(sim)
    result = await run(acts.delete_dpu_node, DeleteNodeInput(host=host("host-001")))
    assert [(o.kind, o.outcome) for o in result.objects] == [("DPUNode", "deleted")]
    api.wait("DPUNode", "node-host-001", lambda o: o is None)
    for k in (0, 1):
        api.wait("DPU", f"node-host-001-device-host-001-dpu-{k}", lambda o: o is None)
    assert [
        o.outcome for o in (await run(acts.delete_dpu_node, DeleteNodeInput(host=host("host-001")))).objects
    ] == ["gone"]

    forced = await run(acts.delete_dpu_node, DeleteNodeInput(host=host("host-002"), force=True))
    assert forced.objects[0].outcome == "deleted"
    assert api.get("DPUNode", "node-host-002") is None
    for k in (0, 1):
        assert api.get("DPU", f"node-host-002-device-host-002-dpu-{k}") is None


async def test_invalid_objects_are_rejected_by_the_api_as_invalid_input(sim: RunningSim, api: Api) -> None:
    acts = dpf_activities(sim)
    bad = SiteSetupInput(
        groups=(GroupSpec(name="storage"),), bfb=BFBSpec(name="bad-bfb", url="ftp://nowhere/x.bfb")
    )
    with pytest.raises(
        InvalidInput, match="the API server rejected BFB dpf-operator-system/bad-bfb"
    ) as caught:
        await run(acts.create_site_objects, bad)
    assert "spec.url" in caught.value.message and caught.value.non_retryable
    with pytest.raises(InvalidInput, match="longer than 20 characters"):
        await run(
            acts.create_site_objects, SiteSetupInput(groups=(GroupSpec(name="a-very-long-group-name"),))
        )


async def test_api_unreachable_is_retryable_kubernetes_unavailable(tmp_path: Path) -> None:
    with running_sim(tmp_path / "gone", hosts=1, dpus_per_host=1) as sim:
        config = yaml.safe_load(sim.kubeconfig.read_text())
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))  # its server has stopped: the port refuses
    acts = dpf_activities(sim, kubeconfig=kubeconfig)
    with pytest.raises(KubernetesUnavailable, match="cannot be reached for DPUNode") as caught:
        await run(acts.mark_dpu_node_rebooted, acked(host("host-001")))
    assert not caught.value.non_retryable


async def test_per_host_limit_bounds_calls_in_flight(sim: RunningSim) -> None:
    acts = dpf_activities(sim, dpf_max_in_flight_per_host=2)
    states = await asyncio.gather(*(run(acts.read_host_dpf_state, host("host-001")) for _ in range(30)))
    assert all(len(s.dpus) == 2 for s in states)
    assert acts.kube.peak_in_flight["host-001"] == 2


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (401, KubernetesAccessDenied),
        (403, KubernetesAccessDenied),
        (404, ObjectNotFound),
        (422, InvalidInput),
    ],
)
def test_api_refusals_become_typed_permanent_errors(status: int, expected: type[Exception]) -> None:
    # The simulated API has no authentication, so a refusal is made here as the client raises it.
    refusal = ApiException(status=status, reason="Refused")
    refusal.body = '{"kind": "Status", "message": "dpus.provisioning.dpu.nvidia.com is forbidden"}'
    err = translate(refusal, "DPU node-host-001-device-host-001-dpu-0")
    assert isinstance(err, expected)
    assert "node-host-001-device-host-001-dpu-0" in str(err)
    assert getattr(err, "non_retryable", False) is True
