"""DPF flows 1-4 and 6 of docs/DOMAIN.md (section 2.8), driven through the store API as metalflow
drives them."""

from __future__ import annotations

from dpf_support import (
    HOLD,
    NS,
    REBOOT,
    PhaseLog,
    cond,
    gone,
    has_annotation,
    phase_is,
    running,
    settle,
    site_of,
    wait_for,
)

from simulators.dpf import objects as dpf_objects

HAPPY_PATH = [
    "Initializing",
    "Pending",
    "Node Effect",
    "Initialize Interface",
    "Config FW Parameters",
    "Prepare BFB",
    "OS Installing",
    "Rebooting",
    "DPU Cluster Config",
    "Node Effect Removal",
    "Ready",
]
DPU0 = "node-host-001-device-host-001-dpu-0"
DPU1 = "node-host-001-device-host-001-dpu-1"


async def test_site_setup_and_discovery_make_dpus_held_in_node_effect() -> None:
    async with running(site_of(("host-001", "BF3", 2))) as sim:
        k = sim.kube
        sim.site_setup()
        bfb = await wait_for(sim.store, k.bfb, dpf_objects.DEFAULT_BFB, phase_is("Ready"))
        assert bfb is not None
        dpuset = await wait_for(sim.store, k.dpuset, "gpu-compute-dpuset", lambda o: o is not None)
        assert dpuset is not None
        assert dpuset["spec"]["dpuTemplate"]["spec"]["bfb"] == {"name": dpf_objects.DEFAULT_BFB}
        assert dpuset["spec"]["dpuTemplate"]["spec"]["nodeEffect"]["hold"] is True
        assert dpuset["metadata"]["ownerReferences"][0]["kind"] == "DPUDeployment"
        deployment = await wait_for(
            sim.store, k.deployment, "gpu-compute", lambda o: cond(o, "Ready") is not None
        )
        assert cond(deployment, "Ready")["status"] == "True"  # type: ignore[index]

        sim.discover("host-001")
        node = await wait_for(
            sim.store, k.dpunode, "node-host-001", lambda o: (cond(o, "Ready") or {}).get("status") == "True"
        )
        assert node is not None
        assert "provisioning.dpu.nvidia.com/dpunode-protection" in node["metadata"]["finalizers"]
        for dpu_id in ("host-001-dpu-0", "host-001-dpu-1"):
            device = await wait_for(
                sim.store,
                k.dpudevice,
                f"device-{dpu_id}",
                lambda o: (cond(o, "Ready") or {}).get("status") == "True",
            )
            assert device is not None

        for name in (DPU0, DPU1):
            dpu = await wait_for(sim.store, k.dpu, name, phase_is("Node Effect"))
            assert dpu is not None
            assert dpu["spec"]["bfb"] == dpf_objects.DEFAULT_BFB
            assert dpu["spec"]["nodeEffect"]["hold"] is True
            assert "provisioning.dpu.nvidia.com/dpu-protection" in dpu["metadata"]["finalizers"]
            assert cond(dpu, "NodeEffectReady")["status"] == "False"  # type: ignore[index]
            assert cond(dpu, "Ready")["status"] == "False"  # type: ignore[index]
        hold = await wait_for(sim.store, k.maintenance, "node-host-001-hold", lambda o: o is not None)
        assert hold is not None
        assert hold["metadata"]["annotations"][HOLD] == "true"
        assert hold["spec"]["dpuNodeName"] == "node-host-001"
        assert sorted(hold["spec"]["requestor"]) == [DPU0, DPU1]

        await settle()  # the hold holds: nothing moves until metalflow releases it
        for name in (DPU0, DPU1):
            assert sim.get(k.dpu, name)["status"]["phase"] == "Node Effect"  # type: ignore[index]
        assert sim.violations.as_json() == []


