"""The simulated DPF as v26 behaves (simulators/dpf/BEHAVIOUR.md), against v25.10 where they differ.

Each test names the behaviour-table rows it checks. The controller runs on a real store serving
the vendored CRDs with metalflow's v26 overlay; every wait follows a store watch.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from dpf_support import (
    NS,
    REBOOT,
    PhaseLog,
    Sim,
    cond,
    gone,
    has_annotation,
    phase_is,
    running,
    settle,
    site_of,
    wait_for,
)

from contracts.models.dpf import GroupSpec, SiteSetupInput
from drivers import dpf as driver
from simulators import violations as kinds
from simulators.dpf import faults as dpf_faults
from simulators.dpf import versions
from simulators.events import PowerTransition
from simulators.faults import Faults
from simulators.kube.store import Invalid
from simulators.redfish import BMCs
from simulators.timings import timings_for

V26 = versions.V26
DPU0 = "node-host-001-device-host-001-dpu-0"
DPU1 = "node-host-001-device-host-001-dpu-1"
BF4 = "node-host-003-device-host-003-dpu-0"
NODE = "node-host-001"


def reboot_status(obj: dict | None) -> dict:  # type: ignore[type-arg]
    return dict(((obj or {}).get("status") or {}).get("rebootStatus") or {})


def stamped(obj: dict | None) -> bool:  # type: ignore[type-arg]
    status = reboot_status(obj)
    return status.get("phase") == "Pending" and status.get("reason") == "WaitingForManualPowerCycleOrReboot"


async def to_reboot_request(sim: Sim, host: str, dpus: tuple[str, ...]) -> None:
    sim.site_setup()
    sim.discover(host)
    await wait_for(sim.store, sim.kube.maintenance, f"node-{host}-hold", lambda o: o is not None)
    for name in dpus:
        await wait_for(sim.store, sim.kube.dpu, name, phase_is("Node Effect"))
    sim.release_hold(f"node-{host}")
    await wait_for(sim.store, sim.kube.dpunode, f"node-{host}", has_annotation(REBOOT))


async def test_v26_overlay_serves_the_new_fields_and_v25_prunes_them() -> None:
    """O1-O3: the v26 schema keeps `rebootStatus`/`outdated`; v25.10 prunes them; the new
    required fields are enforced."""
    for version, kept in ((versions.V25, False), (V26, True)):
        async with running(site_of(("host-001", "BF3", 1)), initialised=True, version=version) as sim:
            sim.store.patch(
                sim.kube.dpu, NS, DPU0,
                {"status": {"rebootStatus": {"phase": "Pending", "method": "PowerCycle"}}}, "merge",
                subresource="status",
            )  # fmt: skip
            assert ("rebootStatus" in sim.get(sim.kube.dpu, DPU0)["status"]) is kept  # type: ignore[index]
            if version == V26:
                with pytest.raises(Invalid, match="phase"):
                    sim.store.patch(
                        sim.kube.dpu,
                        NS,
                        DPU0,
                        {"status": {"phase": "Warp Drive"}},
                        "merge",
                        subresource="status",
                    )
                dpuset = sim.kube.dpuset
                with pytest.raises(Invalid, match="strategy"):
                    sim.store.create(dpuset, NS, {"apiVersion": dpuset.api_version, "kind": "DPUSet",
                                                  "metadata": {"name": "no-strategy"},
                                                  "spec": {"dpuTemplate": {"spec": {"dpuFlavor": "f",
                                                           "nodeEffect": {"hold": True}}}}})  # fmt: skip


async def test_a_dpuservice_for_the_dpucluster_must_say_whether_it_is_privileged() -> None:
    """O4: under v26 a DPUService that targets the DPUCluster (deployInCluster unset or false)
    is refused without `security.privileged`, one deployed in the host cluster with it; a
    DPUServiceTemplate keeps the field (no rule of its own). v25.10 prunes the field."""
    for version in (versions.V25, V26):
        async with running(site_of(("host-001", "BF3", 1)), version=version) as sim:
            services = sim.store.resource_type("svc.dpu.nvidia.com", "v1alpha1", "dpuservices")

            # The product's own site set-up (drivers/dpf.py), as it writes each DPUServiceTemplate.
            for body in driver.site_setup_objects(SiteSetupInput(groups=(GroupSpec(name="gpu"),))):
                sim.create(body)
            template = sim.get(sim.kube.service_template, "gpu-dts") or {}
            if version == versions.V25:
                sim.store.create(services, NS, service("unset"))  # no rule, the field pruned
                made = sim.store.create(services, NS, service("set", security={"privileged": True}))
                assert "security" not in made["spec"] and "security" not in template.get("spec", {})
                continue
            assert template["spec"]["security"] == {"privileged": False}  # kept, as metalflow wrote it
            with pytest.raises(
                Invalid, match="security.privileged must be set when deployInCluster is false"
            ):
                sim.store.create(services, NS, service("unset"))
            with pytest.raises(
                Invalid, match="security.privileged must be set when deployInCluster is false"
            ):
                sim.store.create(services, NS, service("off", deployInCluster=False))
            with pytest.raises(Invalid, match="must not be set when deployInCluster is true"):
                sim.store.create(
                    services, NS, service("host", deployInCluster=True, security={"privileged": False})
                )
            sim.store.create(services, NS, service("host-ok", deployInCluster=True))
            made = sim.store.create(services, NS, service("dpu", security={"privileged": False}))
            assert made["spec"]["security"] == {"privileged": False}
            with pytest.raises(Invalid, match="security.privileged must be set"):  # not dropped later
                sim.store.patch(services, NS, "dpu", {"spec": {"security": None}}, "merge")


async def test_v26_provisioning_reports_reboot_status_method_and_sequence() -> None:
    """P1-P3, R1-R5, A1: the v26 phases; the annotation with the method in the condition message
    and DPUNode `status.rebootMethod`; rebootStatus Pending, stamped one reconcile later; the
    removal completes it (Succeeded); the agent's NoAction resets the sequence count. A3: DPF copies
    the agent's start time in DPU Config only; a reset of the Ready DPU moves the agent's own."""
    async with running(site_of(("host-001", "BF3", 2)), version=V26) as sim:
        k = sim.kube
        logs = [PhaseLog(sim.store, k.dpu, DPU0), PhaseLog(sim.store, k.dpu, DPU1)]
        await to_reboot_request(sim, "host-001", (DPU0, DPU1))
        for name in (DPU0, DPU1):
            dpu = await wait_for(sim.store, k.dpu, name, stamped)
            status = dpu["status"]  # type: ignore[index]
            agent = status["agentStatus"]
            assert (agent["rebootMethod"], agent["rebootSequenceCount"]) == ("PowerCycle", 1)
            assert status["agentLastStartupTime"] == agent["lastStartupTime"]  # A3: copied in DPU Config
            assert status["rebootStatus"]["method"] == "PowerCycle"
            assert status["previousPhase"] == "DPU Config"
            # R4: device-query discovery (the default) says so; DPF comes back to DPU Config for it
            assert [(c["type"], c["status"], c["reason"]) for c in agent["conditions"]] == [
                ("RebootMethodDiscovery", "True", "PowerCycle")
            ]
        node = await wait_for(
            sim.store,
            k.dpunode,
            NODE,
            lambda o: (cond(o, "DPUNodeRebootInProgress") or {}).get("status") == "True",
        )
        assert cond(node, "DPUNodeRebootInProgress")["message"] in (  # type: ignore[index]
            f"required reboot method: PowerCycle (driven by DPU {DPU0})",
            f"required reboot method: PowerCycle (driven by DPU {DPU1})",
        )
        assert node["status"]["rebootMethod"] == "PowerCycle"  # type: ignore[index]
        sim.power_cycle("host-001")
        sim.remove_reboot_annotation(NODE)
        for name in (DPU0, DPU1):
            dpu = await wait_for(sim.store, k.dpu, name, phase_is("Ready"))
            assert dpu["status"]["agentStatus"]["rebootMethod"] == "NoAction"  # type: ignore[index]
            assert dpu["status"]["agentStatus"]["rebootSequenceCount"] == 0  # type: ignore[index]
            assert reboot_status(dpu)["phase"] == "Succeeded"
            assert cond(dpu, "Rebooted")["status"] == "True"  # type: ignore[index]
        node = sim.get(k.dpunode, NODE)
        assert node["status"]["rebootMethod"] == "PowerCycle"  # preserved once idle (dpunode.md)
        # A3: a reset of a Ready DPU moves the agent's own start time, not DPF's copy.
        ready = sim.get(k.dpu, DPU0)["status"]  # type: ignore[index]
        copied = ready["agentLastStartupTime"]
        assert copied == ready["agentStatus"]["lastStartupTime"]
        await _next_second(copied)
        sim.power_cycle("host-001")
        restarted = await wait_for(sim.store, k.dpu, DPU0, lambda o: _started(o) not in ("", copied))
        assert restarted["status"]["agentLastStartupTime"] == copied  # type: ignore[index]
        assert restarted["status"]["phase"] == "Ready"  # type: ignore[index]
        for log in logs:
            log.close()
            assert log.phases[:9] == ["Initializing", "Pending", "Node Effect", "Initialize Interface",
                                      "Config FW Parameters", "Prepare BFB", "OS Installing", "DPU Config",
                                      "Rebooting"]  # fmt: skip
            assert log.phases[9:] == ["DPU Config", "DPU Cluster Config",  # zero trust (the default)
                                      "Service Readiness", "Node Effect Removal", "Ready"]  # fmt: skip
        assert sim.violations.as_json() == []


async def test_a_host_trusted_dpf_configures_the_host_network_before_the_cluster() -> None:
    """P1 (issue 36 point 6): on a host-trusted DPF the DPU goes `Host Network Configuration ->
    DPU Cluster Config` after the host reboot and after the agent's NoAction (a BF3 passes it
    once: its reboot returns it to DPU Config, whose NoAction moves on); 25.10 refuses the mode."""
    async with running(site_of(("host-001", "BF3", 1)), version=V26, mode="host-trusted") as sim:
        k = sim.kube
        log = PhaseLog(sim.store, k.dpu, DPU0)
        await to_reboot_request(sim, "host-001", (DPU0,))
        await wait_for(sim.store, k.dpu, DPU0, stamped)
        sim.power_cycle("host-001")
        sim.remove_reboot_annotation(NODE)
        await wait_for(sim.store, k.dpu, DPU0, phase_is("Ready"))
        log.close()
        assert log.phases[8:] == ["Rebooting", "DPU Config", "Host Network Configuration",
                                  "DPU Cluster Config", "Service Readiness", "Node Effect Removal",
                                  "Ready"]  # fmt: skip
        assert sim.violations.as_json() == []
    with pytest.raises(ValueError, match="is DPF v26 behaviour: serve --dpf-version 26"):
        versions.chosen_mode("host-trusted", versions.V25)
    with pytest.raises(ValueError, match="unknown DPF deployment mode 'trusting'"):
        versions.chosen_mode("trusting", V26)


@pytest.mark.parametrize(
    ("mode", "after"),
    [
        ("zero-trust", ["DPU Cluster Config"]),
        ("host-trusted", ["Host Network Configuration", "DPU Cluster Config"]),
    ],
)
async def test_with_boot_id_discovery_dpf_goes_on_after_the_host_reboot(mode: str, after: list[str]) -> None:
    """R4 (issue 36): an agent without device query (MFT < 4.36.0-95) finds the method by boot ID:
    SystemLevelReset before the first boot, for every model, and no `RebootMethodDiscovery`
    condition; after the host reboot DPF goes on to `DPU Cluster Config` (zero trust) or `Host
    Network Configuration` (host trusted), never back to `DPU Config` (`rebooting.go` c=c406f0c5
    cases 2-4). One host reboot, and the sequence count stays 1 (no NoAction is asked for)."""
    async with running(site_of(("host-003", "BF4", 1)), version=V26, mode=mode, discovery="boot-id") as sim:
        k = sim.kube
        log = PhaseLog(sim.store, k.dpu, BF4)
        await to_reboot_request(sim, "host-003", (BF4,))
        dpu = await wait_for(sim.store, k.dpu, BF4, stamped)
        agent = dpu["status"]["agentStatus"]  # type: ignore[index]
        assert (agent["rebootMethod"], agent["rebootSequenceCount"]) == ("SystemLevelReset", 1)
        assert "conditions" not in agent
        warm_reset(sim, "host-003")
        sim.remove_reboot_annotation("node-host-003")
        ready = await wait_for(sim.store, k.dpu, BF4, phase_is("Ready"))
        assert ready["status"]["agentStatus"]["rebootSequenceCount"] == 1  # type: ignore[index]
        log.close()
        rebooting = log.phases.index("Rebooting")
        assert log.phases[rebooting - 1 :] == ["DPU Config", "Rebooting", *after, "Service Readiness",
                                               "Node Effect Removal", "Ready"]  # fmt: skip
        assert log.phases.count("Rebooting") == 1
        assert sim.violations.as_json() == []


def stamped_by_condition(obj: dict | None) -> bool:  # type: ignore[type-arg]
    rebooted = cond(obj, "Rebooted") or {}
    return (
        rebooted.get("status") == "False" and rebooted.get("reason") == "WaitingForManualPowerCycleOrReboot"
    )


async def test_rc3_stamps_the_rebooted_condition_and_has_no_reboot_status() -> None:
    """R7 (issue 36 point 8): v26.4.0-rc.3 serves no `rebootStatus`, `outdated` or DPUNode
    `rebootMethod` and refuses the phases it lacks; DPF stamps each Rebooting DPU's `Rebooted`
    condition with the annotation (a BF4's second round too: no WaitForShutdown), goes without
    `Update Firmware` and `Service Readiness`, and the removal completes each round."""
    async with running(site_of(("host-003", "BF4", 1)), version=versions.V26_RC3) as sim:
        k = sim.kube
        log = PhaseLog(sim.store, k.dpu, BF4)
        await to_reboot_request(sim, "host-003", (BF4,))
        with pytest.raises(Invalid, match="phase"):
            sim.store.patch(k.dpu, NS, BF4, {"status": {"phase": "Service Readiness"}}, "merge",
                            subresource="status")  # fmt: skip
        for method in ("PowerCycle", "SystemLevelReset"):
            await wait_for(sim.store, k.dpunode, "node-host-003", has_annotation(REBOOT))
            dpu = await wait_for(sim.store, k.dpu, BF4, phase_is("Rebooting"))
            assert stamped_by_condition(dpu) and "rebootStatus" not in dpu["status"]  # type: ignore[index]
            assert dpu["status"]["agentStatus"]["rebootMethod"] == method  # type: ignore[index]
            node = sim.get(k.dpunode, "node-host-003")
            assert "rebootMethod" not in node["status"]  # type: ignore[index]
            sim.power_cycle("host-003")
            sim.remove_reboot_annotation("node-host-003")
            await wait_for(sim.store, k.dpu, BF4, lambda o: phase_is("Rebooting")(o) is False)
        await wait_for(sim.store, k.dpu, BF4, phase_is("Ready"))
        log.close()
        assert "Update Firmware" not in log.phases and log.phases[-2:] == ["Node Effect Removal", "Ready"]
        assert sim.violations.as_json() == []


async def test_rc3_a_dpu_that_joins_the_round_is_stamped_later_and_an_early_removal_re_arms() -> None:
    """R7: DPU 1 reaches `Rebooting` after DPU 0 had DPF ask for the reboot; DPF stamps it
    `reboot_stamp_seconds` later (1 s here); a removal before that is undone (the annotation is
    set again, violation `reboot-annotation-removed-early`); after the stamp the next round
    completes for both."""
    timings = timings_for("zero", reboot_stamp_seconds=1.0)
    async with running(site_of(("host-001", "BF3", 2)), timings, version=versions.V26_RC3) as sim:
        k = sim.kube
        sim.dpf.provisioner.detours[DPU1] = ("Perform ARM Force Restart", 0.3)  # it lags behind
        await to_reboot_request(sim, "host-001", (DPU0,))
        assert stamped_by_condition(sim.get(k.dpu, DPU0))
        joined = await wait_for(sim.store, k.dpu, DPU1, phase_is("Rebooting"))
        assert cond(joined, "Rebooted") is None
        sim.power_cycle("host-001")
        sim.remove_reboot_annotation(NODE)
        await wait_for(sim.store, k.dpunode, NODE, has_annotation(REBOOT))
        assert sim.kinds() == [kinds.REBOOT_ANNOTATION_REMOVED_EARLY]
        await wait_for(sim.store, k.dpu, DPU1, stamped_by_condition)
        sim.power_cycle("host-001")
        sim.remove_reboot_annotation(NODE)
        for name in (DPU0, DPU1):
            await wait_for(sim.store, k.dpu, name, phase_is("Ready"))
        assert sim.kinds() == [kinds.REBOOT_ANNOTATION_REMOVED_EARLY]


async def test_removal_before_dpf_stamped_the_reboot_re_arms_it() -> None:
    """R3: a removal before Step 2 is undone (DPF sets the annotation again) and the reboot before
    it does not count; the next removal after a power cycle does."""
    timings = timings_for("zero", arm_shutdown_seconds=30)
    async with running(site_of(("host-003", "BF4", 1)), timings, version=V26) as sim:
        k = sim.kube
        await to_reboot_request(sim, "host-003", (BF4,))
        await wait_for(sim.store, k.dpu, BF4, stamped)
        sim.power_cycle("host-003")
        sim.remove_reboot_annotation("node-host-003")
        # Second round: SystemLevelReset, held in WaitForShutdown for 30 s (rows R2, R6).
        dpu = await wait_for(
            sim.store, k.dpu, BF4, lambda o: reboot_status(o).get("phase") == "WaitForShutdown"
        )
        assert reboot_status(dpu)["method"] == "SystemLevelReset"
        assert reboot_status(dpu)["reason"] == "WaitingForDPUArmShutdown"  # DPF redfish rebooting.go
        shutting = "WaitingForDPUArmShutdown"  # the condition mirrors it (`reconcileWaitForArmShutdown`)
        await wait_for(sim.store, k.dpu, BF4, lambda o: (cond(o, "Rebooted") or {}).get("reason") == shutting)
        assert dpu["status"]["agentStatus"]["rebootSequenceCount"] == 2  # type: ignore[index]
        await wait_for(sim.store, k.dpunode, "node-host-003", has_annotation(REBOOT))
        sim.power_cycle("host-003")  # while the Arm shuts down: a violation
        sim.remove_reboot_annotation("node-host-003")  # before the stamp: re-armed
        await wait_for(sim.store, k.dpunode, "node-host-003", has_annotation(REBOOT))
        assert sim.kinds() == [kinds.HOST_RESET_DURING_ARM_SHUTDOWN, kinds.REBOOT_ANNOTATION_REMOVED_EARLY]
        assert sim.get(k.dpu, BF4)["status"]["phase"] == "Rebooting"  # type: ignore[index]


async def test_bf4_system_level_reset_waits_for_shutdown_and_accepts_a_warm_reset() -> None:
    """R2, R6, M1: WaitForShutdown, then Pending; a warm reset meets SystemLevelReset, while
    the first round's PowerCycle needs a cold one. P1: a BF4 flashes its firmware after
    `Config FW Parameters` and passes `Service Readiness` before `Node Effect Removal`."""
    async with running(site_of(("host-003", "BF4", 1)), version=V26) as sim:
        k = sim.kube
        log = PhaseLog(sim.store, k.dpu, BF4)
        await to_reboot_request(sim, "host-003", (BF4,))
        await wait_for(sim.store, k.dpu, BF4, stamped)
        warm_reset(sim, "host-003")  # PowerCycle asked: a warm reset does not meet it
        sim.remove_reboot_annotation("node-host-003")
        await wait_for(sim.store, k.dpu, BF4, lambda o: reboot_status(o).get("method") == "SystemLevelReset")
        await wait_for(sim.store, k.dpu, BF4, stamped)
        node = await wait_for(sim.store, k.dpunode, "node-host-003", has_annotation(REBOOT))
        assert node["status"]["rebootMethod"] == "SystemLevelReset"  # type: ignore[index]
        warm_reset(sim, "host-003")
        sim.remove_reboot_annotation("node-host-003")
        await wait_for(sim.store, k.dpu, BF4, phase_is("Ready"))
        assert sim.kinds() == [kinds.REBOOT_METHOD_NOT_MET]
        log.close()
        assert log.phases[3:7] == ["Initialize Interface", "Config FW Parameters", "Update Firmware",
                                   "Prepare BFB"]  # fmt: skip
        assert log.phases[-4:] == ["DPU Cluster Config", "Service Readiness", "Node Effect Removal", "Ready"]


async def test_wait_for_shutdown_ends_when_the_dpu_bmc_shows_the_arm_off_or_at_the_timeout() -> None:
    """R2 (issue 36): DPF holds the host reboot in WaitForShutdown until the DPU BMC's System shows
    the Arm off (`PowerState` `Paused`: the agent's shutdown left it in standby), then `Pending`,
    reason `DPUArmPoweredOff`; an Arm that never goes down (fault `arm-shutdown-hangs`) is released
    after `arm_shutdown_timeout_seconds` with reason `DPUArmShutdownWaitTimeout`, naming the state
    read (DPF redfish `rebooting.go` `reconcileWaitForArmShutdown`). The DPU BMCs are the site's."""
    timings = timings_for(
        "zero", arm_shutdown_seconds=0.2, arm_shutdown_timeout_seconds=1.0, arm_poll_seconds=0.05
    )
    site = site_of(("host-001", "BF3", 1), ("host-002", "BF3", 1))
    async with running(site, timings, version=V26, discovery="boot-id") as sim:
        bmcs = BMCs(site, sim.hub, Faults(), timings, sim.violations, {})
        sim.dpf.provisioner.arm_state = bmcs.dpu_system_state
        hangs = "node-host-002-device-host-002-dpu-0"
        sim.site_setup()
        for host in ("host-001", "host-002"):
            sim.discover(host)
        await wait_for(sim.store, sim.kube.dpu, hangs, lambda o: o is not None)
        dpf_faults.inject(sim.dpf.provisioner, (), hangs, "arm-shutdown-hangs", {})
        for host, name in (("host-001", DPU0), ("host-002", hangs)):
            await wait_for(sim.store, sim.kube.dpu, name, phase_is("Node Effect"))
            sim.release_hold(f"node-{host}")
        held = await wait_for(sim.store, sim.kube.dpu, hangs, lambda o: bool(reboot_status(o).get("phase")))
        assert (reboot_status(held)["phase"], reboot_status(held)["reason"]) == (
            "WaitForShutdown",
            "WaitingForDPUArmShutdown",
        )
        released = await wait_for(
            sim.store, sim.kube.dpu, DPU0, lambda o: reboot_status(o).get("phase") == "Pending"
        )
        assert reboot_status(released)["reason"] == "DPUArmPoweredOff"
        assert bmcs.dpu_system_state("host-001-dpu-0") == ("Paused", "StandbyOffline")
        assert reboot_status(sim.get(sim.kube.dpu, hangs))["phase"] == "WaitForShutdown"  # its Arm is On
        timed_out = await wait_for(
            sim.store, sim.kube.dpu, hangs, lambda o: reboot_status(o).get("phase") == "Pending"
        )
        assert reboot_status(timed_out)["reason"] == "DPUArmShutdownWaitTimeout"
        assert reboot_status(timed_out)["message"] == (
            'timed out after 1s waiting for DPU Arm to power off (last PowerState "On", Status.State '
            '"Enabled"); proceeding with host reboot'
        )


def warm_reset(sim: Sim, host: str) -> None:
    """What the host's BMC publishes for a ForceRestart."""
    from datetime import UTC, datetime

    from simulators.events import PowerCycled

    now = datetime.now(UTC)
    sim.hub.publish(PowerTransition(host, now, "On", "Off", "ForceRestart"))
    sim.hub.publish(PowerTransition(host, now, "Off", "On", "ForceRestart"))
    sim.hub.publish(PowerCycled(host, now))


async def test_reboot_loop_stops_at_the_agents_sequence_limit() -> None:
    """A2: each non-NoAction report counts; at 5 the agent refuses another host reboot."""
    async with running(site_of(("host-001", "BF3", 1)), version=V26) as sim:
        k = sim.kube
        sim.site_setup()
        sim.discover("host-001")
        await wait_for(sim.store, k.dpu, DPU0, phase_is("Node Effect"))
        dpf_faults.inject(sim.dpf.provisioner, (), DPU0, "agent", {"methods": ["SystemReboot"] * 7})
        sim.release_hold(NODE)
        for count in range(1, 6):
            await wait_for(sim.store, k.dpu, DPU0, lambda o, c=count: stamped(o) and _count(o) == c)
            sim.power_cycle("host-001")
            sim.remove_reboot_annotation(NODE)
        refused = await wait_for(
            sim.store, k.dpu, DPU0, lambda o: (cond(o, "DPUConfig") or {}).get("status") == "False"
        )
        dpu = refused
        assert dpu["status"]["phase"] == "DPU Config"  # type: ignore[index]
        assert cond(dpu, "DPUConfig")["message"] == (  # type: ignore[index]
            "rebootSequenceCount limit exceeded (5 >= 5) without an intervening NoAction RebootMethod; "
            "refusing further host reboot"
        )
        with pytest.raises(TypeError, match="methods"):
            dpf_faults.inject(sim.dpf.provisioner, (), DPU0, "agent", {"methods": ["Reboot"]})


async def test_the_dpus_own_reboots_count_in_the_sequence() -> None:
    """A1: FirmwareReset and DPUWarmReboot add one to `rebootSequenceCount` (the DPU reboots
    itself, staying in DPU Config); the host reboot asked next is the third of the count."""
    async with running(site_of(("host-001", "BF3", 1)), version=V26) as sim:
        k = sim.kube
        sim.site_setup()
        sim.discover("host-001")
        await wait_for(sim.store, k.dpu, DPU0, phase_is("Node Effect"))
        dpf_faults.inject(
            sim.dpf.provisioner,
            (),
            DPU0,
            "agent",
            {"methods": ["DPUWarmReboot", "FirmwareReset", "PowerCycle"]},
        )
        log = PhaseLog(sim.store, k.dpu, DPU0)
        sim.release_hold(NODE)
        dpu = await wait_for(sim.store, k.dpu, DPU0, phase_is("Rebooting"))
        log.close()
        assert _count(dpu) == 3 and dpu["status"]["agentStatus"]["rebootMethod"] == "PowerCycle"  # type: ignore[index]
        assert log.phases[-2:] == ["DPU Config", "Rebooting"]  # no Rebooting for the DPU's own


def service(name: str, **spec: object) -> dict:  # type: ignore[type-arg]
    """A DPUService of one chart, with `spec` added."""
    chart = {"source": {"repoURL": "oci://nvcr.io/nvidia/doca", "chart": "c", "version": "1"}}
    return {"apiVersion": "svc.dpu.nvidia.com/v1alpha1", "kind": "DPUService",
            "metadata": {"name": name}, "spec": {"helmChart": chart, **spec}}  # fmt: skip


def _started(obj: dict | None) -> str:  # type: ignore[type-arg]
    return str((((obj or {}).get("status") or {}).get("agentStatus") or {}).get("lastStartupTime", ""))


async def _next_second(stamp: str) -> None:
    """Wait past the second of an RFC 3339 `stamp` (the start times have one-second resolution)."""
    later = datetime.fromisoformat(stamp.replace("Z", "+00:00")) + timedelta(seconds=1)
    while datetime.now(UTC) < later:
        await asyncio.sleep(0.05)


def _count(obj: dict | None) -> int:  # type: ignore[type-arg]
    return int((((obj or {}).get("status") or {}).get("agentStatus") or {}).get("rebootSequenceCount", -1))


async def test_reboot_acknowledged_past_the_join_deadline_sticks_in_cluster_config() -> None:
    """D1: past the deadline the DPU stays in `DPU Cluster Config` (no condition says why)."""
    async with running(site_of(("host-001", "BF3", 1)), timings_for("zero", join_deadline_seconds=0.2),
                       version=V26) as sim:  # fmt: skip
        k = sim.kube
        await to_reboot_request(sim, "host-001", (DPU0,))
        await wait_for(sim.store, k.dpu, DPU0, stamped)
        import asyncio

        await asyncio.sleep(0.3)
        sim.power_cycle("host-001")
        sim.remove_reboot_annotation(NODE)
        await wait_for(sim.store, k.dpu, DPU0, phase_is("DPU Cluster Config"))
        await asyncio.sleep(0.2)
        assert sim.get(k.dpu, DPU0)["status"]["phase"] == "DPU Cluster Config"  # type: ignore[index]


async def test_rolling_update_reprovisions_by_itself_one_at_a_time_and_on_delete_waits() -> None:
    """S1, S2: OnDelete only reports `status.outdated`; RollingUpdate deletes drifted DPUs, one
    unavailable at a time."""
    async with running(site_of(("host-001", "BF3", 2)), initialised=True, version=V26) as sim:
        k = sim.kube
        bfb = {"apiVersion": k.bfb.api_version, "kind": "BFB", "metadata": {"name": "bf-new"},
               "spec": {"url": "http://bfb.local/bf-new.bfb"}}  # fmt: skip
        sim.store.create(k.bfb, NS, bfb)
        uids = {n: sim.get(k.dpu, n)["metadata"]["uid"] for n in (DPU0, DPU1)}  # type: ignore[index]
        sim.store.patch(k.deployment, NS, "gpu-compute", {"spec": {"dpus": {"bfb": "bf-new"}}}, "merge")
        for name in (DPU0, DPU1):
            dpu = await wait_for(sim.store, k.dpu, name, lambda o: "outdated" in (o or {}).get("status", {}))
            assert dpu["status"]["outdated"]["reason"] == "OutdatedBFB"  # type: ignore[index]
        await settle()
        assert {n: sim.get(k.dpu, n)["metadata"]["uid"] for n in (DPU0, DPU1)} == uids  # type: ignore[index]
        sim.store.patch(
            k.deployment, NS, "gpu-compute",
            {"spec": {"dpus": {"dpuSetStrategy": {"type": "RollingUpdate"}}}},
            "merge",
        )  # fmt: skip
        gone_first = await _first_recreated(sim, uids)
        other = DPU1 if gone_first == DPU0 else DPU0
        assert sim.get(k.dpu, other)["metadata"]["uid"] == uids[other]  # type: ignore[index]
        # The recreated DPU is held like any new one: release it; then the other one rolls.
        await wait_for(sim.store, k.dpu, gone_first, phase_is("Node Effect"))
        sim.release_hold(NODE)
        await wait_for(sim.store, k.dpunode, NODE, has_annotation(REBOOT))
        await wait_for(sim.store, k.dpu, gone_first, stamped)
        sim.power_cycle("host-001")
        sim.remove_reboot_annotation(NODE)
        await wait_for(sim.store, k.dpu, gone_first, phase_is("Ready"))
        await wait_for(sim.store, k.dpu, other, lambda o: o is None or o["metadata"]["uid"] != uids[other])


async def _first_recreated(sim: Sim, uids: dict[str, str]) -> str:
    import asyncio

    for _ in range(500):
        for name, uid in uids.items():
            obj = sim.get(sim.kube.dpu, name)
            if obj is None or obj["metadata"]["uid"] != uid or obj["metadata"].get("deletionTimestamp"):
                return name
        await asyncio.sleep(0.01)
    raise AssertionError("RollingUpdate deleted no DPU")


async def test_error_reasons_and_a_phase_the_client_may_not_know() -> None:
    """E1-E5, P4: an Error carries DPF's condition and reason; a build's unknown phase passes; a
    phase the served CRD does not allow, or a reason DPF has not, is refused and changes nothing."""
    async with running(site_of(("host-001", "BF3", 2)), initialised=True, version=V26) as sim:
        k = sim.kube
        phases = sim.dpf._phases()
        dpf_faults.inject(sim.dpf.provisioner, phases, DPU0, "error", {"reason": "FailToInstall"})
        dpu = await wait_for(sim.store, k.dpu, DPU0, phase_is("Error"))
        assert (cond(dpu, "BFBTransferred") or {}).get("reason") == "FailToInstall"
        with pytest.raises(TypeError, match="reason"):
            dpf_faults.inject(sim.dpf.provisioner, phases, DPU1, "error", {"reason": "Gremlins"})
        with pytest.raises(TypeError, match="phase"):
            dpf_faults.inject(sim.dpf.provisioner, phases, DPU1, "phase", {"phase": "Warp Drive"})
        assert sim.get(k.dpu, DPU1)["status"]["phase"] == "Ready"  # type: ignore[index]
        log = PhaseLog(sim.store, k.dpu, DPU0)
        detour = {"phase": "Host OS Init Release", "seconds": 0}
        dpf_faults.inject(sim.dpf.provisioner, phases, DPU0, "phase", detour)
        sim.store.delete(k.dpu, NS, DPU0)  # reprovision: the recreated DPU takes the detour
        await wait_for(sim.store, k.dpu, DPU0, gone)
        await wait_for(sim.store, k.dpu, DPU0, phase_is("Node Effect"))
        log.close()
        assert log.phases[-4:] == ["Initializing", "Host OS Init Release", "Pending", "Node Effect"]


async def test_a_sibling_in_dpu_config_defers_the_reboot_request() -> None:
    """R1 (HandleRebootSync): on a 2-DPU node the annotation waits while a sibling installs."""
    async with running(site_of(("host-001", "BF3", 2)), version=V26) as sim:
        k = sim.kube
        sim.site_setup()
        sim.discover("host-001")
        for name in (DPU0, DPU1):
            await wait_for(sim.store, k.dpu, name, phase_is("Node Effect"))
        methods = {"methods": ["FirmwareReset", "PowerCycle"]}
        dpf_faults.inject(sim.dpf.provisioner, (), DPU1, "agent", methods)
        sim.release_hold(NODE)
        await wait_for(sim.store, k.dpu, DPU0, phase_is("Rebooting"))
        seen = await wait_for(sim.store, k.dpu, DPU1, phase_is("DPU Config", "Rebooting"))
        if seen["status"]["phase"] == "DPU Config":  # type: ignore[index]
            assert REBOOT not in (sim.get(k.dpunode, NODE)["metadata"].get("annotations") or {})  # type: ignore[index]
        await wait_for(sim.store, k.dpunode, NODE, has_annotation(REBOOT))
        assert sim.get(k.dpu, DPU1)["status"]["phase"] == "Rebooting"  # type: ignore[index]


async def test_dpf_waits_in_dpu_config_for_an_agent_a_warm_reset_did_not_restart() -> None:
    """A4 (issue 36 point 4): the removal moves the DPU back to `DPU Config` at once, but with
    the fault `warm-reset-ignored` the warm reset did not restart its agent: DPF finds the
    agent's start time equal to its copy and waits (`DPUConfig=False`,
    `WaitingForFreshRebootMethod`); a cold power cycle restarts the agent and the DPU goes on."""
    async with running(site_of(("host-001", "BF3", 1)), version=V26) as sim:
        k = sim.kube
        sim.dpf.provisioner.agent_faults[DPU0] = ["SystemReboot"]  # a method a warm reset meets
        sim.dpf.provisioner.warm_reset_ignored.add(DPU0)
        await to_reboot_request(sim, "host-001", (DPU0,))
        before = _started(await wait_for(sim.store, k.dpu, DPU0, stamped))
        warm_reset(sim, "host-001")
        sim.remove_reboot_annotation(NODE)
        waiting = await wait_for(
            sim.store, k.dpu, DPU0,
            lambda o: (cond(o, "DPUConfig") or {}).get("reason") == "WaitingForFreshRebootMethod",
        )  # fmt: skip
        assert waiting["status"]["phase"] == "DPU Config" and _started(waiting) == before  # type: ignore[index]
        sim.power_cycle("host-001")
        restarted = await wait_for(sim.store, k.dpu, DPU0, phase_is("Ready"))
        assert _started(restarted) > before
        assert sim.violations.as_json() == []


@pytest.mark.parametrize("discovery", ["device-query", "boot-id"])
async def test_the_agent_marks_its_discovery_as_it_starts_before_its_report(discovery: str) -> None:
    """R4, A3 (issue 36 low findings item 2): the agent runs `HandleReboot` on every start, and
    with device query marks `RebootMethodDiscovery=True` (reason NoAction) before its report
    names the method (`reboot.go` c=75d3fab2 `getRebootMethodDeviceQuery`); so a DPU whose agent
    just started in `DPU Config` already says device query, and boot ID sets no condition."""
    async with running(site_of(("host-001", "BF3", 1)), version=V26, discovery=discovery) as sim:
        k = sim.kube
        sim.site_setup()
        sim.discover("host-001")
        await wait_for(sim.store, k.dpu, DPU0, phase_is("Node Effect"))
        sim.release_hold(NODE)
        started = await wait_for(sim.store, k.dpu, DPU0, phase_is("DPU Config"))
        agent = started["status"]["agentStatus"]  # type: ignore[index]
        assert "rebootMethod" not in agent and agent["lastStartupTime"]  # not reported yet
        said = [(c["type"], c["status"], c["reason"]) for c in agent.get("conditions") or []]
        assert said == (
            [("RebootMethodDiscovery", "True", "NoAction")] if discovery == "device-query" else []
        )


async def test_a_dpu_in_rebooting_before_its_deferring_sibling_is_stamped_with_it() -> None:
    """R1, R3 (issue 36ae): DPU 1 reaches `Rebooting` first while DPU 0 is still in `DPU Config`
    (DPF defers the annotation); when DPU 0 follows, DPF asks for the reboot and stamps EVERY
    `Rebooting` DPU of the node (`processExternalReboot` Step 2 walks all of them), DPU 1
    included. The simulator used to put only the DPU whose move ended the deferral in the round:
    DPU 1 stayed `Pending`/`RebootRequested` beside a stamped DPU 0, and a client that waits for
    every stamp waited for ever."""
    async with running(site_of(("host-001", "BF3", 2)), version=V26) as sim:
        k = sim.kube
        sim.site_setup()
        sim.discover("host-001")
        for name in (DPU0, DPU1):
            await wait_for(sim.store, k.dpu, name, phase_is("Node Effect"))
        lags = {"methods": ["FirmwareReset", "PowerCycle"]}  # DPU 0 stays in DPU Config a while
        dpf_faults.inject(sim.dpf.provisioner, (), DPU0, "agent", lags)
        sim.release_hold(NODE)
        await wait_for(sim.store, k.dpu, DPU1, phase_is("Rebooting"))
        await wait_for(sim.store, k.dpunode, NODE, has_annotation(REBOOT))
        for name in (DPU0, DPU1):
            await wait_for(sim.store, k.dpu, name, stamped, timeout=5)
        node = sim.get(k.dpunode, NODE)
        message = (cond(node, "DPUNodeRebootInProgress") or {}).get("message", "")
        assert message.startswith("required reboot method: PowerCycle"), message
        sim.power_cycle("host-001")
        sim.remove_reboot_annotation(NODE)
        for name in (DPU0, DPU1):
            await wait_for(sim.store, k.dpu, name, phase_is("Ready"))
        assert sim.violations.as_json() == []
