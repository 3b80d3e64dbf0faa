"""DPF flows 1-4 driven by metalflow's own activities against the simulated site (a real
subprocess), checked through the API as an operator would see it, and by the simulator's
protocol checks (no violations)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from dpf_activities_support import (
    HOLD,
    REBOOT,
    Api,
    acked,
    annotation,
    dpf_activities,
    host,
    phase_is,
    power_cycle,
    run,
    settings_for,
)
from sim_support import RunningSim, running_sim

from activities.dpf import DPFActivities
from contracts.errors import ObjectNotFound
from contracts.models.dpf import (
    DPURef,
    GroupSpec,
    HostDPFState,
    RegisterHostInput,
    ReprovisionInput,
    SiteSetupInput,
)
from drivers.inventory import Inventory

SETUP = SiteSetupInput(groups=(GroupSpec(name="gpu-compute"),))


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[RunningSim]:
    with running_sim(tmp_path / "sim", hosts=3, dpus_per_host=2) as running:
        yield running


@pytest.fixture
def api(sim: RunningSim) -> Iterator[Api]:
    client = Api(sim)
    yield client
    client.close()


def dpu_requests(sim: RunningSim, resource: str = "dpus") -> Counter[str]:
    """The requests on DPU objects (or `resource`) the API has answered so far, per verb (its audit)."""
    counts: Counter[str] = Counter()
    for row in sim.audit():
        if row["resource"] == resource:
            counts[row["verb"]] += row["count"]
    return counts


async def register(sim: RunningSim, acts: DPFActivities, host_id: str) -> None:
    inventory = await Inventory(settings_for(sim)).resolve(host_id)
    await run(acts.register_host_dpus, RegisterHostInput(inventory=inventory))


async def test_site_setup_creates_every_object_once(sim: RunningSim, api: Api) -> None:
    acts = dpf_activities(sim)
    first = await run(acts.create_site_objects, SETUP)
    assert [(o.kind, o.name, o.outcome) for o in first.objects] == [
        ("BFB", "bf-bundle-2-9-0", "created"),
        ("DPUFlavor", "carbide-dpu-flavor", "created"),
        ("DPUServiceTemplate", "gpu-compute-dts", "created"),
        ("DPUServiceConfiguration", "gpu-compute-dts", "created"),
        ("DPUDeployment", "gpu-compute", "created"),
    ]
    deployment = api.must("DPUDeployment", "gpu-compute")
    assert deployment["spec"]["dpus"]["nodeEffect"]["hold"] is True
    versions = {
        o.name + o.kind: api.must(o.kind, o.name)["metadata"]["resourceVersion"] for o in first.objects
    }

    second = await run(acts.create_site_objects, SETUP)
    assert {o.outcome for o in second.objects} == {"unchanged"}
    assert not second.changed()
    assert versions == {
        o.name + o.kind: api.must(o.kind, o.name)["metadata"]["resourceVersion"] for o in first.objects
    }


async def test_registration_creates_node_and_devices_that_become_ready(sim: RunningSim, api: Api) -> None:
    acts = dpf_activities(sim)
    await run(acts.create_site_objects, SETUP)
    await register(sim, acts, "host-001")
    node = api.wait("DPUNode", "node-host-001", lambda o: _cond(o, "Ready") == "True")
    assert node is not None
    assert node["spec"]["nodeRebootMethod"] == {"external": {}}
    assert node["spec"]["dpus"] == [{"name": "device-host-001-dpu-0"}, {"name": "device-host-001-dpu-1"}]
    assert node["metadata"]["labels"]["metalflow.io/dpu-group"] == "gpu-compute"
    for dpu_id in ("host-001-dpu-0", "host-001-dpu-1"):
        api.wait("DPUDevice", f"device-{dpu_id}", lambda o: _cond(o, "Ready") == "True")
        api.wait("DPU", f"node-host-001-device-{dpu_id}", phase_is("Node Effect"))
    before = {n: api.must(k, n)["metadata"]["resourceVersion"] for k, n in _registered("host-001")}
    await register(sim, acts, "host-001")  # again: nothing changes
    assert before == {n: api.must(k, n)["metadata"]["resourceVersion"] for k, n in _registered("host-001")}


def _registered(host_id: str) -> list[tuple[str, str]]:
    return [("DPUNode", f"node-{host_id}")] + [("DPUDevice", f"device-{host_id}-dpu-{k}") for k in (0, 1)]


def _cond(obj: dict | None, ctype: str) -> str | None:  # type: ignore[type-arg]
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == ctype:
            return str(cond["status"])
    return None


async def test_initial_provisioning_flow_reaches_ready_without_violations(sim: RunningSim, api: Api) -> None:
    """Flows 1-3: hold released -> Rebooting with the annotation -> power cycle -> rebooted -> Ready."""
    acts = dpf_activities(sim)
    ref = host("host-001")
    await run(acts.create_site_objects, SETUP)
    await register(sim, acts, "host-001")
    hold = api.wait("DPUNodeMaintenance", "node-host-001-hold", lambda o: o is not None)
    assert annotation(hold, HOLD) == "true"
    state: HostDPFState = await run(acts.read_host_dpf_state, ref)
    assert [d.phase for d in state.dpus] == ["Node Effect", "Node Effect"]
    assert state.hold is not None and state.hold.holding

    before = dpu_requests(sim, "dpunodemaintenances")
    released = await run(acts.release_node_effect_hold, ref)
    assert released.changed
    # One request where DPF holds: the JSON patch that tests "true" and replaces it (issue 37).
    assert dpu_requests(sim, "dpunodemaintenances") - before == Counter({"patch": 1})
    hold_rv = api.must("DPUNodeMaintenance", "node-host-001-hold")["metadata"]["resourceVersion"]
    assert not (await run(acts.release_node_effect_hold, ref)).changed  # idempotent: no second write
    after = api.get("DPUNodeMaintenance", "node-host-001-hold")
    assert (
        after is None or after["metadata"]["resourceVersion"] == hold_rv or annotation(after, HOLD) == "false"
    )

    api.wait("DPUNode", "node-host-001", lambda o: annotation(o, REBOOT) == "true")
    for k in (0, 1):
        api.wait("DPU", f"node-host-001-device-host-001-dpu-{k}", phase_is("Rebooting"))
    waiting = await run(acts.read_host_dpf_state, ref)
    assert waiting.node is not None and waiting.node.waiting_for_reboot
    assert waiting.node.reboot_required == "true"
    condition = waiting.node.condition("DPUNodeRebootInProgress")
    assert condition is not None and condition.reason == "WaitForExternalReboot"
    not_yet = waiting.dpu("host-001-dpu-0")
    assert not_yet is not None and not not_yet.ready and not_yet.phase == "Rebooting"

    power_cycle(sim, "host-001")
    assert (await run(acts.mark_dpu_node_rebooted, acked(ref))).changed
    node_rv = api.must("DPUNode", "node-host-001")["metadata"]["resourceVersion"]
    second = await run(acts.mark_dpu_node_rebooted, acked(ref))
    assert not second.changed
    for k in (0, 1):
        api.wait("DPU", f"node-host-001-device-host-001-dpu-{k}", phase_is("Ready"))
        readiness = (await run(acts.read_host_dpf_state, ref)).dpu(f"host-001-dpu-{k}")
        assert readiness is not None and readiness.ready and readiness.phase == "Ready"
    assert annotation(api.must("DPUNode", "node-host-001"), REBOOT) is None
    assert int(api.must("DPUNode", "node-host-001")["metadata"]["resourceVersion"]) >= int(node_rv)
    after_reboot = await run(acts.read_host_dpf_state, ref)
    assert after_reboot.node is not None and not after_reboot.node.waiting_for_reboot
    assert sim.violations() == []


async def test_bf4_second_reboot_round(sim: RunningSim, api: Api) -> None:
    """host-003 carries BF4 DPUs, which ask for a second reboot after the first."""
    acts = dpf_activities(sim)
    ref = host("host-003")
    await run(acts.create_site_objects, SETUP)
    await register(sim, acts, "host-003")
    api.wait("DPUNodeMaintenance", "node-host-003-hold", lambda o: o is not None)
    await run(acts.release_node_effect_hold, ref)
    for round_ in (1, 2):
        api.wait("DPUNode", "node-host-003", lambda o: annotation(o, REBOOT) == "true")
        node = (await run(acts.read_host_dpf_state, ref)).node
        assert node is not None and node.waiting_for_reboot
        power_cycle(sim, "host-003")
        # What the workflow saw when DPF asked: the write tests it instead of reading (issue 37).
        seen = acked(ref, f"op#{round_}").model_copy(
            update={"asked": node.reboot_required, "token_before": node.reboot_acknowledged}
        )
        before = dpu_requests(sim, "dpunodes")
        done = await run(acts.mark_dpu_node_rebooted, seen)
        assert done.changed and done.node is not None and done.node.reboot_required is None
        assert done.node.reboot_acknowledged == f"op#{round_}" and done.node_version > 0
        # Round 1 knew no token before (none on the node yet): read, then patch. Round 2: one request.
        verbs = Counter({"get": 1, "patch": 1}) if round_ == 1 else Counter({"patch": 1})
        assert dpu_requests(sim, "dpunodes") - before == verbs
    retried = await run(acts.mark_dpu_node_rebooted, seen)  # its test fails (our token): read, done
    assert retried.changed and retried.detail.startswith("already acknowledged")
    for k in (0, 1):
        api.wait("DPU", f"node-host-003-device-host-003-dpu-{k}", phase_is("Ready"))
    assert sim.violations() == []


async def test_reprovision_deletes_once_and_dpf_recreates_held(tmp_path: Path) -> None:
    """Flow 4 on an initialised site: the DPU comes back under its name, held in Node Effect."""
    with running_sim(tmp_path / "sim", hosts=2, dpus_per_host=2, initialised=True) as sim:
        api = Api(sim)
        acts = dpf_activities(sim)
        ref = DPURef(host_id="host-001", dpu_id="host-001-dpu-0")
        name = ref.dpu_name()
        old = api.must("DPU", name)
        before = dpu_requests(sim)
        result = await run(acts.reprovision_dpu, ReprovisionInput(dpu=ref, uid=old["metadata"]["uid"]))
        assert result.changed
        # One request: the DELETE with the uid precondition, no read before it (issue 37).
        assert dpu_requests(sim) - before == Counter({"delete": 1})
        new = api.wait(
            "DPU", name, lambda o: o is not None and o["metadata"]["uid"] != old["metadata"]["uid"]
        )
        assert new is not None
        api.wait("DPU", name, phase_is("Node Effect"))
        before = dpu_requests(sim)
        again = await run(acts.reprovision_dpu, ReprovisionInput(dpu=ref, uid=old["metadata"]["uid"]))
        assert not again.changed and "another uid" in again.detail
        assert dpu_requests(sim) - before == Counter({"delete": 1})  # its 409 says so
        before = dpu_requests(sim)
        missing = DPURef(host_id="host-001", dpu_id="host-001-dpu-9")
        gone = await run(acts.reprovision_dpu, ReprovisionInput(dpu=missing, uid="no-such-uid"))
        assert not gone.changed and gone.detail.startswith("gone")
        assert dpu_requests(sim) - before == Counter({"delete": 1})  # its 404 says so
        assert api.must("DPU", name)["metadata"]["uid"] == new["metadata"]["uid"]  # not deleted twice
        assert api.must("DPU", "node-host-001-device-host-001-dpu-1")["status"]["phase"] == "Ready"

        # Continue as flow 3: release, reboot, Ready.
        await run(acts.release_node_effect_hold, ref.host())
        api.wait("DPUNode", "node-host-001", lambda o: annotation(o, REBOOT) == "true")
        power_cycle(sim, "host-001")
        await run(acts.mark_dpu_node_rebooted, acked(ref.host()))
        api.wait("DPU", name, phase_is("Ready"))
        assert sim.violations() == []
        api.close()


async def test_dpu_in_error_is_read_with_dpf_message(tmp_path: Path) -> None:
    with running_sim(tmp_path / "sim", hosts=1, dpus_per_host=1, initialised=True) as sim:
        api = Api(sim)
        acts = dpf_activities(sim)
        ref = DPURef(host_id="host-001", dpu_id="host-001-dpu-0")
        sim.inject(f"dpus/{ref.dpu_name()}/error", {"message": "BFB installation failed: checksum mismatch"})
        api.wait("DPU", ref.dpu_name(), phase_is("Error"))
        state = await run(acts.read_host_dpf_state, ref.host())
        assert (
            state.dpus[0].failed
            and state.dpus[0].failure_message() == "BFB installation failed: checksum mismatch"
        )

        with pytest.raises(ObjectNotFound, match="DPUNodeMaintenance .*node-host-001-hold not found"):
            await run(acts.release_node_effect_hold, ref.host())  # nothing holds a Ready node
        with pytest.raises(ObjectNotFound, match="DPUNode dpf-operator-system/node-host-009 not found"):
            await run(acts.mark_dpu_node_rebooted, acked(host("host-009")))
        api.close()
