"""Decode the protobuf bodies kubectl sends for built-in kinds into the JSON objects they mean.

kubectl's typed clients (`kubectl create namespace|secret|serviceaccount|role|rolebinding|token`)
send `application/vnd.kubernetes.protobuf` and do not fall back to JSON on 415, so a server that
wants those commands to work must read protobuf. The body is the Kubernetes envelope: the magic
`k8s\\0`, then a `runtime.Unknown` (typeMeta = 1, raw = 2) whose `raw` is the object's message.
Only the kinds this server serves (and TokenRequest) are described here, with the field numbers of
k8s.io/api's generated.proto; any other kind is answered 415 as before.

Cost: a pure-Python wire-format walk over a body of a few hundred bytes, per such request.
"""

from __future__ import annotations

import base64
from typing import Any

MAGIC = b"k8s\x00"

# A schema maps field number -> (JSON name, type); a type is "string", "bytes", "bool", "int",
# a nested schema (dict), ("repeated", type) or ("map", value type).
Schema = dict[int, tuple[str, Any]]

_META: Schema = {
    1: ("name", "string"), 2: ("generateName", "string"), 3: ("namespace", "string"),
    5: ("uid", "string"), 6: ("resourceVersion", "string"), 7: ("generation", "int"),
    11: ("labels", ("map", "string")), 12: ("annotations", ("map", "string")),
    14: ("finalizers", ("repeated", "string")),
}  # fmt: skip
_RULE: Schema = {
    1: ("verbs", ("repeated", "string")), 2: ("apiGroups", ("repeated", "string")),
    3: ("resources", ("repeated", "string")), 4: ("resourceNames", ("repeated", "string")),
    5: ("nonResourceURLs", ("repeated", "string")),
}  # fmt: skip
_SUBJECT: Schema = {1: ("kind", "string"), 2: ("apiGroup", "string"), 3: ("name", "string"),
                    4: ("namespace", "string")}  # fmt: skip
_ROLE_REF: Schema = {1: ("apiGroup", "string"), 2: ("kind", "string"), 3: ("name", "string")}
_ROLE: Schema = {1: ("metadata", _META), 2: ("rules", ("repeated", _RULE))}
_BINDING: Schema = {
    1: ("metadata", _META),
    2: ("subjects", ("repeated", _SUBJECT)),
    3: ("roleRef", _ROLE_REF),
}

KINDS: dict[tuple[str, str], Schema] = {
    ("v1", "Namespace"): {1: ("metadata", _META), 2: ("spec", {1: ("finalizers", ("repeated", "string"))})},
    ("v1", "Secret"): {
        1: ("metadata", _META), 2: ("data", ("map", "bytes")), 3: ("type", "string"),
        4: ("stringData", ("map", "string")), 5: ("immutable", "bool"),
    },
    ("v1", "ServiceAccount"): {1: ("metadata", _META), 4: ("automountServiceAccountToken", "bool")},
    ("authentication.k8s.io/v1", "TokenRequest"): {
        1: ("metadata", _META),
        2: ("spec", {1: ("audiences", ("repeated", "string")), 4: ("expirationSeconds", "int")}),
    },
    ("rbac.authorization.k8s.io/v1", "Role"): _ROLE,
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): _ROLE,
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): _BINDING,
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): _BINDING,
}  # fmt: skip


class ProtobufError(ValueError):
    """A body that is not a Kubernetes protobuf envelope, or of a kind this server cannot read."""


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if i >= len(buf):
            raise ProtobufError("truncated varint")
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
        shift += 7


def _fields(buf: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, varint value or length-delimited bytes) in order; fixed widths skipped."""
    out: list[tuple[int, int | bytes]] = []
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
            out.append((number, value))
        elif wire == 2:
            size, i = _varint(buf, i)
            if i + size > len(buf):
                raise ProtobufError("truncated field")
            out.append((number, buf[i : i + size]))
            i += size
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
    return out


def _scalar(kind: Any, raw: int | bytes) -> Any:
    if isinstance(kind, dict):
        return decode_message(kind, raw if isinstance(raw, bytes) else b"")
    if kind == "string":
        return raw.decode() if isinstance(raw, bytes) else str(raw)
    if kind == "bytes":
        return base64.b64encode(raw if isinstance(raw, bytes) else b"").decode()
    if kind == "bool":
        return bool(raw)
    return int(raw) if isinstance(raw, int) else 0


def decode_message(schema: Schema, buf: bytes) -> dict[str, Any]:
    """The JSON object of a message; unknown fields (server-set ones, managedFields) are dropped."""
    obj: dict[str, Any] = {}
    for number, raw in _fields(buf):
        if number not in schema:
            continue
        name, kind = schema[number]
        if isinstance(kind, tuple) and kind[0] == "repeated":
            obj.setdefault(name, []).append(_scalar(kind[1], raw))
        elif isinstance(kind, tuple) and kind[0] == "map":
            entry = dict(_fields(raw if isinstance(raw, bytes) else b""))
            key = entry.get(1, b"")
            obj.setdefault(name, {})[key.decode() if isinstance(key, bytes) else str(key)] = _scalar(
                kind[1], entry.get(2, b"")
            )
        else:
            obj[name] = _scalar(kind, raw)
    return obj


def decode(body: bytes) -> dict[str, Any]:
    """The object a kubectl protobuf body carries, with `apiVersion` and `kind`.

    Raises:
        ProtobufError: Not an envelope, or a kind this server does not read from protobuf.
    """
    if not body.startswith(MAGIC):
        raise ProtobufError("not a Kubernetes protobuf envelope (no k8s magic prefix)")
    unknown = dict(_fields(body[len(MAGIC) :]))
    meta_raw = unknown.get(1, b"")
    type_meta = dict(_fields(meta_raw if isinstance(meta_raw, bytes) else b""))
    api_version = _scalar("string", type_meta.get(1, b""))
    kind = _scalar("string", type_meta.get(2, b""))
    schema = KINDS.get((api_version, kind))
    raw = unknown.get(2, b"")
    if schema is None or not isinstance(raw, bytes):
        raise ProtobufError(f"{kind or 'this kind'} ({api_version}) is not accepted as protobuf")
    return {"apiVersion": api_version, "kind": kind, **decode_message(schema, raw)}