async def test_initial_provisioning_one_reboot_serves_both_dpus() -> None:
    async with running(site_of(("host-001", "BF3", 2))) as sim:
        k = sim.kube
        logs = [PhaseLog(sim.store, k.dpu, DPU0), PhaseLog(sim.store, k.dpu, DPU1)]
        sets_of_annotation: list[str] = []
        node_watch = sim.store.watch(k.dpunode, NS, resource_version=sim.store.resource_version)
        sim.site_setup()
        sim.discover("host-001")
        await wait_for(sim.store, k.maintenance, "node-host-001-hold", lambda o: o is not None)
        for name in (DPU0, DPU1):
            await wait_for(sim.store, k.dpu, name, phase_is("Node Effect"))

        sim.release_hold("node-host-001")
        node = await wait_for(sim.store, k.dpunode, "node-host-001", has_annotation(REBOOT))
        assert node is not None and node["metadata"]["annotations"][REBOOT] == "true"
        for name in (DPU0, DPU1):
            dpu = await wait_for(sim.store, k.dpu, name, phase_is("Rebooting"))
            assert cond(dpu, "OSInstalled")["status"] == "True"  # type: ignore[index]
            assert cond(dpu, "Rebooted") == {**cond(dpu, "Rebooted"), "status": "False"}  # type: ignore[dict-item]
        node = await wait_for(
            sim.store,
            k.dpunode,
            "node-host-001",
            lambda o: (cond(o, "DPUNodeRebootInProgress") or {}).get("reason") == "WaitForExternalReboot",
        )
        assert cond(node, "DPUNodeRebootInProgress")["status"] == "True"  # type: ignore[index]
        assert cond(node, "DPUUpdateInProgress")["status"] == "True"  # type: ignore[index]
        assert cond(node, "Ready")["status"] == "False"  # type: ignore[index]

        # Without the annotation's removal nothing moves on.
        await settle()
        assert sim.get(k.dpu, DPU0)["status"]["phase"] == "Rebooting"  # type: ignore[index]

        sim.power_cycle("host-001")
        sim.remove_reboot_annotation("node-host-001")
        for name in (DPU0, DPU1):
            dpu = await wait_for(sim.store, k.dpu, name, phase_is("Ready"))
            for ctype in ("NodeEffectReady", "BFBReady", "Initialized", "OSInstalled", "Rebooted", "Ready"):
                assert cond(dpu, ctype)["status"] == "True", ctype  # type: ignore[index]
        node = await wait_for(
            sim.store, k.dpunode, "node-host-001", lambda o: (cond(o, "Ready") or {}).get("status") == "True"
        )
        assert cond(node, "DPUNodeRebootInProgress")["status"] == "False"  # type: ignore[index]
        assert cond(node, "DPUUpdateInProgress")["status"] == "False"  # type: ignore[index]
        await wait_for(sim.store, k.maintenance, "node-host-001-hold", gone)

        async def count_annotation_sets() -> None:
            had = False
            while True:
                event = await node_watch.next_shared(timeout=0.05)
                if event is None:
                    return
                has = REBOOT in (event.object["metadata"].get("annotations") or {})
                if has and not had:
                    sets_of_annotation.append(event.object["metadata"]["resourceVersion"])
                had = has

        await count_annotation_sets()
        node_watch.close()
        assert len(sets_of_annotation) == 1  # one host reboot for both DPUs
        for log in logs:
            log.close()
            assert log.phases == HAPPY_PATH
        assert sim.violations.as_json() == []


async def test_bf4_asks_for_a_second_reboot() -> None:
    async with running(site_of(("host-003", "BF4", 1))) as sim:
        k = sim.kube
        name = "node-host-003-device-host-003-dpu-0"
        log = PhaseLog(sim.store, k.dpu, name)
        sim.site_setup()
        sim.discover("host-003")
        await wait_for(sim.store, k.maintenance, "node-host-003-hold", lambda o: o is not None)
        sim.release_hold("node-host-003")
        await wait_for(sim.store, k.dpunode, "node-host-003", has_annotation(REBOOT))
        await wait_for(sim.store, k.dpu, name, phase_is("Rebooting"))
        sim.power_cycle("host-003")
        sim.remove_reboot_annotation("node-host-003")

        node = await wait_for(sim.store, k.dpunode, "node-host-003", has_annotation(REBOOT))
        assert node is not None  # asked again
        dpu = await wait_for(sim.store, k.dpu, name, phase_is("Rebooting"))
        assert cond(dpu, "Rebooted")["status"] == "False"  # type: ignore[index]
        await settle()
        assert sim.get(k.dpu, name)["status"]["phase"] == "Rebooting"  # type: ignore[index]

        sim.power_cycle("host-003")
        sim.remove_reboot_annotation("node-host-003")
        await wait_for(sim.store, k.dpu, name, phase_is("Ready"))
        log.close()
        assert log.phases == [
            *HAPPY_PATH[:8],
            "Checking Host Reboot Required",
            "Rebooting",
            *HAPPY_PATH[8:],
        ]
        assert sim.violations.as_json() == []


