"""The campaign's pure decisions, no I/O: which hosts may start now under the limits, whether a
maintenance window is open and when the next one opens, whether the failure budget is spent, and
the limits and the budget in words.

Cost: O(pending + in flight) per decision, in the workflow's memory; no history events.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from contracts.models.campaign import CampaignHost, FailureBudget, Limits, Window

MINUTES_PER_DAY = 1440


def pick_starts(
    pending: Sequence[CampaignHost], in_flight: Iterable[CampaignHost], limits: Limits, room: int
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
    """The window as [start, end) minute-of-week spans (a span past Sunday wraps to Monday)."""
    length = (window.end_minute - window.start_minute) % MINUTES_PER_DAY or MINUTES_PER_DAY
    week = 7 * MINUTES_PER_DAY
    spans = []
    for day in window.days:
        start = day * MINUTES_PER_DAY + window.start_minute
        end = start + length
        spans.append((start, min(end, week)))
        if end > week:
            spans.append((0, end - week))
    return spans


def window_open(windows: Sequence[Window], now: datetime) -> bool:
    """Whether new hosts may start now: inside any window (no windows: always)."""
    if not windows:
        return True
    minute = _minute_of_week(now)
    return any(start <= minute < end for w in windows for start, end in _spans(w))


def next_window_change(windows: Sequence[Window], now: datetime) -> datetime | None:
    """When the next window opens or closes after `now` (None: no windows), on a minute boundary."""
    if not windows:
        return None
    minute = _minute_of_week(now)
    week = 7 * MINUTES_PER_DAY
    edges = {edge % week for w in windows for span in _spans(w) for edge in span}
    ahead = min((edge - minute) % week or week for edge in edges)
    base = now.replace(second=0, microsecond=0)
    return base + timedelta(minutes=ahead)


def next_window_open(windows: Sequence[Window], now: datetime) -> datetime | None:
    """When new hosts may start next: `now` inside a window, else the next opening."""
    if window_open(windows, now):
        return now
    when = now
    for _ in range(4 * len(windows) * 7 + 2):  # every edge of a week, at most
        change = next_window_change(windows, when)
        if change is None:
            return None
        if window_open(windows, change):
            return change
        when = change
    return None


def budget_exceeded(budget: FailureBudget, failed: int, attempted: int) -> bool:
    """More than `max_failures` failed, or more than `max_percent` % of the attempted."""
    if budget.max_failures is not None and failed > budget.max_failures:
        return True
    return budget.max_percent is not None and attempted > 0 and failed * 100 > budget.max_percent * attempted


def describe_budget(budget: FailureBudget, failed: int, attempted: int) -> str:
    """The budget used, in words."""
    bounds = []
    if budget.max_failures is not None:
        bounds.append(f"{budget.max_failures} failures")
    if budget.max_percent is not None:
        bounds.append(f"{budget.max_percent:g}% of those attempted")
    allowed = " or ".join(bounds) or "no limit"
    return f"{failed} failed of {attempted} attempted; halts past {allowed}"


def describe_limits(limits: Limits) -> str:
    """The limits in words, as `set_limits` answers them."""
    return (
        f"(batch {limits.batch_size}, in flight {limits.max_in_flight}, per group "
        f"{limits.max_per_group or '-'}, per BMC {limits.max_per_bmc or '-'})"
    )
