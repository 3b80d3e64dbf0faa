"""Issue 40 re-attack (B6): `metalflow host mark-rebooted HOST` on a reset (which has no such
answer) printed Temporal's words: `refused `mark_rebooted`: Update handler for 'mark_rebooted'
expected but not found, and there is no dynamic handler. known updates: [abort retry ...]`,
internal update names. Now it says which command the run does not take and which it does."""

from __future__ import annotations

from metalflow.cli.host_decide import refusal_words

HOST = "host-001"
NOT_FOUND = (
    "Update handler for 'mark_rebooted' expected but not found, and there is no dynamic handler. "
    "known updates: [__temporal_workflow_metadata abort host_rebooted pause retry]"
)


def test_an_answer_the_run_has_no_handler_of_is_said_in_the_clis_commands() -> None:
    words = refusal_words(f"reset/{HOST}", "reset", "mark_rebooted", NOT_FOUND, HOST)
    assert words.startswith(f"reset/{HOST} (reset) does not take `metalflow host mark-rebooted {HOST}`: "), (
        words
    )
    assert f"`metalflow host retry {HOST}`" in words and f"`metalflow host abort {HOST}`" in words, words
    assert f"`metalflow host-rebooted {HOST}`" in words, words
    assert "mark_rebooted" not in words and "handler" not in words and "pause" not in words, words


def test_a_refusal_by_the_runs_own_validator_keeps_its_words() -> None:
    why = "`retry` is only accepted in manual-intervention-required (now: resetting-dpus)"
    assert (
        refusal_words(f"reset/{HOST}", "reset", "retry", why, HOST)
        == f"reset/{HOST} (reset) refused `retry`: {why}"
    )
