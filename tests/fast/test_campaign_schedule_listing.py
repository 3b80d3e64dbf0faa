"""`campaign schedule` returns once Temporal's schedule list shows what it made, and `campaign
schedules` passes over a schedule the list still shows after its delete (metalflow/cli/
campaign_schedule.py). Temporal's list is eventually consistent; this stand-in lags as it does,
deterministically, where the real server's lag cannot be forced."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from temporalio.service import RPCError, RPCStatusCode

from metalflow.cli import campaign_schedule


@dataclass
class LaggingList:
    """Lists `ids` only from the `lag`-th call of `list_schedules` on."""

    ids: list[str]
    lag: int
    calls: int = 0
    gone: set[str] = field(default_factory=set)

    async def list_schedules(self) -> AsyncIterator[Any]:
        self.calls += 1
        shown = self.ids if self.calls > self.lag else []

        async def listing() -> AsyncIterator[Any]:
            for sid in shown:
                yield type("Listed", (), {"id": sid})()

        return listing()

    def get_schedule_handle(self, sid: str) -> Any:
        lagging = self

        class Handle:
            async def describe(self) -> Any:
                if sid in lagging.gone:
                    raise RPCError("not found", RPCStatusCode.NOT_FOUND, b"")
                raise AssertionError("only a deleted schedule is described here")

        return Handle()


@pytest.fixture(autouse=True)
def _quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(campaign_schedule, "LISTED_POLL", 0.001)
    monkeypatch.setattr(campaign_schedule, "LISTED_WITHIN", 1.0)


def test_a_create_waits_until_the_list_shows_it() -> None:
    client = LaggingList(ids=["campaign-nightly"], lag=5)
    assert asyncio.run(campaign_schedule._listed_as(client, "campaign-nightly", present=True))
    assert client.calls == 6


def test_a_list_that_never_agrees_is_said_not_waited_for_ever() -> None:
    client = LaggingList(ids=[], lag=0)
    assert not asyncio.run(campaign_schedule._listed_as(client, "campaign-nightly", present=True))


def test_a_deleted_schedule_still_listed_is_passed_over(capsys: pytest.CaptureFixture[str]) -> None:
    client = LaggingList(ids=["campaign-old"], lag=0, gone={"campaign-old"})
    status = asyncio.run(campaign_schedule._schedules(client, None))
    assert status == campaign_schedule.EXIT_OK
    assert capsys.readouterr().out.strip() == "no campaign schedules"
