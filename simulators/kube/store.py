"""The object store behind the simulated Kubernetes API: API-server semantics without HTTP.

CONTRACT (written first so the HTTP layer and the DPF/Grove controllers can be built in
parallel; the kube piece implements the bodies, keeping these signatures):

- One global, increasing `resourceVersion` (an int internally, a decimal string on objects).
- `create` sets `metadata.uid`, `resourceVersion`, `generation: 1`, `creationTimestamp`
  (RFC3339, `Z`), keeps `kind`/`apiVersion`; fails `AlreadyExists` (409).
- `update` (PUT) fails `Conflict` (409) when the body's `metadata.resourceVersion` is set and
  stale; without `subresource`, changes to `status` are ignored (when the type has a status
  subresource) and `generation` increments when `spec` (or anything but metadata/status)
  changed; with `subresource="status"`, only `status` is taken from the body.
- `patch` applies a JSON merge patch (`"merge"`) or a JSON patch (`"json"`), then behaves as
  `update` (a patch carrying `metadata.resourceVersion` is checked the same way).
- `delete`: an object with finalizers gets `deletionTimestamp` (and `deletionGracePeriodSeconds:
  0`) and stays until an update empties its finalizers, when it is removed (DELETED event);
  one without finalizers is removed at once. Returns the object as it last was.
- Every write is validated by the `validate` callable given to the store (CRD schemas); it
  raises `Invalid` (422) with the causes, and the store changes nothing.
- Every change appends a `WatchEvent` to a bounded history; `watch` replays events after the
  given resourceVersion (raising `Gone` (410) when that is older than the history holds), then
  follows live ones. Events are filtered by namespace and selectors like `list`.
- Selectors: label selectors (`a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`,
  comma = and); field selectors `metadata.name` and `metadata.namespace` (`=`, `==`, `!=`).
- Objects handed out are deep copies: callers may mutate them freely.

Additions beyond the first contract (compatible): `validate_rules` (the CRDs' CEL rules, given
the old object on updates), `ensure_namespace`, `watch(...,
initial_events=True)` (synthetic ADDED events for what exists, as a watch without a
resourceVersion gets from a real server; `resource_version=0` does the same), the returned watch
has `aclose()` and `next_shared(timeout)`, `close_watches()`, `Forbidden` (403), and
`invalid_error()` to build a real-shaped 422. The validator may mutate the object it is given
(schema defaults, pruning of unknown fields) before the store commits it. Deleting an object
deletes (in the background, as the garbage collector does) the objects whose ownerReferences
name its uid; deleting a Namespace deletes its content, then the Namespace.
"""

from __future__ import annotations

import builtins
import contextlib
import contextvars
import random
import re
import string
import uuid
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, cast

from simulators.kube.bucket import Bucket
from simulators.kube.patch import PatchError, json_patch, merge_patch
from simulators.kube.selectors import FieldPaths, Selector, SelectorError
from simulators.kube.watch import Watcher, clone

Object = dict[str, Any]


@dataclass(frozen=True)
class PrinterColumn:
    name: str
    type: str
    json_path: str
    description: str = ""
    priority: int = 0
    format: str = ""


@dataclass(frozen=True)
class ResourceType:
    """One served resource: a CRD version, or a built-in (Namespace, Secret)."""

    group: str  # "" for the core group
    version: str
    plural: str
    singular: str
    kind: str
    list_kind: str
    namespaced: bool
    subresources: frozenset[str] = frozenset()  # "status", "scale"
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    printer_columns: tuple[PrinterColumn, ...] = ()
    schema: Object | None = field(default=None, compare=False, hash=False)  # openAPIV3Schema

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources


class StoreError(Exception):
    """An API error, carrying what a `Status` object needs."""

    code = 500
    reason = "InternalError"

    def __init__(self, message: str, *, details: Object | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}


class BadRequest(StoreError):
    code, reason = 400, "BadRequest"


