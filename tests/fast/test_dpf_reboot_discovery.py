"""The simulated DPF's phase after a host reboot (simulators/dpf/BEHAVIOUR.md R4), as a pure rule.

DPF `internal/provisioning/controllers/dpu/state/rebooting.go` c=c406f0c5
`reconcileHostRebootPhase`, first match wins: back to `Initialize Interface` when the reboot came
from there; back to `DPU Config` only when the agent's `RebootMethodDiscovery` condition is True
(device-query discovery, MFT >= 4.36.0-95: agent `reboot.go` c=75d3fab2); else on to `DPU Cluster
Config` (zero trust) or `Host Network Configuration` (host trusted).
"""

from __future__ import annotations

from simulators.__main__ import main
from simulators.dpf.provisioning import after_host_reboot, agent_started, discovery_true

CLUSTER, HOST_NETWORK = "DPU Cluster Config", "Host Network Configuration"


def test_device_query_returns_to_dpu_config_and_boot_id_goes_on() -> None:
    assert after_host_reboot("DPU Config", True, CLUSTER) == "DPU Config"
    assert after_host_reboot("DPU Config", False, CLUSTER) == CLUSTER  # boot ID, zero trust
    assert after_host_reboot("DPU Config", False, HOST_NETWORK) == HOST_NETWORK  # boot ID, host trusted
    assert after_host_reboot("Initialize Interface", False, CLUSTER) == "Initialize Interface"
    assert after_host_reboot("Initialize Interface", True, CLUSTER) == "Initialize Interface"
    assert after_host_reboot("Update Firmware", True, CLUSTER) == CLUSTER  # not a case of this build


def test_only_a_true_discovery_condition_counts() -> None:
    def dpu(*conditions: dict[str, str]) -> dict[str, object]:
        return {"status": {"agentStatus": {"conditions": list(conditions)}}}

    assert discovery_true(dpu({"type": "RebootMethodDiscovery", "status": "True", "reason": "PowerCycle"}))
    assert not discovery_true(dpu({"type": "RebootMethodDiscovery", "status": "False"}))
    assert not discovery_true(dpu({"type": "RebootHandled", "status": "True"}))
    assert not discovery_true(dpu())
    assert not discovery_true({"status": {}})


def test_boot_id_discovery_is_refused_for_dpf_25_10(capsys: object) -> None:
    """Bad input: the flag names itself and the version it needs, and nothing is served."""
    assert main(["serve", "--dpf-version", "25.10", "--dpf-reboot-discovery", "boot-id"]) == 2
    err = capsys.readouterr().err  # type: ignore[attr-defined]
    assert "--dpf-reboot-discovery boot-id is DPF v26's agent" in err


def test_each_agent_start_marks_device_query_discovery_before_its_report() -> None:
    """R4, A3 (issue 36 low findings item 2): upstream the agent runs `HandleReboot` on every
    start, and its device query marks `RebootMethodDiscovery=True` (reason NoAction, no message)
    before anything else (`reboot.go` c=75d3fab2 `getRebootMethodDeviceQuery`); conditions merge,
    so an earlier reason is replaced, other conditions kept. Boot ID sets none."""
    at = "2026-11-29T07:00:00Z"
    fresh = agent_started({}, at, device_query=True)
    assert fresh["lastStartupTime"] == at
    assert [(c["type"], c["status"], c["reason"], c["message"]) for c in fresh["conditions"]] == [
        ("RebootMethodDiscovery", "True", "NoAction", "")
    ]
    other = {"type": "LastStartupTimeReported", "status": "True", "reason": "Success", "message": ""}
    earlier = {
        "conditions": [other, {"type": "RebootMethodDiscovery", "status": "True", "reason": "PowerCycle"}]
    }
    again = agent_started(earlier, at, device_query=True)
    assert [(c["type"], c["reason"]) for c in again["conditions"]] == [
        ("LastStartupTimeReported", "Success"),
        ("RebootMethodDiscovery", "NoAction"),
    ]
    assert earlier["conditions"][1]["reason"] == "PowerCycle"  # the DPU's object is not changed in place
    assert agent_started({}, at, device_query=False) == {"lastStartupTime": at}
