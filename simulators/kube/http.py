"""The Kubernetes REST API over the store: discovery, OpenAPI, CRUD, status, watch, Table output."""

from __future__ import annotations

import asyncio
import json
import time
import weakref
from typing import Any

import yaml
from aiohttp import web

from simulators.faults import Faults
from simulators.kube import discovery, protobuf
from simulators.kube.crds import field_validation_mode
from simulators.kube.rbac import SERVICE_ACCOUNT, Attributes, Auth, User, verb_of
from simulators.kube.store import (
    BadRequest,
    Conflict,
    MethodNotAllowed,
    NotFound,
    Object,
    ResourceType,
    Store,
    StoreError,
    UnsupportedMediaType,
    writing_as,
)
from simulators.kube.table import render_table

JSON = "application/json"
_NS_SUBRESOURCES = ("status", "finalize")
_PATCH_TYPES = {
    "application/merge-patch+json": "merge",
    "application/json-patch+json": "json",
    "application/strategic-merge-patch+json": "strategic",
}
_CR_PATCH_ACCEPTED = "application/json-patch+json, application/merge-patch+json"


def status_body(code: int, reason: str, message: str, details: Object | None = None) -> Object:
    body: Object = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=json.dumps(body, separators=(",", ":")).encode(),
        status=status,
        content_type=JSON,
        headers=headers,
    )


def _manager(request: web.Request) -> str | None:
    """The field manager of a write: `?fieldManager=`, else the User-Agent up to its first "/"."""
    given = request.query.get("fieldManager")
    if given:
        return given
    agent = request.headers.get("User-Agent", "")
    return agent.split("/", 1)[0] or None


def error_response(exc: StoreError) -> web.Response:
    return json_response(status_body(exc.code, exc.reason, exc.message, exc.details), exc.code)


class _Request:
    """What a resource URL names: the type, namespace, object name and subresource."""

    def __init__(self, rt: ResourceType, namespace: str | None, name: str | None, sub: str | None) -> None:
        self.rt, self.namespace, self.name, self.sub = rt, namespace, name, sub