class NotFound(StoreError):
    code, reason = 404, "NotFound"


class MethodNotAllowed(StoreError):
    code, reason = 405, "MethodNotAllowed"


class AlreadyExists(StoreError):
    code, reason = 409, "AlreadyExists"


class Conflict(StoreError):
    code, reason = 409, "Conflict"


class Gone(StoreError):
    code, reason = 410, "Expired"


class UnsupportedMediaType(StoreError):
    code, reason = 415, "UnsupportedMediaType"


class Invalid(StoreError):
    code, reason = 422, "Invalid"


class Forbidden(StoreError):
    code, reason = 403, "Forbidden"


WatchEventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]


@dataclass(frozen=True)
class WatchEvent:
    type: WatchEventType
    object: Object
    resource_version: int


Validator = Callable[[ResourceType, Object], None]  # raises Invalid
# The CRDs' CEL rules (`simulators.kube.cel`): the new object and, on updates, the old one.
RuleCheck = Callable[[ResourceType, Object, "Object | None"], None]  # raises Invalid


def resource_label(rt: ResourceType) -> str:
    """`dpus.provisioning.dpu.nvidia.com` or `namespaces`: how API errors name a resource."""
    return f"{rt.plural}.{rt.group}" if rt.group else rt.plural


def kind_label(rt: ResourceType) -> str:
    """`DPU.provisioning.dpu.nvidia.com` or `Secret`: how 422 messages name a kind."""
    return f"{rt.kind}.{rt.group}" if rt.group else rt.kind


def invalid_error(rt: ResourceType, name: str, causes: list[tuple[str, str, str]]) -> Invalid:
    """A 422 Invalid shaped as the API server's; causes are (field, reason, message)."""
    parts = [f"{f}: {m}" if f else m for f, _, m in causes]
    joined = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    return Invalid(
        f'{kind_label(rt)} "{name}" is invalid: {joined}',
        details={
            "name": name,
            "group": rt.group,
            "kind": rt.kind,
            "causes": [{"reason": r, "message": m, "field": f} for f, r, m in causes],
        },
    )


def not_found(rt: ResourceType, name: str) -> NotFound:
    return NotFound(
        f'{resource_label(rt)} "{name}" not found',
        details={"name": name, "group": rt.group, "kind": rt.plural},
    )


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
# Metadata fields a client may not change through an update (the server keeps its own).
_SERVER_METADATA = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
)

# -- managedFields ------------------------------------------------------------------------------
# Who wrote which field, as a real API server records it for `operation: Update` writes: the
# HTTP layer names the manager (`?fieldManager=`, else the User-Agent up to its first "/");
# in-process controllers write unnamed and are not recorded. A manager owns the leaf fields its
# writes changed (lists are atomic: the list is the leaf), and loses those another manager
# changes later. Server-side apply is not served.
_manager: contextvars.ContextVar[str | None] = contextvars.ContextVar("field_manager", default=None)
_UNMANAGED_META = ("labels", "annotations")


@contextlib.contextmanager
def writing_as(manager: str | None) -> Iterator[None]:
    """Within the block, writes are recorded in managedFields as `manager`'s."""
    token = _manager.set(manager[:128] if manager else None)
    try:
        yield
    finally:
        _manager.reset(token)


def _leaves(old: Any, new: Any, path: tuple[str, ...]) -> set[tuple[str, ...]]:
    if isinstance(old, dict) and isinstance(new, dict):
        out: set[tuple[str, ...]] = set()
        for k in set(old) | set(new):
            if old.get(k) != new.get(k):
                out |= _leaves(old.get(k), new.get(k), (*path, k))
        return out
    return {path} if old != new else set()


