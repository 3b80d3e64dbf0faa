"""The host operation's decisions on DPF v26 state, as pure functions (workflows/parts/dpf_barrier.py):
the barrier's v26 conditions, the reset a method needs, resets DPF did not make, and the
reading of the new fields (drivers/dpf.py)."""

from __future__ import annotations

from contracts.models.dpf import Condition, DPUNodeState, DPUState, HostDPFState, RebootStatus
from drivers import dpf as states
from workflows.parts import dpf_barrier as barrier

STAMPED = RebootStatus(
    phase="Pending", method="SystemLevelReset", reason="WaitingForManualPowerCycleOrReboot"
)


WAITING = Condition(type="Rebooted", status="False", reason="WaitingForManualPowerCycleOrReboot")


def _state(*dpus: DPUState, method: str | None = None) -> HostDPFState:
    node = DPUNodeState(name="node-h", uid="n", reboot_required="true", reboot_method=method)
    return HostDPFState(host_id="h", node=node, dpus=dpus)


def _dpu(i: int, phase: str = "Rebooting", reboot: RebootStatus | None = None, **more: object) -> DPUState:
    name = f"node-h-device-d{i}"
    return DPUState(name=name, uid=f"u{i}", dpu_id=f"d{i}", phase=phase, reboot_status=reboot,
                    **more)  # type: ignore[arg-type]  # fmt: skip


def test_the_barrier_waits_for_the_arm_shutdown_and_dpfs_stamp_and_passes_unknown_phases_of_nobody() -> None:
    ids = ("d0", "d1")
    by_condition = (WAITING,)  # v25.10 and rc.3: no rebootStatus, the stamp is the condition
    assert barrier.reboot_barrier_reached(
        _state(_dpu(0, conditions=by_condition), _dpu(1, conditions=by_condition)), ids, {}
    )
    assert barrier.reboot_barrier_reached(_state(_dpu(0, reboot=STAMPED), _dpu(1, reboot=STAMPED)), ids, {})
    shutting = STAMPED.model_copy(update={"phase": "WaitForShutdown", "reason": "WaitingForDPUArmShutdown"})
    assert not barrier.reboot_barrier_reached(
        _state(_dpu(0, reboot=STAMPED), _dpu(1, reboot=shutting)), ids, {}
    )
    unstamped = STAMPED.model_copy(update={"reason": "RebootRequested"})
    assert not barrier.reboot_barrier_reached(
        _state(_dpu(0, reboot=STAMPED), _dpu(1, reboot=unstamped)), ids, {}
    )
    # A sibling (not under the operation) shutting down its Arm holds the host reboot too.
    assert not barrier.reboot_barrier_reached(
        _state(_dpu(0, reboot=STAMPED), _dpu(1, reboot=shutting)), ("d0",), {}
    )
    # A DPU in a phase nobody knows is in progress: the barrier waits for it, it is no install.
    assert not barrier.reboot_barrier_reached(_state(_dpu(0), _dpu(1, "Host OS Init Release")), ids, {})
    assert barrier.installing(_state(_dpu(0), _dpu(1, "Host OS Init Release"))) == []
    assert barrier.installing(_state(_dpu(0), _dpu(1, "DPU Config"))) == ["node-h-device-d1"]


def test_without_reboot_status_the_rebooted_condition_is_dpfs_stamp() -> None:
    """Issue 36 point 8 (BEHAVIOUR.md R7): on v26.4.0-rc.3 (NICo's pin; no `rebootStatus`) a
    `Rebooting` DPU is readied for the reboot by its condition `Rebooted=False`
    /`WaitingForManualPowerCycleOrReboot`; one that joined the round after DPF asked has no
    `Rebooted` condition yet (DPF removed it on entering `Rebooting`): the barrier waits for it."""
    rc3 = {"agent_reboot_method": "PowerCycle", "reboot_sequence_count": 1, "previous_phase": "DPU Config"}
    stamped = _dpu(0, conditions=(WAITING,), **rc3)
    joined = _dpu(1, **rc3)  # in Rebooting, not stamped yet
    assert stamped.ready_for_host_reboot and not joined.ready_for_host_reboot
    assert barrier.not_stamped(_state(stamped, joined)) == ["node-h-device-d1"]
    assert not barrier.reboot_barrier_reached(_state(stamped, joined), ("d0", "d1"), {})
    other = Condition(type="Rebooted", status="False", reason="RebootRequested")
    assert not _dpu(1, conditions=(other,), **rc3).ready_for_host_reboot
    # rebootStatus, where the DPU has it, decides: the condition alone does not stamp it
    assert not _dpu(
        1, conditions=(WAITING,), reboot=STAMPED.model_copy(update={"reason": "X"})
    ).ready_for_host_reboot
    assert barrier.reboot_barrier_reached(
        _state(stamped, _dpu(1, conditions=(WAITING,), **rc3)), ("d0", "d1"), {}
    )
    dpu = states.dpu_state({
        "metadata": {"name": "node-h-device-d0", "uid": "u0"},
        "status": {"phase": "Rebooting", "conditions": [
            {"type": "Rebooted", "status": "False", "reason": "WaitingForManualPowerCycleOrReboot"}]},
    })  # fmt: skip
    assert dpu.reboot_status is None and dpu.ready_for_host_reboot


