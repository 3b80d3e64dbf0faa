"""The simulated API evaluates the CRDs' `x-kubernetes-validations` CEL rules: what the issue
named (a DPUNode with two reboot methods, an edit of an immutable serial number) is refused with
a 422 naming the field and the rule's message, and valid writes still pass."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_support import KubeServer, kube_server
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

G, V, NS = "provisioning.dpu.nvidia.com", "v1alpha1", "dpf-operator-system"


def api_client(server: KubeServer) -> client.ApiClient:
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(server.kubeconfig), client_configuration=configuration)  # type: ignore[no-untyped-call]
    return client.ApiClient(configuration)


@pytest.fixture(scope="module")
def crd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    server: KubeServer
    with kube_server(tmp_path_factory.mktemp("cel")) as server:
        yield client.CustomObjectsApi(api_client(server))


def dpunode(name: str, reboot: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{G}/{V}", "kind": "DPUNode", "metadata": {"name": name},
            "spec": {"nodeRebootMethod": reboot}}  # fmt: skip


def device(name: str, serial: str) -> dict[str, Any]:
    return {"apiVersion": f"{G}/{V}", "kind": "DPUDevice", "metadata": {"name": name},
            "spec": {"serialNumber": serial}}  # fmt: skip


def refusal(call: Any, *args: Any) -> dict[str, Any]:
    with pytest.raises(ApiException) as caught:
        call(*args)
    assert caught.value.status == 422
    status: dict[str, Any] = json.loads(caught.value.body)
    return status


def test_a_dpunode_with_two_reboot_methods_is_refused(crd: Any) -> None:
    status = refusal(crd.create_namespaced_custom_object, G, V, NS, "dpunodes",
                     dpunode("node-two", {"external": {}, "script": {"name": "x"}}))  # fmt: skip
    assert status["reason"] == "Invalid"
    assert status["details"]["causes"] == [{
        "reason": "FieldValueInvalid", "field": "spec.nodeRebootMethod",
        "message": 'Invalid value: "object": only one of hostAgent, external, script can be set',
    }]  # fmt: skip
    with pytest.raises(ApiException) as missing:
        crd.get_namespaced_custom_object(G, V, NS, "dpunodes", "node-two")
    assert missing.value.status == 404  # refused writes change nothing
    created = crd.create_namespaced_custom_object(G, V, NS, "dpunodes", dpunode("node-one", {"external": {}}))
    assert created["spec"]["nodeRebootMethod"] == {"external": {}}


def test_the_serial_number_of_a_dpudevice_is_immutable_but_labels_are_not(crd: Any) -> None:
    crd.create_namespaced_custom_object(G, V, NS, "dpudevices", device("dev-1", "MT0001"))
    status = refusal(crd.patch_namespaced_custom_object, G, V, NS, "dpudevices", "dev-1",
                     {"spec": {"serialNumber": "MT9999"}})  # fmt: skip
    assert status["details"]["causes"][0]["field"] == "spec.serialNumber"
    assert "Serial Number is immutable" in status["message"]
    relabelled = crd.patch_namespaced_custom_object(
        G, V, NS, "dpudevices", "dev-1", {"metadata": {"labels": {"rack": "r7"}}}
    )
    assert relabelled["spec"]["serialNumber"] == "MT0001"
    assert relabelled["metadata"]["labels"] == {"rack": "r7"}


def test_a_name_longer_than_the_crd_allows_is_refused(crd: Any) -> None:
    status = refusal(crd.create_namespaced_custom_object, G, V, NS, "dpunodes",
                     dpunode("node-" + "x" * 60, {"external": {}}))  # fmt: skip
    assert "name length can't be bigger than 48 chars" in status["message"]


def test_every_rule_of_the_vendored_crds_compiles(tmp_path: Path) -> None:
    from simulators.kube.cel import RuleValidator
    from simulators.kube.crds import find_crd_dir, load_resource_types

    validator, rules = RuleValidator(), []

    def collect(node: Any) -> None:
        if isinstance(node, dict):
            rules.extend(v["rule"] for v in node.get("x-kubernetes-validations") or ())
            for child in node.values():
                collect(child)
        elif isinstance(node, list):
            for child in node:
                collect(child)

    for rt in load_resource_types(find_crd_dir()):
        collect(rt.schema)
    assert len(set(rules)) >= 20
    for rule in set(rules):
        validator._program(rule)  # raises on a rule the library cannot parse


def test_the_simulated_site_imports_the_cel_bindings_without_their_repl() -> None:
    """A site's start imports `cel` without the package's interactive CLI (typer, prompt_toolkit,
    rich: a third of a site's start); a later `import cel.cli` still gets the real one."""
    script = (
        "import sys, simulators.kube.cel as c; "
        "print(sorted(m for m in ('typer', 'prompt_toolkit', 'rich') if m in sys.modules)); "
        "print(c.cel.compile('1 + 1') is not None); import cel.cli; print(hasattr(cel.cli, 'app'))"
    )
    shown = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert shown.stdout.split() == ["[]", "True", "True"], shown
