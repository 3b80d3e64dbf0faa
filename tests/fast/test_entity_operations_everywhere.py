"""Every entity operation request (a row of `contracts.host_requests.ENTITY_REQUESTS`) reaches the
places that list operations without naming them: `metalflow host list --phase` takes the entity's
`running <operation>` and every phase the operation's workflow shows, and the worker's Kubernetes
Events report the operation's start and ending with the row's action word. A new row is covered
here without anyone remembering these files (tests/test_host_phases.py holds each row's phases to
its workflow's code)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from contracts import names
from contracts.events import PhaseChange
from contracts.host_requests import ENTITY_REQUESTS, EntityRequest
from metalflow.cli import host_list
from metalflow.runtime.events import describe

ROWS = pytest.mark.parametrize("row", ENTITY_REQUESTS, ids=lambda row: row.operation)
NAMESPACE = "dpf-operator-system"
AT = datetime(2026, 11, 27, tzinfo=UTC)


def _change(row: EntityRequest[Any], workflow_type: str, phase: str, **more: Any) -> PhaseChange:
    return PhaseChange(
        workflow_id=names.host_operation_workflow_id(row.operation, "h1"), run_id="r1",
        workflow_type=workflow_type, phase=phase, details="what happened", at=AT, history_length=9,
        host_id="h1", operation=row.operation, **more,
    )  # fmt: skip


@ROWS
def test_host_list_takes_the_entitys_running_phase_and_the_operations_phases(row: EntityRequest[Any]) -> None:
    assert host_list._phase(f"running {row.operation}") == f"running {row.operation}"
    assert row.phases, f"{row.operation}: its row names the phases its workflow shows"
    for phase in (*row.phases, row.ended, "failed", "aborted", "cancelled"):
        assert host_list._phase(phase) == phase


@ROWS
@pytest.mark.parametrize(
    ("phase", "reason", "kind"),
    [
        ("failed", "OperationFailed", "Warning"),
        ("aborted", "OperationAborted", "Warning"),
        ("cancelled", "OperationAborted", "Warning"),
    ],
)
def test_an_operation_that_ends_early_tells_on_call(
    row: EntityRequest[Any], phase: str, reason: str, kind: str
) -> None:
    spec = describe(_change(row, row.child, phase), NAMESPACE)
    assert spec is not None, f"no Event for a {row.operation} that ended {phase}"
    assert (spec.reason, spec.type, spec.action, spec.host_id) == (reason, kind, row.action, "h1")
    assert spec.regarding is not None and spec.regarding.name == "node-h1"


@ROWS
def test_the_operation_ends_and_starts_with_the_rows_action(row: EntityRequest[Any]) -> None:
    ended = describe(_change(row, row.child, row.ended), NAMESPACE)
    assert ended is not None and (ended.reason, ended.action) == ("OperationSucceeded", row.action)
    started = describe(_change(row, "HostWorkflow", f"running {row.operation}"), NAMESPACE)
    assert started is not None and (started.reason, started.action) == ("OperationStarted", row.action)
