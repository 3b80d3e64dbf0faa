"""An operation's end is counted once per run, even when its end path runs twice (issue 38).

Seen: `reprovision/host-003` completed once and `metalflow_operations_finished_total` showed 2.
A signal arrived while the run completed; the server refused the completion (`WorkflowTaskFailed`,
cause `UNHANDLED_COMMAND`) and the retried workflow task ran the kernel's end path (`to_the_end`)
again, for real, not as a replay (the SDK skips increments only while replaying). Here the same
helpers the kernel calls run twice for one run id, as the retried task runs them.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest

from contracts import metrics


class _Counter:
    def __init__(self, adds: list[tuple[str, int, Mapping[str, str]]], name: str) -> None:
        self._adds, self._name = adds, name

    def add(self, value: int, attributes: Mapping[str, str] | None = None) -> None:
        self._adds.append((self._name, value, dict(attributes or {})))


class _Meter:
    """Records each counter add: what the SDK's meter would export."""

    def __init__(self) -> None:
        self.adds: list[tuple[str, int, Mapping[str, str]]] = []

    def create_counter(self, name: str, *_: Any, **__: Any) -> _Counter:
        return _Counter(self.adds, name)


def test_the_end_path_run_twice_for_one_run_counts_once(monkeypatch: pytest.MonkeyPatch) -> None:
    meter = _Meter()
    run = SimpleNamespace(run_id="run-of-reprovision-host-003-counted-once")
    monkeypatch.setattr(metrics, "_workflow_meter", lambda: meter)
    monkeypatch.setattr(metrics.workflow, "info", lambda: run)
    for _ in range(2):  # the first workflow task, then its retry after UNHANDLED_COMMAND
        metrics.workflow_operation_started("reprovision")
        metrics.workflow_operation_ended("reprovision", "completed")
    assert meter.adds == [
        ("metalflow_operations_started", 1, {"kind": "reprovision"}),
        ("metalflow_operations_finished", 1, {"kind": "reprovision", "outcome": "succeeded"}),
    ]
    # Another run of the same workflow id (a new operation) counts again.
    run.run_id = "the-next-run-of-reprovision-host-003"
    metrics.workflow_operation_ended("reprovision", "completed")
    assert len(meter.adds) == 3
