"""The official kubernetes Python client against the simulated API over real HTTP."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_support import FIXTURES, KubeServer, kube_server
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from sim_support import sim_http

G, V = "provisioning.dpu.nvidia.com", "v1alpha1"
NS = "dpf-operator-system"
load_kube_config: Any = config.load_kube_config
Watch: Any = watch.Watch  # the client's watch module is untyped


@pytest.fixture
def server(tmp_path: Path) -> Iterator[KubeServer]:
    with kube_server(tmp_path) as srv:
        yield srv


def api_client(srv: KubeServer) -> client.ApiClient:
    cfg = client.Configuration()
    load_kube_config(config_file=str(srv.kubeconfig), client_configuration=cfg)
    return client.ApiClient(cfg)


@pytest.fixture
def crd(server: KubeServer) -> Any:
    return client.CustomObjectsApi(api_client(server))


def dpu(name: str = "host-001-dpu-0", **labels: str) -> dict[str, Any]:
    body = yaml.safe_load((FIXTURES / "dpu.yaml").read_text())
    body["metadata"]["name"] = name
    body["metadata"]["labels"] = labels
    return dict(body)


def error_of(exc: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load(exc.value.body or "")
    assert body["kind"] == "Status" and body["code"] == exc.value.status
    return body


def test_crud_and_list_shape(crd: Any) -> None:
    created = crd.create_namespaced_custom_object(G, V, NS, "dpus", dpu())
    meta = created["metadata"]
    assert meta["uid"] and meta["resourceVersion"] and meta["generation"] == 1 and meta["creationTimestamp"]
    assert created["spec"]["nodeEffect"] == {
        "applyOnLabelChange": False,
        "drain": True,
        "force": False,
    }  # defaults
    got = crd.get_namespaced_custom_object(G, V, NS, "dpus", "host-001-dpu-0")
    assert got["metadata"]["uid"] == meta["uid"]
    listed = crd.list_namespaced_custom_object(G, V, NS, "dpus")
    assert listed["kind"] == "DPUList" and listed["apiVersion"] == f"{G}/{V}"
    assert int(listed["metadata"]["resourceVersion"]) >= int(meta["resourceVersion"])
    assert [i["metadata"]["name"] for i in listed["items"]] == ["host-001-dpu-0"]
    got["spec"]["bfb"] = "bf-bundle-3.2"
    replaced = crd.replace_namespaced_custom_object(G, V, NS, "dpus", "host-001-dpu-0", got)
    assert replaced["metadata"]["generation"] == 2
    deleted = crd.delete_namespaced_custom_object(G, V, NS, "dpus", "host-001-dpu-0")
    assert deleted["metadata"]["name"] == "host-001-dpu-0"
    with pytest.raises(ApiException) as exc:
        crd.get_namespaced_custom_object(G, V, NS, "dpus", "host-001-dpu-0")
    body = error_of(exc)
    assert exc.value.status == 404 and body["reason"] == "NotFound"
    assert body["message"] == 'dpus.provisioning.dpu.nvidia.com "host-001-dpu-0" not found'


def test_already_exists_conflict_and_missing_namespace(crd: Any) -> None:
    first = crd.create_namespaced_custom_object(G, V, NS, "dpus", dpu())
    with pytest.raises(ApiException) as exc:
        crd.create_namespaced_custom_object(G, V, NS, "dpus", dpu())
    assert exc.value.status == 409 and error_of(exc)["reason"] == "AlreadyExists"
    crd.patch_namespaced_custom_object(G, V, NS, "dpus", "host-001-dpu-0", {"spec": {"bfb": "other"}})
    stale = copy.deepcopy(first)
    stale["spec"]["bfb"] = "stale"
    with pytest.raises(ApiException) as exc:
        crd.replace_namespaced_custom_object(G, V, NS, "dpus", "host-001-dpu-0", stale)
    assert exc.value.status == 409 and error_of(exc)["reason"] == "Conflict"
    elsewhere = dpu()
    with pytest.raises(ApiException) as exc:
        crd.create_namespaced_custom_object(G, V, "nowhere", "dpus", elsewhere)
    assert exc.value.status == 400  # the body names another namespace than the URL
    del elsewhere["metadata"]["namespace"]
    with pytest.raises(ApiException) as exc:
        crd.create_namespaced_custom_object(G, V, "nowhere", "dpus", elsewhere)
    assert exc.value.status == 404 and error_of(exc)["message"] == 'namespaces "nowhere" not found'


def test_merge_and_json_patch(server: KubeServer, crd: Any) -> None:
    crd.create_namespaced_custom_object(G, V, NS, "dpus", dpu(role="a"))
    merged = crd.patch_namespaced_custom_object(
        G, V, NS, "dpus", "host-001-dpu-0", {"metadata": {"labels": {"x": "1"}}}
    )
    assert merged["metadata"]["labels"] == {"role": "a", "x": "1"}
    patched = crd.patch_namespaced_custom_object(
        G, V, NS, "dpus", "host-001-dpu-0", [{"op": "replace", "path": "/spec/bfb", "value": "json-patched"}],
        _content_type="application/json-patch+json",
    )  # fmt: skip
    assert patched["spec"]["bfb"] == "json-patched"


def test_strategic_merge_patch_is_415_for_custom_resources(server: KubeServer, crd: Any) -> None:
    crd.create_namespaced_custom_object(G, V, NS, "dpus", dpu())
    resp = sim_http().patch(
        f"{server.url}/apis/{G}/{V}/namespaces/{NS}/dpus/host-001-dpu-0",
        content=b'{"spec": {"bfb": "x"}}',
        headers={"Content-Type": "application/strategic-merge-patch+json"},
    )
    assert resp.status_code == 415 and resp.json()["reason"] == "UnsupportedMediaType"
    resp = sim_http().post(f"{server.url}/apis/{G}/{V}/namespaces/{NS}/dpus", content=b"{not json")
    assert resp.status_code == 400 and resp.json()["kind"] == "Status"
    resp = sim_http().get(f"{server.url}/apis/{G}/{V}/namespaces/{NS}/nothings")
    assert resp.status_code == 404 and resp.json()["reason"] == "NotFound"
    resp = sim_http().put(f"{server.url}/apis/{G}/{V}/namespaces/{NS}/dpus", content=b"{}")
    assert resp.status_code == 405 and resp.json()["reason"] == "MethodNotAllowed"


def test_selectors(crd: Any) -> None:
    crd.create_namespaced_custom_object(G, V, NS, "dpus", dpu("a", rack="r1", model="bf3"))
    crd.create_namespaced_custom_object(G, V, NS, "dpus", dpu("b", rack="r1", model="bf4"))
    crd.create_namespaced_custom_object(G, V, NS, "dpus", dpu("c", rack="r2"))

    def names(**kw: str) -> list[str]:
        return [
            i["metadata"]["name"] for i in crd.list_namespaced_custom_object(G, V, NS, "dpus", **kw)["items"]
        ]

    assert names(label_selector="rack=r1") == ["a", "b"]
    assert names(label_selector="rack=r1,model!=bf3") == ["b"]
    assert names(label_selector="model in (bf3,bf4)") == ["a", "b"]
    assert names(label_selector="!model") == ["c"]
    assert names(field_selector="metadata.name=c") == ["c"]
    all_ns = crd.list_cluster_custom_object(G, V, "dpus", label_selector="rack=r2")
    assert [i["metadata"]["name"] for i in all_ns["items"]] == ["c"]
    with pytest.raises(ApiException) as exc:
        names(field_selector="spec.bfb=x")
    assert exc.value.status == 400


def test_status_subresource_and_validation(crd: Any) -> None:
    crd.create_namespaced_custom_object(G, V, NS, "dpus", dpu())
    patched = crd.patch_namespaced_custom_object_status(
        G, V, NS, "dpus", "host-001-dpu-0", {"status": {"phase": "OS Installing"}}
    )
    assert patched["status"]["phase"] == "OS Installing" and patched["metadata"]["generation"] == 1
    # The main resource ignores status changes.
    ignored = crd.patch_namespaced_custom_object(
        G, V, NS, "dpus", "host-001-dpu-0", {"status": {"phase": "Ready"}}
    )
    assert ignored["status"]["phase"] == "OS Installing"
    with pytest.raises(ApiException) as exc:
        crd.patch_namespaced_custom_object_status(
            G, V, NS, "dpus", "host-001-dpu-0", {"status": {"phase": "Bogus"}}
        )
    body = error_of(exc)
    assert exc.value.status == 422 and body["reason"] == "Invalid"
    assert body["message"].startswith(
        'DPU.provisioning.dpu.nvidia.com "host-001-dpu-0" is invalid: '
        'status.phase: Unsupported value: "Bogus": supported values: "Initializing", "Node Effect",'
    )
    assert body["details"]["causes"][0]["field"] == "status.phase"
    assert body["details"]["causes"][0]["reason"] == "FieldValueNotSupported"
    missing = dpu("no-bfb")
    del missing["spec"]["bfb"]
    with pytest.raises(ApiException) as exc:
        crd.create_namespaced_custom_object(G, V, NS, "dpus", missing)
    cause = error_of(exc)["details"]["causes"][0]
    assert (exc.value.status, cause["field"], cause["reason"]) == (422, "spec.bfb", "FieldValueRequired")
    wrong = dpu("wrong-type")
    wrong["spec"]["serialNumber"] = 12
    with pytest.raises(ApiException) as exc:
        crd.create_namespaced_custom_object(G, V, NS, "dpus", wrong)
    assert (
        exc.value.status == 422
        and "spec.serialNumber in body must be of type string" in error_of(exc)["message"]
    )
    with pytest.raises(ApiException) as exc:
        crd.create_namespaced_custom_object(G, V, NS, "dpus", dpu("Not_A_DNS_Name"))
    assert exc.value.status == 422 and error_of(exc)["details"]["causes"][0]["field"] == "metadata.name"


def test_unknown_fields_pruned_or_rejected(server: KubeServer, crd: Any) -> None:
    body = dpu()
    body["spec"]["notInSchema"] = True
    created = crd.create_namespaced_custom_object(G, V, NS, "dpus", body)
    assert "notInSchema" not in created["spec"]
    body["metadata"]["name"] = "strict"
    with pytest.raises(ApiException) as exc:
        crd.create_namespaced_custom_object(G, V, NS, "dpus", body, field_validation="Strict")
    assert exc.value.status == 400 and 'unknown field "spec.notInSchema"' in error_of(exc)["message"]


def test_dry_run_changes_nothing(crd: Any) -> None:
    out = crd.create_namespaced_custom_object(G, V, NS, "dpus", dpu(), dry_run="All")
    assert out["metadata"]["name"] == "host-001-dpu-0"
    assert crd.list_namespaced_custom_object(G, V, NS, "dpus")["items"] == []


def test_finalizers_and_deletion_timestamp(crd: Any) -> None:
    body = dpu()
    body["metadata"]["finalizers"] = ["provisioning.dpu.nvidia.com/dpu-protection"]
    crd.create_namespaced_custom_object(G, V, NS, "dpus", body)
    deleting = crd.delete_namespaced_custom_object(G, V, NS, "dpus", "host-001-dpu-0")
    assert deleting["metadata"]["deletionTimestamp"]
    still = crd.get_namespaced_custom_object(G, V, NS, "dpus", "host-001-dpu-0")
    assert still["metadata"]["deletionTimestamp"] == deleting["metadata"]["deletionTimestamp"]
    crd.patch_namespaced_custom_object(G, V, NS, "dpus", "host-001-dpu-0", {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as exc:
        crd.get_namespaced_custom_object(G, V, NS, "dpus", "host-001-dpu-0")
    assert exc.value.status == 404


def test_namespace_and_secret(server: KubeServer) -> None:
    core: Any = client.CoreV1Api(api_client(server))
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="site-a")))
    assert core.read_namespace("site-a").status.phase == "Active"
    secret = client.V1Secret(metadata=client.V1ObjectMeta(name="bmc"), string_data={"password": "pw"})
    created = core.create_namespaced_secret("site-a", secret)
    assert created.data == {"password": "cHc="} and created.type == "Opaque" and created.string_data is None
    names = [n.metadata.name for n in core.list_namespace().items]
    assert names == ["default", "dpf-operator-system", "site-a"]
    core.delete_namespaced_secret("bmc", "site-a")
    assert core.list_namespaced_secret("site-a").items == []


def test_watch_resume_and_bookmarks(crd: Any) -> None:
    created = crd.create_namespaced_custom_object(G, V, NS, "dpus", dpu("a"))
    rv = created["metadata"]["resourceVersion"]
    crd.patch_namespaced_custom_object_status(G, V, NS, "dpus", "a", {"status": {"phase": "Pending"}})
    crd.create_namespaced_custom_object(G, V, NS, "dpus", dpu("b"))
    crd.delete_namespaced_custom_object(G, V, NS, "dpus", "b")
    w = Watch()
    seen = []
    for event in w.stream(
        crd.list_namespaced_custom_object, G, V, NS, "dpus", resource_version=rv, timeout_seconds=1
    ):
        seen.append((event["type"], event["object"]["metadata"]["name"]))
    assert seen == [("MODIFIED", "a"), ("ADDED", "b"), ("DELETED", "b")]
    # Without a resourceVersion the stream starts with what exists; then live events follow.
    live: list[tuple[str, str]] = []
    w2 = Watch()

    def later() -> None:
        crd.patch_namespaced_custom_object(G, V, NS, "dpus", "a", {"metadata": {"labels": {"k": "v"}}})

    timer = threading.Timer(0.3, later)
    timer.start()
    for event in w2.stream(crd.list_namespaced_custom_object, G, V, NS, "dpus", timeout_seconds=2):
        live.append((event["type"], event["object"]["metadata"]["name"]))
        if len(live) == 2:
            w2.stop()
    timer.join()
    assert live == [("ADDED", "a"), ("MODIFIED", "a")]


def test_watch_gone_after_history_eviction(tmp_path: Path) -> None:
    with kube_server(tmp_path, history_size=5) as srv:
        crd: Any = client.CustomObjectsApi(api_client(srv))
        first = crd.create_namespaced_custom_object(G, V, NS, "dpus", dpu("a"))
        for i in range(10):
            crd.patch_namespaced_custom_object(G, V, NS, "dpus", "a", {"metadata": {"labels": {"n": str(i)}}})
        w = Watch()
        with pytest.raises(ApiException) as exc:
            for _ in w.stream(
                crd.list_namespaced_custom_object, G, V, NS, "dpus",
                resource_version=first["metadata"]["resourceVersion"], timeout_seconds=1,
            ):  # fmt: skip
                pass
        assert exc.value.status == 410


def test_watch_timeout_and_bookmark_events(tmp_path: Path) -> None:
    with kube_server(tmp_path, bookmark_interval=0.2) as srv:
        api = api_client(srv)
        crd: Any = client.CustomObjectsApi(api)
        created = crd.create_namespaced_custom_object(G, V, NS, "dpus", dpu("a"))
        resp = crd.list_namespaced_custom_object(
            G, V, NS, "dpus", watch=True, allow_watch_bookmarks=True, timeout_seconds=1,
            resource_version=created["metadata"]["resourceVersion"], _preload_content=False,
        )  # fmt: skip
        lines = [yaml.safe_load(line) for line in resp.read().decode().splitlines() if line]
        types = {e["type"] for e in lines}
        assert types == {"BOOKMARK"}, lines
        assert all(int(e["object"]["metadata"]["resourceVersion"]) >= 1 for e in lines)
