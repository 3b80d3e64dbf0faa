"""Served resource types: every CRD of a directory plus the built-ins Namespace, Secret and Pod.

`make_validator` gives the store the admission step of a real API server: Secret `stringData`
folding, pruning, defaulting and validation against each type's `openAPIV3Schema`. What the
server does with unknown fields depends on the request's `fieldValidation` (Ignore: prune
silently; Warn: prune and warn; Strict: reject with 400), which the HTTP layer sets per request
with `field_validation_mode`.
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from simulators.kube.cel import RuleValidator
from simulators.kube.schema import Node, compile_schema
from simulators.kube.store import (
    BadRequest,
    Object,
    PrinterColumn,
    ResourceType,
    Store,
    Validator,
    invalid_error,
)

_mode: contextvars.ContextVar[str] = contextvars.ContextVar("field_validation", default="Ignore")
_warnings: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("field_warnings", default=None)

_META_DESC = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"  # noqa: E501
_COMMON = {
    "apiVersion": {
        "type": "string",
        "description": "APIVersion defines the versioned schema of this object.",
    },
    "kind": {"type": "string", "description": "Kind is a string value representing the REST resource."},
    "metadata": {"type": "object", "description": _META_DESC},
}
NAMESPACE_SCHEMA: Object = {
    "description": "Namespace provides a scope for Names. Use of multiple namespaces is optional.",
    "type": "object",
    "properties": {
        **_COMMON,
        "spec": {
            "description": "Spec defines the behavior of the Namespace.",
            "type": "object",
            "properties": {"finalizers": {"type": "array", "items": {"type": "string"}}},
        },
        "status": {
            "description": "Status describes the current status of a Namespace.",
            "type": "object",
            "properties": {
                "phase": {"type": "string", "enum": ["Active", "Terminating"]},
                "conditions": {
                    "type": "array",
                    "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                },  # noqa: E501
            },
        },
    },
}
SECRET_SCHEMA: Object = {
    "description": "Secret holds secret data of a certain type. The total bytes of the values in the Data field must be less than MaxSecretSize bytes.",  # noqa: E501
    "type": "object",
    "properties": {
        **_COMMON,
        "data": {
            "description": "Data contains the secret data, base64 encoded.",
            "type": "object",
            "additionalProperties": {"type": "string", "format": "byte"},
        },
        "stringData": {
            "description": "stringData allows specifying non-binary secret data in string form; write-only.",
            "type": "object",
            "additionalProperties": {"type": "string"},
        },
        "type": {"description": "Used to facilitate programmatic handling of secret data.", "type": "string"},
        "immutable": {
            "description": "Immutable, if set to true, data stored in the Secret cannot be updated.",
            "type": "boolean",
        },  # noqa: E501
    },
}
NAMESPACE = ResourceType(
    "", "v1", "namespaces", "namespace", "Namespace", "NamespaceList", False,
    frozenset({"status"}), short_names=("ns",),
    printer_columns=(PrinterColumn("Status", "string", ".status.phase"),),
    schema=NAMESPACE_SCHEMA,
)  # fmt: skip
SECRET = ResourceType(
    "", "v1", "secrets", "secret", "Secret", "SecretList", True,
    printer_columns=(PrinterColumn("Type", "string", ".type"),),
    schema=SECRET_SCHEMA,
)  # fmt: skip
_OPEN = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
POD_SCHEMA: Object = {
    "description": "Pod is a collection of containers that can run on a host (served so Grove's pods are "
    "visible: the simulated Grove creates and replaces them; spec and status are not validated).",
    "type": "object",
    "properties": {**_COMMON, "spec": _OPEN, "status": _OPEN},
}
POD = ResourceType(
    "", "v1", "pods", "pod", "Pod", "PodList", True, frozenset({"status"}), short_names=("po",),
    categories=("all",), printer_columns=(PrinterColumn("Status", "string", ".status.phase"),),
    schema=POD_SCHEMA,
)  # fmt: skip
CONFIGMAP_SCHEMA: Object = {
    "description": "ConfigMap holds configuration data for pods to consume (served so Grove's operator "
    "configuration can be read: simulators/grove/BEHAVIOUR.md K1).",
    "type": "object",
    "properties": {
        **_COMMON,
        "data": {"type": "object", "additionalProperties": {"type": "string"}},
        "immutable": {"type": "boolean"},
    },
}
CONFIGMAP = ResourceType(
    "", "v1", "configmaps", "configmap", "ConfigMap", "ConfigMapList", True, short_names=("cm",),
    schema=CONFIGMAP_SCHEMA,
)  # fmt: skip
BUILTINS = (NAMESPACE, SECRET, POD, CONFIGMAP)


def _resource_types_of(crd: Object) -> list[ResourceType]:
    spec = crd["spec"]
    names = spec["names"]
    out = []
    for version in spec.get("versions") or ():
        if not version.get("served", True):
            continue
        columns = tuple(
            PrinterColumn(
                c["name"], c.get("type", "string"), c["jsonPath"], c.get("description", ""),
                int(c.get("priority", 0)), c.get("format", ""),
            )
            for c in version.get("additionalPrinterColumns") or ()
        )  # fmt: skip
        out.append(
            ResourceType(
                group=spec["group"],
                version=version["name"],
                plural=names["plural"],
                singular=names.get("singular") or names["kind"].lower(),
                kind=names["kind"],
                list_kind=names.get("listKind") or names["kind"] + "List",
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                subresources=frozenset((version.get("subresources") or {}).keys()),
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                printer_columns=columns,
                schema=(version.get("schema") or {}).get("openAPIV3Schema"),
            )
        )
    return out


CRDS_ENV = "METALFLOW_CRDS"
# The vendored CRDs (README.md there names source, version and licence); package data, so an
# installed wheel has them as well as a checkout.
VENDORED_CRDS = Path(__file__).resolve().parent.parent / "crds"


def find_crd_dir(given: str | Path | None = None) -> Path:
    """The folder of the DPF and Grove CRDs the site serves.

    `given` (the `--crds` option), else `$METALFLOW_CRDS`, else the CRDs vendored in this package
    (`simulators/crds`). Nothing outside the installed package or the given folder is read.

    Raises:
        FileNotFoundError: The chosen folder does not hold both `dpf/` and `grove/`.
    """
    if given:
        candidate, source = Path(given), "--crds"
    elif os.environ.get(CRDS_ENV):
        candidate, source = Path(os.environ[CRDS_ENV]), f"${CRDS_ENV}"
    else:
        candidate, source = VENDORED_CRDS, "the vendored CRDs"
    if (candidate / "dpf").is_dir() and (candidate / "grove").is_dir():
        return candidate
    raise FileNotFoundError(
        f"{candidate} ({source}) is not a CRD folder: it must hold dpf/ and grove/; "
        f"pass --crds DIR or set {CRDS_ENV} to one that does"
    )


def load_resource_types(crd_dir: Path) -> list[ResourceType]:
    """Every served version of every CRD under `crd_dir` (recursively), plus Namespace, Secret, Pod,
    ConfigMap."""
    types: list[ResourceType] = list(BUILTINS)
    for path in sorted(crd_dir.rglob("*.yaml")) + sorted(crd_dir.rglob("*.yml")):
        with path.open() as f:
            for doc in yaml.load_all(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
                if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                    types.extend(_resource_types_of(doc))
    return types


@contextlib.contextmanager
def field_validation_mode(mode: str | None) -> Iterator[list[str]]:
    """Within the block, writes handle unknown fields per `mode`; yields the warnings list."""
    chosen = mode if mode in ("Ignore", "Warn", "Strict") else "Ignore"
    warnings: list[str] = []
    t1, t2 = _mode.set(chosen), _warnings.set(warnings)
    try:
        yield warnings
    finally:
        _mode.reset(t1)
        _warnings.reset(t2)


def _fold_string_data(obj: Object) -> None:
    """Merge a Secret's `stringData` into base64 `data`, as the API server does on write."""
    string_data = obj.pop("stringData", None)
    if isinstance(string_data, dict):
        current = obj.get("data")
        data: dict[str, Any] = current if isinstance(current, dict) else {}
        for key, value in string_data.items():
            if isinstance(value, str):
                data[key] = base64.b64encode(value.encode()).decode()
        obj["data"] = data
    obj.setdefault("type", "Opaque")


