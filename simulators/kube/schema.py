"""Structural-schema processing of a custom resource, compiled once per CRD version.

One walk over an object does what the API server does to a write, in its order: drop unknown
fields (pruning; reported so that `fieldValidation=Strict|Warn` can act), drop non-nullable
nulls, apply `default`s, then validate types, required fields, enums, formats, bounds, patterns,
list types and the value validations of `anyOf`/`allOf`/`oneOf`/`not`. CEL rules
(`x-kubernetes-validations`) are not evaluated.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import re
from typing import Any

from simulators.kube.watch import clone

Cause = tuple[str, str, str]  # (field, reason, message), as in Status.details.causes

_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$")
_TYPE_NAMES = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}


def go_value(value: Any) -> str:
    """Render a value roughly as the API server's messages do (%q for strings)."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return repr(value)
    return '"object"' if isinstance(value, dict) else '"array"'


def _check_format(fmt: str, value: str) -> bool:
    if fmt == "date-time":
        return bool(_DATE_TIME.match(value))
    if fmt == "date":
        return bool(_DATE.match(value))
    if fmt in ("ipv4", "ipv6"):
        try:
            addr = ipaddress.ip_address(value)
        except ValueError:
            return False
        return addr.version == (4 if fmt == "ipv4" else 6)
    if fmt == "cidr":
        try:
            ipaddress.ip_network(value, strict=False)
        except ValueError:
            return False
        return True
    if fmt in ("uuid", "uuid3", "uuid4", "uuid5"):
        return bool(_UUID.match(value))
    if fmt == "byte":
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return False
        return True
    return True  # int32, int64 and the rest: not checked by the API server either


def _type_ok(expected: str, value: Any) -> bool:
    if expected == "object":
        return isinstance(value, dict)
    if expected == "array":
        return isinstance(value, list)
    if expected == "string":
        return isinstance(value, str)
    if expected == "boolean":
        return isinstance(value, bool)
    if expected == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if expected == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return True


def _bad(path: str, value: Any, text: str) -> Cause:
    """A FieldValueInvalid cause worded as the API server's schema validation words it."""
    return (path, "FieldValueInvalid", f"Invalid value: {go_value(value)}: {path} in body {text}")


