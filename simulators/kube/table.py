"""`meta.k8s.io/v1` Table rendering (what `kubectl get` asks for) from a type's printer columns."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from simulators.kube.store import Object, PrinterColumn, ResourceType

_TOKEN = re.compile(
    r"\.([A-Za-z0-9_\-/]+)|\[(\d+|\*)\]|\[\?\(@\.([A-Za-z0-9_\-]+)\s*==\s*['\"]([^'\"]*)['\"]\)\]"
)
_NAME = PrinterColumn(
    "Name", "string", ".metadata.name", "Name must be unique within a namespace.", 0, "name"
)
_AGE = PrinterColumn("Age", "date", ".metadata.creationTimestamp", "CreationTimestamp is a timestamp.")


def json_path(obj: Any, path: str) -> list[Any]:
    """Evaluate the JSONPath subset printer columns use: fields, [n], [*], [?(@.k=='v')]."""
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    if path.startswith("$"):
        path = path[1:]
    current = [obj]
    pos = 0
    while pos < len(path):
        m = _TOKEN.match(path, pos)
        if m is None:
            return []
        pos = m.end()
        field, index, fkey, fval = m.groups()
        nxt: list[Any] = []
        for value in current:
            if field is not None and isinstance(value, dict) and field in value:
                nxt.append(value[field])
            elif index is not None and isinstance(value, list):
                if index == "*":
                    nxt.extend(value)
                elif int(index) < len(value):
                    nxt.append(value[int(index)])
            elif fkey is not None and isinstance(value, list):
                nxt.extend(v for v in value if isinstance(v, dict) and str(v.get(fkey)) == fval)
        current = nxt
    return current


def columns_for(rt: ResourceType) -> list[PrinterColumn]:
    """Name first, then the CRD's columns (or Age when it declares none), as the server does."""
    cols = list(rt.printer_columns)
    if rt.group and not cols:
        cols = [_AGE]
    if not rt.group:
        cols = cols + [_AGE]
    return [_NAME] + cols


def human_duration(seconds: float) -> str:
    """The API server's short age format (5s, 3m12s, 4h, 12d, ...)."""
    if seconds < -1:
        return "<invalid>"
    s = max(int(seconds), 0)
    m, h, d = s // 60, s // 3600, s // 86400
    if s < 120:
        return f"{s}s"
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    if h < 24 * 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    if h < 24 * 365 * 2:
        return f"{d}d"
    y = d // 365
    return f"{y}y{d % 365}d" if h < 24 * 365 * 8 and d % 365 else f"{y}y"


def _cell(col: PrinterColumn, obj: Object) -> Any:
    values = json_path(obj, col.json_path)
    if not values:
        return None
    value = values[0]
    if col.type == "date" and isinstance(value, str):
        try:
            when = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return "<invalid>"
        return human_duration((datetime.now(UTC) - when).total_seconds())
    if col.type == "string" and not isinstance(value, str):
        return str(value).lower() if isinstance(value, bool) else str(value)
    return value


Cells = Callable[[Object], list[Any]]


def render_table(
    rt: ResourceType,
    objs: list[Object],
    rv: int,
    include: str = "Metadata",
    printer: tuple[tuple[PrinterColumn, ...], Cells] | None = None,
) -> Object:
    """A Table of `objs`; `include` is the request's includeObject (None, Metadata, Object);
    `printer` the columns and cells of a built-in kind the server prints its own way (Events)."""
    cols = list(printer[0]) if printer else columns_for(rt)
    rows = []
    for obj in objs:
        row: Object = {"cells": printer[1](obj) if printer else [_cell(c, obj) for c in cols]}
        if include == "Object":
            row["object"] = obj
        elif include != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata", {}),
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": str(rv)},
        "columnDefinitions": [
            {
                "name": c.name,
                "type": c.type,
                "format": c.format,
                "description": c.description,
                "priority": c.priority,
            }
            for c in cols
        ],
        "rows": rows,
    }
