"""A host operation's words for the kept site check it started under (issue 36 deliver 4):
`workflows/parts/site_check_said.said` (its phases' details) and
`metalflow.operation_progress.describe_operation` (the status line `host status` and `--wait` print)."""

from __future__ import annotations

from metalflow.operation_progress import describe_operation
from workflows.parts.site_check_said import said

WORDS = ("provision is degraded on host-001 by the site check of 2026-11-29T10:00:00Z: slower",)


def test_the_details_end_with_the_words_and_stay_without_any() -> None:
    assert said("reading DPF", WORDS) == f"reading DPF (site check: {WORDS[0]})"
    assert said("reading DPF", ()) == "reading DPF"


def test_the_status_line_says_them() -> None:
    line = describe_operation({"phase": "waiting-for-reboot-request", "site_check": list(WORDS)})
    assert line.endswith(f"; site check: {WORDS[0]}")
    assert "site check" not in describe_operation({"phase": "waiting-for-reboot-request"})
