"""Events, as the API server serves them: core/v1 `events` and its events.k8s.io/v1 view.

One storage, two shapes, as in Kubernetes: an Event is stored once (here in core/v1 form, under
`/api/v1/namespaces/<ns>/events`); `/apis/events.k8s.io/v1/namespaces/<ns>/events` serves the
same objects converted (`to_v1`, `to_core`), so an Event a controller writes through
events.k8s.io/v1 is what `kubectl describe` and `kubectl get events` read through core/v1.

Behaviour and its upstream source, one row each (sources at the kubernetes/kubernetes paths
named; kubectl's behaviour is checked with the real kubectl in tests/test_kube_events.py):

| # | behaviour | upstream source (kubernetes/kubernetes) |
| --- | --- | --- |
| 1 | events.k8s.io/v1 <-> core/v1 field mapping | pkg/apis/events/v1/conversion.go |
| 2 | core/v1 field selectors | pkg/registry/core/event/strategy.go `ToSelectableFields` |
| 3 | events.k8s.io/v1 field selectors | pkg/apis/events/v1/conversion.go `AddFieldLabelConversionsForEvent` |
| 4 | every write: the legacy rules | pkg/apis/core/validation/events.go `legacyValidateEvent` |
| 5 | create through events.k8s.io/v1: the strict rules | same file, `ValidateEventCreate` |
| 6 | update through events.k8s.io/v1: only `series` changes | same file, `ValidateEventUpdate` |
| 7 | strategic merge patch of `series` accepted | client-go tools/events/event_broadcaster.go |
| 8 | the Table `kubectl get events` prints | pkg/printers/internalversion/printers.go `printEvent` |
| 9 | how `kubectl describe` finds an object's Events | kubectl pkg/describe/describe.go `searchEvents` |

1. `regarding`<->`involvedObject`, `note`<->`message`, `reportingController`<->
   `reportingComponent`, `deprecatedSource`<->`source`, `deprecated{First,Last}Timestamp`,
   `deprecatedCount` <-> `firstTimestamp`, `lastTimestamp`, `count`; the rest by name.
2. `involvedObject.{kind,namespace,name,uid,apiVersion,resourceVersion,fieldPath}`, `reason`,
   `reportingComponent`, `source`, `type`, `metadata.name`, `metadata.namespace`; any other
   field is 400 `field label not supported`.
3. `regarding.*` -> `involvedObject.*`, `reportingController` -> `reportingComponent`, `reason`,
   `type`, `metadata.*`; any other is 400.
4. An Event with `eventTime` needs `reportingController` (a qualified name), `reportingInstance`,
   `action`, `reason` (each at most 128 characters) and a message of at most 1,024; one whose
   `regarding`/`involvedObject` has no namespace may only be in `default` or `kube-system`.
   Without `eventTime` its namespace must match `involvedObject.namespace`. 422 otherwise.
5. Also `eventTime` required, `type` Normal or Warning, no deprecated field set, and a `series`
   has `count` >= 2 and a `lastObservedTime`.
6. `regarding`, `reason`, `note`, `type`, `eventTime`, `action`, `related`, the reporting
   fields and the deprecated ones are immutable (422); a changed `series` is validated as in 5.
7. client-go's broadcaster patches a series with a strategic merge patch; `series` holds no
   list, so it applies as a JSON merge patch.
8. Columns Last Seen, Type, Reason, Object (`<lower-cased kind>/<name>`), Subobject, Source,
   Message, First Seen, Count, Name (priority 1, shown by `-o wide`). First Seen is
   `firstTimestamp`, else `eventTime`; Last Seen `series.lastObservedTime`, else
   `lastTimestamp`, else First Seen; Count `series.count`, else `count`, else 1.
9. core/v1 `events` with `fieldSelector=involvedObject.name=..,involvedObject.namespace=..,
   involvedObject.kind=..,involvedObject.uid=..`: an Event without the object's uid is not
   listed under it (tests/test_kube_events.py runs the real kubectl against this).

Not served: Events' TTL (a real server drops them after `--event-ttl`, 1 h by default), and
watch bookmarks on the events.k8s.io view.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from aiohttp import web

from simulators.kube.patch import PatchError, json_patch, merge_patch
from simulators.kube.store import (
    BadRequest,
    Invalid,
    MethodNotAllowed,
    Object,
    PrinterColumn,
    ResourceType,
    Store,
    UnsupportedMediaType,
    invalid_error,
)
from simulators.kube.table import human_duration

if TYPE_CHECKING:
    from simulators.kube.http import KubeAPI

_PRESERVE: Object = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
EVENT = ResourceType(
    "", "v1", "events", "event", "Event", "EventList", True, short_names=("ev",), schema=_PRESERVE
)
EVENT_V1 = ResourceType(
    "events.k8s.io",
    "v1",
    "events",
    "event",
    "Event",
    "EventList",
    True,
    short_names=("ev",),
    schema=_PRESERVE,
)
RESOURCE_TYPES = (EVENT, EVENT_V1)

REFERENCE_FIELDS = ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")


def _get(*path: str) -> Callable[[Mapping[str, Any]], str]:
    def read(obj: Mapping[str, Any]) -> str:
        value: Any = obj
        for part in path:
            value = value.get(part) if isinstance(value, Mapping) else None
        return "" if value is None else str(value)

    return read


CORE_FIELD_PATHS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    **{f"involvedObject.{f}": _get("involvedObject", f) for f in REFERENCE_FIELDS},
    "reason": _get("reason"),
    "reportingComponent": _get("reportingComponent"),
    "source": _get("source", "component"),
    "type": _get("type"),
}
V1_FIELD_LABELS = {
    **{f"regarding.{f}": f"involvedObject.{f}" for f in REFERENCE_FIELDS},
    "reportingController": "reportingComponent",
    "reason": "reason",
    "type": "type",
    "metadata.name": "metadata.name",
    "metadata.namespace": "metadata.namespace",
}

# -- conversion (pkg/apis/events/v1/conversion.go) ------------------------------------------------
_RENAMED = {  # events.k8s.io/v1 name -> core/v1 name
    "regarding": "involvedObject",
    "note": "message",
    "reportingController": "reportingComponent",
    "deprecatedSource": "source",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedCount": "count",
}
_SAME = ("metadata", "eventTime", "series", "related", "action", "reason", "reportingInstance", "type")


def micro_time(value: Any) -> Any:
    """A `MicroTime` as the API server writes it back (`2006-01-02T15:04:05.000000Z`); a value
    that does not parse is left for validation to refuse."""
    if not isinstance(value, str) or not value:
        return value
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return value
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def to_core(event: Object) -> Object:
    """An events.k8s.io/v1 Event in core/v1 form."""
    core: Object = {"kind": "Event", "apiVersion": "v1"}
    for name in _SAME:
        if name in event:
            core[name] = event[name]
    for v1_name, core_name in _RENAMED.items():
        if v1_name in event:
            core[core_name] = event[v1_name]
    core.setdefault("involvedObject", {})
    if "eventTime" in core:
        core["eventTime"] = micro_time(core["eventTime"])
    if isinstance(core.get("series"), dict):
        core["series"] = {
            **core["series"],
            "lastObservedTime": micro_time(core["series"].get("lastObservedTime")),
        }
    return core


def to_v1(core: Object) -> Object:
    """A stored core/v1 Event in events.k8s.io/v1 form (zero values omitted, as Go's omitempty)."""
    event: Object = {"kind": "Event", "apiVersion": "events.k8s.io/v1"}
    for name in _SAME:
        if core.get(name) not in (None, "", {}):
            event[name] = core[name]
    for v1_name, core_name in _RENAMED.items():
        value = core.get(core_name)
        if value not in (None, "", {}, 0) or v1_name == "regarding":
            event[v1_name] = value if value is not None else {}
    return event


def v1_field_selector(selector: str | None) -> str | None:
    """An events.k8s.io/v1 field selector in core terms; an unknown label is 400."""
    if not selector or not selector.strip():
        return selector
    terms = []
    for term in selector.split(","):
        match = re.match(r"^\s*([^=!\s]+)\s*(==|!=|=)\s*(.*?)\s*$", term)
        if not match:
            raise BadRequest(f"invalid selector: '{selector}'; can't understand '{term}'")
        label, op, value = match.groups()
        if label not in V1_FIELD_LABELS:
            raise BadRequest(f'field label not supported: "{label}"')
        terms.append(f"{V1_FIELD_LABELS[label]}{op}{value}")
    return ",".join(terms)


# -- validation (pkg/apis/core/validation/events.go) ----------------------------------------------
_QUALIFIED = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


def validate_core(event: Object) -> None:
    """`legacyValidateEvent`: every Event, through either API."""
    name = str(event.get("metadata", {}).get("name", ""))
    namespace = str(event.get("metadata", {}).get("namespace", ""))
    involved_ns = str((event.get("involvedObject") or {}).get("namespace") or "")
    causes: list[tuple[str, str, str]] = []

    def cause(field: str, message: str, reason: str = "FieldValueInvalid") -> None:
        causes.append((field, reason, message))

    if not event.get("eventTime"):
        if involved_ns and namespace != involved_ns or not involved_ns and namespace not in ("", "default"):
            cause(
                "involvedObject.namespace", f'Invalid value: "{involved_ns}": does not match event.namespace'
            )
    else:
        if not involved_ns and namespace not in ("default", "kube-system"):
            cause(
                "involvedObject.namespace", f'Invalid value: "{involved_ns}": does not match event.namespace'
            )
        controller = str(event.get("reportingComponent") or "")
        if not controller:
            cause("reportingController", "Required value", "FieldValueRequired")
        elif len(controller) > 316 or not _QUALIFIED.match(controller):
            cause("reportingController", f'Invalid value: "{controller}": must be a qualified name')
        for field, limit in (("reportingInstance", 128), ("action", 128), ("reason", 128)):
            value = str(event.get(field) or "")
            if not value:
                cause(field, "Required value", "FieldValueRequired")
            elif len(value) > limit:
                cause(field, f'Invalid value: "": can have at most {limit} characters')
        if len(str(event.get("message") or "")) > 1024:
            cause("message", 'Invalid value: "": can have at most 1024 characters')
    if causes:
        raise invalid_error(EVENT, name, causes)


def _validate_series(event: Object, causes: list[tuple[str, str, str]]) -> None:
    series = event.get("series")
    if series is None:
        return
    if not isinstance(series, dict) or int(series.get("count") or 0) < 2:
        causes.append(("series.count", "FieldValueInvalid", 'Invalid value: "": should be at least 2'))
    if not isinstance(series, dict) or not series.get("lastObservedTime"):
        causes.append(("series.lastObservedTime", "FieldValueRequired", "Required value"))


def validate_v1_create(event: Object) -> None:
    """`ValidateEventCreate` for events.k8s.io/v1 (strict), on the v1 shape."""
    name = str(event.get("metadata", {}).get("name", ""))
    causes: list[tuple[str, str, str]] = []
    if not event.get("eventTime"):
        causes.append(("eventTime", "FieldValueRequired", "Required value"))
    if event.get("type") not in ("Normal", "Warning"):
        causes.append(
            ("type", "FieldValueInvalid", f'Invalid value: "": has invalid value: {event.get("type", "")}')
        )
    for field in (
        "deprecatedFirstTimestamp",
        "deprecatedLastTimestamp",
        "deprecatedCount",
        "deprecatedSource",
    ):
        if event.get(field) not in (None, "", 0, {}):
            causes.append((field, "FieldValueInvalid", 'Invalid value: "": needs to be unset'))
    _validate_series(event, causes)
    if causes:
        raise invalid_error(EVENT_V1, name, causes)


_IMMUTABLE = ("regarding", "reason", "note", "deprecatedSource", "deprecatedFirstTimestamp",
              "deprecatedLastTimestamp", "deprecatedCount", "type", "eventTime", "action", "related",
              "reportingController", "reportingInstance")  # fmt: skip


def validate_v1_update(new: Object, old: Object) -> None:
    """`ValidateEventUpdate` for events.k8s.io/v1 (strict): only `series` may change."""
    name = str(new.get("metadata", {}).get("name", ""))
    causes: list[tuple[str, str, str]] = []
    for field in _IMMUTABLE:
        if new.get(field) != old.get(field):
            causes.append((field, "FieldValueInvalid", "Invalid value: field is immutable"))
    if new.get("series") != old.get("series"):
        _validate_series(new, causes)
    if causes:
        raise invalid_error(EVENT_V1, name, causes)


# -- Table (pkg/printers/internalversion/printers.go) ---------------------------------------------
COLUMNS = (
    PrinterColumn("Last Seen", "string", ""),
    PrinterColumn("Type", "string", "", "Type of this event (Normal, Warning)."),
    PrinterColumn("Reason", "string", "", "A short, machine understandable reason for the transition."),
    PrinterColumn("Object", "string", "", "The object that this event is about."),
    PrinterColumn("Subobject", "string", "", "", 1),
    PrinterColumn("Source", "string", "", "The component reporting this event.", 1),
    PrinterColumn("Message", "string", "", "A human-readable description of the status of this operation."),
    PrinterColumn("First Seen", "string", "", "", 1),
    PrinterColumn("Count", "string", "", "The number of times this event has occurred.", 1),
    PrinterColumn("Name", "string", "", "", 1, "name"),
)  # fmt: skip


def _since(stamp: Any, now: float) -> str:
    if not stamp:
        return "<unknown>"
    try:
        when = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return "<invalid>"
    return human_duration(now - when.timestamp())


def event_cells(core: Object) -> list[Any]:
    """`printEvent` (wide: the server renders every column, kubectl hides priority 1)."""
    import time

    now = time.time()
    first = (
        _since(core.get("firstTimestamp"), now)
        if core.get("firstTimestamp")
        else _since(core.get("eventTime"), now)
    )
    last = _since(core.get("lastTimestamp"), now) if core.get("lastTimestamp") else first
    count = core.get("count") or 0
    series = core.get("series")
    if series:
        last = _since(series.get("lastObservedTime"), now)
        count = series.get("count")
    elif not count:
        count = 1
    involved = core.get("involvedObject") or {}
    kind = str(involved.get("kind") or "").lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    source = core.get("source") or {}
    component = source.get("component") or ""
    source_text = f"{component}, {source['host']}" if source.get("host") else component
    return [
        last,
        core.get("type", ""),
        core.get("reason", ""),
        target,
        involved.get("fieldPath", ""),
        source_text,
        core.get("message", ""),
        first,
        count,
        core.get("metadata", {}).get("name", ""),
    ]


# -- the events.k8s.io/v1 view over the core storage -------------------------------------------------
class EventsV1View:
    """Serves `/apis/events.k8s.io/v1/.../events` from the core/v1 Events of the store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def handle(
        self, api: KubeAPI, namespace: str | None, name: str | None, request: web.Request
    ) -> web.StreamResponse:
        from simulators.kube.http import json_response

        method = request.method
        if name is None and method == "GET":
            q = request.query
            fields = v1_field_selector(q.get("fieldSelector"))
            if q.get("watch", "").lower() in ("1", "true"):
                return await api.watch_converted(EVENT, namespace, request, fields, to_v1)
            selector = self.store.selector(q.get("labelSelector"), fields, EVENT)
            items = self.store.list_shared(EVENT, namespace, selector)
            rv = self.store.resource_version
            if "as=Table" in request.headers.get("Accept", ""):
                return json_response(api.table(EVENT, items, rv, q.get("includeObject", "Metadata")))
            return json_response(
                {
                    "kind": "EventList",
                    "apiVersion": "events.k8s.io/v1",
                    "metadata": {"resourceVersion": str(rv)},
                    "items": [to_v1(o) for o in items],
                }  # fmt: skip
            )
        if name is None and method == "POST":
            body = await api.read_body(request)
            if not isinstance(body, dict):
                raise BadRequest("the body of the request is not a JSON object")
            body.setdefault("apiVersion", "events.k8s.io/v1")
            if body.get("apiVersion") != "events.k8s.io/v1" or body.get("kind", "Event") != "Event":
                raise BadRequest(
                    f"the API version in the data ({body.get('apiVersion')}) does not match the expected "
                    "API version (events.k8s.io/v1)"
                )
            validate_v1_create(body)
            created = self.store.create(
                EVENT, namespace, to_core(body), dry_run=bool(request.query.getall("dryRun", []))
            )
            return json_response(to_v1(created), 201)
        if name is None:
            raise MethodNotAllowed("the server does not allow this method on the requested resource")
        if method == "GET":
            return json_response(to_v1(self.store.get(EVENT, namespace, name)))
        if method == "DELETE":
            return json_response(to_v1(self.store.delete(EVENT, namespace, name)))
        if method in ("PATCH", "PUT"):
            old = to_v1(self.store.get(EVENT, namespace, name))
            body = await api.read_body(request)
            if method == "PUT":
                new = body
            else:
                new = self._patched(old, body, request.content_type)
            if not isinstance(new, dict):
                raise BadRequest("the patched object is not a JSON object")
            validate_v1_update(new, old)
            updated = self.store.update(EVENT, namespace, name, to_core(new))
            return json_response(to_v1(updated))
        raise MethodNotAllowed("the server does not allow this method on the requested resource")

    @staticmethod
    def _patched(old: Object, patch: Any, content_type: str) -> Any:
        try:
            if content_type in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
                if not isinstance(patch, dict):
                    raise PatchError("a merge patch must be a JSON object", 400)
                return merge_patch(old, patch)
            if content_type == "application/json-patch+json":
                return json_patch(old, patch)
        except PatchError as exc:
            if exc.code == 400:
                raise BadRequest(str(exc)) from exc
            raise Invalid(str(exc)) from exc
        raise UnsupportedMediaType(
            "the body of the request was in an unknown format - accepted media types include: "
            "application/json-patch+json, application/merge-patch+json, "
            "application/strategic-merge-patch+json"
        )


def serve_events(store: Store, api: KubeAPI) -> None:
    """Serve Events on `store` and `api` (whose types include `RESOURCE_TYPES`)."""
    store.field_paths[(EVENT.group, EVENT.plural)] = CORE_FIELD_PATHS
    store.admission.append(lambda rt, obj: validate_core(obj) if rt is EVENT else None)
    api.views[(EVENT_V1.group, EVENT_V1.version, EVENT_V1.plural)] = EventsV1View(store)
    api.tables[(EVENT.group, EVENT.plural)] = (COLUMNS, event_cells)
