"""DPF deletions (flows 7-10), injected faults, the two invariant checks, and the initialised site."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from dpf_support import (
    NS,
    REBOOT,
    cond,
    gone,
    has_annotation,
    phase_is,
    running,
    settle,
    site_of,
    wait_for,
)

from simulators import violations as kinds
from simulators.events import PowerTransition
from simulators.site import default_site
from simulators.timings import timings_for

DPU0 = "node-host-001-device-host-001-dpu-0"
DPU1 = "node-host-001-device-host-001-dpu-1"


async def test_deleting_a_dpudevice_deletes_its_dpu_for_good() -> None:
    async with running(site_of(("host-001", "BF3", 2)), initialised=True) as sim:
        k = sim.kube
        sim.store.delete(k.dpudevice, NS, "device-host-001-dpu-0")
        await wait_for(sim.store, k.dpu, DPU0, gone)
        await wait_for(sim.store, k.dpudevice, "device-host-001-dpu-0", gone)
        await settle()
        assert sim.get(k.dpu, DPU0) is None  # not recreated: its device is gone
        assert sim.get(k.dpu, DPU1)["status"]["phase"] == "Ready"  # type: ignore[index]


async def test_deleting_a_dpunode_deletes_its_dpus_then_itself() -> None:
    async with running(site_of(("host-001", "BF3", 2)), initialised=True) as sim:
        k = sim.kube
        sim.store.delete(k.dpunode, NS, "node-host-001")
        for name in (DPU0, DPU1):
            await wait_for(sim.store, k.dpu, name, gone)
        await wait_for(sim.store, k.dpunode, "node-host-001", gone)
        await settle()
        assert sim.get(k.dpu, DPU0) is None and sim.get(k.dpu, DPU1) is None


async def test_force_deleting_a_dpunode_and_its_dpus() -> None:
    # Phases slow enough that the DPUs are still `Deleting` when the client strips finalizers.
    async with running(site_of(("host-001", "BF3", 2)), timings_for("zero", dpu_phase_seconds=30)) as sim:
        k = sim.kube
        await sim.dpf.initialise()
        sim.store.delete(k.dpunode, NS, "node-host-001")
        for name in (DPU0, DPU1):
            await wait_for(sim.store, k.dpu, name, phase_is("Deleting"))
        for rt, name in ((k.dpu, DPU0), (k.dpu, DPU1), (k.dpunode, "node-host-001")):
            sim.store.patch(rt, NS, name, {"metadata": {"finalizers": None}}, "merge")
        for rt, name in ((k.dpu, DPU0), (k.dpu, DPU1), (k.dpunode, "node-host-001")):
            await wait_for(sim.store, rt, name, gone)
        await settle()
        assert sim.get(k.dpu, DPU0) is None


async def test_force_deleting_a_dpu_recreates_it_at_once() -> None:
    async with running(site_of(("host-001", "BF3", 1)), timings_for("zero", dpu_phase_seconds=30)) as sim:
        k = sim.kube
        await sim.dpf.initialise()
        before = sim.get(k.dpu, DPU0)
        sim.store.delete(k.dpu, NS, DPU0)
        await wait_for(sim.store, k.dpu, DPU0, phase_is("Deleting"))
        sim.store.patch(k.dpu, NS, DPU0, {"metadata": {"finalizers": None}}, "merge")
        after = await wait_for(
            sim.store,
            k.dpu,
            DPU0,
            lambda o: o is not None and o["metadata"]["uid"] != before["metadata"]["uid"],  # type: ignore[index]
        )
        assert after is not None


async def test_injected_error_stays_until_reprovisioned() -> None:
    async with running(site_of(("host-001", "BF3", 1))) as sim:
        k = sim.kube
        sim.site_setup()
        sim.discover("host-001")
        await wait_for(sim.store, k.dpu, DPU0, phase_is("Node Effect"))
        await sim.dpf.inject_error(DPU0, "BFB install failed: checksum mismatch")
        dpu = await wait_for(sim.store, k.dpu, DPU0, phase_is("Error"))
        ready = cond(dpu, "Ready")
        assert ready is not None and ready["status"] == "False"
        assert ready["message"] == "BFB install failed: checksum mismatch"
        sim.release_hold("node-host-001")
        await settle()
        assert sim.get(k.dpu, DPU0)["status"]["phase"] == "Error"  # type: ignore[index]

        sim.store.delete(k.dpu, NS, DPU0)
        await wait_for(
            sim.store, k.dpu, DPU0, lambda o: o is not None and o["metadata"]["uid"] != dpu["metadata"]["uid"]
        )  # type: ignore[index]
        await wait_for(sim.store, k.dpu, DPU0, phase_is("Node Effect"))
        with pytest.raises(KeyError):
            await sim.dpf.inject_error("node-host-001-device-nope", "x")


async def test_injected_node_effect_and_recovery() -> None:
    async with running(site_of(("host-001", "BF3", 1)), initialised=True) as sim:
        k = sim.kube
        await sim.dpf.inject_node_effect(DPU0)
        dpu = await wait_for(sim.store, k.dpu, DPU0, phase_is("Node Effect"))
        assert cond(dpu, "Ready")["status"] == "False"  # type: ignore[index]
        await settle()
        assert sim.get(k.dpu, DPU0)["status"]["phase"] == "Node Effect"  # type: ignore[index]
        await sim.dpf.recover(DPU0)
        dpu = await wait_for(sim.store, k.dpu, DPU0, phase_is("Ready"))
        assert cond(dpu, "Ready")["status"] == "True"  # type: ignore[index]
        with pytest.raises(ValueError):
            await sim.dpf.recover(DPU0)


async def test_annotation_removed_without_power_cycle_is_a_violation_and_dpus_continue() -> None:
    async with running(site_of(("host-001", "BF3", 2))) as sim:
        k = sim.kube
        sim.site_setup()
        sim.discover("host-001")
        await wait_for(sim.store, k.maintenance, "node-host-001-hold", lambda o: o is not None)
        sim.release_hold("node-host-001")
        await wait_for(sim.store, k.dpunode, "node-host-001", has_annotation(REBOOT))
        # A power cycle *before* the annotation was set does not count.
        sim.remove_reboot_annotation("node-host-001")
        for name in (DPU0, DPU1):
            await wait_for(sim.store, k.dpu, name, phase_is("Ready"))
        found = sim.violations.as_json()
        assert [(v["kind"], v["subject"]) for v in found] == [
            (kinds.REBOOT_ANNOTATION_REMOVED_WITHOUT_POWER_CYCLE, "node-host-001")
        ]


async def test_power_cycle_during_install_is_a_violation() -> None:
    async with running(site_of(("host-001", "BF3", 1)), timings_for("zero", dpu_phase_seconds=0.3)) as sim:
        k = sim.kube
        sim.site_setup()
        sim.discover("host-001")
        await wait_for(sim.store, k.maintenance, "node-host-001-hold", lambda o: o is not None)
        sim.release_hold("node-host-001")
        await wait_for(sim.store, k.dpu, DPU0, phase_is("Prepare BFB"))
        sim.power_cycle("host-001")
        found = sim.violations.as_json()
        assert [(v["kind"], v["subject"]) for v in found] == [(kinds.POWER_CYCLE_DURING_INSTALL, "host-001")]
        assert DPU0 in found[0]["detail"] and "Prepare BFB" in found[0]["detail"]

        # Once the reboot is asked for, a power cycle is what DPF wants.
        await wait_for(sim.store, k.dpunode, "node-host-001", has_annotation(REBOOT), timeout=10)
        sim.power_cycle("host-001")
        sim.remove_reboot_annotation("node-host-001")
        await wait_for(sim.store, k.dpu, DPU0, phase_is("Ready"), timeout=10)
        assert len(sim.violations) == 1


async def test_power_off_of_an_idle_host_is_no_violation() -> None:
    async with running(site_of(("host-001", "BF3", 1)), initialised=True) as sim:
        sim.hub.publish(PowerTransition("host-001", datetime.now(UTC), "On", "Off", "ForceOff"))
        assert sim.violations.as_json() == []


async def test_initialise_makes_every_dpu_ready_and_valid() -> None:
    site = default_site(6, 2)
    async with running(site, initialised=True) as sim:
        k = sim.kube
        dpus = sim.kube.list(k.dpu)
        assert len(dpus) == 12
        assert {d["status"]["phase"] for d in dpus} == {"Ready"}
        assert all(cond(d, "Ready")["status"] == "True" for d in dpus)  # type: ignore[index]
        nodes = sim.kube.list(k.dpunode)
        assert len(nodes) == 6 and all(cond(n, "Ready")["status"] == "True" for n in nodes)  # type: ignore[index]
        assert all(n["spec"]["nodeRebootMethod"] == {"external": {}} for n in nodes)
        assert len(sim.kube.list(k.dpudevice)) == 12
        assert [s["metadata"]["name"] for s in sim.kube.list(k.dpuset)] == ["gpu-compute-dpuset"]
        await settle()
        assert len(sim.kube.list(k.dpu)) == 12  # the controller, catching up on events, adds nothing
        assert sim.kube.list(k.maintenance) == []


async def test_concurrent_client_edits_do_not_stop_provisioning() -> None:
    async with running(site_of(("host-001", "BF3", 1)), timings_for("zero", dpu_phase_seconds=0.01)) as sim:
        k = sim.kube
        sim.site_setup()
        sim.discover("host-001")
        await wait_for(sim.store, k.maintenance, "node-host-001-hold", lambda o: o is not None)
        sim.release_hold("node-host-001")
        for i in range(20):  # a client labelling the DPU and node while DPF writes their status
            sim.store.patch(k.dpu, NS, DPU0, {"metadata": {"labels": {"edited": str(i)}}}, "merge")
            sim.store.patch(
                k.dpunode, NS, "node-host-001", {"metadata": {"labels": {"edited": str(i)}}}, "merge"
            )
            await settle(5)
        await wait_for(sim.store, k.dpunode, "node-host-001", has_annotation(REBOOT))
        sim.power_cycle("host-001")
        sim.remove_reboot_annotation("node-host-001")
        dpu = await wait_for(sim.store, k.dpu, DPU0, phase_is("Ready"))
        assert dpu["metadata"]["labels"]["edited"] == "19"  # type: ignore[index]


async def test_removing_the_hold_annotation_re_arms_it_and_reboot_needs_removal_not_false() -> None:
    """The hold as DPF's `reconcileHold` reads it (DOMAIN.md 2.4): removal re-arms it, a value that
    is no boolean is an error, any Go false spelling releases. The reboot annotation is the other
    way round: only its removal completes the reboot."""
    hold = "provisioning.dpu.nvidia.com/wait-for-external-nodeeffect"
    async with running(site_of(("host-001", "BF3", 1))) as sim:
        k = sim.kube
        sim.site_setup()
        sim.discover("host-001")
        await wait_for(sim.store, k.dpu, DPU0, phase_is("Node Effect"))

        def annotate(value: str | None) -> None:
            patch = {"metadata": {"annotations": {hold: value}}}
            sim.store.patch(k.maintenance, NS, "node-host-001-hold", patch, "merge")

        annotate(None)  # removed: DPF writes it back "true" and keeps holding
        await wait_for(
            sim.store,
            k.maintenance,
            "node-host-001-hold",
            lambda o: o is not None and (o["metadata"].get("annotations") or {}).get(hold) == "true",
        )
        annotate("maybe")  # no boolean: an error, not a release
        await wait_for(
            sim.store,
            k.maintenance,
            "node-host-001-hold",
            lambda o: (cond(o, "NodeEffectApplied") or {}).get("reason") == "Error",
        )
        await settle()
        assert sim.get(k.dpu, DPU0)["status"]["phase"] == "Node Effect"  # type: ignore[index]
        annotate("False")  # Go's ParseBool: a false value releases
        await wait_for(sim.store, k.dpunode, "node-host-001", has_annotation(REBOOT))
        sim.power_cycle("host-001")
        sim.store.patch(
            k.dpunode, NS, "node-host-001", {"metadata": {"annotations": {REBOOT: "false"}}}, "merge"
        )
        await settle()
        assert sim.get(k.dpu, DPU0)["status"]["phase"] == "Rebooting"  # type: ignore[index]
        sim.remove_reboot_annotation("node-host-001")
        await wait_for(sim.store, k.dpu, DPU0, phase_is("Ready"))
        assert sim.violations.as_json() == []


async def test_power_cycle_while_a_sibling_dpu_still_installs_is_a_violation() -> None:
    """The multi-DPU barrier: DPF asks for the reboot when the FIRST DPU reaches `Rebooting`;
    cycling the host then, while a sibling is still installing, corrupts the sibling's install."""
    timings = timings_for("zero", dpu_phase_seconds=0.3)
    async with running(site_of(("host-001", "BF3", 2)), timings, initialised=True) as sim:
        k = sim.kube
        sim.store.delete(k.dpu, NS, DPU0)
        await wait_for(sim.store, k.maintenance, "node-host-001-hold", lambda o: o is not None, timeout=10)
        sim.release_hold("node-host-001")
        await wait_for(sim.store, k.dpunode, "node-host-001", has_annotation(REBOOT), timeout=10)
        # DPU0 now waits in Rebooting; reprovision DPU1 too, so it installs while DPU0 waits.
        sim.store.delete(k.dpu, NS, DPU1)
        await wait_for(sim.store, k.dpu, DPU1, phase_is("Prepare BFB", "OS Installing"), timeout=10)
        sim.power_cycle("host-001")
        found = sim.violations.as_json()
        assert [(v["kind"], v["subject"]) for v in found] == [(kinds.POWER_CYCLE_DURING_INSTALL, "host-001")]
        assert DPU1 in found[0]["detail"] and "another DPU" in found[0]["detail"]
