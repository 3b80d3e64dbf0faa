"""kubectl, with default flags and the written kubeconfig, against the simulated API."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator

import pytest
import yaml
from kube_support import FIXTURES, KubeServer, kube_server

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeServer]:
    with kube_server(tmp_path_factory.mktemp("kube")) as srv:
        yield srv


def kubectl(srv: KubeServer, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    home = srv.kubeconfig.parent / "home"
    home.mkdir(exist_ok=True)  # kubectl's discovery cache goes under $HOME/.kube
    result = subprocess.run(
        ["kubectl", "--kubeconfig", str(srv.kubeconfig), *args],
        capture_output=True, text=True, timeout=60, env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    if ok:
        assert result.returncode == 0, result.stderr
        assert result.stderr == "", result.stderr  # no discovery or OpenAPI complaints
    return result


def test_api_resources_lists_the_crds(server: KubeServer) -> None:
    out = kubectl(server, "api-resources").stdout
    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert {"dpus", "dpunodes", "podcliquesets", "podgangs", "namespaces", "secrets"} <= set(lines)
    assert "pcs" in lines["podcliquesets"] and "grove.io/v1alpha1" in lines["podcliquesets"]


def test_apply_get_patch_delete_a_dpu(server: KubeServer) -> None:
    out = kubectl(server, "apply", "-f", str(FIXTURES / "dpu.yaml")).stdout
    assert out.strip() == "dpu.provisioning.dpu.nvidia.com/host-001-dpu-0 created"
    table = kubectl(server, "get", "dpus", "-n", "dpf-operator-system").stdout.splitlines()
    assert table[0].split() == ["NAME", "READY", "PHASE", "AGE"]
    assert table[1].split()[:2] == ["host-001-dpu-0", "Initializing"]
    obj = yaml.safe_load(
        kubectl(server, "get", "dpu", "host-001-dpu-0", "-n", "dpf-operator-system", "-o", "yaml").stdout
    )
    assert obj["kind"] == "DPU" and obj["metadata"]["uid"] and obj["spec"]["bfb"] == "bf-bundle-3.1"
    # Re-apply with a change: a three-way merge patch.
    changed = (FIXTURES / "dpu.yaml").read_text().replace("bf-bundle-3.1", "bf-bundle-3.2")
    applied = server.kubeconfig.parent / "dpu2.yaml"
    applied.write_text(changed)
    assert "configured" in kubectl(server, "apply", "-f", str(applied)).stdout
    kubectl(server, "patch", "dpu", "host-001-dpu-0", "-n", "dpf-operator-system", "--type", "merge",
            "-p", '{"metadata":{"labels":{"rack":"r7"}}}')  # fmt: skip
    obj = yaml.safe_load(
        kubectl(server, "get", "dpu", "host-001-dpu-0", "-n", "dpf-operator-system", "-o", "yaml").stdout
    )
    assert obj["spec"]["bfb"] == "bf-bundle-3.2" and obj["metadata"]["labels"]["rack"] == "r7"
    assert obj["metadata"]["generation"] == 2
    names = kubectl(server, "get", "dpus", "-A", "-l", "rack=r7", "-o", "name").stdout.split()
    assert names == ["dpu.provisioning.dpu.nvidia.com/host-001-dpu-0"]
    out = kubectl(server, "delete", "dpu", "host-001-dpu-0", "-n", "dpf-operator-system").stdout
    assert "deleted" in out
    gone = kubectl(server, "get", "dpu", "host-001-dpu-0", "-n", "dpf-operator-system", ok=False)
    assert (
        gone.returncode != 0 and 'dpus.provisioning.dpu.nvidia.com "host-001-dpu-0" not found' in gone.stderr
    )


def test_invalid_object_is_rejected_with_the_servers_message(server: KubeServer) -> None:
    bad = yaml.safe_load((FIXTURES / "dpu.yaml").read_text())
    bad["metadata"]["name"] = "bad-dpu"
    bad["spec"]["serialNumber"] = 42
    path = server.kubeconfig.parent / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    result = kubectl(server, "apply", "-f", str(path), ok=False)
    assert result.returncode != 0
    assert 'The DPU "bad-dpu" is invalid' in result.stderr
    assert "spec.serialNumber in body must be of type string" in result.stderr


def test_explain_and_grove_printer_columns(server: KubeServer) -> None:
    out = kubectl(server, "explain", "dpu.spec").stdout
    assert "KIND:       DPU" in out and "bfb\t<string> -required-" in out
    kubectl(server, "apply", "-f", str(FIXTURES / "podcliqueset.yaml"))
    header = kubectl(server, "get", "pcs").stdout.splitlines()[0].split()
    assert header[:2] == ["NAME", "REPLICAS"] and header[-1] == "AGE"
    out = kubectl(server, "get", "namespaces").stdout
    assert "dpf-operator-system   Active" in out