class SchemaValidator:
    """Compiles each type's schema on first use and keeps it; callable as the store's Validator."""

    def __init__(self) -> None:
        self._compiled: dict[tuple[str, str, str], Node | None] = {}

    def compiled(self, rt: ResourceType) -> Node | None:
        key = (rt.group, rt.version, rt.plural)
        if key not in self._compiled:
            self._compiled[key] = compile_schema(rt.schema) if rt.schema else None
        return self._compiled[key]

    def __call__(self, rt: ResourceType, obj: Object) -> None:
        if rt.group == "" and rt.kind == "Secret":
            _fold_string_data(obj)
        node = self.compiled(rt)
        if node is None:
            return
        unknown: list[str] = []
        node.prepare(obj, "", unknown)
        if unknown:
            mode = _mode.get()
            if mode == "Strict":
                listed = ", ".join(f'unknown field "{u}"' for u in unknown)
                raise BadRequest(
                    f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
                    f"strict decoding error: {listed}"
                )
            warnings = _warnings.get()
            if mode == "Warn" and warnings is not None:
                warnings.extend(f'unknown field "{u}"' for u in unknown)
        errors: list[tuple[str, str, str]] = []
        node.validate(obj, "", errors)
        if errors:
            raise invalid_error(rt, str(obj.get("metadata", {}).get("name", "")), errors)


def make_validator(resource_types: list[ResourceType] | None = None) -> Validator:
    """The store's Validator; compiles the given types' schemas now so first writes are fast."""
    validator = SchemaValidator()
    for rt in resource_types or ():
        validator.compiled(rt)
    return validator


def new_store(
    crd_dir: Path, *, namespaces: tuple[str, ...] = ("default", "dpf-operator-system"), **kw: Any
) -> Store:
    """A Store serving the CRDs of `crd_dir` with validation, and the given namespaces created."""
    types = load_resource_types(crd_dir)
    store = Store(types, validate=make_validator(types), validate_rules=RuleValidator(), **kw)
    for ns in namespaces:
        store.ensure_namespace(ns)
    return store
