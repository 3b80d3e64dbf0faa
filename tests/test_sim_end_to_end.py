"""The simulated site as users meet it: a separate process reached only over HTTP.

DPF flows 1-3 driven through raw API calls with the official kubernetes client, the host's power
cycle through its Redfish BMC with httpx, and the `metalflow sim` commands reading the outcome.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from cli_support import run_metalflow
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from sim_support import RunningSim, running_sim

NS = "dpf-operator-system"
PROV = ("provisioning.dpu.nvidia.com", "v1alpha1")
SVC = ("svc.dpu.nvidia.com", "v1alpha1")
HOLD = "provisioning.dpu.nvidia.com/wait-for-external-nodeeffect"
REBOOT = "provisioning.dpu.nvidia.com/dpunode-external-reboot-required"
GROUP_LABEL = "metalflow.io/dpu-group"


def _api(sim: RunningSim) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(k8s_config.new_client_from_config(str(sim.kubeconfig)))


def _create(
    api: k8s.CustomObjectsApi, group_version: tuple[str, str], plural: str, body: dict[str, Any]
) -> None:
    api.create_namespaced_custom_object(*group_version, NS, plural, body)


def _site_setup(api: k8s.CustomObjectsApi) -> None:
    """Flow 1: what a real DPF site needs before any host is registered."""
    _create(
        api, PROV, "bfbs",
        {"apiVersion": "provisioning.dpu.nvidia.com/v1alpha1", "kind": "BFB",
         "metadata": {"name": "bf-bundle"},
         "spec": {"url": "http://bfb.local/bf-bundle-2.9.0.bfb", "fileName": "bf-bundle.bfb"}},
    )  # fmt: skip
    _create(
        api, PROV, "dpuflavors",
        {"apiVersion": "provisioning.dpu.nvidia.com/v1alpha1", "kind": "DPUFlavor",
         "metadata": {"name": "carbide-flavor"}, "spec": {"dpuMode": "dpu"}},
    )  # fmt: skip
    _create(
        api, SVC, "dpuservicetemplates",
        {"apiVersion": "svc.dpu.nvidia.com/v1alpha1", "kind": "DPUServiceTemplate",
         "metadata": {"name": "dts"},
         "spec": {"deploymentServiceName": "dts", "helmChart": {"source": {
             "repoURL": "oci://nvcr.io/nvidia/doca", "chart": "doca-telemetry", "version": "1.0.0"}}}},
    )  # fmt: skip
    _create(
        api, SVC, "dpuserviceconfigurations",
        {"apiVersion": "svc.dpu.nvidia.com/v1alpha1", "kind": "DPUServiceConfiguration",
         "metadata": {"name": "dts"},
         "spec": {"deploymentServiceName": "dts"}},
    )  # fmt: skip
    _create(
        api, SVC, "dpudeployments",
        {"apiVersion": "svc.dpu.nvidia.com/v1alpha1", "kind": "DPUDeployment",
         "metadata": {"name": "gpu-compute"},
         "spec": {"dpus": {"bfb": "bf-bundle", "flavor": "carbide-flavor", "nodeEffect": {"hold": True},
                           "dpuSets": [{"nameSuffix": "dpuset",
                                        "nodeSelector": {"matchLabels": {GROUP_LABEL: "gpu-compute"}},
                                        "dpuSelector": {GROUP_LABEL: "gpu-compute"}}]},
                  "services": {"dts": {"serviceTemplate": "dts", "serviceConfiguration": "dts"}}}},
    )  # fmt: skip


def _register(api: k8s.CustomObjectsApi, host: dict[str, Any]) -> None:
    """Flow 2: the DPUDevices, then the DPUNode that lists them."""
    for dpu in host["dpus"]:
        _create(
            api, PROV, "dpudevices",
            {"apiVersion": "provisioning.dpu.nvidia.com/v1alpha1", "kind": "DPUDevice",
             "metadata": {"name": f"device-{dpu['id']}", "labels": {GROUP_LABEL: "gpu-compute"}},
             "spec": {"serialNumber": dpu["serial"]}},
        )  # fmt: skip
    _create(
        api, PROV, "dpunodes",
        {"apiVersion": "provisioning.dpu.nvidia.com/v1alpha1", "kind": "DPUNode",
         "metadata": {"name": f"node-{host['id']}", "labels": {GROUP_LABEL: "gpu-compute"}},
         "spec": {"nodeRebootMethod": {"external": {}},
                  "dpus": [{"name": f"device-{d['id']}"} for d in host["dpus"]]}},
    )  # fmt: skip


def _wait(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _phases(api: k8s.CustomObjectsApi, host_id: str) -> list[str]:
    listed = api.list_namespaced_custom_object(*PROV, NS, "dpus")
    return [
        d.get("status", {}).get("phase", "")
        for d in listed["items"]
        if d["metadata"]["name"].startswith(f"node-{host_id}-")
    ]


def _annotations(api: k8s.CustomObjectsApi, plural: str, name: str) -> dict[str, str]:
    """The object's annotations; none while DPF has not created it yet."""
    try:
        obj = api.get_namespaced_custom_object(*PROV, NS, plural, name)
    except k8s.ApiException as err:
        if err.status == 404:
            return {}
        raise
    found: dict[str, str] = obj["metadata"].get("annotations") or {}
    return found


