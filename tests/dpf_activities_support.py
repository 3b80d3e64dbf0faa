"""Shared pieces of the DPF activity, inventory and watcher tests: settings for a running
simulator, the activities built on them, and plain HTTP reads and writes of the simulated
API (what an operator's kubectl would see), independent of the code under test."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from sim_support import RunningSim, tls_context
from temporalio.testing import ActivityEnvironment

from activities.dpf import DPFActivities
from contracts.models.dpf import HostRef, MarkRebootedInput
from drivers.kube import Kube
from drivers.settings import Settings

NS = "dpf-operator-system"
HOLD = "provisioning.dpu.nvidia.com/wait-for-external-nodeeffect"
REBOOT = "provisioning.dpu.nvidia.com/dpunode-external-reboot-required"
PLURALS = {
    "DPU": "provisioning.dpu.nvidia.com/v1alpha1/dpus",
    "DPUNode": "provisioning.dpu.nvidia.com/v1alpha1/dpunodes",
    "DPUDevice": "provisioning.dpu.nvidia.com/v1alpha1/dpudevices",
    "DPUNodeMaintenance": "provisioning.dpu.nvidia.com/v1alpha1/dpunodemaintenances",
    "BFB": "provisioning.dpu.nvidia.com/v1alpha1/bfbs",
    "DPUFlavor": "provisioning.dpu.nvidia.com/v1alpha1/dpuflavors",
    "DPUDeployment": "svc.dpu.nvidia.com/v1alpha1/dpudeployments",
    "DPUServiceTemplate": "svc.dpu.nvidia.com/v1alpha1/dpuservicetemplates",
    "DPUServiceConfiguration": "svc.dpu.nvidia.com/v1alpha1/dpuserviceconfigurations",
}

Object = dict[str, Any]


def settings_for(sim: RunningSim, **overrides: Any) -> Settings:
    values: dict[str, Any] = {"site_file": sim.site_file, "kubeconfig": sim.kubeconfig, **overrides}
    return Settings.model_validate(values)


def dpf_activities(sim: RunningSim, **overrides: Any) -> DPFActivities:
    settings = settings_for(sim, **overrides)
    return DPFActivities(settings, Kube(settings))


async def run(fn: Callable[..., Any], *args: Any) -> Any:
    """Run one activity as the worker would (ActivityEnvironment: real activity context)."""
    return await ActivityEnvironment().run(fn, *args)


def host(host_id: str) -> HostRef:
    return HostRef(host_id=host_id)


def acked(ref: HostRef, token: str = "") -> MarkRebootedInput:
    """The input of `mark_dpu_node_rebooted` for a host (a token: once per token)."""
    return MarkRebootedInput(host_id=ref.host_id, namespace=ref.namespace, token=token)


class Api:
    """The simulated Kubernetes API over plain HTTP, for the tests' own reads and writes."""

    def __init__(self, sim: RunningSim) -> None:
        self.sim = sim
        self.http = httpx.Client(base_url=sim.url, headers=sim.headers, timeout=10, verify=tls_context())

    def url(self, kind: str, name: str = "") -> str:
        return f"/apis/{PLURALS[kind].replace('/v1alpha1/', f'/v1alpha1/namespaces/{NS}/')}" + (
            f"/{name}" if name else ""
        )

    def get(self, kind: str, name: str) -> Object | None:
        # The flaky profile answers some requests 503; a test's own reads just try again.
        for _ in range(20):
            response = self.http.get(self.url(kind, name))
            if response.status_code == 404:
                return None
            if response.status_code < 500:
                response.raise_for_status()
                found: Object = response.json()
                return found
        raise AssertionError(f"GET {kind} {name} kept failing: {response.status_code}")

    def must(self, kind: str, name: str) -> Object:
        obj = self.get(kind, name)
        assert obj is not None, f"{kind} {name} does not exist"
        return obj

    def list(self, kind: str) -> list[Object]:
        response = self.http.get(self.url(kind))
        response.raise_for_status()
        items: list[Object] = response.json()["items"]
        return items

    def create(self, kind: str, body: Object) -> Object:
        response = self.http.post(self.url(kind), json=body)
        response.raise_for_status()
        created: Object = response.json()
        return created

    def patch(self, kind: str, name: str, patch: Object) -> Object:
        for _ in range(20):
            response = self.http.patch(
                self.url(kind, name),
                content=json.dumps(patch),
                headers={"Content-Type": "application/merge-patch+json"},
            )
            if response.status_code < 500:
                response.raise_for_status()
                patched: Object = response.json()
                return patched
        raise AssertionError(f"PATCH {kind} {name} kept failing")

    def wait(
        self, kind: str, name: str, predicate: Callable[[Object | None], bool], timeout: float = 15
    ) -> Object | None:
        deadline = time.monotonic() + timeout
        last: Object | None = None
        while time.monotonic() < deadline:
            last = self.get(kind, name)
            if predicate(last):
                return last
            time.sleep(0.02)
        raise AssertionError(f"{kind} {name} never matched; last seen: {json.dumps(last)[:2000]}")

    def close(self) -> None:
        self.http.close()


def phase_is(*phases: str) -> Callable[[Object | None], bool]:
    return lambda obj: obj is not None and (obj.get("status") or {}).get("phase") in phases


def annotation(obj: Object | None, key: str) -> str | None:
    return ((obj or {}).get("metadata", {}).get("annotations") or {}).get(key)


def power_cycle(sim: RunningSim, host_id: str) -> None:
    """Power-cycle the host through its BMC with plain Redfish calls (the Redfish activities
    are another piece's): ForceOff, wait for Off, On, wait for On, as the power log shows."""
    bmc = sim.host(host_id)["bmc"]
    creds = json.loads(Path(bmc["credentials"]["file"]).read_text())
    before = len(sim.power_log(host_id))
    with httpx.Client(auth=(creds["username"], creds["password"]), timeout=10, verify=tls_context()) as http:
        members = http.get(f"{bmc['endpoint']}/redfish/v1/Systems").json()["Members"]
        origin = httpx.URL(bmc["endpoint"]).copy_with(path="/")
        system = str(origin.join(members[0]["@odata.id"]))  # @odata.id is a path from the root
        for reset, target in (("ForceOff", "Off"), ("On", "On")):
            for _ in range(50):
                response = http.post(f"{system}/Actions/ComputerSystem.Reset", json={"ResetType": reset})
                if response.status_code < 300:
                    break
                time.sleep(0.05)  # 409/5xx of the flaky profile
            else:
                raise AssertionError(f"{host_id}: {reset} kept failing: {response.status_code}")
            deadline = time.monotonic() + 10
            while http.get(system).json().get("PowerState") != target:
                assert time.monotonic() < deadline, f"{host_id} never reached {target}"
                time.sleep(0.02)
    log = sim.power_log(host_id)
    assert [(e["from"], e["to"]) for e in log[before:]] == [("On", "Off"), ("Off", "On")], log