async def test_reprovisioning_recreates_the_dpu_held_under_the_same_name() -> None:
    async with running(site_of(("host-001", "BF3", 2)), initialised=True) as sim:
        k = sim.kube
        before = await wait_for(sim.store, k.dpu, DPU0, phase_is("Ready"))
        assert before is not None
        assert sim.get(k.maintenance, "node-host-001-hold") is None
        log = PhaseLog(sim.store, k.dpu, DPU0)

        sim.store.delete(k.dpu, NS, DPU0)
        after = await wait_for(
            sim.store,
            k.dpu,
            DPU0,
            lambda o: (
                o is not None
                and o["metadata"]["uid"] != before["metadata"]["uid"]
                and phase_is("Node Effect")(o)
            ),
        )
        assert after is not None
        hold = await wait_for(sim.store, k.maintenance, "node-host-001-hold", lambda o: o is not None)
        assert hold["metadata"]["annotations"][HOLD] == "true"  # type: ignore[index]
        assert hold["spec"]["requestor"] == [DPU0]  # type: ignore[index]
        assert sim.get(k.dpu, DPU1)["status"]["phase"] == "Ready"  # type: ignore[index]
        await settle()
        assert sim.get(k.dpu, DPU0)["status"]["phase"] == "Node Effect"  # type: ignore[index]

        sim.release_hold("node-host-001")
        await wait_for(sim.store, k.dpunode, "node-host-001", has_annotation(REBOOT))
        sim.power_cycle("host-001")
        sim.remove_reboot_annotation("node-host-001")
        await wait_for(sim.store, k.dpu, DPU0, phase_is("Ready"))
        log.close()
        assert log.phases == ["Ready", "Deleting", *HAPPY_PATH]
        assert len(log.uids) == 2
        assert sim.violations.as_json() == []


async def test_bfb_upgrade_marks_outdated_and_waits_for_deletion() -> None:
    async with running(site_of(("host-001", "BF3", 2)), initialised=True) as sim:
        k = sim.kube
        sim.create(
            {
                "apiVersion": "provisioning.dpu.nvidia.com/v1alpha1",
                "kind": "BFB",
                "metadata": {"name": "bf-bundle-3-0-0"},
                "spec": {"url": "http://bfb.local/bf-bundle-3.0.0.bfb"},
            }
        )
        await wait_for(sim.store, k.bfb, "bf-bundle-3-0-0", phase_is("Ready"))
        sim.store.patch(
            k.deployment, NS, "gpu-compute", {"spec": {"dpus": {"bfb": "bf-bundle-3-0-0"}}}, "merge"
        )

        def outdated(o: dict | None) -> bool:  # type: ignore[type-arg]
            return (cond(o, "Outdated") or {}).get("reason") == "OutdatedBFB"

        for name in (DPU0, DPU1):
            dpu = await wait_for(sim.store, k.dpu, name, outdated)
            assert dpu["status"]["phase"] == "Ready"  # type: ignore[index]
            assert "bf-bundle-2-9-0 -> bf-bundle-3-0-0" in cond(dpu, "Outdated")["message"]  # type: ignore[index]
        await settle()  # OnDelete: nothing else happens
        assert sim.get(k.dpu, DPU0)["spec"]["bfb"] == dpf_objects.DEFAULT_BFB  # type: ignore[index]
        assert sim.get(k.dpu, DPU0)["status"]["phase"] == "Ready"  # type: ignore[index]

        sim.store.delete(k.dpu, NS, DPU0)
        dpu = await wait_for(
            sim.store, k.dpu, DPU0, lambda o: o is not None and o["spec"]["bfb"] == "bf-bundle-3-0-0"
        )
        await wait_for(sim.store, k.dpu, DPU0, phase_is("Node Effect"))
        assert cond(sim.get(k.dpu, DPU0), "Outdated") is None
        assert outdated(sim.get(k.dpu, DPU1))
