"""The store's per-type index (simulators/kube/bucket.py): a list answers exactly what a scan of
every object answers, in the same order, and a list by name or label looks only at the matches."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from simulators.kube.selectors import Selector
from simulators.kube.store import NotFound, ResourceType, Store

NS = ResourceType("", "v1", "namespaces", "namespace", "Namespace", "NamespaceList", namespaced=False)
DPU = ResourceType(
    "provisioning.dpu.nvidia.com", "v1alpha1", "dpus", "dpu", "DPU", "DPUList", True, frozenset({"status"})
)
CM = ResourceType("example.com", "v1", "things", "thing", "Thing", "ThingList", True)

NAMESPACES = ("ns", "ns-a", "nsb")
SELECTORS = [
    (None, None),
    ("pool=in", None),
    ("pool=out,rack=r1", None),
    ("pool in (in,out)", None),
    ("pool!=in", None),
    ("!pool", None),
    ("rack", None),
    ("rack=r9", None),
    (None, "metadata.name=d3"),
    (None, "metadata.name!=d3"),
    ("rack=r2", "metadata.name=d7"),
    (None, "metadata.namespace=ns-a"),
    (None, "metadata.namespace=ns-a,metadata.name=d1"),
    (None, "metadata.name=nobody"),
]


def dpu(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": DPU.api_version,
        "kind": "DPU",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {},
    }


def scan(store: Store, namespace: str | None, selector: Selector) -> list[dict[str, Any]]:
    """What a list must answer: every object of the kind, by (namespace, name), filtered."""
    everything = [o for (_, _), o in sorted(store._bucket(DPU).items())]  # noqa: SLF001 - the oracle
    return [
        o
        for o in everything
        if (not namespace or o["metadata"]["namespace"] == namespace) and selector.matches(o)
    ]


def mutate(store: Store, rng: random.Random, steps: int) -> None:
    """Creates, label changes, deletions (some held by a finalizer first) in random order."""
    for _ in range(steps):
        ns, name = rng.choice(NAMESPACES), f"d{rng.randrange(12)}"
        labels = {
            k: v
            for k, v in (("pool", rng.choice(["in", "out"])), ("rack", f"r{rng.randrange(3)}"))
            if rng.random() < 0.7
        }
        try:
            current = store.get(DPU, ns, name)
        except NotFound:
            body = dpu(name, labels)
            if rng.random() < 0.3:
                body["metadata"]["finalizers"] = ["example.com/hold"]
            store.create(DPU, ns, body)
            continue
        action = rng.random()
        if action < 0.5:
            store.patch(
                DPU, ns, name, {"metadata": {"labels": {"pool": None, "rack": None, **labels}}}, "merge"
            )
        elif action < 0.8:
            store.delete(DPU, ns, name)
        else:
            store.patch(DPU, ns, name, {"metadata": {"finalizers": None}}, "merge")  # a held one goes
        del current


@pytest.mark.parametrize("seed", range(6))
def test_every_list_answers_what_a_scan_answers(seed: int) -> None:
    rng = random.Random(seed)
    store = Store([NS, DPU, CM])
    for ns in NAMESPACES:
        store.ensure_namespace(ns)
    for round_ in range(8):
        mutate(store, rng, 40)
        for namespace in (None, *NAMESPACES, "absent"):
            for label_selector, field_selector in SELECTORS:
                selector = store.selector(label_selector, field_selector)
                got = store.list_shared(DPU, namespace, selector)
                want = scan(store, namespace, selector)
                assert [o["metadata"]["namespace"] + "/" + o["metadata"]["name"] for o in got] == [
                    o["metadata"]["namespace"] + "/" + o["metadata"]["name"] for o in want
                ], (seed, round_, namespace, label_selector, field_selector)
                assert got == want
        # The list copies handed out are the same objects' copies, never the stored ones.
        listed, _ = store.list(DPU, None)
        assert listed == scan(store, None, store.selector(None, None))


@dataclass(frozen=True)
class CountingSelector(Selector):
    """A real selector that counts the objects it was asked about."""

    tested: list[str] = field(default_factory=list, compare=False)

    def matches(self, obj: Any) -> bool:
        self.tested.append(obj["metadata"]["name"])
        return super().matches(obj)


def counting(store: Store, label_selector: str | None, field_selector: str | None) -> CountingSelector:
    parsed = store.selector(label_selector, field_selector)
    return CountingSelector(parsed.labels, parsed.fields)


def test_a_list_by_name_or_label_tests_only_the_matches() -> None:
    """What a host's join asks (a DPUNode by name, its DPUs by label) at 2,000 objects of a kind."""
    store = Store([NS, DPU, CM])
    store.ensure_namespace("ns")
    for n in range(2_000):
        store.create(DPU, "ns", dpu(f"host-{n:04d}-dpu", {"node": f"host-{n:04d}", "pool": "in"}))
    by_name = counting(store, None, "metadata.name=host-0042-dpu")
    assert [o["metadata"]["name"] for o in store.list_shared(DPU, "ns", by_name)] == ["host-0042-dpu"]
    assert by_name.tested == ["host-0042-dpu"]
    by_label = counting(store, "node=host-1999,pool=in", None)
    assert [o["metadata"]["name"] for o in store.list_shared(DPU, "ns", by_label)] == ["host-1999-dpu"]
    assert by_label.tested == ["host-1999-dpu"]
    nothing = counting(store, None, "metadata.name=metalflow-resource-version-probe")
    assert store.list_shared(DPU, "ns", nothing) == [] and nothing.tested == []
    # A relabelled object moves in the index: the old value no longer finds it.
    store.patch(DPU, "ns", "host-0042-dpu", {"metadata": {"labels": {"node": "elsewhere"}}}, "merge")
    assert store.list_shared(DPU, "ns", counting(store, "node=host-0042", None)) == []
    moved = store.list_shared(DPU, "ns", counting(store, "node=elsewhere", None))
    assert [o["metadata"]["name"] for o in moved] == ["host-0042-dpu"]
    # A selector with nothing to narrow by still answers, in order, from the namespace's slice.
    others = store.list_shared(DPU, "ns", store.selector("node!=elsewhere", None))
    assert len(others) == 1_999 and others[0]["metadata"]["name"] == "host-0000-dpu"


def test_restore_and_renumbering_keep_the_index() -> None:
    store = Store([NS, DPU, CM])
    store.ensure_namespace("ns")
    for n in range(5):
        store.create(DPU, "ns", dpu(f"d{n}", {"rack": f"r{n % 2}"}))
    copy = Store([NS, DPU, CM])
    copy.restore(store.snapshot())
    select = copy.selector("rack=r1", None)
    assert [o["metadata"]["name"] for o in copy.list_shared(DPU, "ns", select)] == ["d1", "d3"]
    copy.restart_renumbered()
    assert [o["metadata"]["name"] for o in copy.list_shared(DPU, "ns", select)] == ["d1", "d3"]
    copy.delete(DPU, "ns", "d1")
    assert [o["metadata"]["name"] for o in copy.list_shared(DPU, "ns", select)] == ["d3"]