class KubeAPI:
    """Request handlers bound to one store and fault profile."""

    def __init__(
        self, store: Store, faults: Faults, *, bookmark_interval: float = 30.0, auth: Auth | None = None
    ) -> None:
        self.store = store
        self.faults = faults
        self.auth = auth  # None: no authentication (in-process unit tests of the API only)
        self.bookmark_interval = bookmark_interval
        self.types = store.resource_types()
        self._cache: dict[str, bytes] = {}
        self.client_watches: weakref.WeakSet[Any] = weakref.WeakSet()  # open watches of API clients
        # A resource served as a converted view of another's storage (events.k8s.io/v1 Events):
        # (group, version, plural) -> an object with `handle(api, namespace, name, request)`.
        self.views: dict[tuple[str, str, str], Any] = {}
        # Built-in kinds the server prints with its own columns: (group, plural) -> (columns, cells).
        self.tables: dict[tuple[str, str], Any] = {}

    def drop_client_watches(self) -> int:
        """End every client's open watch stream (a restarted or failed-over API server does);
        the simulator's own controllers keep theirs. Returns how many were open."""
        open_now = [w for w in self.client_watches if not w.closed]
        for watcher in open_now:
            watcher.close()
        return len(open_now)

    # -- discovery and OpenAPI --------------------------------------------------------------
    def _cached(self, key: str, build: Any) -> web.Response:
        if key not in self._cache:
            doc = build()
            if doc is None:
                raise NotFound("the server could not find the requested resource")
            self._cache[key] = discovery.encode(doc)
        return web.Response(body=self._cache[key], content_type=JSON)

    async def version(self, request: web.Request) -> web.Response:
        return json_response(discovery.SERVER_VERSION)

    def _user(self, request: web.Request) -> User | None:
        """The request's user; Unauthorized (401) without a valid bearer token."""
        return None if self.auth is None else self.auth.authenticate(request.headers.get("Authorization"))

    async def openapi_v2(self, request: web.Request) -> web.Response:
        self._user(request)
        accept = request.headers.get("Accept", "")
        if accept and "json" not in accept and "*/*" not in accept:
            # kubectl asks for protobuf first; 406 tells it this server speaks only JSON.
            e = StoreError("only application/json is served")
            e.code, e.reason = 406, "NotAcceptable"
            return error_response(e)
        return self._cached("v2", lambda: discovery.openapi_v2_doc(self.types))

    async def openapi_v3(self, request: web.Request) -> web.Response:
        self._user(request)
        tail = request.match_info.get("tail", "").strip("/")
        if not tail:
            return self._cached("v3", lambda: discovery.openapi_v3_root(self.types))
        parts = tail.split("/")
        if parts[0] == "api" and parts[1:] == ["v1"]:
            return self._cached("v3/api/v1", lambda: discovery.openapi_v3_doc(self.types, "", "v1"))
        if parts[0] == "apis" and len(parts) == 3:
            return self._cached(
                f"v3/{tail}", lambda: discovery.openapi_v3_doc(self.types, parts[1], parts[2])
            )
        raise NotFound("the server could not find the requested resource")

    # -- routing ----------------------------------------------------------------------------
    async def core(self, request: web.Request) -> web.StreamResponse:
        self._user(request)
        segments = [s for s in request.match_info.get("tail", "").split("/") if s]
        if not segments:
            return json_response(discovery.api_versions())
        if segments[0] != "v1":
            raise NotFound("the server could not find the requested resource")
        return await self._resource("", "v1", segments[1:], request)

    async def groups(self, request: web.Request) -> web.StreamResponse:
        self._user(request)
        segments = [s for s in request.match_info.get("tail", "").split("/") if s]
        if not segments:
            return self._cached("apis", lambda: discovery.api_group_list(self.types))
        if len(segments) == 1:
            return self._cached(f"apis/{segments[0]}", lambda: discovery.api_group(self.types, segments[0]))
        return await self._resource(segments[0], segments[1], segments[2:], request)

    def _parse(self, group: str, version: str, rest: list[str]) -> _Request:
        namespaced_path = (
            rest[0] == "namespaces"
            and len(rest) >= 3
            and not (group == "" and len(rest) == 3 and rest[2] in _NS_SUBRESOURCES)
        )
        if namespaced_path:
            if len(rest) > 5:
                raise NotFound("the server could not find the requested resource")
            rt = self.store.resource_type(group, version, rest[2])
            if not rt.namespaced:
                raise NotFound("the server could not find the requested resource")
            return _Request(
                rt, rest[1], rest[3] if len(rest) > 3 else None, rest[4] if len(rest) > 4 else None
            )
        if len(rest) > 3:
            raise NotFound("the server could not find the requested resource")
        rt = self.store.resource_type(group, version, rest[0])
        name = rest[1] if len(rest) > 1 else None
        if rt.namespaced and name is not None:
            raise NotFound("the server could not find the requested resource")
        return _Request(rt, None, name, rest[2] if len(rest) > 2 else None)

    async def _resource(
        self, group: str, version: str, rest: list[str], request: web.Request
    ) -> web.StreamResponse:
        if not rest:
            if request.method != "GET":
                raise MethodNotAllowed("the server does not allow this method on the requested resource")
            key = f"rl/{group}/{version}"
            return self._cached(key, lambda: discovery.resource_list(self.types, group, version))
        req = self._parse(group, version, rest)
        self._authorize(req, request)
        if req.rt is SERVICE_ACCOUNT and req.sub == "token" and request.method == "POST" and self.auth:
            assert req.namespace is not None and req.name is not None
            body = await self._body(request)
            return json_response(self.auth.token_request(req.namespace, req.name, body), 201)
        fault = self.faults.api_fault()
        if fault is not None:
            e = StoreError("the server is currently unable to handle the request")
            e.code, e.reason = fault, "ServiceUnavailable"
            return error_response(e)
        delay = self.faults.response_delay("api")
        if delay:
            await asyncio.sleep(delay)
        if request.method != "GET":
            await self.faults.hold_write()
        if req.sub is not None and (req.sub not in req.rt.subresources or req.sub == "scale"):
            raise NotFound("the server could not find the requested resource")
        view = self.views.get((req.rt.group, req.rt.version, req.rt.plural))
        if view is not None:
            return await view.handle(self, req.namespace, req.name, request)  # type: ignore[no-any-return]
        method = request.method
        if req.name is None:
            if method == "GET":
                return await self._list_or_watch(req, request)
            if method == "POST":
                return await self._create(req, request)
            if method == "DELETE":
                return await self._delete_collection(req, request)
        elif method == "GET":
            obj = self.store.get(req.rt, req.namespace, req.name)
            return self._object_response(req.rt, obj, request)
        elif method == "PUT":
            return await self._update(req, request)
        elif method == "PATCH":
            return await self._patch(req, request)
        elif method == "DELETE" and req.sub is None:
            await self._check_preconditions(req, request)
            return self._delete(req, request)
        raise MethodNotAllowed("the server does not allow this method on the requested resource")

    # -- helpers ----------------------------------------------------------------------------
    def _authorize(self, req: _Request, request: web.Request) -> None:
        user = self._user(request)
        if user is None or self.auth is None:
            return
        watch = request.query.get("watch", "").lower() in ("1", "true")
        resource = req.rt.plural + (f"/{req.sub}" if req.sub else "")
        verb = verb_of(request.method, req.name, watch)
        self.auth.authorize(user, Attributes(verb, req.rt.group, resource, req.namespace, req.name))

    @staticmethod
    def _wants_table(request: web.Request) -> bool:
        return "as=Table" in request.headers.get("Accept", "")

    def _object_response(self, rt: ResourceType, obj: Object, request: web.Request, status: int = 200,
                         headers: dict[str, str] | None = None) -> web.Response:  # fmt: skip
        if self._wants_table(request):
            include = request.query.get("includeObject", "Metadata")
            obj = self.table(rt, [obj], self.store.resource_version, include)
        return json_response(obj, status, headers)

    def table(self, rt: ResourceType, objs: list[Object], rv: int, include: str) -> Object:
        """The Table of `objs` (a kind's own printer when it has one, else its columns)."""
        return render_table(rt, objs, rv, include, self.tables.get((rt.group, rt.plural)))

    async def read_body(self, request: web.Request) -> Any:
        """The request's body, decoded (JSON, YAML or protobuf)."""
        return await self._body(request)

    async def watch_converted(
        self, rt: ResourceType, namespace: str | None, request: web.Request, field_selector: str | None,
        convert: Any,
    ) -> web.StreamResponse:  # fmt: skip
        """A watch of `rt` whose objects are sent through `convert` (a view's shape)."""
        return await self._watch(_Request(rt, namespace, None, None), request, field_selector, convert)

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        ctype = request.content_type
        if "protobuf" in ctype:
            # kubectl's typed clients (create namespace|secret|token...) send protobuf only.
            try:
                return protobuf.decode(raw)
            except protobuf.ProtobufError as exc:
                raise UnsupportedMediaType(
                    f"the body of the request was in an unknown format ({exc}) - accepted media types "
                    "include: application/json, application/yaml, application/vnd.kubernetes.protobuf"
                ) from exc
        try:
            if "yaml" in ctype:
                return yaml.safe_load(raw)
            return json.loads(raw)
        except (ValueError, yaml.YAMLError) as exc:
            raise BadRequest(f"couldn't get version/kind; json parse error: {exc}") from exc

    @staticmethod
    def _dry_run(request: web.Request) -> bool:
        values = request.query.getall("dryRun", [])
        if any(v != "All" for v in values):
            raise BadRequest(f"Invalid dryRun value: {values}")
        return bool(values)

    @staticmethod
    def _warning_headers(warnings: list[str]) -> dict[str, str] | None:
        if not warnings:
            return None
        # One header line; aiohttp cannot repeat a key in a plain dict, so warnings are joined.
        return {"Warning": ", ".join('299 - "' + w.replace('"', '\\"') + '"' for w in warnings)}

    def _field_validation(self, request: web.Request) -> str:
        mode = request.query.get("fieldValidation", "Warn")
        if mode not in ("Ignore", "Warn", "Strict"):
            raise BadRequest(f"fieldValidation parameter unsupported: {mode}")
        return mode

    # -- writes -----------------------------------------------------------------------------
    async def _create(self, req: _Request, request: web.Request) -> web.Response:
        body = await self._body(request)
        if not isinstance(body, dict):
            raise BadRequest("the body of the request is not a JSON object")
        if "kind" not in body and req.rt.group:
            raise BadRequest(f"Object 'Kind' is missing in '{json.dumps(body)[:200]}'")
        with (
            field_validation_mode(self._field_validation(request)) as warnings,
            writing_as(_manager(request)),
        ):
            obj = self.store.create(req.rt, req.namespace, body, dry_run=self._dry_run(request))
        return self._object_response(req.rt, obj, request, 201, self._warning_headers(warnings))

    async def _update(self, req: _Request, request: web.Request) -> web.Response:
        assert req.name is not None
        body = await self._body(request)
        if not isinstance(body, dict):
            raise BadRequest("the body of the request is not a JSON object")
        with (
            field_validation_mode(self._field_validation(request)) as warnings,
            writing_as(_manager(request)),
        ):
            obj = self.store.update(
                req.rt, req.namespace, req.name, body, subresource=req.sub, dry_run=self._dry_run(request)
            )
        return self._object_response(req.rt, obj, request, 200, self._warning_headers(warnings))

    async def _patch(self, req: _Request, request: web.Request) -> web.Response:
        assert req.name is not None
        ptype = _PATCH_TYPES.get(request.content_type)
        if ptype == "strategic" and req.rt.group == "":
            ptype = "merge"  # Namespace and Secret have no list merge keys a client could use
        if ptype is None or ptype == "strategic":
            accepted = (
                _CR_PATCH_ACCEPTED
                if req.rt.group
                else _CR_PATCH_ACCEPTED + ", application/strategic-merge-patch+json"
            )  # noqa: E501
            raise UnsupportedMediaType(
                f"the body of the request was in an unknown format - accepted media types include: {accepted}"
            )
        body = await self._body(request)
        with (
            field_validation_mode(self._field_validation(request)) as warnings,
            writing_as(_manager(request)),
        ):
            obj = self.store.patch(
                req.rt, req.namespace, req.name, body, ptype,  # type: ignore[arg-type]
                subresource=req.sub, dry_run=self._dry_run(request),
            )  # fmt: skip
        return self._object_response(req.rt, obj, request, 200, self._warning_headers(warnings))

    async def _check_preconditions(self, req: _Request, request: web.Request) -> None:
        """DeleteOptions `preconditions` (uid, resourceVersion): a mismatch is 409, nothing deleted."""
        assert req.name is not None
        raw = await request.read() if request.can_read_body else b""
        try:
            options = json.loads(raw) if raw else {}
        except ValueError:
            return
        wanted = (options or {}).get("preconditions") or {} if isinstance(options, dict) else {}
        if not wanted:
            return
        meta = self.store.get(req.rt, req.namespace, req.name)["metadata"]
        for field, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
            if wanted.get(field) and str(wanted[field]) != str(meta.get(field)):
                raise Conflict(
                    f'Operation cannot be fulfilled on {req.rt.plural} "{req.name}": Precondition failed: '
                    f"{label} in precondition: {wanted[field]}, {label} in object meta: {meta.get(field)}",
                    details={"name": req.name, "group": req.rt.group, "kind": req.rt.plural},
                )

    def _delete(self, req: _Request, request: web.Request) -> web.Response:
        assert req.name is not None
        dry = self._dry_run(request)
        obj = self.store.delete(req.rt, req.namespace, req.name, dry_run=dry)
        try:
            self.store.get(req.rt, req.namespace, req.name)
            still_there = not dry
        except NotFound:
            still_there = False
        if req.rt.group == "" and req.rt.kind == "Secret" and not still_there:
            meta = obj["metadata"]
            return json_response(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": {"name": meta["name"], "kind": req.rt.plural, "uid": meta.get("uid")},
                }
            )
        if still_there:
            # Finalizers hold it: the server answers 200 with the object as it now is.
            return json_response(self.store.get(req.rt, req.namespace, req.name))
        return json_response(obj)

    async def _delete_collection(self, req: _Request, request: web.Request) -> web.Response:
        objs, _ = self.store.list(
            req.rt,
            req.namespace,
            label_selector=request.query.get("labelSelector"),
            field_selector=request.query.get("fieldSelector"),
        )
        dry = self._dry_run(request)
        for obj in objs:
            meta = obj["metadata"]
            try:
                self.store.delete(req.rt, meta.get("namespace"), meta["name"], dry_run=dry)
            except NotFound:
                pass  # garbage-collected along with an earlier one
        return json_response(self._list_body(req.rt, objs, self.store.resource_version))

    # -- reads and watch --------------------------------------------------------------------
    @staticmethod
    def _list_body(rt: ResourceType, items: list[Object], rv: int) -> Object:
        return {
            "kind": rt.list_kind,
            "apiVersion": rt.api_version,
            "metadata": {"resourceVersion": str(rv)},
            "items": items,
        }  # noqa: E501

    async def _list_or_watch(self, req: _Request, request: web.Request) -> web.StreamResponse:
        q = request.query
        if q.get("watch", "").lower() in ("1", "true"):
            return await self._watch(req, request)
        selector = self.store.selector(q.get("labelSelector"), q.get("fieldSelector"), req.rt)
        items = self.store.list_shared(req.rt, req.namespace, selector)
        rv = self.store.resource_version
        if self._wants_table(request):
            return json_response(self.table(req.rt, items, rv, q.get("includeObject", "Metadata")))
        # The snapshots are serialised, never mutated, so no copy is needed here.
        return json_response(self._list_body(req.rt, items, rv))

    async def _watch(
        self, req: _Request, request: web.Request, field_selector: str | None = None, convert: Any = None
    ) -> web.StreamResponse:
        q = request.query
        if convert is None:
            field_selector = q.get("fieldSelector")
        rv_param = q.get("resourceVersion", "")
        try:
            rv = int(rv_param) if rv_param else None
            timeout = float(q["timeoutSeconds"]) if q.get("timeoutSeconds") else None
        except ValueError as exc:
            raise BadRequest(f"invalid watch parameter: {exc}") from exc
        table = self._wants_table(request)
        response = web.StreamResponse(status=200, headers={"Content-Type": JSON, "Cache-Control": "no-cache"})
        response.enable_chunked_encoding()
        try:
            watcher = self.store.watch(
                req.rt,
                req.namespace,
                resource_version=rv,
                label_selector=q.get("labelSelector"),
                field_selector=field_selector,
                initial_events=rv is None,
            )
            self.client_watches.add(watcher)
        except StoreError as exc:
            if exc.code != 410:
                raise
            # A real server answers 200, then an ERROR event carrying the 410 Status.
            await response.prepare(request)
            expired = {"type": "ERROR", "object": status_body(410, "Expired", exc.message)}
            await response.write(json.dumps(expired).encode() + b"\n")
            await response.write_eof()
            return response
        await response.prepare(request)
        bookmarks = q.get("allowWatchBookmarks", "").lower() in ("1", "true")
        deadline = time.monotonic() + timeout if timeout is not None else None
        try:
            while True:
                wait = self.bookmark_interval if bookmarks else None
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    wait = left if wait is None else min(wait, left)
                try:
                    event = await watcher.next_shared(wait)
                except StopAsyncIteration:
                    break
                if event is None:
                    if bookmarks and (deadline is None or deadline - time.monotonic() > 0):
                        rv_now = str(self.store.resource_version)
                        mark = {"kind": req.rt.kind, "apiVersion": req.rt.api_version,
                                "metadata": {"resourceVersion": rv_now}}  # fmt: skip
                        await response.write(
                            json.dumps({"type": "BOOKMARK", "object": mark}).encode() + b"\n"
                        )
                    continue
                obj = event.object if convert is None else convert(event.object)
                if table:
                    obj = self.table(
                        req.rt, [event.object], event.resource_version, q.get("includeObject", "Metadata")
                    )
                line = json.dumps({"type": event.type, "object": obj}, separators=(",", ":"))
                await response.write(line.encode() + b"\n")
                if self.faults.drop_watch():
                    break
        except (ConnectionResetError, asyncio.CancelledError):
            await watcher.aclose()
            raise
        await watcher.aclose()
        await response.write_eof()
        return response


