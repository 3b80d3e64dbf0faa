"""An update Temporal dropped with its failed workflow task is sent again, with the same id
(contracts/with_start.py `execute_update`). Seen in `make test` under load: `host abort` exited 1
with "Unable to perform workflow execution update due to unexpected workflow task failure"; the
abort had not been applied, and sending it again is what an operator would have done."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.service import RPCError, RPCStatusCode

from contracts import with_start
from contracts.with_start import dropped_with_its_task, execute_update

DROPPED = RPCError(
    "Unable to perform workflow execution update due to unexpected workflow task failure.",
    RPCStatusCode.FAILED_PRECONDITION,
    b"",
)


class _Handle:
    """A workflow handle whose first `failures` updates Temporal drops (or refuses otherwise)."""

    def __init__(self, failures: list[RPCError]) -> None:
        self.failures = failures
        self.ids: list[str] = []

    async def execute_update(self, update: str, arg: Any, **options: Any) -> str:
        self.ids.append(options["id"])
        if self.failures:
            raise self.failures.pop(0)
        return f"{update} answered"


@pytest.fixture(autouse=True)
def _no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(with_start, "UPDATE_RETRY_SECONDS", 0.0)


async def test_an_update_dropped_with_its_task_is_sent_again_under_the_same_id() -> None:
    handle = _Handle([DROPPED, DROPPED])
    assert await execute_update(handle, "abort", {}) == "abort answered"  # type: ignore[arg-type]
    assert len(handle.ids) == 3 and len(set(handle.ids)) == 1


async def test_it_gives_up_after_its_attempts_and_raises_what_temporal_said() -> None:
    handle = _Handle([DROPPED] * with_start.UPDATE_ATTEMPTS)
    with pytest.raises(RPCError) as raised:
        await execute_update(handle, "abort", {})  # type: ignore[arg-type]
    assert dropped_with_its_task(raised.value) and len(handle.ids) == with_start.UPDATE_ATTEMPTS


async def test_any_other_refusal_is_raised_at_once() -> None:
    other = RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b"")
    precondition = RPCError("something else", RPCStatusCode.FAILED_PRECONDITION, b"")
    for refusal in (other, precondition):
        handle = _Handle([refusal])
        with pytest.raises(RPCError):
            await execute_update(handle, "abort", {})  # type: ignore[arg-type]
        assert len(handle.ids) == 1
