"""The fields of a workflow as a raw visibility listing returns it (`WorkflowExecutionInfo`),
decoded one at a time: `host list` reads a few search attributes and memo entries of each row
and leaves the rest undecoded (split from host_list.py by size)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from temporalio.api.workflow.v1 import WorkflowExecutionInfo


def attribute(execution: WorkflowExecutionInfo, name: str) -> Any:
    """One search attribute of a listed workflow (JSON in its payload), None when unset."""
    payload = execution.search_attributes.indexed_fields.get(name)
    if payload is None or not payload.data:
        return None
    data = payload.data
    # Most are keywords: a JSON string with nothing escaped is its bytes between the quotes
    # (json.loads was half of the client's CPU at 10,000 hosts).
    if len(data) >= 2 and data[0] == data[-1] == 0x22 and b"\\" not in data and b'"' not in data[1:-1]:
        return data[1:-1].decode()
    try:
        return json.loads(data)
    except ValueError:
        return None


def memo_entry(execution: WorkflowExecutionInfo, key: str) -> str | None:
    """One string entry of a listed workflow's memo (JSON in its payload), None when absent."""
    payload = execution.memo.fields.get(key)
    if payload is None or not payload.data:
        return None
    try:
        value = json.loads(payload.data)
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def time_of(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
