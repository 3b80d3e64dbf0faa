"""The campaign's rules, no I/O, nothing of Temporal: which hosts may start now under the limits,
whether a maintenance window is open and when the next one opens (each window in its own IANA time
zone: local wall-clock times, DST included), whether the failure budget is spent, and the limits
and the budget in words. The campaign's state (state.py) decides with them, and `metalflow
campaign plan` (metalflow/cli/campaign_plan.py) shows what they will do.

Cost: O(pending + in flight) per decision, in the workflow's memory; no history events.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from contracts.models.campaign import CampaignHost, FailureBudget, Limits, Window, zone
from contracts.wording import plural

MINUTES_PER_DAY = 1440


def pick_starts(
    pending: Iterable[CampaignHost], in_flight: Iterable[CampaignHost], limits: Limits, room: int
) -> list[CampaignHost]:
    """The hosts to start now, in `pending`'s order: at most `room`, and never past
    `max_in_flight` overall, `max_per_group` per group or `max_per_bmc` per BMC endpoint
    (counting the hosts already in flight). A host held back by its group or BMC lets a later
    host of another group go first."""
    running = list(in_flight)
    groups = Counter(h.group for h in running)
    bmcs = Counter(h.bmc for h in running)
    free = min(room, limits.max_in_flight - len(running))
    chosen: list[CampaignHost] = []
    for host in pending:
        if len(chosen) >= free:
            break
        if limits.max_per_group and host.group and groups[host.group] >= limits.max_per_group:
            continue
        if limits.max_per_bmc and host.bmc and bmcs[host.bmc] >= limits.max_per_bmc:
            continue
        chosen.append(host)
        groups[host.group] += 1
        bmcs[host.bmc] += 1
    return chosen


def _minute_of_week(when: datetime) -> int:
    return when.weekday() * MINUTES_PER_DAY + when.hour * 60 + when.minute


def _spans(window: Window) -> list[tuple[int, int]]:
    """The window as [start, end) minute-of-week spans of local time (a span past Sunday wraps)."""
    length = window.length_minutes()
    week = 7 * MINUTES_PER_DAY
    spans = []
    for day in window.days:
        start = day * MINUTES_PER_DAY + window.start_minute
        end = start + length
        spans.append((start, min(end, week)))
        if end > week:
            spans.append((0, end - week))
    return spans


def _local(window: Window, now: datetime) -> datetime:
    return now.astimezone(zone(window.tz))


def _open(window: Window, now: datetime) -> bool:
    minute = _minute_of_week(_local(window, now))
    return any(start <= minute < end for start, end in _spans(window))


def window_open(windows: Sequence[Window], now: datetime) -> bool:
    """Whether new hosts may start now: inside any window, each read in its own time zone (no
    windows: always)."""
    return not windows or any(_open(w, now) for w in windows)


def next_window_change(windows: Sequence[Window], now: datetime) -> datetime | None:
    """The first minute after `now` at which whether a window is open changes (None: no
    windows), each window read in its own zone. The changes can only fall on a window's local
    edges (each localised both ways round a repeated hour) or on a DST change of its zone (a
    skipped hour moves an edge inside the gap to the first minute after it); each candidate is
    checked against the minute before it, so a local time that does not exist never opens one."""
    if not windows:
        return None
    base = now.astimezone(UTC).replace(second=0, microsecond=0)
    horizon = base + timedelta(days=8)
    candidates: set[datetime] = set()
    for w in windows:
        tz = zone(w.tz)
        local_day = base.astimezone(tz).date()
        for offset in range(-1, 9):
            day = local_day + timedelta(days=offset)
            midnight = datetime(day.year, day.month, day.day)
            for minute in (w.start_minute, w.start_minute + w.length_minutes()):
                wall = midnight + timedelta(minutes=minute)
                for fold in (0, 1):
                    candidates.add(wall.replace(tzinfo=tz, fold=fold).astimezone(UTC))
        candidates.update(_offset_changes(tz, base, horizon))
    for when in sorted(c for c in candidates if base < c <= horizon):
        if window_open(windows, when) != window_open(windows, when - timedelta(minutes=1)):
            return when
    return None


def _offset_changes(tz: Any, start: datetime, end: datetime) -> list[datetime]:
    """The UTC minutes at which `tz`'s offset changes between `start` and `end` (hourly probes,
    then bisection to the minute)."""
    found = []
    probe = start
    while probe < end:
        nxt = probe + timedelta(hours=1)
        if probe.astimezone(tz).utcoffset() != nxt.astimezone(tz).utcoffset():
            low, high = probe, nxt
            while high - low > timedelta(minutes=1):
                mid = low + (high - low) / 2
                mid = mid.replace(second=0, microsecond=0)
                if mid <= low:
                    break
                if mid.astimezone(tz).utcoffset() == low.astimezone(tz).utcoffset():
                    low = mid
                else:
                    high = mid
            found.append(high)
        probe = nxt
    return found


def next_window_open(windows: Sequence[Window], now: datetime) -> datetime | None:
    """When new hosts may start next: `now` inside a window, else the next opening."""
    if window_open(windows, now):
        return now
    when = now
    for _ in range(4 * len(windows) * 8 + 8):  # every edge (and DST change) of a week, at most
        change = next_window_change(windows, when)
        if change is None:
            return None
        if window_open(windows, change):
            return change
        when = change
    return None


def budget_exceeded(budget: FailureBudget, failed: int, selected: int) -> bool:
    """More failed than the budget allows for `selected` hosts (`FailureBudget.allowed`)."""
    allowed = budget.allowed(selected)
    return allowed is not None and failed > allowed


def describe_budget(budget: FailureBudget, failed: int, selected: int) -> str:
    """The budget used, in words: failures counted, not hosts failed now (a failed host skipped
    leaves the failed count, its failure stays counted: `campaign status` says both, one truth)."""
    allowed = budget.allowed(selected)
    counted = f"{plural(failed, 'failure')} counted"
    if allowed is None:
        return f"{counted}; no limit"
    share = (
        f" ({budget.max_percent:g}% of {plural(selected, 'host')})" if budget.max_percent is not None else ""
    )
    return f"{counted}; halts past {allowed}{share}"


def describe_limits(limits: Limits) -> str:
    """The limits in words, as `set_limits` answers them."""
    return (
        f"(batch {limits.batch_size}, in flight {limits.max_in_flight}, per group "
        f"{limits.max_per_group or '-'}, per BMC {limits.max_per_bmc or '-'})"
    )
