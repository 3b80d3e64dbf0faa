"""What `metalflow campaign status` and `campaign start --wait` print for a campaign aborted with
`cancel_running`: the hosts it cut are shown as aborted, by name, never as failed; counts beyond
the hosts named point at `campaign hosts`. And a status without the newest optional fields still
decodes.
(The workflow side, end to end: test_campaign_control.py's cancel-running abort.)"""

from __future__ import annotations

from datetime import UTC, datetime

from contracts.models.campaign import CampaignResult, CampaignStatus, Deferred, Failure, Limits
from metalflow.cli.campaign import details, print_named, render, summary
from metalflow.cli.campaign_render import skipped_words

NOW = datetime(2026, 11, 23, 4, 0, tzinfo=UTC)
CUT = Failure(host_id="h-002", reason="failed: aborted by alice: bad BFB")


def _status(**fields: object) -> CampaignStatus:
    values: dict[str, object] = {
        "name": "fleet",
        "target": "reprovision",
        "phase": "aborted",
        "total": 4,
        "done": 1,
        "already_at_target": 0,
        "in_flight": (),
        "awaiting_approval": (),
        "failed": 0,
        "failures": (),
        "skipped": 1,
        "skipped_hosts": (),
        "deferred": (),
        "remaining": 0,
        "batch": 1,
        "canary_passed": True,
        "window_open": True,
        "next_window": None,
        "soak_until": None,
        "budget": "0 failures counted; halts past 0",
        "halted_reason": None,
        "paused_by": None,
        "aborting": "alice",
        "limits": Limits(),
        "runs": 1,
    }
    values.update(fields)
    return CampaignStatus.model_validate(values)


def test_status_line_counts_aborted_hosts_apart_from_failures() -> None:
    line = render(_status(aborted=2, aborted_hosts=(CUT,)))
    counts = "1 done, 0 already at target, 0 in flight, 0 failed, 1 skipped, 2 aborted (h-002, +1 more)"
    assert f"4/4: {counts}; batch 1" in line


def test_result_line_names_aborted_hosts_and_is_not_a_success() -> None:
    result = CampaignResult(
        name="fleet", outcome="aborted", total=3, done=2, already_at_target=0, failed=0, skipped=0,
        runs=1, finished_at=NOW, aborted=1, aborted_hosts=(CUT,),
    )  # fmt: skip
    assert summary(result) == (
        "campaign/fleet aborted: 2 done, 0 already at target, 0 failed, 0 skipped, 1 aborted of 3"
    )
    assert not result.all_succeeded


def test_hosts_beyond_those_named_point_at_the_hosts_command(capsys: object) -> None:
    print_named("skipped", 9000, (CUT,), "campaign/fleet")
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "skipped h-002: failed: aborted by alice: bad BFB" in out
    assert "... 8999 more skipped: `metalflow campaign hosts fleet --outcome skipped`" in out


def test_a_status_without_the_newest_fields_decodes() -> None:
    old_status = _status().model_dump(mode="json")
    for field in ("aborted", "aborted_hosts", "verifying", "changes"):
        old_status.pop(field)
    status = CampaignStatus.model_validate(old_status)
    assert (status.aborted, status.aborted_hosts, status.changes) == (0, (), ())
    assert ", aborted" not in render(status) and "0 failed, 1 skipped; batch 1" in render(status)


def test_status_line_names_the_hosts_and_counts_those_awaiting_approval() -> None:
    """Issue 29 item 8: a canary awaiting approval read `0 in flight`, and no host was named."""
    skipped = Failure(host_id="h-004", reason="instance assigned: i-1")
    failed = Failure(host_id="h-005", reason="failed: DPUFailed")
    waiting = render(_status(phase="canary", in_flight=(), awaiting_approval=("h-001",), skipped=1,
                             skipped_hosts=(skipped,), aborting=None))  # fmt: skip
    assert "0/4: 0 done" not in waiting  # finished: 1 done + 1 skipped
    assert "0 in flight, 1 awaiting approval (h-001), 0 failed, 1 skipped (h-004); batch 1" in waiting
    many = tuple(f"h-1{i:02d}" for i in range(7))
    running = render(_status(phase="running", in_flight=many, failed=1, failures=(failed,), skipped=0))
    assert "7 in flight (h-100, h-101, h-102, h-103, h-104, +2 more), 1 failed (h-005), 0 skipped" in running