def _power_cycle(sim: RunningSim, host: dict[str, Any]) -> None:
    """ForceOff, wait for Off, On, wait for On: what a BMC without PowerCycle needs."""
    creds = json.loads(Path(host["bmc"]["credentials"]["file"]).read_text())
    endpoint = host["bmc"]["endpoint"]
    with httpx.Client(base_url=endpoint, auth=(creds["username"], creds["password"]), timeout=10) as bmc:
        systems = bmc.get("/redfish/v1/Systems").json()
        system = systems["Members"][0]["@odata.id"]
        target = bmc.get(system).json()["Actions"]["#ComputerSystem.Reset"]["target"]
        for reset, state in (("ForceOff", "Off"), ("On", "On")):
            assert bmc.post(target, json={"ResetType": reset}).status_code in (200, 202, 204)
            _wait(f"{host['id']} {state}", lambda state=state: bmc.get(system).json()["PowerState"] == state)


def _metalflow(*args: str) -> subprocess.CompletedProcess[str]:
    """`metalflow ARGS` in this process (tests/cli_support.py): what the `sim` commands read is the
    subject here, not their process (`python -m metalflow` is tests/test_cli_help.py's and
    test_self_contained's), and each interpreter cost ~1 s of CPU."""
    return run_metalflow(*args)


def test_provisioning_over_http_with_one_power_cycle_per_reboot(tmp_path: Path) -> None:
    with running_sim(tmp_path, hosts=2, dpus_per_host=2, timings="zero") as sim:
        api = _api(sim)
        host = sim.host("host-002")  # a BMC without PowerCycle: ForceOff then On
        _site_setup(api)
        _register(api, host)
        hold = f"node-{host['id']}-hold"
        _wait("the hold", lambda: _phases(api, host["id"]) == ["Node Effect", "Node Effect"])
        _wait("the hold object", lambda: _annotations(api, "dpunodemaintenances", hold).get(HOLD) == "true")
        api.patch_namespaced_custom_object(
            *PROV, NS, "dpunodemaintenances", hold, {"metadata": {"annotations": {HOLD: "false"}}}
        )

        # The barrier: every DPU of the host waits in Rebooting before the one power cycle.
        _wait("every DPU Rebooting", lambda: _phases(api, host["id"]) == ["Rebooting", "Rebooting"])
        assert _annotations(api, "dpunodes", f"node-{host['id']}")[REBOOT] == "true"
        _power_cycle(sim, host)
        patch = {"metadata": {"annotations": {REBOOT: None}}}
        api.patch_namespaced_custom_object(*PROV, NS, "dpunodes", f"node-{host['id']}", patch)
        _wait("every DPU Ready", lambda: _phases(api, host["id"]) == ["Ready", "Ready"])

        log = sim.power_log(host["id"])
        assert [(e["from"], e["to"], e["reset_type"]) for e in log] == [
            ("On", "Off", "ForceOff"),
            ("Off", "On", "On"),
        ]
        assert sim.violations() == []

        env = ["--state-dir", str(tmp_path)]
        shown = _metalflow("sim", "power-log", host["id"], "--json", *env)
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout) == log
        clean = _metalflow("sim", "violations", "--json", *env)
        assert clean.returncode == 0 and json.loads(clean.stdout) == []


def test_a_skipped_power_cycle_is_reported_by_metalflow_sim_violations(tmp_path: Path) -> None:
    with running_sim(tmp_path, hosts=1, dpus_per_host=1, timings="zero") as sim:
        api = _api(sim)
        host = sim.host("host-001")
        _site_setup(api)
        _register(api, host)
        hold = f"node-{host['id']}-hold"
        _wait("the hold object", lambda: HOLD in _annotations(api, "dpunodemaintenances", hold))
        api.patch_namespaced_custom_object(
            *PROV, NS, "dpunodemaintenances", hold, {"metadata": {"annotations": {HOLD: "false"}}}
        )
        _wait("Rebooting", lambda: _phases(api, host["id"]) == ["Rebooting"])
        patch = {"metadata": {"annotations": {REBOOT: None}}}
        api.patch_namespaced_custom_object(
            *PROV, NS, "dpunodes", f"node-{host['id']}", patch
        )  # no power cycle

        shown = _metalflow("sim", "violations", "--json", "--state-dir", str(tmp_path))
        assert shown.returncode == 0, shown.stderr
        found = json.loads(shown.stdout)
        assert [(v["kind"], v["subject"]) for v in found] == [
            ("reboot-annotation-removed-without-power-cycle", f"node-{host['id']}")
        ]
        human = _metalflow("sim", "violations", "--state-dir", str(tmp_path))
        assert "reboot-annotation-removed-without-power-cycle" in human.stdout


def test_sim_commands_explain_a_missing_simulator(tmp_path: Path) -> None:
    shown = _metalflow("sim", "violations", "--state-dir", str(tmp_path))
    assert shown.returncode != 0
    assert "no simulator runs" in shown.stderr and "metalflow sim up" in shown.stderr


def test_unknown_host_power_log_is_a_clear_error(tmp_path: Path) -> None:
    with running_sim(tmp_path, hosts=1, dpus_per_host=1):
        shown = _metalflow("sim", "power-log", "host-999", "--state-dir", str(tmp_path))
        assert shown.returncode != 0
        assert "host-999" in shown.stderr
