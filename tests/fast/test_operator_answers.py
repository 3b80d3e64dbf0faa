"""One answer wins (contracts/operator_answers.py): an abort and a retry sent to the same
wait for a person at once; the second is refused naming the first and when it was accepted
(tests/test_host_answer_race.py sends both to a real reset and reboot in one workflow task)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from contracts.operator_answers import Answered, second_answer_refusal

AT = datetime(2026, 11, 29, 23, 58, 1, 400_000, tzinfo=UTC)
Z = "2026-11-29T23:58:01Z"  # to the second


@pytest.mark.parametrize(
    ("kind", "first", "refused"),
    [
        ("abort", Answered("retry", "bob", AT), f"abort refused: retry by bob accepted at {Z} already"),
        ("retry", Answered("abort", "carol", AT), f"retry refused: abort by carol accepted at {Z} already"),
        ("mark_rebooted", Answered("abort", "carol", AT),
         f"mark_rebooted refused: abort by carol accepted at {Z} already"),
        ("abort", Answered("mark_rebooted", "dan", AT),
         f"abort refused: mark_rebooted by dan accepted at {Z} already"),
        ("retry", None, None),  # nothing taken: the validator's own rules decide
        ("abort", None, None),
        ("retry", Answered("retry", "bob", AT), None),  # the same answer twice: "not awaited now"
        ("abort", Answered("abort", "carol", AT), None),  # "already aborting" (or a campaign's escalation)
    ],
)  # fmt: skip
def test_the_second_answer_is_refused_naming_the_first(
    kind: str, first: Answered | None, refused: str | None
) -> None:
    assert second_answer_refusal(kind, first) == refused
