"""Discovery documents (`/api`, `/apis`, resource lists) and OpenAPI v2/v3 built from the CRDs."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from typing import Any

from simulators.kube.store import Object, ResourceType

SERVER_VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0",
    "gitCommit": "metalflow-simulated-site",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.23",
    "compiler": "gc",
    "platform": "linux/amd64",
}
VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
SUB_VERBS = ["get", "patch", "update"]


def group_versions(types: list[ResourceType]) -> dict[str, list[str]]:
    """Served versions per API group, in first-seen order."""
    out: dict[str, list[str]] = defaultdict(list)
    for rt in types:
        if rt.version not in out[rt.group]:
            out[rt.group].append(rt.version)
    return dict(out)


def api_versions() -> Object:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
    }


def _group(name: str, versions: list[str]) -> Object:
    listed = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": listed, "preferredVersion": listed[0]}


def api_group_list(types: list[ResourceType]) -> Object:
    groups = [_group(g, vs) for g, vs in group_versions(types).items() if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(types: list[ResourceType], group: str) -> Object | None:
    versions = group_versions(types).get(group)
    if not group or not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(group, versions)}


def resource_list(types: list[ResourceType], group: str, version: str) -> Object | None:
    """The APIResourceList of one group/version, or None when it is not served."""
    served = [rt for rt in types if rt.group == group and rt.version == version]
    if not served:
        return None
    resources: list[Object] = []
    for rt in served:
        entry: Object = {
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": VERBS,
            "storageVersionHash": hashlib.sha256(f"{rt.api_version}/{rt.kind}".encode()).hexdigest()[:11],
        }
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        if rt.categories:
            entry["categories"] = list(rt.categories)
        resources.append(entry)
        for sub in sorted(rt.subresources):
            kind = "Scale" if sub == "scale" else rt.kind
            sub_entry: Object = {
                "name": f"{rt.plural}/{sub}",
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": kind,
                "verbs": SUB_VERBS,
            }
            if sub == "scale":
                sub_entry.update({"group": "autoscaling", "version": "v1"})
            resources.append(sub_entry)
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}


# -- OpenAPI ---------------------------------------------------------------------------------
def schema_name(rt: ResourceType) -> str:
    """`io.grove.v1alpha1.PodCliqueSet`, `io.k8s.api.core.v1.Secret`: the API server's naming."""
    if not rt.group:
        return f"io.k8s.api.core.v1.{rt.kind}"
    return ".".join(reversed(rt.group.split("."))) + f".{rt.version}.{rt.kind}"


def _gvk(rt: ResourceType) -> Object:
    return {"group": rt.group, "version": rt.version, "kind": rt.kind}


def _param(name: str, where: str = "query", description: str = "") -> Object:
    return {
        "name": name,
        "in": where,
        "description": description,
        "schema": {"type": "string"},
        "uniqueItems": True,
    }


_WRITE_PARAMS = [
    _param("dryRun", description="When present, indicates that modifications should not be persisted."),
    _param(
        "fieldManager", description="fieldManager is a name associated with the actor making these changes."
    ),
    _param("fieldValidation", description="Ignore, Warn (the default) or Strict handling of unknown fields."),
]
_LIST_PARAMS = [
    _param(p)
    for p in (
        "labelSelector",
        "fieldSelector",
        "resourceVersion",
        "timeoutSeconds",
        "watch",
        "allowWatchBookmarks",
    )
]


