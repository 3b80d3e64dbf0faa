"""An operator's answer sent while the entity starts the approved operation's child waits that out
(`metalflow.cli.host_decide.started`), then reaches the run: a full run's `host abort` of the
monitor's reprovision said "nothing to abort (reprovision/out-003 is starting)" and the
reprovision ran on (tests/test_outlives_its_process.py, under load)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from contracts.models.host import OperationRecord
from metalflow.cli.host_decide import started
from metalflow.hosts import HostRequestError

T0 = datetime(2026, 11, 30, 4, 0, tzinfo=UTC)


def record(outcome: str) -> OperationRecord:
    return OperationRecord(
        operation="reprovision",
        workflow_id="reprovision/out-003",
        requested_by="monitor/out-003",
        requested_at=T0,
        outcome=outcome,
    )


def reads(*outcomes: str | None) -> tuple[Iterator[OperationRecord | None], list[int]]:
    calls: list[int] = []

    def gen() -> Iterator[OperationRecord | None]:
        for n, outcome in enumerate(outcomes):
            calls.append(n)
            yield None if outcome is None else record(outcome)

    return gen(), calls


def test_an_answer_waits_until_the_operation_runs_then_reaches_it() -> None:
    seq, calls = reads("starting", "starting", "running")

    async def read() -> OperationRecord | None:
        return next(seq)

    now = asyncio.run(started(read, "out-003", record("starting"), poll_seconds=0))
    assert now is not None and now.outcome == "running"
    assert len(calls) == 3


def test_an_operation_that_ended_while_starting_is_returned_as_it_is_now() -> None:
    seq, _ = reads(None)

    async def read() -> OperationRecord | None:
        return next(seq)

    assert asyncio.run(started(read, "out-003", record("starting"), poll_seconds=0)) is None


def test_still_starting_past_the_wait_says_so_and_sends_nothing() -> None:
    async def read() -> OperationRecord | None:
        return record("starting")

    with pytest.raises(HostRequestError) as err:
        asyncio.run(started(read, "out-003", record("starting"), wait_seconds=0.05, poll_seconds=0.01))
    assert "reprovision/out-003 is still starting after 0.05 s" in str(err.value)
    assert "nothing was sent" in str(err.value)
