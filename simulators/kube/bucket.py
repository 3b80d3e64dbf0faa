"""The objects of one resource type, indexed so a list costs O(matches), as on a real API server.

Why: a list used to sort every object of its kind by namespace/name and test the selector on
each, for every request. At 10,000 hosts each host monitor's join lists three kinds by one name
(`labelSelector=dpu.nvidia.com/dpunode-name=<node>`, `fieldSelector=metadata.name=<name>`), so
starting 10,000 monitors cost ~3 x 10^4 objects sorted per join: the simulated API, not the
product, set the pace (bench/README.md, the 10,000-host monitors run).

What is kept, beside the objects by (namespace, name):
- the keys in (namespace, name) order, maintained on insert and removal (`bisect`: a modified
  object keeps its key, so the common write costs nothing here), so no list sorts everything
  and a namespace is a contiguous slice;
- per label key and value, the keys of the objects carrying it;
- per name, the keys of the objects of that name (one per namespace).

A list narrows to the smallest set that an equality (`a=b`, `a in (x,y)`, `metadata.name=n`,
`metadata.namespace=ns`, or the namespace of the request) allows, sorts only those, and tests
the whole selector on each; a selector with nothing to narrow by (`!a`, `a!=b`, none) walks the
namespace's slice in order. The result is the same objects in the same order as before.

Cost: per stored object one key in the order list and the name index, plus one entry per label
(10,000 DPUs with 4 labels: ~50,000 set entries, a few MB); per write O(labels changed) and,
on create or removal only, one `bisect` insertion or deletion (a list move of n pointers).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import Any

from simulators.kube.selectors import Selector

Object = dict[str, Any]
ObjKey = tuple[str, str]  # (namespace or "", name)


def _labels(obj: Object) -> dict[str, str]:
    labels = (obj.get("metadata") or {}).get("labels")
    return labels if isinstance(labels, dict) else {}


class Bucket:
    """Objects by (namespace, name) with the indexes above. Stored objects are never mutated in
    place by the store (a write replaces the dict), so the indexes stay true between writes."""

    def __init__(self) -> None:
        self._objects: dict[ObjKey, Object] = {}
        self._order: list[ObjKey] = []
        self._by_label: dict[str, dict[str, set[ObjKey]]] = {}
        self._by_name: dict[str, set[ObjKey]] = {}

    # -- dict-like reads ----------------------------------------------------------------------
    def get(self, key: ObjKey) -> Object | None:
        return self._objects.get(key)

    def __getitem__(self, key: ObjKey) -> Object:
        return self._objects[key]

    def __contains__(self, key: object) -> bool:
        return key in self._objects

    def __iter__(self) -> Iterator[ObjKey]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._objects)

    def values(self) -> list[Object]:
        """In (namespace, name) order; a list, so the caller may write while it walks."""
        return [self._objects[k] for k in self._order]

    def items(self) -> list[tuple[ObjKey, Object]]:
        return [(k, self._objects[k]) for k in self._order]

    # -- writes -------------------------------------------------------------------------------
    def put(self, key: ObjKey, obj: Object) -> None:
        old = self._objects.get(key)
        self._objects[key] = obj
        if old is None:
            bisect.insort(self._order, key)
            self._by_name.setdefault(key[1], set()).add(key)
            self._index_labels(key, {}, _labels(obj))
        else:
            self._index_labels(key, _labels(old), _labels(obj))

    def remove(self, key: ObjKey) -> None:
        old = self._objects.pop(key)
        at = bisect.bisect_left(self._order, key)
        del self._order[at]
        names = self._by_name[key[1]]
        names.discard(key)
        if not names:
            del self._by_name[key[1]]
        self._index_labels(key, _labels(old), {})

    def _index_labels(self, key: ObjKey, old: dict[str, str], new: dict[str, str]) -> None:
        if old == new:
            return
        for label, value in old.items():
            if new.get(label) != value:
                values = self._by_label[label]
                keys = values[value]
                keys.discard(key)
                if not keys:
                    del values[value]
                    if not values:
                        del self._by_label[label]
        for label, value in new.items():
            if old.get(label) != value:
                self._by_label.setdefault(label, {}).setdefault(value, set()).add(key)

    # -- list -----------------------------------------------------------------------------------
    def select(self, namespace: str | None, selector: Selector) -> list[Object]:
        """The stored objects (not copies) in `namespace` (None or "": every namespace) that
        match `selector`, in (namespace, name) order."""
        candidates = self._narrowest(namespace or None, selector)
        if candidates is None:
            keys: list[ObjKey] | Iterator[ObjKey] = self._namespace_slice(namespace or None)
        else:
            keys = sorted(k for k in candidates if not namespace or k[0] == namespace)
        objs = [self._objects[k] for k in keys]
        return objs if selector.empty else [o for o in objs if selector.matches(o)]

    def _namespace_slice(self, namespace: str | None) -> list[ObjKey]:
        if namespace is None:
            return self._order
        lo = bisect.bisect_left(self._order, (namespace, ""))
        hi = bisect.bisect_left(self._order, (namespace + "\0", ""))
        return self._order[lo:hi]

    def _narrowest(self, namespace: str | None, selector: Selector) -> set[ObjKey] | None:
        """The smallest key set an equality of the selector allows; None: nothing narrows it
        (then the namespace's slice is walked)."""
        best: set[ObjKey] | None = None

        def offer(keys: set[ObjKey]) -> None:
            nonlocal best
            if best is None or len(keys) < len(best):
                best = keys

        for field in selector.fields:
            if field.negated:
                continue
            if field.path == "metadata.name":
                offer(self._by_name.get(field.value, set()))
            elif field.path == "metadata.namespace" and namespace is None:
                # Cluster-scoped objects are stored under "": they match no other namespace.
                offer(set(self._namespace_slice(field.value)))
        for req in selector.labels:
            if req.op in ("=", "in"):
                values = self._by_label.get(req.key, {})
                found = [values[v] for v in req.values if v in values]
                offer(found[0] if len(found) == 1 else set().union(*found))
        return best
