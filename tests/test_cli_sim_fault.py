"""`metalflow sim fault dpu|podgang` as a user runs it, against a running simulated site: the short
DPU id works, the fault shows in the site's Kubernetes API, bad input is refused clearly."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_support import METALFLOW, clean_env, run_metalflow
from ports_support import free_port
from sim_support import sim_http

from metalflow.devstack.sim import read_sim_info

DPUS = "/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/dpf-operator-system/dpus"
PODGANGS = "/apis/scheduler.grove.io/v1alpha1/podgangs"


def _metalflow(*args: str, state: Path) -> subprocess.CompletedProcess[str]:
    env = clean_env() | {"METALFLOW_STATE_DIR": str(state)}
    return subprocess.run([METALFLOW, *args], env=env, capture_output=True, text=True, timeout=180)


def _fault(*args: str, state: Path) -> subprocess.CompletedProcess[str]:
    """`metalflow sim fault ARGS --state-dir STATE` in this process (tests/cli_support.py): the
    command's answer is the subject here, not its process, and each interpreter cost ~1.3 s of CPU."""
    return run_metalflow("sim", "fault", *args, "--state-dir", state)


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    state = tmp_path_factory.mktemp("sim")
    port = str(free_port())
    up = _metalflow("sim", "up", "--detach", "--initialised", "--hosts", "1", "--sim-port", port, state=state)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        yield state
    finally:
        _metalflow("sim", "down", state=state)


def _get(state: Path, path: str) -> list[dict[str, Any]]:
    """A list from the site's Kubernetes API, with the admin token its kubeconfig holds."""
    config = yaml.safe_load((state / "kubeconfig").read_text())
    headers = {"Authorization": f"Bearer {config['users'][0]['user']['token']}"}
    response = sim_http().get(read_sim_info(state)["url"] + path, headers=headers)
    response.raise_for_status()
    items: list[dict[str, Any]] = response.json()["items"]
    return items


def _phase(state: Path, device: str) -> str:
    for dpu in _get(state, DPUS):
        if dpu["metadata"]["labels"]["provisioning.dpu.nvidia.com/dpudevice-name"] == f"device-{device}":
            return str(dpu.get("status", {}).get("phase"))
    raise AssertionError(f"no DPU of {device}")


def _until(state: Path, device: str, phase: str) -> None:
    for _ in range(200):
        if _phase(state, device) == phase:
            return
        time.sleep(0.1)
    raise AssertionError(f"{device} never reached {phase}: {_phase(state, device)}")


def test_dpu_faults_take_the_short_id_and_show_in_dpf(state: Path) -> None:
    _until(state, "host-001-dpu-0", "Ready")
    error = _fault("dpu", "host-001-dpu-0", "error", "--message", "rehearsal", state=state)
    assert error.returncode == 0, error.stderr
    assert error.stdout.strip() == "DPU host-001-dpu-0: error injected"
    _until(state, "host-001-dpu-0", "Error")
    assert _phase(state, "host-001-dpu-1") == "Ready"  # only the DPU named

    # An Error lasts until a reprovision: `recover` says so and changes nothing.
    stays = _fault("dpu", "host-001-dpu-0", "recover", state=state)
    assert stays.returncode == 1 and "no injected service failure to recover from" in stays.stderr
    assert _phase(state, "host-001-dpu-0") == "Error"

    effect = _fault("dpu", "host-001-dpu-1", "node-effect", state=state)
    assert effect.returncode == 0, effect.stderr
    _until(state, "host-001-dpu-1", "Node Effect")
    recover = _fault("dpu", "host-001-dpu-1", "recover", state=state)
    assert recover.returncode == 0, recover.stderr
    _until(state, "host-001-dpu-1", "Ready")

    unknown = _fault("dpu", "host-009-dpu-0", "error", state=state)
    assert unknown.returncode == 2 and "DPU host-009-dpu-0: no DPU" in unknown.stderr, unknown.stderr
    bad = _fault("dpu", "host-001-dpu-0", "explode", state=state)
    assert bad.returncode == 2 and "invalid choice: 'explode'" in bad.stderr


def test_podgang_faults(state: Path) -> None:
    gangs = _get(state, PODGANGS)
    assert gangs, "the initialised site has a Grove workload"
    name = gangs[0]["metadata"]["name"]
    never = _fault("podgang", name, "never-available", state=state)
    assert never.returncode == 0 and never.stdout.strip() == f"PodGang {name}: never-available injected"
    fall = _fault("podgang", name, "fall-back", state=state)
    assert fall.returncode == 0, fall.stderr
    missing = _fault("podgang", "no-such-gang", "fall-back", state=state)
    assert missing.returncode == 2 and "no PodGang 'no-such-gang'" in missing.stderr, missing.stderr
    bad = _fault("podgang", "Bad_Name", "fall-back", state=state)
    assert bad.returncode == 2 and "invalid PodGang name" in bad.stderr


def test_host_versions_exits_3_when_no_bmc_can_be_reached_and_names_the_ones_it_could_not(
    state: Path,
) -> None:
    """README's exit-status table: 3 when the site cannot be reached. `host versions` of a host
    whose every BMC is down exited 0; now 3, naming them. While some BMC answered it exits 0 and
    names the ones that did not (their versions show `-`)."""
    bmcs = ["host-001", "host-001-dpu-0", "host-001-dpu-1"]
    try:
        for bmc in bmcs:
            assert _fault("bmc", bmc, "unreachable", state=state).returncode == 0
        nothing = _metalflow("host", "versions", "host-001", state=state)
        assert nothing.returncode == 3, nothing.stdout + nothing.stderr
        said = "no BMC could be reached (3 BMCs asked: host-001, host-001-dpu-0, host-001-dpu-1)"
        assert said in nothing.stderr, nothing.stderr
        as_json = _metalflow("host", "versions", "host-001", "--json", state=state)
        assert as_json.returncode == 3, as_json.stdout + as_json.stderr
        assert json.loads(as_json.stdout)["unreached_bmcs"] == bmcs  # one document, saying which

        for bmc in bmcs[1:]:
            assert _fault("bmc", bmc, "clear", state=state).returncode == 0
        some = _metalflow("host", "versions", "host-001", state=state)
        assert some.returncode == 0, some.stdout + some.stderr
        assert "1 of 3 BMCs could not be reached (host-001): their versions show `-`" in some.stderr
    finally:
        for bmc in bmcs:
            _fault("bmc", bmc, "clear", state=state)
