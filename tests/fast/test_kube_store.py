"""The object store's API-server semantics, without HTTP."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from simulators.kube.store import (
    AlreadyExists,
    BadRequest,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    ResourceType,
    Store,
    WatchEvent,
)

NS = ResourceType("", "v1", "namespaces", "namespace", "Namespace", "NamespaceList", namespaced=False)
DPU = ResourceType(
    "provisioning.dpu.nvidia.com", "v1alpha1", "dpus", "dpu", "DPU", "DPUList", True, frozenset({"status"})
)
CM = ResourceType("example.com", "v1", "things", "thing", "Thing", "ThingList", True)


def make_store(**kw: Any) -> Store:
    store = Store([NS, DPU, CM], **kw)
    store.ensure_namespace("ns")
    return store


def dpu(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": DPU.api_version,
        "kind": "DPU",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }


def test_create_sets_server_fields_and_rejects_duplicates() -> None:
    store = make_store()
    created = store.create(DPU, "ns", dpu("a", bfb="x"))
    meta = created["metadata"]
    assert meta["namespace"] == "ns" and meta["generation"] == 1
    assert meta["uid"] and meta["creationTimestamp"].endswith("Z")
    assert int(meta["resourceVersion"]) == store.resource_version
    with pytest.raises(AlreadyExists) as exc:
        store.create(DPU, "ns", dpu("a"))
    assert exc.value.code == 409
    assert exc.value.message == 'dpus.provisioning.dpu.nvidia.com "a" already exists'


def test_create_needs_existing_namespace_and_valid_name() -> None:
    store = make_store()
    with pytest.raises(NotFound, match='namespaces "nope" not found'):
        store.create(DPU, "nope", dpu("a"))
    with pytest.raises(Invalid) as exc:
        store.create(DPU, "ns", dpu("Bad_Name"))
    assert exc.value.details["causes"][0]["field"] == "metadata.name"
    assert exc.value.message.startswith(
        'DPU.provisioning.dpu.nvidia.com "Bad_Name" is invalid: metadata.name:'
    )


def test_get_returns_deep_copies() -> None:
    store = make_store()
    store.create(DPU, "ns", dpu("a", bfb="x"))
    got = store.get(DPU, "ns", "a")
    got["spec"]["bfb"] = "mutated"
    assert store.get(DPU, "ns", "a")["spec"]["bfb"] == "x"


def test_update_conflict_generation_and_status_subresource() -> None:
    store = make_store()
    first = store.create(DPU, "ns", dpu("a", bfb="x"))
    second = store.get(DPU, "ns", "a")
    second["spec"]["bfb"] = "y"
    second["status"] = {"phase": "Ready"}  # ignored: status has its own subresource
    updated = store.update(DPU, "ns", "a", second)
    assert updated["metadata"]["generation"] == 2 and "status" not in updated
    first["spec"]["bfb"] = "z"
    with pytest.raises(Conflict, match="the object has been modified"):
        store.update(DPU, "ns", "a", first)
    status = store.update(
        DPU, "ns", "a", {"metadata": {"name": "a"}, "status": {"phase": "Ready"}}, subresource="status"
    )
    assert status["status"] == {"phase": "Ready"} and status["metadata"]["generation"] == 2
    assert status["spec"]["bfb"] == "y"
    # Labels change: no generation bump. No-op: no new resourceVersion.
    labelled = store.patch(DPU, "ns", "a", {"metadata": {"labels": {"k": "v"}}}, "merge")
    assert labelled["metadata"]["generation"] == 2
    again = store.patch(DPU, "ns", "a", {"metadata": {"labels": {"k": "v"}}}, "merge")
    assert again["metadata"]["resourceVersion"] == labelled["metadata"]["resourceVersion"]


def test_merge_and_json_patch() -> None:
    store = make_store()
    store.create(DPU, "ns", dpu("a", bfb="x", cluster={"name": "c", "namespace": "n"}))
    merged = store.patch(DPU, "ns", "a", {"spec": {"cluster": {"namespace": None}}}, "merge")
    assert merged["spec"]["cluster"] == {"name": "c"}
    patched = store.patch(DPU, "ns", "a", [{"op": "replace", "path": "/spec/bfb", "value": "y"}], "json")
    assert patched["spec"]["bfb"] == "y"
    with pytest.raises(Invalid):
        store.patch(DPU, "ns", "a", [{"op": "remove", "path": "/spec/missing"}], "json")
    with pytest.raises(BadRequest):
        store.patch(DPU, "ns", "a", {"op": "remove"}, "json")
    stale = {"metadata": {"resourceVersion": "1"}, "spec": {"bfb": "z"}}
    with pytest.raises(Conflict):
        store.patch(DPU, "ns", "a", stale, "merge")
    status = store.patch(DPU, "ns", "a", {"status": {"phase": "Ready"}}, "merge", subresource="status")
    assert status["status"]["phase"] == "Ready"


def test_selectors() -> None:
    store = make_store()
    store.create(DPU, "ns", dpu("a", {"env": "prod", "tier": "x"}))
    store.create(DPU, "ns", dpu("b", {"env": "dev"}))
    store.create(DPU, "ns", dpu("c"))

    def names(**kw: str) -> list[str]:
        return [o["metadata"]["name"] for o in store.list(DPU, "ns", **kw)[0]]

    assert names(label_selector="env=prod") == ["a"]
    assert names(label_selector="env!=prod") == ["b", "c"]
    assert names(label_selector="env in (prod,dev)") == ["a", "b"]
    assert names(label_selector="env notin (prod)") == ["b", "c"]
    assert names(label_selector="env") == ["a", "b"]
    assert names(label_selector="!env") == ["c"]
    assert names(label_selector="env==prod,tier") == ["a"]
    assert names(field_selector="metadata.name=b") == ["b"]
    assert names(field_selector="metadata.name!=b,metadata.namespace=ns") == ["a", "c"]
    with pytest.raises(BadRequest):
        names(field_selector="spec.bfb=x")
    with pytest.raises(BadRequest):
        names(label_selector="a in (")


def test_finalizers_and_deletion_timestamp() -> None:
    store = make_store()
    obj = dpu("a")
    obj["metadata"]["finalizers"] = ["x/y"]
    store.create(DPU, "ns", obj)
    deleting = store.delete(DPU, "ns", "a")
    assert deleting["metadata"]["deletionTimestamp"]
    with pytest.raises(Forbidden):
        store.patch(DPU, "ns", "a", {"metadata": {"finalizers": ["x/y", "new"]}}, "merge")
    store.patch(DPU, "ns", "a", {"metadata": {"finalizers": None}}, "merge")
    with pytest.raises(NotFound, match='dpus.provisioning.dpu.nvidia.com "a" not found'):
        store.get(DPU, "ns", "a")


def test_owner_references_are_garbage_collected_and_namespaces_emptied() -> None:
    store = make_store()
    owner = store.create(DPU, "ns", dpu("owner"))
    ref = {"apiVersion": DPU.api_version, "kind": "DPU", "name": "owner", "uid": owner["metadata"]["uid"]}
    store.create(CM, "ns", {"metadata": {"name": "dep", "ownerReferences": [ref]}})
    store.delete(DPU, "ns", "owner")
    assert store.list(CM, "ns")[0] == []
    store.create(CM, "ns", {"metadata": {"name": "other"}})
    store.delete(NS, None, "ns")
    assert store.list(CM)[0] == [] and store.list(NS)[0] == []


async def collect(it: Any, n: int) -> list[WatchEvent]:
    out = []
    async with asyncio.timeout(2):
        async for ev in it:
            out.append(ev)
            if len(out) == n:
                break
    return out


async def test_watch_replay_live_selector_crossing_and_gone() -> None:
    store = make_store(history_size=10)
    start = store.resource_version
    store.create(DPU, "ns", dpu("a", {"sel": "yes"}))
    store.create(DPU, "ns", dpu("b"))
    w = store.watch(DPU, "ns", resource_version=start, label_selector="sel=yes")
    store.patch(DPU, "ns", "a", {"metadata": {"labels": {"sel": "no"}}}, "merge")
    store.patch(DPU, "ns", "b", {"metadata": {"labels": {"sel": "yes"}}}, "merge")
    store.delete(DPU, "ns", "b")
    events = await collect(w, 4)
    assert [(e.type, e.object["metadata"]["name"]) for e in events] == [
        ("ADDED", "a"),
        ("DELETED", "a"),
        ("ADDED", "b"),
        ("DELETED", "b"),
    ]
    assert [e.resource_version for e in events] == sorted(e.resource_version for e in events)
    await w.aclose()
    for i in range(12):
        store.create(CM, "ns", {"metadata": {"name": f"t{i}"}})
    with pytest.raises(Gone) as exc:
        store.watch(DPU, "ns", resource_version=start)
    assert exc.value.code == 410


async def test_watch_initial_events_and_fan_out() -> None:
    store = make_store()
    store.create(DPU, "ns", dpu("a"))
    watchers = [store.watch(DPU, initial_events=True) for _ in range(200)]
    store.create(DPU, "ns", dpu("b"))
    for w in watchers:
        events = await collect(w, 2)
        assert [(e.type, e.object["metadata"]["name"]) for e in events] == [("ADDED", "a"), ("ADDED", "b")]
    store.close_watches()
    assert await collect(watchers[0], 1) == []
