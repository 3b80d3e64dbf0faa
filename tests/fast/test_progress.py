"""The progress display (metalflow.progress) and the vocabulary it prints (contracts.wording)."""

from __future__ import annotations

import io
import re
from datetime import UTC, datetime, timedelta, timezone

from contracts.wording import duration, iso_z, plural
from metalflow.progress import Progress

START = datetime(2026, 11, 22, 21, 45, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


def test_plain_lines_are_stamped_and_say_what_is_awaited_once_per_change() -> None:
    clock, out = Clock(), io.StringIO()
    with Progress(out, clock=clock) as progress:
        assert not progress.is_live  # a StringIO is no terminal
        progress.note("3 hosts")
        clock.now += timedelta(seconds=12)
        progress.step("host-001", "rebooting-host; 2 DPUs Rebooting", waiting_for="power cycle of host-001")
        clock.now += timedelta(seconds=3)
        progress.waiting("host-001", "power cycle of host-001")  # unchanged: no new line
        clock.now += timedelta(seconds=60)
        progress.step("host-001", "waiting-for-ready", waiting_for="every DPU Ready (1 of 2)")
        progress.finish("host-001", "completed")
    assert out.getvalue().splitlines() == [
        "2026-11-22T21:45:00Z +0:00 3 hosts",
        "2026-11-22T21:45:12Z +0:12 host-001: rebooting-host; 2 DPUs Rebooting",
        "2026-11-22T21:45:12Z +0:12 host-001:   waiting for power cycle of host-001"
        " (since 2026-11-22T21:45:12Z)",
        "2026-11-22T21:46:15Z +1:15 host-001: waiting-for-ready",
        "2026-11-22T21:46:15Z +1:15 host-001:   waiting for every DPU Ready (1 of 2)"
        " (since 2026-11-22T21:46:15Z)",
        "2026-11-22T21:46:15Z +1:15 host-001: completed",
    ]
    assert progress.waits() == {}  # finished keys wait for nothing


def test_plain_lines_can_go_to_a_writer_and_escapes_never_reach_it() -> None:
    lines: list[str] = []
    progress = Progress(write=lines.append, clock=Clock())
    progress.note("phase \x1b[31mred\x1b[0m")
    assert len(lines) == 1 and "\x1b" not in lines[0] and lines[0].startswith("2026-11-22T21:45:00Z +0:00 ")


def test_live_region_shows_each_wait_since_when_and_lasting_lines_stay() -> None:
    clock, out = Clock(), io.StringIO()
    progress = Progress(out, live=True, clock=clock)
    with progress:
        assert progress.is_live
        progress.step("host-001", "rebooting-host", waiting_for="power cycle of host-001")
        progress.step("host-002", "waiting-for-hold", waiting_for="the hold (0 of 2)")
        clock.now += timedelta(seconds=75)
        assert progress.waits() == {
            "host-001": ("power cycle of host-001", START),
            "host-002": ("the hold (0 of 2)", START),
        }
        region = "\n".join(line.plain for line in progress._region().renderables)  # type: ignore[union-attr]
        assert "host-001  waiting for power cycle of host-001  since 2026-11-22T21:45:00Z (1:15)" in region
        assert "host-002  waiting for the hold (0 of 2)  since 2026-11-22T21:45:00Z (1:15)" in region
        assert "elapsed 1:15" in region
        progress.finish("host-001", "completed")
        assert list(progress.waits()) == ["host-002"]
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    assert "host-001: rebooting-host" in text and "host-001: completed" in text


def test_one_vocabulary() -> None:
    assert (
        iso_z(datetime(2026, 1, 2, 3, 4, 5, 900, tzinfo=timezone(timedelta(hours=2))))
        == "2026-01-02T01:04:05Z"
    )
    assert iso_z(datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02T03:04:05Z"  # naive: taken as UTC
    assert iso_z(None) == "-"
    assert [plural(n, "DPU") for n in (0, 1, 2)] == ["0 DPUs", "1 DPU", "2 DPUs"]
    assert plural(1, "entry", "entries") == "1 entry" and plural(3, "entry", "entries") == "3 entries"
    assert [duration(s) for s in (0, 7, 75, 3723, -5)] == ["0:00", "0:07", "1:15", "1:02:03", "0:00"]


def test_details_of_a_step_stay_out_of_a_log_but_keep_the_wait_current() -> None:
    clock, out = Clock(), io.StringIO()
    progress = Progress(out, clock=clock)
    progress.step("host-001", "waiting-for-hold; 2 DPUs Pending", waiting_for="every DPU held (0 of 2)")
    clock.now += timedelta(seconds=5)
    progress.detail("host-001", "waiting-for-hold; 2 DPUs Node Effect", "every DPU held (1 of 2)")
    assert len(out.getvalue().splitlines()) == 2  # the step and its wait; the detail is not logged
    # The wait is the same step's: it still counts from when the step began.
    assert progress.waits() == {"host-001": ("every DPU held (1 of 2)", START)}


def test_live_a_wait_wider_than_the_terminal_is_also_printed_whole_once() -> None:
    """Attack 41a: on a 120-column terminal the live line of a reboot riding out a silent BMC
    ended `BMC host-002 has not ans…`: since, until and the attempt were never seen. A wait
    announced at a step that the region would crop is printed whole above it; a short one is not."""
    clock, out = Clock(), io.StringIO()
    progress = Progress(out, live=True, clock=clock)
    long = (
        "the power cycle of host-002; BMC host-002 has not answered since 2026-11-22T21:45:00Z " + "x" * 200
    )
    with progress:
        progress._live.console.width = 120  # type: ignore[union-attr]
        progress.step("host-001", "rebooting-host", waiting_for="power cycle of host-001")
        progress.step("host-002", "powering", waiting_for=long)
        progress.detail("host-002", "", waiting_for=long + " more")  # a detail: the live line only
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\s*\n\s*", "", out.getvalue())
    assert long.replace(" ", "") in text.replace(" ", "")  # the whole words, wrapped
    assert "waitingforpowercycleofhost-001" not in text.replace(" ", "")  # fits: not repeated
    assert "more" not in text