def _op(rt: ResourceType, action: str, op_id: str, params: list[Object], v3: bool) -> Object:
    ref = f"#/components/schemas/{schema_name(rt)}" if v3 else f"#/definitions/{schema_name(rt)}"
    op: Object = {
        "operationId": op_id + rt.kind,
        "parameters": params,
        "responses": {"200": {"description": "OK"}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk(rt),
    }
    if action in ("post", "put", "patch"):
        if v3:
            types = (
                ["application/json-patch+json", "application/merge-patch+json"]
                if action == "patch"
                else ["application/json"]
            )
            op["requestBody"] = {"content": {t: {"schema": {"$ref": ref}} for t in types}, "required": True}
        else:
            op["parameters"] = params + [
                {"name": "body", "in": "body", "required": True, "schema": {"$ref": ref}}
            ]
    return op


def _paths(rt: ResourceType, v3: bool) -> dict[str, Object]:
    base = f"/apis/{rt.group}/{rt.version}" if rt.group else "/api/v1"
    coll = f"{base}/namespaces/{{namespace}}/{rt.plural}" if rt.namespaced else f"{base}/{rt.plural}"
    ns_param = [_param("namespace", "path")] if rt.namespaced else []
    name_param = [_param("name", "path")]
    item: dict[str, Object] = {
        "get": _op(rt, "get", "read", [], v3),
        "put": _op(rt, "put", "replace", _WRITE_PARAMS, v3),
        "patch": _op(rt, "patch", "patch", _WRITE_PARAMS, v3),
        "delete": _op(rt, "delete", "delete", [_param("dryRun")], v3),
        "parameters": ns_param + name_param,  # type: ignore[dict-item]
    }
    paths: dict[str, Object] = {
        coll: {
            "get": _op(rt, "list", "list", _LIST_PARAMS, v3),
            "post": _op(rt, "post", "create", _WRITE_PARAMS, v3),
            "parameters": ns_param,
        },
        f"{coll}/{{name}}": item,
    }
    for sub in sorted(rt.subresources - {"scale"}):
        paths[f"{coll}/{{name}}/{sub}"] = {
            "get": _op(rt, "get", f"read{sub.title()}", [], v3),
            "put": _op(rt, "put", f"replace{sub.title()}", _WRITE_PARAMS, v3),
            "patch": _op(rt, "patch", f"patch{sub.title()}", _WRITE_PARAMS, v3),
            "parameters": ns_param + name_param,
        }
    return paths


def _published_schema(rt: ResourceType, v3: bool) -> Object:
    schema = dict(rt.schema or {"type": "object", "x-kubernetes-preserve-unknown-fields": True})
    if not v3:
        schema = _to_v2(schema)
    schema["x-kubernetes-group-version-kind"] = [_gvk(rt)]
    return schema


def _to_v2(schema: Any) -> Any:
    """OpenAPI v2 has no `nullable`, `anyOf` or `oneOf`: drop them as the API server does."""
    if isinstance(schema, list):
        return [_to_v2(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    return {k: _to_v2(v) for k, v in schema.items() if k not in ("nullable", "anyOf", "oneOf", "not")}


def openapi_v3_root(types: list[ResourceType]) -> Object:
    paths = {}
    for group, versions in group_versions(types).items():
        for version in versions:
            key = f"apis/{group}/{version}" if group else "api/v1"
            h = hashlib.sha256(key.encode()).hexdigest()[:16].upper()
            paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={h}"}
    return {"paths": paths}


def openapi_v3_doc(types: list[ResourceType], group: str, version: str) -> Object | None:
    served = [rt for rt in types if rt.group == group and rt.version == version]
    if not served:
        return None
    paths: dict[str, Object] = {}
    schemas: dict[str, Object] = {}
    for rt in served:
        paths.update(_paths(rt, v3=True))
        schemas[schema_name(rt)] = _published_schema(rt, v3=True)
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": SERVER_VERSION["gitVersion"]},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def openapi_v2_doc(types: list[ResourceType]) -> Object:
    paths: dict[str, Object] = {}
    definitions: dict[str, Object] = {}
    for rt in types:
        paths.update(_paths(rt, v3=False))
        definitions[schema_name(rt)] = _published_schema(rt, v3=False)
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": SERVER_VERSION["gitVersion"]},
        "paths": paths,
        "definitions": definitions,
    }


def encode(doc: Object) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()
