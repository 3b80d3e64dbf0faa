"""What `metalflow site check` says of each running campaign it tells (issue 36 attack item 3):
after a worker kill the `site_blocked` update timed out and the check said "campaign ... was not
told (WorkflowUpdateRPCTimeoutOrCancelledError...", cut mid-word, though the update was applied
later. A timeout now says the outcome is unknown (it may apply once a worker runs the campaign),
an error is never cut mid-word, and `--json` records told / not told / unknown."""

from __future__ import annotations

from temporalio.client import WorkflowUpdateRPCTimeoutOrCancelledError

from metalflow.cli.site_campaigns import NOT_TOLD, TOLD, UNKNOWN, Told, as_json, cut, not_told


def test_an_update_unanswered_in_time_is_unknown_not_untold() -> None:
    for err in (WorkflowUpdateRPCTimeoutOrCancelledError(), TimeoutError()):
        said = not_told("campaign/c8", err)
        assert said.outcome == UNKNOWN, said
        assert said.line.startswith("campaign campaign/c8 did not answer within 10 s"), said.line
        assert (
            "whether it skips the hosts is unknown, the update may apply once a worker runs it" in said.line
        )
        assert "was not told" not in said.line


def test_a_refusal_is_not_told_and_its_words_are_cut_at_a_word() -> None:
    said = not_told("campaign/c8", RuntimeError("workflow execution already completed " + "word " * 60))
    assert said.outcome == NOT_TOLD
    assert said.line.startswith("campaign campaign/c8 was not told (RuntimeError: workflow execution already")
    assert said.line.endswith("word ...)"), said.line
    assert cut("E", RuntimeError("short")) == "E: short"


def test_json_records_which_campaigns_were_told_not_told_and_unknown() -> None:
    told = [Told(TOLD, "campaign/a", ""), Told(NOT_TOLD, "campaign/b", ""), Told(UNKNOWN, "campaign/c", "")]
    assert as_json(told) == {"told": ["campaign/a"], "not_told": ["campaign/b"], "unknown": ["campaign/c"]}


def test_the_help_says_which_temporal_the_check_tells_campaigns_through() -> None:
    """Issue 36 attack item 3: with no Temporal configured the check contacted 127.0.0.1:7233 and
    said so nowhere. Decided: the Temporal every command resolves (the dev default included), only
    when the new findings block a host; said in its help (and README)."""
    from metalflow.cli import build_parser

    parser = build_parser()
    [site] = [a for a in parser._subparsers._group_actions if "site" in a.choices]  # type: ignore[union-attr]
    check = site.choices["site"]._subparsers._group_actions[0].choices["check"]  # type: ignore[union-attr]
    text = " ".join((check.description or "").split())
    assert "When the new findings block a host, the running campaigns are told" in text, text
    assert "--address/--namespace" in text and "else 127.0.0.1:7233" in text, text
