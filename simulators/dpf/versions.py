"""Which DPF release the simulated site plays: `25.10` (the vendored CRDs as they are), `26`
(the same CRDs with metalflow's v26 overlay applied, `simulators/crds/dpf-v26/overlay.yaml`) or
`26.4-rc.3` (NICo's pin: the v26 overlay, then `rc3.yaml` takes away what that build lacks).

Chosen with `python -m simulators serve --dpf-version 26` or `METALFLOW_DPF_VERSION=26`; the
default stays 25.10. The overlay is a schema delta written by metalflow after reading the
upstream files its header names: no upstream file is copied. Behaviour that differs between
the releases is in `simulators/dpf/BEHAVIOUR.md`, one row per behaviour with its source.

Cost: the overlay is applied once at start (a deep copy of the CRD schemas it changes).
"""

from __future__ import annotations

import copy
import dataclasses
import os
from pathlib import Path
from typing import Any, Final

import yaml

from simulators.dpf.model import DEPLOYMENT_MODES, ZERO_TRUST
from simulators.kube.store import ResourceType

V25: Final = "25.10"
V26: Final = "26"
V26_RC3: Final = "26.4-rc.3"  # the build NICo pins: v26 without rebootStatus (BEHAVIOUR.md R7)
VERSIONS: Final = (V25, V26, V26_RC3)
V26_BUILDS: Final = (V26, V26_RC3)
VERSION_ENV: Final = "METALFLOW_DPF_VERSION"
OVERLAY: Final = Path(__file__).resolve().parent.parent / "crds" / "dpf-v26" / "overlay.yaml"
RC3_OVERLAY: Final = OVERLAY.with_name("rc3.yaml")  # applied after OVERLAY for 26.4-rc.3

Object = dict[str, Any]


def chosen(given: str | None = None) -> str:
    """The DPF version asked for: `given`, else `$METALFLOW_DPF_VERSION`, else 25.10.

    Raises:
        ValueError: Not one of `VERSIONS` (the message names them and where the value came from).
    """
    source = "--dpf-version" if given else f"${VERSION_ENV}"
    value = given or os.environ.get(VERSION_ENV) or V25
    if value not in VERSIONS:
        raise ValueError(f"unknown DPF version {value!r} ({source}); choose one of {', '.join(VERSIONS)}")
    return value


MODE_ENV: Final = "METALFLOW_DPF_DEPLOYMENT_MODE"


def chosen_mode(given: str | None, version: str) -> str:
    """The deployment mode DPF plays: `given`, else `$METALFLOW_DPF_DEPLOYMENT_MODE`, else
    zero-trust. It decides which phase follows the agent's NoAction and a host reboot
    (simulators/dpf/BEHAVIOUR.md P1), which the 25.10 simulation does not play.

    Raises:
        ValueError: Not one of `DEPLOYMENT_MODES`, or host-trusted asked of DPF 25.10 (the
            message names the value and where it came from).
    """
    source = "--dpf-deployment-mode" if given else f"${MODE_ENV}"
    value = given or os.environ.get(MODE_ENV) or ZERO_TRUST
    if value not in DEPLOYMENT_MODES:
        raise ValueError(
            f"unknown DPF deployment mode {value!r} ({source}); choose one of {', '.join(DEPLOYMENT_MODES)}"
        )
    if value != ZERO_TRUST and version == V25:
        raise ValueError(
            f"DPF deployment mode {value!r} ({source}) is DPF v26 behaviour: serve --dpf-version 26"
        )
    return value


def load_overlay(path: Path = OVERLAY) -> list[Object]:
    """An overlay's operations, checked: each names an op this module knows and a CRD."""
    document = yaml.safe_load(path.read_text())
    if not isinstance(document, dict) or document.get("kind") != "MetalflowCRDOverlay":
        raise ValueError(f"{path} is not a MetalflowCRDOverlay")
    operations = document.get("operations") or []
    for i, operation in enumerate(operations):
        if operation.get("op") not in _OPS or not operation.get("crd") or not operation.get("at"):
            raise ValueError(f"{path}: operation {i} needs op ({', '.join(_OPS)}), crd and at: {operation}")
    return list(operations)


def apply(types: list[ResourceType], version: str) -> list[ResourceType]:
    """`types` as DPF `version` serves them: unchanged for 25.10, the overlay applied for 26, and
    for 26.4-rc.3 then the rc.3 overlay (what that build's CRDs do not have, taken away).

    Raises:
        ValueError: An operation names a CRD or a path the served CRDs do not have (the overlay
            no longer fits the vendored CRDs: it says which).
    """
    if version == V25:
        return types
    by_crd: dict[str, list[Object]] = {}
    for operation in load_overlay() + (load_overlay(RC3_OVERLAY) if version == V26_RC3 else []):
        by_crd.setdefault(operation["crd"], []).append(operation)
    out = []
    for rt in types:
        key = f"{rt.plural}.{rt.group}"
        operations = by_crd.pop(key, None)
        if operations is None or rt.schema is None:
            out.append(rt)
            continue
        schema = copy.deepcopy(rt.schema)
        for operation in operations:
            _OPS[operation["op"]](_at(schema, operation["at"], key), operation)
        out.append(dataclasses.replace(rt, schema=schema))
    if by_crd:
        raise ValueError(f"the DPF v26 overlay names CRDs that are not served: {', '.join(sorted(by_crd))}")
    return out


def _at(schema: Object, path: str, crd: str) -> Object:
    node: Any = schema
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise ValueError(f"the DPF v26 overlay's path {path!r} is not in CRD {crd}")
        node = node[part]
    if not isinstance(node, dict):
        raise ValueError(f"the DPF v26 overlay's path {path!r} in CRD {crd} is not a schema")
    return node


def _extend_enum(node: Object, operation: Object) -> None:
    node["enum"] = [*node.get("enum", []), *(v for v in operation["values"] if v not in node.get("enum", []))]


def _add_properties(node: Object, operation: Object) -> None:
    node.setdefault("properties", {}).update(copy.deepcopy(operation["properties"]))


def _require(node: Object, operation: Object) -> None:
    node["required"] = sorted({*node.get("required", []), *operation["names"]})


def _drop_default(node: Object, operation: Object) -> None:
    node.pop("default", None)


def _drop_properties(node: Object, operation: Object) -> None:
    for name in operation["names"]:
        node.get("properties", {}).pop(name, None)


def _drop_enum(node: Object, operation: Object) -> None:
    node["enum"] = [v for v in node.get("enum", []) if v not in operation["values"]]


def _add_validation(node: Object, operation: Object) -> None:
    """A CEL rule (`x-kubernetes-validations`) on the schema at `at`: `rule`, `message`, and
    `optionalOldSelf` when it has one."""
    rule: Object = {"rule": operation["rule"], "message": operation["message"]}
    if operation.get("optionalOldSelf"):
        rule["optionalOldSelf"] = True
    node["x-kubernetes-validations"] = [*node.get("x-kubernetes-validations", []), rule]


_OPS = {
    "extend_enum": _extend_enum,
    "add_properties": _add_properties,
    "require": _require,
    "drop_default": _drop_default,
    "drop_properties": _drop_properties,
    "drop_enum": _drop_enum,
    "add_validation": _add_validation,
}
