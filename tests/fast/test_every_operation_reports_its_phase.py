"""Every workflow type the worker registers (`workflows.ALL`, not a list written here) that runs as
a host operation reports a phase and a one-line "now" where a person looks: `host list` and the
Temporal UI (the `Phase` search attribute and the current details, which `kernel.Runbook.enter`
writes), `host status` and `--wait` (`metalflow.operation_progress.operation_progress`: the operation's
`status` query, or, for one without, its `Phase` and current details).

A host operation is a workflow type the host's entity starts: the `child` of a row of
`contracts.host_requests.ENTITY_REQUESTS`. Its `status` answer, when it has one, must carry
`phase` and `waiting_for`: a status without them showed a running reset as `host-002: ?` (issue 38).
"""

from __future__ import annotations

import typing
from datetime import UTC, datetime

import pytest
from pydantic import BaseModel
from temporalio import workflow

import workflows
from contracts.host_requests import ENTITY_REQUESTS
from contracts.models.control import STATUS_QUERY
from contracts.models.host import HostResetStatus
from metalflow.operation_progress import describe_operation
from workflows import kernel

REGISTERED: list[type] = workflows.ALL
OPERATIONS = {row.child for row in ENTITY_REQUESTS}


def _name(cls: type) -> str:
    return workflow._Definition.must_from_class(cls).name


def _status_answer(cls: type) -> type[BaseModel] | None:
    """The model the workflow's `status` query answers with (None: it has no `status`)."""
    query = workflow._Definition.must_from_class(cls).queries.get(STATUS_QUERY)
    if query is None:
        return None
    answer = typing.get_type_hints(query.fn)["return"]
    assert isinstance(answer, type) and issubclass(answer, BaseModel), (
        f"{_name(cls)}: status answers {answer}"
    )
    return answer


def test_the_registry_runs_every_host_operation() -> None:
    assert OPERATIONS <= {_name(cls) for cls in REGISTERED}, "an entity request's child is not registered"


@pytest.mark.parametrize("cls", REGISTERED, ids=_name)
def test_every_host_operation_reports_a_phase_and_what_it_waits_for(cls: type) -> None:
    if _name(cls) not in OPERATIONS:
        return  # not a host operation: nothing follows it as one (`host status`, `--wait`)
    # Its phases reach the `Phase` search attribute and the current details (host list, the UI).
    assert issubclass(cls, kernel.Runbook), f"{_name(cls)} shows no phase: not a kernel.Runbook"
    answer = _status_answer(cls)
    if answer is None:
        return  # `operation_progress` reads its `Phase` and current details
    missing = {"phase", "waiting_for"} - set(answer.model_fields)
    assert not missing, f"{_name(cls)}'s status ({answer.__name__}) has no {', '.join(sorted(missing))}"


def test_a_running_resets_now_line_names_its_phase_and_what_it_waits_for() -> None:
    status = HostResetStatus(
        host_id="host-002",
        target="dpu",
        phase="waiting-for-dpu-os",
        waiting_for="DPU host-002-dpu-0 to boot its OS (OsIsRunning, at most 600 s)",
        resets=("host-002-dpu-0: ForceRestart",),
        boot_generation=0,
        started_at=datetime(2026, 11, 29, 4, tzinfo=UTC),
    ).model_dump(mode="json")
    assert describe_operation(status) == (
        "waiting-for-dpu-os; waiting for DPU host-002-dpu-0 to boot its OS (OsIsRunning, at most 600 s)"
    )
    assert describe_operation(status, waiting=False) == "waiting-for-dpu-os"
