"""Replay every saved history in tests/histories/*.json against today's workflow code, so a change
that would break running workflows (non-determinism) fails CI. Add a history by recording it
(`python tests/history_tool.py`, or any test that calls `save_history` with
METALFLOW_RECORD_HISTORIES=1) and committing the JSON."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

import workflows
from contracts.converter import DATA_CONVERTER
from metalflow.runtime.code_cache import SnippetCachingRunner

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


@pytest.fixture(scope="module")
async def replay_failures() -> dict[str, Exception | None]:
    """Every history replayed by one replayer, each as a fresh run of today's code: the failure
    of each (None when it replays), by file stem.

    Why one replayer: each `replay_workflow` builds a replay worker, which checks every workflow
    class in the sandbox again, ~0.8 s of CPU per history; through one worker a history costs
    ~0.15 s. Each history is still replayed whole and judged on its own: the worker evicts its run
    at the end and reports that run's non-determinism or failure."""

    async def histories() -> AsyncIterator[WorkflowHistory]:
        for path in HISTORIES:
            yield WorkflowHistory.from_json(path.stem, path.read_text())

    # The worker's runner (metalflow/runtime/worker.py): what replays in production is what is tested.
    replayer = Replayer(
        workflows=workflows.ALL,
        data_converter=DATA_CONVERTER,
        workflow_runner=SnippetCachingRunner(),
    )
    failures: dict[str, Exception | None] = {}
    async with replayer.workflow_replay_iterator(histories()) as results:
        async for result in results:
            failures[result.history.workflow_id] = result.replay_failure
    return failures


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_history_replays(path: Path, replay_failures: dict[str, Exception | None]) -> None:
    assert path.stem in replay_failures, f"{path.name} was not replayed"
    failure = replay_failures[path.stem]
    assert failure is None, f"{path.name} no longer replays: {failure}"


def test_there_are_histories_to_replay() -> None:
    assert HISTORIES, "tests/histories/ holds no recorded histories"


def _workflow_type(path: Path) -> str:
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    return history.events[0].workflow_execution_started_event_attributes.workflow_type.name


def test_every_registered_workflow_has_a_saved_history() -> None:
    """A workflow without a history is a workflow whose breaking change CI would not catch."""
    registered = {str(workflow._Definition.must_from_class(cls).name) for cls in workflows.ALL}
    covered = {_workflow_type(path) for path in HISTORIES}
    assert registered - covered == set(), (
        f"no history in tests/histories/ replays {sorted(registered - covered)}: record one "
        "(tests/history_tool.py) and commit it"
    )


def _pending_at_end(history: WorkflowHistory) -> tuple[list[str], bool]:
    """The activities still pending at a history's end, and whether it ended by itself
    (continued-as-new and terminated runs are not judged: the run did not end by itself)."""
    pending: dict[int, str] = {}
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            pending[event.event_id] = event.activity_task_scheduled_event_attributes.activity_type.name
        for ended in ("completed", "failed", "timed_out", "canceled"):
            field = f"activity_task_{ended}_event_attributes"
            if event.HasField(field):
                pending.pop(getattr(event, field).scheduled_event_id, None)
    last = history.events[-1]
    ended_by_itself = any(
        last.HasField(f"workflow_execution_{how}_event_attributes")
        for how in ("completed", "failed", "canceled")
    )
    return sorted(pending.values()), ended_by_itself


def test_runs_end_with_no_activity_pending() -> None:
    """Every run waits for what it cancels (`kernel.cancel_and_wait`): an ended run shows no
    pending activity in the UI, however it ended (completed, failed, aborted, cancelled)."""
    judged, left = 0, []
    for path in HISTORIES:
        pending, ended = _pending_at_end(WorkflowHistory.from_json(path.stem, path.read_text()))
        if ended:
            judged += 1
            if pending:
                left.append(f"{path.name}: {', '.join(pending)}")
    assert judged >= 20  # the recorded completions, aborts, cancels and failures
    assert left == []


def test_recorded_histories_carry_no_patch_marker() -> None:
    """Histories are recorded from released code, which carries only the patches LIVE_PATCHES
    lists (docs/VERSIONING.md)."""
    from metalflow.runtime.versioning import LIVE_PATCHES

    for path in HISTORIES:
        for event in WorkflowHistory.from_json(path.stem, path.read_text()).events:
            if event.HasField("marker_recorded_event_attributes"):
                marker = event.marker_recorded_event_attributes
                if marker.marker_name == "core_patch":
                    ids = {json.loads(p.data)["id"] for p in marker.details["patch-data"].payloads}
                    assert ids <= set(LIVE_PATCHES), f"{path.name}: {ids}"
