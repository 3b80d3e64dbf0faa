"""Faults rehearsed by name (issue 38 item 6, issue 40 Deliver 3): each set through
`metalflow sim fault`, seen by a product command, and cleared (simulators/redfish/BEHAVIOUR.md
F1-F4, simulators/dpf/BEHAVIOUR.md F5).

The BMC faults are seen by `metalflow bmc check` / `bmc power` (the product's Redfish code, no
Temporal); the DPU's failed install by `metalflow host versions --json` (DPF's phase of the DPU).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_support import run_metalflow
from sim_support import RunningSim, running_sim, sim_http

DPUS = "/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/dpf-operator-system/dpus"
MAINTENANCE = "/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/dpf-operator-system/dpunodemaintenances"
HOLD = "provisioning.dpu.nvidia.com/wait-for-external-nodeeffect"
HOST = "host-002"  # profile no-powercycle: a power cycle is ForceOff then On


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with running_sim(tmp_path_factory.mktemp("named"), hosts=2, timings="zero", initialised=True) as sim:
        # The product commands run in this process (tests/cli_support.py `run_metalflow`): an
        # interpreter per command costs ~1.3 s of CPU. They read the site as an operator's would.
        with pytest.MonkeyPatch.context() as env:
            for name in [k for k in os.environ if k.startswith(("TEMPORAL_", "METALFLOW_"))]:
                env.delenv(name)
            env.setenv("METALFLOW_SITE_FILE", str(sim.site_file))
            env.setenv("KUBECONFIG", str(sim.kubeconfig))
            env.setenv("METALFLOW_INVENTORY", "site")
            yield sim


def _product(sim: RunningSim, *args: str) -> subprocess.CompletedProcess[str]:
    """A product command against the simulated site (the fixture's environment names it)."""
    return run_metalflow(*args)


def _fault(sim: RunningSim, *args: str) -> subprocess.CompletedProcess[str]:
    return run_metalflow("sim", "fault", *args, "--state-dir", sim.state_dir)


def _faults_of(sim: RunningSim, bmc: str) -> dict[str, Any]:
    found: dict[str, Any] = sim_http().get(f"{sim.url}/sim/bmcs/{bmc}/faults").json()
    return found


def test_help_lists_every_named_fault() -> None:
    shown = run_metalflow("sim", "fault", "--help").stdout
    for name in ("wrong-credentials", "rotate-after-forceoff", "unreachable", "install-fails", "clear",
                 "recover", "power-on-during-power-down", "power-off-at-rest"):  # fmt: skip
        assert name in shown, shown


def test_wrong_credentials_is_refused_by_the_bmc_then_cleared(sim: RunningSim) -> None:
    assert _product(sim, "bmc", "check", HOST).returncode == 0
    done = _fault(sim, "bmc", HOST, "wrong-credentials")
    assert (done.returncode, done.stdout.strip()) == (0, f"BMC of {HOST}: wrong-credentials injected")
    refused = _product(sim, "bmc", "check", HOST, "--timeout", "10")
    assert refused.returncode == 1 and "401" in refused.stderr, refused.stderr
    assert "The user name or password is not valid" in refused.stderr
    assert _product(sim, "bmc", "check", "host-001").returncode == 0  # only the BMC named
    cleared = _fault(sim, "bmc", HOST, "clear")
    assert (cleared.returncode, cleared.stdout.strip()) == (0, f"BMC of {HOST}: cleared")
    assert _product(sim, "bmc", "check", HOST).returncode == 0


def test_credentials_rotated_right_after_a_forceoff(sim: RunningSim) -> None:
    """Issue 40: the BMC's password changes right after metalflow powered the host off."""
    assert _fault(sim, "bmc", HOST, "rotate-after-forceoff").returncode == 0
    assert _product(sim, "bmc", "check", HOST).returncode == 0  # armed: nothing changed yet
    off = _product(sim, "bmc", "power", HOST, "off", "--timeout", "10")
    assert "sending ForceOff" in off.stdout, off.stdout + off.stderr
    assert off.returncode != 0 and "401" in off.stderr, off.stderr  # refused while it waits for Off
    # In words: the credentials changed during the operation, not a missing privilege.
    assert "BMCAuthenticationFailed" in off.stderr and "privilege" not in off.stderr, off.stderr
    assert "the BMC rejected the credentials it had accepted earlier in this operation: they changed" in (
        off.stderr
    )
    assert _faults_of(sim, HOST)["wrong_credentials"] is True
    assert sim.power_log(HOST)[-1]["to"] == "Off"  # the host is off, and the BMC refuses metalflow
    assert _product(sim, "bmc", "power", HOST, "on", "--timeout", "10").returncode == 1
    assert _fault(sim, "bmc", HOST, "clear").returncode == 0
    on = _product(sim, "bmc", "power", HOST, "on", "--timeout", "30")
    assert on.returncode == 0, on.stdout + on.stderr
    assert _faults_of(sim, HOST) == {"bmc": HOST, "wrong_credentials": False, "rotate_after_forceoff": False,
                                     "unreachable": False, "power_on_during_power_down": False}  # fmt: skip


def test_another_actor_turns_the_host_off_at_rest_and_on_after_each_forceoff(sim: RunningSim) -> None:
    """Issue 39 item 4 (BEHAVIOUR.md F6, F7): the other actor metalflow must notice, not fight."""
    since = len(sim.power_log(HOST))
    off = _fault(sim, "bmc", HOST, "power-off-at-rest")
    assert (off.returncode, off.stdout.strip()) == (0, f"BMC of {HOST}: power-off-at-rest injected")
    assert [(e["to"], e["reset_type"]) for e in sim.power_log(HOST)[since:]] == [("Off", "ForceOff")]
    again = _fault(sim, "bmc", HOST, "power-off-at-rest")  # Off already: refused, nothing changed
    assert again.returncode == 1 and f"host {HOST} is Off, not On at rest" in again.stderr, again.stderr
    assert _product(sim, "bmc", "power", HOST, "on", "--timeout", "30").returncode == 0
    assert _fault(sim, "bmc", HOST, "power-on-during-power-down").returncode == 0
    assert _faults_of(sim, HOST)["power_on_during_power_down"] is True
    since = len(sim.power_log(HOST))
    assert _product(sim, "bmc", "power", HOST, "off", "--timeout", "30", "--settle", "0").returncode == 0
    for _ in range(100):  # 1 s after Off, someone else's On
        if len(sim.power_log(HOST)) - since >= 2:
            break
        time.sleep(0.1)
    assert [(e["to"], e["reset_type"]) for e in sim.power_log(HOST)[since:]] == [
        ("Off", "ForceOff"),
        ("On", "On"),
    ]
    assert _fault(sim, "bmc", HOST, "clear").returncode == 0
    assert _faults_of(sim, HOST)["power_on_during_power_down"] is False


def test_an_unreachable_bmc_answers_nothing_then_comes_back(sim: RunningSim) -> None:
    endpoint = sim.host(HOST)["bmc"]["endpoint"]
    with httpx.Client(base_url=endpoint) as pooled:  # a connection opened before the fault
        assert pooled.get("/redfish/v1/").status_code == 200
        assert _fault(sim, "bmc", HOST, "unreachable").returncode == 0
        with pytest.raises(httpx.TransportError):
            pooled.get("/redfish/v1/")
    gone = _product(sim, "bmc", "check", HOST, "--timeout", "3")
    assert gone.returncode == 3 and "cannot reach" in gone.stderr, gone.stderr  # README's exit table
    assert _fault(sim, "bmc", HOST, "clear").returncode == 0
    assert _product(sim, "bmc", "check", HOST).returncode == 0
    unknown = _fault(sim, "bmc", "host-999", "unreachable")
    assert unknown.returncode == 2 and "no BMC 'host-999'" in unknown.stderr, unknown.stderr


def _dpu(sim: RunningSim, dpu_id: str) -> dict[str, Any]:
    items = sim_http().get(sim.url + DPUS, headers=sim.headers).json()["items"]
    for obj in items:
        if obj["metadata"]["labels"]["provisioning.dpu.nvidia.com/dpudevice-name"] == f"device-{dpu_id}":
            return dict(obj)
    raise AssertionError(f"no DPU object of {dpu_id}")


def _reinstall(sim: RunningSim, dpu_id: str) -> str:
    """What a reprovision does to DPF (activities/dpf): delete the DPU object and release the
    node-effect hold; DPF creates it again and installs it. Its phase once the install ended:
    `Error`, or `Rebooting` (installed; the host's reboot is the reprovision's next step)."""
    old = _dpu(sim, dpu_id)["metadata"]
    sim_http().delete(f"{sim.url}{DPUS}/{old['name']}", headers=sim.headers).raise_for_status()
    node = old["name"].removesuffix(f"-device-{dpu_id}")
    for _ in range(300):
        release = sim_http().patch(
            f"{sim.url}{MAINTENANCE}/{node}-hold", json={"metadata": {"annotations": {HOLD: "false"}}},
            headers=sim.headers | {"Content-Type": "application/merge-patch+json"}, timeout=10,
        )  # fmt: skip
        if release.status_code == 404:  # the hold between DPF's delete and its new one: next round
            time.sleep(0.1)
            continue
        release.raise_for_status()
        again = _dpu(sim, dpu_id)
        phase = again.get("status", {}).get("phase")
        if again["metadata"]["uid"] != old["uid"] and phase in ("Error", "Rebooting", "DPU Config"):
            return str(phase)
        time.sleep(0.1)
    raise AssertionError(f"{dpu_id} was not installed again: {_dpu(sim, dpu_id).get('status')}")


def _phase_shown(sim: RunningSim, host: str, dpu_id: str) -> str | None:
    """DPF's phase of the DPU as `metalflow host versions --json` shows it."""
    shown = _product(sim, "host", "versions", host, "--json")
    assert shown.returncode == 0, shown.stderr
    for listed in json.loads(shown.stdout)["hosts"]:  # one JSON document (README's --json rule)
        for dpu in listed.get("dpus") or []:
            if dpu["dpu_id"] == dpu_id:
                return str(dpu["phase"])
    raise AssertionError(shown.stdout)


def test_a_dpu_whose_install_fails_then_a_reprovision_installs_it(sim: RunningSim) -> None:
    dpu_id = "host-001-dpu-0"
    armed = _fault(sim, "dpu", dpu_id, "install-fails")
    assert armed.stdout.strip() == f"DPU {dpu_id}: install-fails injected", armed.stderr
    assert _phase_shown(sim, "host-001", dpu_id) == "Ready"  # armed: its next install fails
    assert _reinstall(sim, dpu_id) == "Error"
    assert _phase_shown(sim, "host-001", dpu_id) == "Error"
    condition = {c["type"]: c for c in _dpu(sim, dpu_id)["status"]["conditions"]}["BFBTransferred"]
    assert (condition["status"], condition["reason"]) == ("False", "FailToInstall")
    assert _reinstall(sim, dpu_id) != "Error"  # the clearing a DPF Error takes: a reprovision
    assert _phase_shown(sim, "host-001", dpu_id) != "Error"
    # Armed, then disarmed before it is hit: the next install succeeds.
    assert _fault(sim, "dpu", dpu_id, "install-fails").returncode == 0
    undone = _fault(sim, "dpu", dpu_id, "recover")
    assert (undone.returncode, undone.stdout.strip()) == (0, f"DPU {dpu_id}: recovered")
    assert _reinstall(sim, dpu_id) != "Error"


def test_bad_fault_names_are_refused_naming_the_choices(tmp_path: Path) -> None:
    bad = run_metalflow("sim", "fault", "bmc", "host-001", "explode", "--state-dir", tmp_path)
    assert bad.returncode == 2 and "invalid choice: 'explode'" in bad.stderr and "unreachable" in bad.stderr