def test_a_reboot_that_did_not_restart_an_agent_did_not_reach_its_dpu() -> None:
    """Issue 36 point 4: before a reboot each Rebooting DPU's agent start time is kept; after it,
    a DPU (same object) still carrying that time was not reached. DPUs without an agent time
    (v25.10, rc.3 before its OS) are not checked; a recreated DPU is a new object."""
    t0, t1 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"
    before = _state(_dpu(0, agent_started_at=t0), _dpu(1, agent_started_at=t0), _dpu(2),
                    _dpu(3, "Ready", agent_started_at=t0))  # fmt: skip
    starts = barrier.agent_starts(before, ("d0", "d1", "d2", "d3"))
    assert starts == {"d0": ("u0", t0), "d1": ("u1", t0)}
    after = _state(_dpu(0, "DPU Config", agent_started_at=t1), _dpu(1, "DPU Config", agent_started_at=t0))
    assert barrier.not_restarted(after, starts) == ["d1"]
    assert barrier.not_restarted(_state(_dpu(1, "DPU Config", agent_started_at="")), starts) == []
    recreated = DPUState(name="node-h-device-d1", uid="new", dpu_id="d1", phase="Initializing")
    assert barrier.not_restarted(_state(recreated), starts) == []
    # DPF put it in Error after the reboot: the run's Error rules decide, not this wait (a full
    # `make test` caught the run waiting here for its agent, the Error unseen, 2026-11-29)
    assert barrier.not_restarted(_state(_dpu(1, "Error", agent_started_at=t0)), starts) == []
    # waiting in DPU Config for its agent is no install; a sibling's OS install is, and so is a
    # sibling's DPU Config with a fresh agent (about to report: DPF defers reboots for it)
    assert not barrier.installing_besides(_state(_dpu(0, "DPU Cluster Config"), after.dpus[1]), ["d1"])
    assert barrier.installing_besides(after, ["d1"])
    assert barrier.installing_besides(_state(_dpu(1, "DPU Config"), _dpu(2, "OS Installing")), ["d1"])


def test_the_reset_follows_the_required_method() -> None:
    assert barrier.host_reset_for(None) == "cold"  # DPF before v26 names none
    assert barrier.host_reset_for("PowerCycle") == "cold"
    assert barrier.host_reset_for("Unknown") == "cold"
    assert barrier.host_reset_for("SystemLevelReset") == "warm"
    assert barrier.host_reset_for("SystemReboot") == "warm"
    state = _state(_dpu(0, reboot=STAMPED), _dpu(1, agent_reboot_method="PowerCycle"))
    assert barrier.required_method(state, ("d0", "d1")) == "PowerCycle"  # the priority winner
    assert barrier.required_method(_state(_dpu(0), method="SystemReboot"), ("d0",)) == "SystemReboot"


def test_moves_dpf_does_not_make_are_unplanned() -> None:
    seen = ("u0", "DPU Cluster Config", "2026-01-01T00:00:00Z")
    assert (
        barrier.unplanned_change(seen, _dpu(0, "Initializing"))
        == "went back from DPU Cluster Config to Initializing"
    )
    assert barrier.unplanned_change(("u0", "Rebooting", ""), _dpu(0, "DPU Config")) is None  # DPF's own loop
    assert barrier.unplanned_change(("u0", "Ready", ""), _dpu(0, "Node Effect")) is None  # flow 5
    assert barrier.unplanned_change(("other", "Ready", ""), _dpu(0, "Initializing")) is None  # recreated
    restarted = _dpu(0, "Rebooting", agent_started_at="2026-01-01T00:05:00Z")
    assert barrier.unplanned_change(("u0", "Rebooting", "2026-01-01T00:00:00Z"), restarted) == "restarted"
    assert barrier.unplanned_change(("u0", "Rebooting", ""), restarted) is None  # its first start
    unknown = _dpu(0, "Rebooting")  # a watch that does not carry the time says nothing
    assert barrier.unplanned_change(("u0", "Rebooting", "2026-01-01T00:00:00Z"), unknown) is None