class Node:
    """One compiled schema node."""

    __slots__ = (
        "type", "nullable", "int_or_string", "preserve", "properties", "additional", "items",
        "required", "enum", "default", "has_default", "fmt", "pattern", "pattern_src", "bounds",
        "list_type", "map_keys", "any_of", "all_of", "one_of", "not_", "is_meta",
    )  # fmt: skip

    def __init__(self, schema: dict[str, Any], *, is_meta: bool = False) -> None:
        self.type: str | None = schema.get("type")
        self.nullable = bool(schema.get("nullable"))
        self.int_or_string = bool(schema.get("x-kubernetes-int-or-string"))
        self.preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        self.is_meta = is_meta
        props = schema.get("properties")
        self.properties: dict[str, Node] | None = (
            {k: Node(v) for k, v in props.items()} if isinstance(props, dict) else None
        )
        add = schema.get("additionalProperties")
        self.additional: Node | bool | None = Node(add) if isinstance(add, dict) else add
        items = schema.get("items")
        self.items = Node(items) if isinstance(items, dict) else None
        self.required: tuple[str, ...] = tuple(schema.get("required") or ())
        self.enum: list[Any] | None = schema.get("enum")
        self.has_default = "default" in schema
        self.default = schema.get("default")
        self.fmt: str | None = schema.get("format")
        self.pattern_src: str | None = schema.get("pattern")
        self.pattern = re.compile(self.pattern_src) if self.pattern_src else None
        self.bounds = {
            k: schema[k]
            for k in (
                "maxLength", "minLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                "maxItems", "minItems", "maxProperties", "minProperties", "multipleOf", "uniqueItems",
            )
            if k in schema
        }  # fmt: skip
        self.list_type: str | None = schema.get("x-kubernetes-list-type")
        self.map_keys: tuple[str, ...] = tuple(schema.get("x-kubernetes-list-map-keys") or ())
        self.any_of = [Node(s) for s in schema.get("anyOf") or ()]
        self.all_of = [Node(s) for s in schema.get("allOf") or ()]
        self.one_of = [Node(s) for s in schema.get("oneOf") or ()]
        self.not_ = Node(schema["not"]) if isinstance(schema.get("not"), dict) else None

    # -- prune, null-prune, default -------------------------------------------------------
    def prepare(self, value: Any, path: str, unknown: list[str]) -> None:
        """Prune unknown fields and non-nullable nulls, apply defaults (in place)."""
        if isinstance(value, dict):
            if self.is_meta:
                return  # ObjectMeta is the server's own business, never pruned here
            props = self.properties
            if props is not None or (self.additional is None and not self.preserve):
                for key in list(value):
                    child = props.get(key) if props is not None else None
                    if child is None:
                        if isinstance(self.additional, Node):
                            child = self.additional
                        elif not self.preserve and self.additional is not True:
                            unknown.append(f"{path}.{key}" if path else key)
                            del value[key]
                            continue
                        else:
                            continue
                    sub = value[key]
                    if sub is None and not child.nullable:
                        del value[key]
                    else:
                        child.prepare(sub, f"{path}.{key}" if path else key, unknown)
            elif isinstance(self.additional, Node):
                for key in list(value):
                    sub = value[key]
                    if sub is None and not self.additional.nullable:
                        del value[key]
                    else:
                        self.additional.prepare(sub, f"{path}[{key}]", unknown)
            if props is not None:
                for key, child in props.items():
                    if child.has_default and key not in value:
                        value[key] = clone(child.default)
                        child.prepare(value[key], f"{path}.{key}" if path else key, unknown)
        elif isinstance(value, list) and self.items is not None:
            for i, item in enumerate(value):
                if item is not None or self.items.nullable:
                    self.items.prepare(item, f"{path}[{i}]", unknown)

    # -- validate ---------------------------------------------------------------------------
    def validate(self, value: Any, path: str, errors: list[Cause]) -> None:
        if value is None:
            if not self.nullable and self.type is not None:
                errors.append(
                    (
                        path,
                        "FieldValueTypeInvalid",
                        f'Invalid value: "null": {path} in body must be of type {self.type}: "null"',
                    )
                )
            return
        if self.int_or_string:
            if not (isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))):
                errors.append(self._type_error(path, value, "integer or string"))
                return
        elif self.type is not None and not _type_ok(self.type, value):
            errors.append(self._type_error(path, value, self.type))
            return
        if self.enum is not None and value not in self.enum:
            supported = ", ".join(go_value(v) for v in self.enum)
            errors.append(
                (
                    path,
                    "FieldValueNotSupported",
                    f"Unsupported value: {go_value(value)}: supported values: {supported}",
                )
            )
        if isinstance(value, str):
            self._validate_string(value, path, errors)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            self._validate_number(value, path, errors)
        elif isinstance(value, dict):
            self._validate_object(value, path, errors)
        elif isinstance(value, list):
            self._validate_array(value, path, errors)
        if self.any_of or self.all_of or self.one_of or self.not_ is not None:
            self._validate_combinators(value, path, errors)

    def _type_error(self, path: str, value: Any, expected: str) -> Cause:
        shown = go_value(value)
        return (
            path,
            "FieldValueTypeInvalid",
            f"Invalid value: {shown}: {path} in body must be of type {expected}: {shown}",
        )

    def _validate_string(self, value: str, path: str, errors: list[Cause]) -> None:
        b = self.bounds
        if b:
            if "maxLength" in b and len(value) > b["maxLength"]:
                errors.append(
                    (path, "FieldValueTooLong", f"Too long: may not be more than {b['maxLength']} bytes")
                )
            if "minLength" in b and len(value) < b["minLength"]:
                errors.append(_bad(path, value, f"should be at least {b['minLength']} chars long"))
        if self.pattern is not None and not self.pattern.search(value):
            errors.append(_bad(path, value, f"should match '{self.pattern_src}'"))
        if self.fmt and not _check_format(self.fmt, value):
            errors.append(_bad(path, value, f"must be of type {self.fmt}: {go_value(value)}"))

    def _validate_number(self, value: float, path: str, errors: list[Cause]) -> None:
        b = self.bounds
        if not b:
            return
        if "minimum" in b:
            if b.get("exclusiveMinimum") is True and value <= b["minimum"]:
                errors.append(_bad(path, value, f"should be greater than {b['minimum']}"))
            elif value < b["minimum"]:
                errors.append(_bad(path, value, f"should be greater than or equal to {b['minimum']}"))
        if "maximum" in b:
            if b.get("exclusiveMaximum") is True and value >= b["maximum"]:
                errors.append(_bad(path, value, f"should be less than {b['maximum']}"))
            elif value > b["maximum"]:
                errors.append(_bad(path, value, f"should be less than or equal to {b['maximum']}"))
        if "multipleOf" in b and value % b["multipleOf"]:
            errors.append(_bad(path, value, f"should be a multiple of {b['multipleOf']}"))

    def _validate_object(self, value: dict[str, Any], path: str, errors: list[Cause]) -> None:
        if self.is_meta:
            return
        for key in self.required:
            if key not in value:
                errors.append((f"{path}.{key}" if path else key, "FieldValueRequired", "Required value"))
        b = self.bounds
        if "maxProperties" in b and len(value) > b["maxProperties"]:
            errors.append(
                (
                    path,
                    "FieldValueTooMany",
                    f"Too many: {len(value)}: must have at most {b['maxProperties']} items",
                )
            )
        if "minProperties" in b and len(value) < b["minProperties"]:
            errors.append(_bad(path, len(value), f"should have at least {b['minProperties']} properties"))
        props = self.properties
        for key, sub in value.items():
            child = props.get(key) if props is not None else None
            if child is not None:
                child.validate(sub, f"{path}.{key}" if path else key, errors)
            elif isinstance(self.additional, Node):
                self.additional.validate(sub, f"{path}[{key}]", errors)

    def _validate_array(self, value: list[Any], path: str, errors: list[Cause]) -> None:
        b = self.bounds
        if "maxItems" in b and len(value) > b["maxItems"]:
            errors.append(
                (
                    path,
                    "FieldValueTooMany",
                    f"Too many: {len(value)}: must have at most {b['maxItems']} items",
                )
            )
        if "minItems" in b and len(value) < b["minItems"]:
            errors.append(_bad(path, len(value), f"should have at least {b['minItems']} items"))
        if self.items is not None:
            for i, item in enumerate(value):
                self.items.validate(item, f"{path}[{i}]", errors)
        if self.list_type == "set" or b.get("uniqueItems"):
            seen: list[Any] = []
            for i, item in enumerate(value):
                if item in seen:
                    errors.append(
                        (f"{path}[{i}]", "FieldValueDuplicate", f"Duplicate value: {go_value(item)}")
                    )
                seen.append(item)
        elif self.list_type == "map" and self.map_keys:
            keys: set[str] = set()
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    k = json.dumps([item.get(m) for m in self.map_keys])
                    if k in keys:
                        shown = "{" + ", ".join(f'"{m}":{go_value(item.get(m))}' for m in self.map_keys) + "}"
                        errors.append(
                            (
                                f"{path}[{i}]",
                                "FieldValueDuplicate",
                                f"Duplicate value: map[string]interface {{}}{shown}",
                            )
                        )
                    keys.add(k)

    def _validate_combinators(self, value: Any, path: str, errors: list[Cause]) -> None:
        def ok(node: Node) -> bool:
            sub: list[Cause] = []
            node.validate(value, path, sub)
            return not sub

        if self.any_of and not any(ok(n) for n in self.any_of):
            errors.append(_bad(path, value, "must match at least one schema in anyOf"))
        for n in self.all_of:
            n.validate(value, path, errors)
        if self.one_of and sum(ok(n) for n in self.one_of) != 1:
            errors.append(_bad(path, value, "must match exactly one schema in oneOf"))
        if self.not_ is not None and ok(self.not_):
            errors.append(_bad(path, value, "should not be valid against schema in not"))


def compile_schema(schema: dict[str, Any]) -> Node:
    """Compile a CRD's openAPIV3Schema; the root `metadata` is left to the server's own checks."""
    root = Node(schema)
    if root.properties is not None:
        root.properties["metadata"] = Node({"type": "object"}, is_meta=True)
        for key in ("apiVersion", "kind"):
            root.properties.setdefault(key, Node({"type": "string"}))
    return root
