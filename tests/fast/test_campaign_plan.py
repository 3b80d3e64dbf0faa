"""Properties of the campaign's rules (workflows/campaign/plan.py) and its input checks."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from contracts import names
from contracts.models.campaign import (
    CampaignHost,
    CampaignTarget,
    FailureBudget,
    HostSelection,
    Limits,
    Window,
)
from workflows.campaign import plan

hosts = st.lists(
    st.builds(
        CampaignHost,
        host_id=st.uuids().map(str),
        group=st.sampled_from(["", "r1", "r2", "r3"]),
        bmc=st.sampled_from(["", "b1", "b2", "b3", "b4"]),
    ),
    max_size=30,
    unique_by=lambda h: h.host_id,
)
limits = st.builds(
    Limits,
    max_in_flight=st.integers(1, 10),
    max_per_group=st.integers(0, 4),
    max_per_bmc=st.integers(0, 3),
)
windows = st.lists(
    st.tuples(
        st.lists(st.integers(0, 6), min_size=1, max_size=7, unique=True).map(tuple),
        st.integers(0, 1439),
        st.integers(0, 1439),
    )
    .filter(lambda t: t[1] != t[2])
    .map(lambda t: Window(days=t[0], start_minute=t[1], end_minute=t[2])),
    max_size=3,
)
instants = st.datetimes(
    min_value=datetime(2026, 1, 1), max_value=datetime(2027, 1, 1), timezones=st.just(UTC)
)


@settings(max_examples=100, deadline=None)
@given(hosts, hosts, limits, st.integers(0, 20))
def test_starts_never_exceed_a_limit(
    pending: list[CampaignHost], running: list[CampaignHost], lim: Limits, room: int
) -> None:
    running_ids = {h.host_id for h in running}
    pending = [h for h in pending if h.host_id not in running_ids]
    chosen = plan.pick_starts(pending, running, lim, room)
    assert len(chosen) <= room
    assert len(chosen) + len(running) <= max(lim.max_in_flight, len(running))
    assert [h for h in pending if h in chosen] == chosen, "pending order is kept"
    after = running + chosen
    new_groups = Counter(h.group for h in chosen if h.group)
    new_bmcs = Counter(h.bmc for h in chosen if h.bmc)
    groups, bmcs = Counter(h.group for h in after), Counter(h.bmc for h in after)
    if lim.max_per_group:
        assert all(groups[g] <= lim.max_per_group for g in new_groups)
    if lim.max_per_bmc:
        assert all(bmcs[b] <= lim.max_per_bmc for b in new_bmcs)


@settings(max_examples=100, deadline=None)
@given(hosts, limits)
def test_a_free_fleet_fills_what_the_limits_allow(pending: list[CampaignHost], lim: Limits) -> None:
    chosen = plan.pick_starts(pending, [], lim, 1000)
    if pending and len(chosen) < min(len(pending), lim.max_in_flight):
        left = [h for h in pending if h not in chosen]
        groups, bmcs = Counter(h.group for h in chosen), Counter(h.bmc for h in chosen)
        for host in left:  # every host left out is held by its group's or its BMC's limit
            assert (lim.max_per_group and host.group and groups[host.group] >= lim.max_per_group) or (
                lim.max_per_bmc and host.bmc and bmcs[host.bmc] >= lim.max_per_bmc
            )


@settings(max_examples=100, deadline=None)
@given(windows.filter(bool), instants)
def test_the_next_opening_is_open_and_nothing_opens_before_it(ws: list[Window], now: datetime) -> None:
    opens = plan.next_window_open(ws, now)
    assert opens is not None, "a valid window opens within a week"
    assert opens - now <= timedelta(days=7, minutes=1)
    assert plan.window_open(ws, opens)
    if opens != now:  # no minute between now and the opening is open
        probe = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
        step = max(timedelta(minutes=1), (opens - probe) / 50)
        while probe < opens:
            assert not plan.window_open(ws, probe)
            probe += step


def test_a_night_window_runs_past_midnight() -> None:
    night = [Window(days=(4,), start_minute=22 * 60, end_minute=2 * 60)]  # Friday 22:00 - Saturday 02:00
    friday = datetime(2026, 11, 20, tzinfo=UTC)
    assert plan.window_open(night, friday.replace(hour=23))
    assert plan.window_open(night, friday + timedelta(days=1, hours=1, minutes=59))
    assert not plan.window_open(night, friday + timedelta(days=1, hours=2))
    assert plan.next_window_open(night, friday.replace(hour=12)) == friday.replace(hour=22)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 50), st.integers(0, 100), st.integers(0, 20), st.floats(0, 100))
def test_the_budget_halts_exactly_past_its_bounds(failed: int, extra: int, most: int, percent: float) -> None:
    attempted = failed + extra
    assert plan.budget_exceeded(FailureBudget(max_failures=most), failed, attempted) == (failed > most)
    by_share = plan.budget_exceeded(FailureBudget(max_percent=percent), failed, attempted)
    assert by_share == (attempted > 0 and failed * 100 > percent * attempted)
    assert not plan.budget_exceeded(FailureBudget(), failed, attempted)


def test_bad_inputs_are_refused_with_the_reason() -> None:
    with pytest.raises(ValidationError, match="never opens"):
        Window(start_minute=60, end_minute=60)
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        Limits(batch_size=0)
    with pytest.raises(ValidationError, match="exactly one"):
        HostSelection(all=True, group="gpu")
    with pytest.raises(ValidationError, match="image URI"):
        CampaignTarget(kind="firmware", value="24.40")
    with pytest.raises(ValidationError, match="DPUDeployment"):
        CampaignTarget(kind="bfb", value="bf-bundle-3")


BERLIN = "Europe/Berlin"


def test_a_window_in_a_zone_opens_at_local_time_across_dst() -> None:
    """02:00-04:00 Europe/Berlin, Sundays. Spring (2026-03-29) skips 02:00-03:00: the window
    opens at the first local minute after the gap (03:00 CEST = 01:00 UTC) and closes at 04:00
    CEST (02:00 UTC). Autumn (2026-10-25) repeats 02:00-03:00: open from the first 02:00 (00:00
    UTC) until 04:00 CET (03:00 UTC), three hours."""
    w = [Window(days=(6,), start_minute=120, end_minute=240, tz=BERLIN)]
    spring = datetime(2026, 3, 29, tzinfo=UTC)
    assert plan.next_window_open(w, spring - timedelta(hours=6)) == spring.replace(hour=1)
    assert not plan.window_open(w, spring.replace(hour=0, minute=59))
    assert plan.window_open(w, spring.replace(hour=1))
    assert plan.next_window_change(w, spring.replace(hour=1)) == spring.replace(hour=2)
    autumn = datetime(2026, 10, 25, tzinfo=UTC)
    assert plan.next_window_open(w, autumn - timedelta(hours=6)) == autumn
    assert plan.window_open(w, autumn.replace(hour=2, minute=30))  # 02:30 CET, the second time
    assert plan.next_window_change(w, autumn) == autumn.replace(hour=3)
    late = [Window(days=(6,), start_minute=150, end_minute=240, tz=BERLIN)]  # 02:30, inside the gap
    assert plan.next_window_open(late, spring - timedelta(hours=6)) == spring.replace(hour=1)
    summer = datetime(2026, 7, 5, tzinfo=UTC)  # CEST: 02:00 local is 00:00 UTC
    assert plan.next_window_open(w, summer - timedelta(hours=3)) == summer


def test_zones_and_run_names_are_refused_or_taken_with_the_reason() -> None:
    with pytest.raises(ValidationError, match="unknown time zone 'Mars/Olympus'"):
        Window(start_minute=60, end_minute=120, tz="Mars/Olympus")
    assert (
        names.campaign_run_workflow_id("fleet-2026-11-22T02:00:00Z") == "campaign/fleet-2026-11-22T02:00:00Z"
    )
    assert names.campaign_run_workflow_id("fleet") == "campaign/fleet"
    with pytest.raises(ValueError, match="invalid campaign name"):
        names.campaign_run_workflow_id("bad name-2026-11-22T02:00:00Z")


zones = st.sampled_from(["UTC", BERLIN, "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"])


@settings(max_examples=150, deadline=None)
@given(windows, zones, instants)
def test_the_next_change_is_a_real_change_and_nothing_changes_before_it(
    ws: list[Window], tz: str, now: datetime
) -> None:
    ws = [w.model_copy(update={"tz": tz}) for w in ws]
    change = plan.next_window_change(ws, now)
    if not ws:
        assert change is None
        return
    if change is None:  # a window open all week, whatever the local time
        return
    assert plan.window_open(ws, change) != plan.window_open(ws, change - timedelta(minutes=1))
    probe = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    state = plan.window_open(ws, now)
    step = max(timedelta(minutes=1), (change - probe) / 40)
    while probe < change:
        assert plan.window_open(ws, probe) == state, f"changed at {probe} before {change}"
        probe += step