def test_both_trust_modes_move_forward() -> None:
    """Issue 36 point 6 (BEHAVIOUR.md P1): a host-trusted DPF configures the host network before
    the cluster, a zero-trust one skips it; DPF's label refresh sends a Ready DPU back to
    `DPU Cluster Config` by itself. None of it is a move back."""
    host_trusted = ["DPU Config", "Rebooting", "Host Network Configuration", "DPU Cluster Config",
                    "Service Readiness", "Node Effect Removal", "Ready", "DPU Cluster Config"]  # fmt: skip
    zero_trust = ["DPU Config", "Rebooting", "DPU Cluster Config", "Node Effect Removal", "Ready"]
    for path in (host_trusted, zero_trust, ["DPU Config", "Host Network Configuration"]):
        for before, after in zip(path, path[1:], strict=False):
            assert not barrier.went_back(before, after), (before, after)
            assert barrier.unplanned_change(("u0", before, ""), _dpu(0, after)) is None
    assert barrier.went_back("DPU Cluster Config", "Host Network Configuration")  # never DPF's


def test_the_newest_dpf_order_of_update_firmware_and_service_readiness_moves_forward() -> None:
    """Issue 36 re-audit (BEHAVIOUR.md P1): the newest DPF moves a BF4 `Config FW Parameters ->
    Update Firmware -> Prepare BFB` (redfish `config_fw_params.go`, `firmware_update.go`
    c=e3a3c89b), through `Rebooting` back to `Update Firmware` when the flash needs a power
    cycle (a stored `rebooting.go`: `previousPhase == Update Firmware`), and every DPU
    `DPU Cluster Config -> Service Readiness -> Node Effect Removal -> Ready`
    (`service_readiness.go` c=ce4bd987). None of it is a move back."""
    bf4 = ["Initialize Interface", "Config FW Parameters", "Update Firmware", "Rebooting", "Update Firmware",
           "Prepare BFB", "OS Installing", "DPU Config"]  # fmt: skip
    tail = ["DPU Config", "DPU Cluster Config", "Service Readiness", "Node Effect Removal", "Ready"]
    for path in (bf4, tail):
        for before, after in zip(path, path[1:], strict=False):
            assert not barrier.went_back(before, after), (before, after)
            assert barrier.unplanned_change(("u0", before, ""), _dpu(0, after)) is None
    assert barrier.went_back("Prepare BFB", "Update Firmware")  # a reset, not DPF's own move
    assert barrier.went_back("Node Effect Removal", "Service Readiness")