def add_kube_routes(
    app: web.Application,
    store: Store,
    faults: Faults,
    *,
    bookmark_interval: float = 30.0,
    auth: Auth | None = None,
) -> KubeAPI:
    """Serve the Kubernetes API of `store` on `app` (which must not have other catch-all routes);
    with `auth`, every request but `/version` needs a bearer token and passes RBAC."""
    api = KubeAPI(store, faults, bookmark_interval=bookmark_interval, auth=auth)

    def guarded(handler: Any) -> Any:
        async def run(request: web.Request) -> web.StreamResponse:
            try:
                return await handler(request)  # type: ignore[no-any-return]
            except StoreError as exc:
                return error_response(exc)

        return run

    app.router.add_get("/version", guarded(api.version))
    app.router.add_get("/openapi/v2", guarded(api.openapi_v2))
    app.router.add_get("/openapi/v3", guarded(api.openapi_v3))
    app.router.add_get("/openapi/v3/{tail:.*}", guarded(api.openapi_v3))
    app.router.add_route("*", "/api", guarded(api.core))
    app.router.add_route("*", "/api/{tail:.*}", guarded(api.core))
    app.router.add_route("*", "/apis", guarded(api.groups))
    app.router.add_route("*", "/apis/{tail:.*}", guarded(api.groups))

    async def close_watches(_: web.Application) -> None:
        store.close_watches()

    app.on_shutdown.append(close_watches)
    return api
