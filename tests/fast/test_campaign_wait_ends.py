"""`metalflow campaign start --wait` ends once the campaign waits for nothing but an operator
(issue 40's standard: a wait that cannot progress says so early): halted (its failure budget
spent) or paused, nothing in flight. Before, `--wait` followed a halted campaign for ever.
(End to end: tests/test_campaign_wait_halted.py.)"""

from __future__ import annotations

from test_cli_campaign_render import _status

from metalflow.cli.campaign import waits_for_operator


def test_a_halted_campaign_waits_for_an_operator_and_says_what_it_accepts() -> None:
    halted = _status(
        phase="halted", aborting=None, waiting_on="operator",
        halted_reason="failure budget spent: 2 failed, halts past 1",
        waiting_for="failure budget spent: 2 failed, halts past 1; waiting for resume, retry_failed or abort",
    )  # fmt: skip
    assert waits_for_operator(halted) == (
        "campaign/fleet halted: it still runs and starts no host until an operator answers with "
        "`metalflow campaign retry-failed fleet` or `metalflow campaign resume fleet` or "
        "`metalflow campaign abort fleet`"
    )
    no_resume = halted.model_copy(update={"waiting_for": "canary failed; waiting for retry_failed or abort"})
    assert "resume" not in (waits_for_operator(no_resume) or "x resume")


def test_a_paused_campaign_waits_for_an_operator() -> None:
    paused = _status(phase="paused", aborting=None, waiting_on="operator", paused_by="alice")
    assert waits_for_operator(paused) == (
        "campaign/fleet paused by alice: it still runs and starts no host until an operator answers "
        "with `metalflow campaign resume fleet` or `metalflow campaign abort fleet`"
    )


def test_a_campaign_with_work_in_flight_or_a_timer_goes_on_by_itself() -> None:
    for waiting_on in ("in-flight", "timer", "can-start", "ended", ""):
        # Halted with hosts still in flight: they finish first (their outcomes count).
        status = _status(aborting=None, waiting_on=waiting_on, halted_reason="budget spent")
        assert waits_for_operator(status) is None, waiting_on