def test_hosts_put_off_show_when_they_are_asked_again_and_why_and_the_rest_point_at_hosts() -> None:
    later = Deferred(
        host_id="h-003", retry_at=datetime(2026, 11, 23, 4, 5, tzinfo=UTC), reason="host h-003 is busy"
    )
    status = _status(phase="running", deferred=("h-003",), deferred_count=12, deferred_hosts=(later,))
    assert "12 deferred (h-003 until 2026-11-23T04:05:00Z, +11 more)" in render(status)
    lines = details(status, "campaign/fleet")
    assert "  deferred h-003 until 2026-11-23T04:05:00Z: host h-003 is busy" in lines
    assert "  ... 11 more deferred: `metalflow campaign hosts fleet --outcome deferred`" in lines


def test_hosts_left_deferred_by_an_ended_campaign_show_no_retry_time() -> None:
    """Issue 38 deliver 2: an aborted campaign still printed `1 deferred (h-003 until ...Z)`, a
    retry that never happens; its status carries no time then, and the words say so."""
    left = Deferred(host_id="h-003", retry_at=None, reason="host h-003 is busy")
    status = _status(phase="aborted", deferred=("h-003",), deferred_count=1, deferred_hosts=(left,))
    assert "1 deferred (h-003 left with no retry)" in render(status)
    assert "  deferred h-003 left with no retry: host h-003 is busy" in details(status, "campaign/fleet")


def test_an_ended_campaign_says_no_waiting_for_line() -> None:
    """`campaign status` of a completed campaign printed `waiting for: ended: completed` under
    `demo-fleet completed [...]` (issue 38, first-day words): an end is said on the line above."""
    ended = _status(phase="completed", aborting=None, waiting_on="ended", waiting_for="completed")
    assert not any(line.startswith("  waiting for:") for line in details(ended, "campaign/fleet"))
    running = _status(phase="running", aborting=None, waiting_on="timer", waiting_for="at T: it opens")
    assert "  waiting for: timer: at T: it opens" in details(running, "campaign/fleet")


def test_a_command_to_an_ended_campaign_says_how_it_ended_in_the_commands_words() -> None:
    """Issue 38 item 3-4: a campaign aborted by alice was "has ended (completed)" to `pause`, and
    `retry-failed` read "nothing to retry_failed" (the update's name)."""
    from metalflow.cli.workflow_commands import campaign_ended, ended_refusal

    aborted = campaign_ended(_status(abort_reason="bad BFB"))
    said = ended_refusal("campaign/fleet", aborted, "retry-failed")
    assert said == (
        "campaign/fleet has ended (aborted by alice: bad BFB): `retry-failed` has nothing to act on; "
        "nothing was changed"
    )  # before: "nothing to retry-failed", and "nothing to limits" (issue 38)
    assert campaign_ended(_status(phase="completed", aborting=None)) == "completed"


HELD = Failure(host_id="h-001", reason="automation held back by alice since 2026-11-23T03:00:00Z: debugging")


def _ended(**counts: int) -> CampaignResult:
    values = {"total": 1, "done": 0, "already_at_target": 0, "failed": 0, "skipped": 0, **counts}
    return CampaignResult(name="fleet", outcome="completed", runs=1, finished_at=NOW, **values)


def test_a_campaign_whose_every_host_was_rightly_skipped_did_nothing_and_is_not_a_failure() -> None:
    """An attack found it (issue 40): a campaign whose only host was skipped (held back by an
    operator, left out by its rules) ended `--wait` with exit 1, as if the command had failed. A
    skip is the rule working: no host failed, so exit 0 (`nothing_failed`), and it says so."""
    only = _ended(skipped=1).model_copy(update={"skipped_hosts": (HELD,)})
    assert only.nothing_failed and not only.all_succeeded
    assert skipped_words(only) == (
        "  nothing to do: every host was skipped (named above, each with why: the campaign's rules or a "
        "person's word): no host's operation ran; not a failure (exit 0)"
    )
    # doing more never ends worse: one done, one skipped is no failure either
    some = _ended(total=2, done=1, skipped=1)
    assert some.nothing_failed and skipped_words(some) == (
        "  1 host skipped (named above, each with why: the campaign's rules or a person's word), every "
        "other one succeeded; not a failure (exit 0)"
    )
    # a failed host, an aborted one, or a campaign that did not complete: exit 1 (4), no such words
    for worse in (
        _ended(total=2, failed=1, skipped=1),
        _ended(total=2, skipped=1, aborted=1),
        _ended(skipped=1).model_copy(update={"outcome": "stopped"}),
    ):
        assert not worse.nothing_failed and skipped_words(worse) is None, worse
    assert _ended(done=1).nothing_failed and skipped_words(_ended(done=1)) is None