def _changed_fields(old: Object | None, new: Object) -> set[tuple[str, ...]]:
    def view(o: Object | None) -> Object:
        if o is None:
            return {}
        meta = o.get("metadata") or {}
        out = {k: v for k, v in o.items() if k not in ("metadata", "apiVersion", "kind")}
        out["metadata"] = {k: meta[k] for k in _UNMANAGED_META if k in meta}
        return out

    return _leaves(view(old), view(new), ())


def _to_fields_v1(paths: set[tuple[str, ...]]) -> Object:
    root: Object = {}
    for path in sorted(paths):
        node = root
        for part in path:
            node = node.setdefault(f"f:{part}", {})
    return root


def _from_fields_v1(fields: Object, path: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    if not fields:
        return {path} if path else set()
    out: set[tuple[str, ...]] = set()
    for k, v in fields.items():
        if k.startswith("f:"):
            out |= _from_fields_v1(v, (*path, k[2:]))
    return out


def _overlaps(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    return a[: len(b)] == b or b[: len(a)] == a


def _managed_fields(
    rt: ResourceType, old: Object | None, new: Object, subresource: str | None
) -> list[Object] | None:
    """The managedFields after this write (None: leave them as they were)."""
    entries = [dict(e) for e in ((old or {}).get("metadata") or {}).get("managedFields") or []]
    manager = _manager.get()
    if manager is None:
        return entries if old is not None else None
    changed = _changed_fields(old, new)
    if not changed:
        return entries
    out = []
    mine: set[tuple[str, ...]] = set()
    for e in entries:
        paths = _from_fields_v1(e.get("fieldsV1") or {})
        if (
            e.get("manager") == manager
            and e.get("operation") == "Update"
            and e.get("subresource") == subresource
        ):
            mine = paths
            continue
        kept = {p for p in paths if not any(_overlaps(p, c) for c in changed)}
        if kept:
            out.append({**e, "fieldsV1": _to_fields_v1(kept)})
    mine = {p for p in mine if not any(_overlaps(p, c) for c in changed)} | changed
    entry: Object = {
        "manager": manager,
        "operation": "Update",
        "apiVersion": rt.api_version,
        "time": _now(),
        "fieldsType": "FieldsV1",
        "fieldsV1": _to_fields_v1(mine),
    }
    if subresource:
        entry["subresource"] = subresource
    out.append(entry)
    return out


_TypeKey = tuple[str, str]  # (group, plural): every served version shares one storage
_ObjKey = tuple[str, str]  # (namespace or "", name)


class Store:
    def __init__(
        self,
        resource_types: Iterable[ResourceType],
        *,
        validate: Validator | None = None,
        validate_rules: RuleCheck | None = None,
        history_size: int = 20_000,
    ) -> None:
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        self._by_kind: dict[tuple[str, str], ResourceType] = {}
        # Indexed per type (simulators/kube/bucket.py): a list costs O(matches), not O(all).
        self._objects: dict[_TypeKey, Bucket] = {}
        for rt in resource_types:
            self._types[(rt.group, rt.version, rt.plural)] = rt
            self._by_kind[(rt.api_version, rt.kind)] = rt
            self._objects.setdefault((rt.group, rt.plural), Bucket())
        self._validate = validate
        self._validate_rules = validate_rules
        self._rv = 0
        # Stored objects are never mutated in place (every write makes a new dict), so the
        # history can share them; `_floor` is the newest version the history no longer holds.
        self._history: deque[tuple[str, Object | None, Object, int, _TypeKey]] = deque()
        self._history_size = history_size
        self._floor = 0
        self._watchers: dict[_TypeKey, weakref.WeakSet[Watcher]] = {}
        self._ns_type = self._by_kind.get(("v1", "Namespace"))
        # Field labels a type selects on beyond metadata.name/namespace (an Event's `reason`).
        self.field_paths: dict[_TypeKey, FieldPaths] = {}
        # Admission checks of built-in kinds beyond the schema (an Event's rules), run on every write.
        self.admission: list[Validator] = []

    # -- types ------------------------------------------------------------------------------
    def resource_types(self) -> list[ResourceType]:
        return list(self._types.values())

    def resource_type(self, group: str, version: str, plural: str) -> ResourceType:
        """The served type, or NotFound."""
        rt = self._types.get((group, version, plural))
        if rt is None:
            raise NotFound("the server could not find the requested resource", details={})
        return rt

    def resource_type_for_kind(self, api_version: str, kind: str) -> ResourceType:
        rt = self._by_kind.get((api_version, kind))
        if rt is None:
            raise NotFound(f'no matches for kind "{kind}" in version "{api_version}"')
        return rt

    @property
    def resource_version(self) -> int:
        return self._rv

    # -- persistence (the dev stack's snapshot across restarts) -------------------------------
    def snapshot(self) -> dict[str, Any]:
        """Every stored object and the resource version, as plain JSON data."""
        objects = [
            {"group": group, "plural": plural, "object": obj}
            for (group, plural), bucket in self._objects.items()
            for obj in bucket.values()
        ]
        return {"resourceVersion": self._rv, "objects": objects}

    def restore(self, snapshot: dict[str, Any]) -> int:
        """Load a `snapshot` into an empty store; returns how many objects it held.

        The watch history starts empty at the restored version: a client resuming from an older
        resourceVersion gets 410 Gone and lists again, as after a real API server's compaction.
        """
        count = 0
        for item in snapshot["objects"]:
            key = (item["group"], item["plural"])
            if key not in self._objects:
                raise BadRequest(f"snapshot holds {item['plural']}.{item['group']}, a type not served")
            obj = item["object"]
            meta = obj["metadata"]
            rt = next(t for t in self._types.values() if (t.group, t.plural) == key)
            self._objects[key].put(self._key(rt, meta.get("namespace"), meta["name"]), obj)
            count += 1
        self._rv = self._floor = int(snapshot["resourceVersion"])
        return count

    def restart_renumbered(self) -> int:
        """Act as an API server restarted on a new store (an etcd restored elsewhere): every open
        watch ends, every object gets a new, lower resourceVersion (1..N in a stable order), the
        watch history is dropped, and later writes continue from N. Clients that compare
        resourceVersions see them go backwards; a watch from a version newer than the store's
        gets 410 Gone. Returns the new resourceVersion."""
        self.close_watches()
        self._history.clear()
        rv = 0
        for key in sorted(self._objects):
            for obj in self._objects[key].values():
                rv += 1
                obj["metadata"]["resourceVersion"] = str(rv)
        self._rv = self._floor = rv
        return rv

    def compact(self) -> int:
        """Compact the watch history, as etcd does, and end every open watch: a client resuming
        from any version it held gets 410 Gone and must list again (the version moves on by one
        so that every held version is older than the history). Returns the new floor."""
        self._rv += 1
        self._floor = self._rv
        self._history.clear()
        self.close_watches()
        return self._rv

    def open_watches(self) -> dict[str, int]:
        """Watches open now, per resource (`plural.group`), for `/sim/kube/watches`."""
        counts: dict[str, int] = {}
        for (group, plural), watchers in self._watchers.items():
            live = sum(1 for w in list(watchers) if not w.closed)
            if live:
                counts[f"{plural}.{group}" if group else plural] = live
        return counts

    # -- helpers ----------------------------------------------------------------------------
    @staticmethod
    def _key(rt: ResourceType, namespace: str | None, name: str) -> _ObjKey:
        return ((namespace or "") if rt.namespaced else "", name)

    def _bucket(self, rt: ResourceType) -> Bucket:
        return self._objects[(rt.group, rt.plural)]

    def _current(self, rt: ResourceType, namespace: str | None, name: str) -> Object:
        obj = self._bucket(rt).get(self._key(rt, namespace, name))
        if obj is None:
            raise not_found(rt, name)
        return obj

    def _record(self, rt: ResourceType, kind: str, old: Object | None, new: Object) -> None:
        tkey = (rt.group, rt.plural)
        self._history.append((kind, old, new, self._rv, tkey))
        while len(self._history) > self._history_size:
            self._floor = self._history.popleft()[3]
        watchers = self._watchers.get(tkey)
        if watchers:
            for w in list(watchers):
                w.offer(kind, old, new, self._rv)

    def selector(
        self, label_selector: str | None, field_selector: str | None, rt: ResourceType | None = None
    ) -> Selector:
        """Parse a label/field selector pair (with `rt`'s own field labels, `field_paths`);
        BadRequest when it does not parse."""
        try:
            paths = self.field_paths.get((rt.group, rt.plural)) if rt is not None else None
            return Selector.parse(label_selector, field_selector, paths)
        except SelectorError as exc:
            raise BadRequest(str(exc)) from exc

    def _check_identity(self, rt: ResourceType, namespace: str | None, obj: Object) -> None:
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata", {}), dict):
            raise BadRequest("the object provided is not a valid JSON object")
        api_version, kind = obj.setdefault("apiVersion", rt.api_version), obj.setdefault("kind", rt.kind)
        if api_version != rt.api_version:
            raise BadRequest(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({rt.api_version})"
            )
        if kind != rt.kind:
            raise BadRequest(f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})")
        meta = obj.setdefault("metadata", {})
        if rt.namespaced:
            body_ns = meta.get("namespace")
            if body_ns and namespace and body_ns != namespace:
                raise BadRequest(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = namespace or body_ns or ""
        else:
            meta.pop("namespace", None)

    def _check_meta(self, rt: ResourceType, obj: Object) -> None:
        meta = obj["metadata"]
        name = meta.get("name", "")
        causes: list[tuple[str, str, str]] = []
        if not name:
            causes.append(
                ("metadata.name", "FieldValueRequired", "Required value: name or generateName is required")
            )
        elif len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
            causes.append(
                ("metadata.name", "FieldValueInvalid", f'Invalid value: "{name}": {_SUBDOMAIN_MSG}')
            )
        elif rt.kind == "Namespace" and (len(name) > 63 or not _DNS1123_LABEL.match(name)):
            causes.append(("metadata.name", "FieldValueInvalid", f'Invalid value: "{name}": {_LABEL_MSG}'))
        for fld in ("labels", "annotations"):
            value = meta.get(fld)
            if value is not None and (
                not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values())
            ):
                causes.append(
                    (f"metadata.{fld}", "FieldValueInvalid", "Invalid value: must be a map of strings")
                )
        fins = meta.get("finalizers")
        if fins is not None and (not isinstance(fins, list) or not all(isinstance(f, str) for f in fins)):
            causes.append(
                ("metadata.finalizers", "FieldValueInvalid", "Invalid value: must be a list of strings")
            )
        if causes:
            raise invalid_error(rt, name, causes)

    def _admit(self, rt: ResourceType, obj: Object, old: Object | None = None) -> None:
        self._check_meta(rt, obj)
        if self._validate is not None:
            self._validate(rt, obj)
        for check in self.admission:
            check(rt, obj)
        if self._validate_rules is not None:
            self._validate_rules(rt, obj, old)

    # -- reads ------------------------------------------------------------------------------
    def get(self, rt: ResourceType, namespace: str | None, name: str) -> Object:
        return cast(Object, clone(self._current(rt, namespace, name)))

    def list(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[builtins.list[Object], int]:
        """Matching objects sorted by namespace/name, and the store's resourceVersion."""
        return [
            clone(o)
            for o in self.list_shared(rt, namespace, self.selector(label_selector, field_selector, rt))
        ], self._rv

    def list_shared(
        self, rt: ResourceType, namespace: str | None, selector: Selector
    ) -> builtins.list[Object]:
        """Like `list` but returns the stored snapshots themselves: the caller must not mutate them."""
        return self._bucket(rt).select(namespace if rt.namespaced else None, selector)

    # -- writes -----------------------------------------------------------------------------
    def ensure_namespace(self, name: str) -> None:
        """Create the Namespace `name` unless it exists (used at start for system namespaces)."""
        if self._ns_type is not None and ("", name) not in self._bucket(self._ns_type):
            self.create(self._ns_type, None, {"metadata": {"name": name}})

    def create(
        self, rt: ResourceType, namespace: str | None, obj: Object, *, dry_run: bool = False
    ) -> Object:
        obj = cast(Object, clone(obj))
        self._check_identity(rt, namespace, obj)
        meta = obj["metadata"]
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(
                random.choices(string.ascii_lowercase + string.digits, k=5)
            )
        name = meta.get("name", "")
        if rt.namespaced:
            self._check_namespace(rt, meta["namespace"], name)
        for fld in ("uid", "resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(fld, None)
        meta["uid"] = str(uuid.uuid4())
        meta["generation"] = 1
        meta["creationTimestamp"] = _now()
        if rt.has_status:
            obj.pop("status", None)  # status is written through its subresource only
        if rt.group == "" and rt.kind == "Namespace":
            obj["spec"] = {"finalizers": ["kubernetes"]}
            obj["status"] = {"phase": "Active"}
        self._admit(rt, obj)
        meta.pop("managedFields", None)
        if (managed := _managed_fields(rt, None, obj, None)) is not None:
            meta["managedFields"] = managed
        key = self._key(rt, meta.get("namespace"), name)
        bucket = self._bucket(rt)
        if key in bucket:
            raise AlreadyExists(
                f'{resource_label(rt)} "{name}" already exists',
                details={"name": name, "group": rt.group, "kind": rt.plural},
            )
        if dry_run:
            return cast(Object, clone(obj))
        self._rv += 1
        meta["resourceVersion"] = str(self._rv)
        bucket.put(key, obj)
        self._record(rt, "ADDED", None, obj)
        return cast(Object, clone(obj))

    def _check_namespace(self, rt: ResourceType, namespace: str, name: str) -> None:
        if not namespace:
            raise BadRequest("the namespace of the object is not set")
        if self._ns_type is None:
            return
        ns = self._bucket(self._ns_type).get(("", namespace))
        if ns is None:
            raise NotFound(
                f'namespaces "{namespace}" not found', details={"name": namespace, "kind": "namespaces"}
            )
        if ns["metadata"].get("deletionTimestamp"):
            raise Forbidden(
                f'{resource_label(rt)} "{name}" is forbidden: unable to create new content in namespace '
                f"{namespace} because it is being terminated",
                details={"name": name, "group": rt.group, "kind": rt.plural},
            )

    def update(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        obj: Object,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> Object:
        if subresource not in (None, "status") or (subresource == "status" and not rt.has_status):
            raise NotFound("the server could not find the requested resource")
        obj = cast(Object, clone(obj))
        self._check_identity(rt, namespace, obj)
        meta = obj["metadata"]
        if meta.get("name") and meta["name"] != name:
            raise BadRequest(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
            )
        meta["name"] = name
        old = self._current(rt, namespace, name)
        old_meta = old["metadata"]
        rv = meta.get("resourceVersion")
        if rv not in (None, "") and str(rv) != old_meta["resourceVersion"]:
            raise Conflict(
                f'Operation cannot be fulfilled on {resource_label(rt)} "{name}": the object has been '
                "modified; please apply your changes to the latest version and try again",
                details={"name": name, "group": rt.group, "kind": rt.plural},
            )
        if subresource == "status":
            new = {k: v for k, v in old.items() if k != "status"}
            if "status" in obj:
                new["status"] = obj["status"]
            new["metadata"] = dict(old_meta)
        else:
            new = obj
            if rt.has_status:
                new.pop("status", None)
                if "status" in old:
                    new["status"] = old["status"]
            for fld in _SERVER_METADATA:
                if fld in old_meta:
                    meta[fld] = old_meta[fld]
                else:
                    meta.pop(fld, None)
            if old_meta.get("deletionTimestamp"):
                added = set(meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
                if added:
                    raise Forbidden(
                        f'{resource_label(rt)} "{name}" is forbidden: no new finalizers can be added '
                        "if the object is being deleted",
                        details={"name": name, "group": rt.group, "kind": rt.plural},
                    )
        new["metadata"]["resourceVersion"] = old_meta["resourceVersion"]
        new["metadata"]["namespace"] = old_meta.get("namespace")
        if not rt.namespaced:
            new["metadata"].pop("namespace", None)
        self._admit(rt, new, old)
        if subresource is None and self._spec_changed(rt, old, new):
            new["metadata"]["generation"] = old_meta.get("generation", 1) + 1
        new["metadata"].pop("managedFields", None)
        if old_meta.get("managedFields") is not None:
            new["metadata"]["managedFields"] = old_meta["managedFields"]
        if new != old and (managed := _managed_fields(rt, old, new, subresource)) is not None:
            new["metadata"]["managedFields"] = managed
        if new == old or dry_run:
            # A no-op write changes nothing (no new resourceVersion), as on a real server.
            return cast(Object, clone(old if new == old else new))
        return self._commit(rt, old, new)

    @staticmethod
    def _spec_changed(rt: ResourceType, old: Object, new: Object) -> bool:
        ignored = {"metadata", "status"} if rt.has_status else {"metadata"}
        keys = (set(old) | set(new)) - ignored
        return any(old.get(k) != new.get(k) for k in keys)

    def _commit(self, rt: ResourceType, old: Object, new: Object) -> Object:
        meta = new["metadata"]
        key = self._key(rt, meta.get("namespace"), meta["name"])
        self._rv += 1
        meta["resourceVersion"] = str(self._rv)
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self._bucket(rt).remove(key)
            self._record(rt, "DELETED", old, new)
            self._after_removal(rt, new)
        else:
            self._bucket(rt).put(key, new)
            self._record(rt, "MODIFIED", old, new)
        return cast(Object, clone(new))

    def patch(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        patch: Any,
        patch_type: Literal["merge", "json"],
        *,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> Object:
        current = self._current(rt, namespace, name)
        try:
            if patch_type == "merge":
                if not isinstance(patch, dict):
                    raise PatchError("a merge patch must be a JSON object", 400)
                patched = merge_patch(current, patch)
            elif patch_type == "json":
                patched = json_patch(current, patch)
            else:
                raise UnsupportedMediaType(f"the patch type {patch_type!r} is not supported")
        except PatchError as exc:
            if exc.code == 400:
                raise BadRequest(str(exc)) from exc
            raise Invalid(str(exc), details={"name": name, "group": rt.group, "kind": rt.kind}) from exc
        if not isinstance(patched, dict):
            raise BadRequest("the patched object is not a JSON object")
        return self.update(rt, namespace, name, patched, subresource=subresource, dry_run=dry_run)

    def delete(self, rt: ResourceType, namespace: str | None, name: str, *, dry_run: bool = False) -> Object:
        old = self._current(rt, namespace, name)
        meta = old["metadata"]
        if dry_run:
            return cast(Object, clone(old))
        is_namespace = rt.group == "" and rt.kind == "Namespace"
        if meta.get("finalizers") or is_namespace:
            if meta.get("deletionTimestamp"):
                return cast(Object, clone(old))
            new = dict(old)
            new["metadata"] = {
                **meta,
                "deletionTimestamp": _now(),
                "deletionGracePeriodSeconds": 0,
                "generation": meta.get("generation", 1) + 1,
            }
            if is_namespace:
                new["status"] = {"phase": "Terminating"}
                result = self._commit(rt, old, new)
                self._empty_namespace(name)
                return result
            return self._commit(rt, old, new)
        self._bucket(rt).remove(self._key(rt, namespace, name))
        self._rv += 1
        gone = dict(old)
        gone["metadata"] = {**meta, "resourceVersion": str(self._rv)}
        self._record(rt, "DELETED", old, gone)
        self._after_removal(rt, gone)
        return cast(Object, clone(old))

    def _after_removal(self, rt: ResourceType, removed: Object) -> None:
        """Garbage-collect dependents, and finish a terminating namespace once empty."""
        uid = removed["metadata"].get("uid")
        for dep_rt in self._types.values():
            for dep in self._bucket(dep_rt).values():
                refs = dep["metadata"].get("ownerReferences") or []
                if any(r.get("uid") == uid for r in refs) and not dep["metadata"].get("deletionTimestamp"):
                    m = dep["metadata"]
                    if self._key(dep_rt, m.get("namespace"), m["name"]) in self._bucket(dep_rt):
                        self.delete(dep_rt, m.get("namespace"), m["name"])
        ns = removed["metadata"].get("namespace")
        if rt.namespaced and ns and self._ns_type is not None:
            ns_obj = self._bucket(self._ns_type).get(("", ns))
            if ns_obj is not None and ns_obj["metadata"].get("deletionTimestamp"):
                self._finish_namespace(ns)

    def _empty_namespace(self, name: str) -> None:
        for rt in self._types.values():
            if rt.namespaced:
                for key, obj in self._bucket(rt).items():
                    if (
                        key[0] == name
                        and key in self._bucket(rt)
                        and not obj["metadata"].get("deletionTimestamp")
                    ):
                        self.delete(rt, name, key[1])
        self._finish_namespace(name)

    def _finish_namespace(self, name: str) -> None:
        assert self._ns_type is not None
        for rt in self._types.values():
            if rt.namespaced and any(k[0] == name for k in self._bucket(rt)):
                return
        ns_rt = self._ns_type
        old = self._bucket(ns_rt).get(("", name))
        if old is None:
            return
        self._bucket(ns_rt).remove(("", name))
        self._rv += 1
        gone = dict(old)
        gone["metadata"] = {**old["metadata"], "resourceVersion": str(self._rv)}
        self._record(ns_rt, "DELETED", old, gone)

    # -- watch ------------------------------------------------------------------------------
    def watch(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        *,
        resource_version: int | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        initial_events: bool = False,
    ) -> Watcher:
        """Events after `resource_version` (None: from now on), then live ones, until closed.

        Raises Gone when `resource_version` is older than the history holds. With
        `initial_events` (or `resource_version=0`, as on a real server) the watch starts with
        an ADDED event for every matching object that exists now.
        """
        selector = self.selector(label_selector, field_selector, rt)
        watcher = Watcher(namespace if rt.namespaced else None, selector, max_pending=self._history_size)
        tkey = (rt.group, rt.plural)
        if resource_version == 0 or (resource_version is None and initial_events):
            for obj in self.list_shared(rt, watcher.namespace, selector):
                watcher.offer("ADDED", None, obj, int(obj["metadata"]["resourceVersion"]))
        elif resource_version is not None:
            if resource_version > self._rv:
                # Newer than this store (it restarted renumbered): relist, as a real server
                # makes a client do for a version it cannot serve.
                raise Gone(f"too large resource version: {resource_version} (current {self._rv})")
            if resource_version < self._floor:
                raise Gone(f"too old resource version: {resource_version} ({self._floor + 1})")
            if resource_version < self._rv:
                for kind, old, new, rv, key in self._history:
                    if rv > resource_version and key == tkey:
                        watcher.offer(kind, old, new, rv)
        self._watchers.setdefault(tkey, weakref.WeakSet()).add(watcher)
        return watcher

    def close_watches(self) -> None:
        """End every open watch (at shutdown)."""
        for watchers in self._watchers.values():
            for w in list(watchers):
                w.close()
