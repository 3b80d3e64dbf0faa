"""README's sample of the demo's output is in the format the demo prints (issue 38: it showed an
older one, without the time stamps and with a step and its wait on one line). Its stamps are what
`Progress` writes when the output is not a terminal; tests/test_cli_dev.py finds every line in a
real demo's output (`readme_sample.matches`)."""

from __future__ import annotations

from datetime import datetime, timedelta

from readme_sample import STAMP, demo_sample, pattern

from metalflow.progress import Progress


def _elapsed(text: str) -> timedelta:
    minutes, seconds = text.split(":")
    return timedelta(minutes=int(minutes), seconds=int(seconds))


def test_each_sample_line_is_a_plain_progress_line_of_the_demo() -> None:
    lines = demo_sample()
    assert len(lines) >= 10 and all(" demo: " in line for line in lines), lines
    first = STAMP.match(lines[0])
    assert first is not None and first.group(2) == "0:00", lines[0]
    began = datetime.fromisoformat(first.group(1))
    for line in lines:
        stamp = STAMP.match(line)
        assert stamp is not None, line
        now, elapsed = datetime.fromisoformat(stamp.group(1)), _elapsed(stamp.group(2))
        # One demo's clock (each stamp is truncated to the second, the time since to the second).
        assert abs(now - began - elapsed) <= timedelta(seconds=1), line
        written: list[str] = []
        shown = Progress(write=written.append, clock=iter([now - elapsed, now]).__next__)  # began, now
        shown.note(line[stamp.end() :])
        assert written[-1] == line
        pattern(line)  # a pattern of the real line can be made of it


def test_a_line_without_the_stamp_is_not_a_sample_line() -> None:
    old = "demo: 3 hosts: host-001 (2 x BF3), host-002 (2 x BF3), host-003 (2 x BF4)"  # README's before
    try:
        pattern(old)
    except AssertionError as err:
        assert "no time stamp" in str(err)
    else:
        raise AssertionError("an unstamped line passed as the demo's format")
