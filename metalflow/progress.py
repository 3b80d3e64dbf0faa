"""Progress a person can read: what runs, what it waits for and since when, how long it has taken.

One display for every command that follows work to its end (`host ... --wait`, `approve --wait`,
the demo; rollouts and campaigns can use it the same way):

    with Progress() as progress:                      # live on a terminal, plain lines otherwise
        progress.note("3 hosts: host-001, ...")       # a lasting line
        progress.step("host-001", "rebooting-host; 2 DPUs Rebooting",
                      waiting_for="power cycle of host-001", since=started)
        progress.finish("host-001", "completed (reboots 1)")

On a terminal (rich's `Live`): lasting lines scroll above a live region holding one line per
key that is still waiting: `host-001  waiting for power cycle of host-001  since
2026-11-22T21:45:02Z (0:12)` (ISO 8601 with its date, as every time metalflow prints), refreshed
twice a second, cropped to the terminal's width (a wait announced at a step whose line is wider
is also printed whole, as a lasting line: the BMC's words, since and until of a power cycle that
rides out a silent BMC were cut at "has not ans…" on a 120-column terminal); the region is gone
when the display closes.
Elsewhere (a pipe, a log file, CI): plain lines, each stamped with the UTC time and the elapsed
time since the display began (`2026-11-22T21:45:02Z +0:12 host-001: ...`), and
a waiting line only when what a key waits for changes, so a log reads as a story.

Cost: nothing per host beyond a dict entry; a live refresh re-renders one line per waiting key.
Both modes pass every line through `contracts.validation.terminal_safe` (a phase or a reason
recorded in a workflow never reaches the terminal as an escape sequence).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from contracts.validation import terminal_safe
from contracts.wording import duration, iso_z

LIVE_REFRESH_PER_SECOND = 2


def utc_now() -> datetime:
    """The current time in UTC (the display's default clock)."""
    return datetime.now(UTC)


@dataclass(frozen=True)
class _Wait:
    what: str
    since: datetime


class Progress:
    """A live status region on a terminal, timestamped lines elsewhere (module docstring)."""

    def __init__(
        self,
        out: TextIO | None = None,
        *,
        live: bool | None = None,
        write: Callable[[str], None] | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        """Args:
        out: Where to write (default: stdout).
        live: Force live (True) or plain (False); default: live when `out` is a terminal.
        write: Plain mode only: hand each finished line to this instead of `out`.
        clock: The time source (tests pass a fixed one).
        """
        self._out = out or sys.stdout
        self._write = write
        isatty = getattr(self._out, "isatty", None)
        self.is_live = bool(isatty and isatty()) if live is None else live
        if write is not None:
            self.is_live = False
        self._clock = clock
        self.began = clock()
        self._waits: dict[str, _Wait] = {}
        self._live: Live | None = None

    # -- lifetime -------------------------------------------------------------------------------

    def __enter__(self) -> Progress:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Show the live region (live mode); plain mode needs no start."""
        if not self.is_live or self._live is not None:
            return
        console = Console(file=self._out, highlight=False, markup=False, emoji=False)
        # redirect_stdout: other prints of the process (the dev stack's) land above the region.
        self._live = Live(
            get_renderable=self._region,
            console=console,
            refresh_per_second=LIVE_REFRESH_PER_SECOND,
            transient=True,
            redirect_stdout=True,
            redirect_stderr=False,
        )
        self._live.start()

    def stop(self) -> None:
        """Remove the live region; lines already printed stay."""
        if self._live is not None:
            self._live.stop()
            self._live = None

    # -- what callers say -------------------------------------------------------------------------

    def note(self, text: str) -> None:
        """A lasting line."""
        now, text = self._clock(), terminal_safe(text)
        if self._live is not None:
            self._live.console.print(Text(f"{duration(now - self.began):>7} {text}"), soft_wrap=True)
            return
        line = f"{iso_z(now)} +{duration(now - self.began)} {text}"
        if self._write is not None:
            self._write(line)
        else:
            print(line, file=self._out, flush=True)

    def detail(self, key: str, text: str, waiting_for: str = "", since: datetime | None = None) -> None:
        """A change within a step (a DPU's phase, a count): the live region shows it, a log does not.
        `since`: when the wait began, when the caller knows (else the wait's, as first seen)."""
        if self._live is not None and text:
            self._live.console.print(Text(f"{duration(self._clock() - self.began):>7} {key}: {text}"))
        self.waiting(key, waiting_for, since, announce=False)

    def step(self, key: str, text: str, *, waiting_for: str = "", since: datetime | None = None) -> None:
        """A change of `key` worth a lasting line, and what it now waits for.

        Args:
            key: Who changed (a host, a rollout); also the line's prefix.
            text: The change, e.g. its new phase.
            waiting_for: What it waits for now, in words ("" when nothing).
            since: When that wait began, when the caller knows; else when first seen here.
        """
        self.note(f"{key}: {text}")
        self.waiting(key, waiting_for, since)

    def waiting(self, key: str, what: str, since: datetime | None = None, *, announce: bool = True) -> None:
        """What `key` waits for now ("" for nothing): the live line, or one plain line per change.

        `announce=False`: a detail of the same wait (a count, a DPU's phase) that only the live
        line shows, so a log gets a few lines per step, not one per detail."""
        if not what:
            self._waits.pop(key, None)
            return
        known = self._waits.get(key)
        if known is not None and known.what == what:
            return
        began = since or (known.since if known is not None and not announce else self._clock())
        self._waits[key] = _Wait(what, began)
        if not announce:
            return
        line = f"{key}:   waiting for {what} (since {iso_z(began)})"
        if self._live is None:
            self.note(line)
        elif len(self._region_line(key, self._waits[key], self._clock())) > self._live.console.width:
            self.note(line)  # the live line is cropped to the terminal: its whole words stay above it

    def finish(self, key: str, text: str) -> None:
        """`key` is done: its live line goes, `text` stays."""
        self._waits.pop(key, None)
        self.note(f"{key}: {text}")

    def waits(self) -> dict[str, tuple[str, datetime]]:
        """What each key waits for and since when (what the live region shows)."""
        return {key: (wait.what, wait.since) for key, wait in self._waits.items()}

    @staticmethod
    def _region_line(key: str, wait: _Wait, now: datetime) -> str:
        return terminal_safe(f"{key}  waiting for {wait.what}  since {_since(wait.since, now)}")

    def _region(self) -> Group:
        now = self._clock()
        lines = [
            Text(self._region_line(key, wait, now), no_wrap=True, overflow="ellipsis")
            for key, wait in self._waits.items()
        ]
        lines.append(Text(f"elapsed {duration(now - self.began)}", style="dim"))
        return Group(*lines)


def _since(when: datetime, now: datetime) -> str:
    return f"{iso_z(when)} ({duration(now - when)})"