def test_the_v26_fields_are_read_and_the_method_from_the_condition_message() -> None:
    dpu = states.dpu_state({
        "metadata": {"name": "node-h-device-d0", "uid": "u0"},
        "spec": {"dpuDeviceName": "device-d0", "dpuNodeName": "node-h"},
        "status": {"phase": "Error", "previousPhase": "OS Installing", "agentLastStartupTime": "t",
                   "agentStatus": {"rebootMethod": "PowerCycle", "rebootSequenceCount": 2},
                   "rebootStatus": {"phase": "Pending", "method": "PowerCycle"},
                   "outdated": {"reason": "OutdatedBFB", "message": "m", "timeStamp": "t"},
                   "conditions": [{"type": "Ready", "status": "False", "reason": "Error"},
                                  {"type": "BFBTransferred", "status": "False", "reason": "FailToInstall"}]},
    })  # fmt: skip
    assert (dpu.reboot_sequence_count, dpu.reboot_method, dpu.outdated_reason) == (
        2,
        "PowerCycle",
        "OutdatedBFB",
    )
    assert dpu.error_reason() == ("BFBTransferred", "FailToInstall")
    node = states.node_state({
        "metadata": {"name": "node-h", "uid": "n",
                     "annotations": {"provisioning.dpu.nvidia.com/dpunode-external-reboot-required": "true"}},
        "status": {"conditions": [{"type": "DPUNodeRebootInProgress", "status": "True",
                                   "reason": "WaitForExternalReboot",
                                   "message": "required reboot method: SystemLevelReset (driven by DPU x)",
                                   "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
    })  # fmt: skip
    assert node.reboot_method == "SystemLevelReset" and node.reboot_requested_at == "2026-01-01T00:00:00Z"
    assert [c.last_transition for c in node.conditions] == ["2026-01-01T00:00:00Z"]
    assert isinstance(node.conditions[0], Condition)


def test_what_a_watch_must_keep_is_what_the_state_is_read_from() -> None:
    """`drivers.dpf.watched` keeps every field `host_state` reads (the site watch's cache should
    hold this, not phase and conditions alone: see the issue note)."""
    dpu = {
        "metadata": {"name": "node-h-device-d0", "uid": "u0", "resourceVersion": "7", "managedFields": [{}]},
        "spec": {"dpuDeviceName": "device-d0", "dpuNodeName": "node-h", "bfb": "b", "serialNumber": "s"},
        "status": {"phase": "Rebooting", "previousPhase": "DPU Config", "agentLastStartupTime": "t",
                   "agentStatus": {"rebootMethod": "SystemLevelReset", "rebootSequenceCount": 2},
                   "rebootStatus": {"phase": "WaitForShutdown", "method": "SystemLevelReset"},
                   "bfbFile": "/bfb/x.bfb", "conditions": [{"type": "Rebooted", "status": "False",
                   "reason": "RebootRequested", "lastTransitionTime": "t", "observedGeneration": 1}]},
    }  # fmt: skip
    node = {"metadata": {"name": "node-h", "uid": "n", "annotations": {"other": "x"}},
            "status": {"rebootMethod": "PowerCycle", "conditions": []}}  # fmt: skip
    full = states.host_state("h", node, [dpu], None)
    assert states.host_state("h", states.watched(node), [states.watched(dpu)], None) == full
    assert len(str(states.watched(dpu))) < len(str(dpu))


def test_every_service_template_says_whether_it_is_privileged() -> None:
    """Issue 36 point 2: DPF (privileged pod enforcement) needs `security.privileged` on the
    DPUServices it generates for the DPUCluster; metalflow writes it on each DPUServiceTemplate,
    explicit whatever its value (simulators/dpf/BEHAVIOUR.md O4)."""
    from contracts.models.dpf import GroupSpec, ServiceSpec, SiteSetupInput

    services = (ServiceSpec(), ServiceSpec(name="hbn", chart="doca-hbn", privileged=True))
    setup = SiteSetupInput(groups=(GroupSpec(name="g", services=services),))
    templates = [o for o in states.site_setup_objects(setup) if o["kind"] == "DPUServiceTemplate"]
    assert [(t["metadata"]["name"], t["spec"]["security"]) for t in templates] == [
        ("g-dts", {"privileged": False}),
        ("g-hbn", {"privileged": True}),
    ]


def test_a_template_without_the_field_an_older_dpf_prunes_does_not_differ() -> None:
    """A DPF before 26.x prunes `security` (and DPF lets an object created without it stay so):
    not a difference; another value is."""
    wanted = {"spec": {"deploymentServiceName": "dts", "security": {"privileged": False}}}
    assert states.differences({"spec": {"deploymentServiceName": "dts"}}, wanted) == []
    changed = {"spec": {"deploymentServiceName": "dts", "security": {"privileged": True}}}
    assert states.differences(changed, wanted) == [".spec.security.privileged"]


def test_a_host_reboot_tells_dpf_only_of_a_reboot_dpf_waits_for_and_has_stamped() -> None:
    """What an aborted reprovision leaves (annotation, Rebooting, stamped) is the reboot DPF waits
    for (DOMAIN.md 2.5); anything short of it (no annotation, no Rebooting DPU, a DPU not stamped
    yet or still shutting its Arm down: a removal then is undone) is not told."""
    assert barrier.awaits_external_reboot(_state(_dpu(0, reboot=STAMPED), _dpu(1, phase="Ready")))
    assert barrier.awaits_external_reboot(_state(_dpu(0, conditions=(WAITING,))))
    bare = HostDPFState(
        host_id="h", node=DPUNodeState(name="node-h", uid="n"), dpus=(_dpu(0, reboot=STAMPED),)
    )
    assert not barrier.awaits_external_reboot(bare)  # no annotation: DPF asks nothing
    assert not barrier.awaits_external_reboot(HostDPFState(host_id="h", dpus=(_dpu(0, reboot=STAMPED),)))
    assert not barrier.awaits_external_reboot(_state(_dpu(0, phase="Ready")))
    assert not barrier.awaits_external_reboot(_state(_dpu(0, reboot=STAMPED), _dpu(1)))  # d1 not stamped
    shutting = STAMPED.model_copy(update={"phase": "WaitForShutdown", "reason": "WaitingForDPUArmShutdown"})
    assert not barrier.awaits_external_reboot(_state(_dpu(0, reboot=shutting)))
