"""Issue 38: after a worker kill, `host status` showed the DPU phases of the site watch's last
beat for up to its takeover (160 s by default) with no hint. `lapse_of` reads the watch's
pending activity as the server describes it: a watch that beats is no news; one whose last beat
is older than its idle beat (plus half of it), or whose retry waits for a worker, is lapsed,
its DPU phases from the last beat, its takeover expected by that beat plus the takeover time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from temporalio.api.activity.v1 import ActivityOptions
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.api.workflow.v1 import PendingActivityInfo

from metalflow.site_watch_health import lapse_of, watch_lapse_of

T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
WATCH = "dpf-watch/dpf-operator-system"


def _stamp(when: datetime) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(when)
    return stamp


def _pending(
    beat: datetime | None,
    started: datetime = T0 - timedelta(hours=1),
    state: PendingActivityState.ValueType = PendingActivityState.PENDING_ACTIVITY_STATE_STARTED,
    timeout: float = 30,
) -> PendingActivityInfo:
    pending = PendingActivityInfo(
        state=state,
        last_started_time=_stamp(started),
        activity_options=ActivityOptions(heartbeat_timeout=Duration(seconds=int(timeout))),
    )
    if beat is not None:
        pending.last_heartbeat_time.CopyFrom(_stamp(beat))
    return pending


def test_a_watch_that_beats_is_no_news() -> None:
    # 30 s timeout: a beat every 10 s, late from 15 s on
    assert lapse_of(WATCH, _pending(T0 - timedelta(seconds=14)), T0) is None
    assert lapse_of(WATCH, _pending(None, started=T0 - timedelta(seconds=3)), T0) is None


def test_a_late_beat_says_since_when_and_the_takeover_expected() -> None:
    lapse = lapse_of(WATCH, _pending(T0 - timedelta(seconds=16)), T0)
    assert lapse is not None
    assert lapse.since == T0 - timedelta(seconds=16)
    assert lapse.expected_by == T0 - timedelta(seconds=16) + timedelta(seconds=30 + 10)  # + retry backoff
    assert lapse.words(T0) == (
        f"the DPU phases shown are from 2026-11-29T11:59:44Z: the site watch {WATCH} has not beaten "
        "since (its worker stopped) and is being taken over by another worker (expected by "
        "2026-11-29T12:00:24Z)"
    )
    assert lapse.as_json() == {
        "site_watch": WATCH,
        "dpu_phases_from": "2026-11-29T11:59:44Z",
        "takeover_expected_by": "2026-11-29T12:00:24Z",
    }
    assert "is a worker running?" in lapse.words(T0 + timedelta(minutes=5))


def test_a_retry_waiting_for_a_worker_is_lapsed_however_recent() -> None:
    scheduled = PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED
    lapse = lapse_of(WATCH, _pending(T0 - timedelta(seconds=1), state=scheduled), T0)
    assert lapse is not None and lapse.since == T0 - timedelta(seconds=1)


def test_a_new_attempt_counts_from_its_start_not_the_old_attempts_beat() -> None:
    # taken over 2 s ago: the old attempt's last beat (a minute ago) is history
    pending = _pending(T0 - timedelta(minutes=1), started=T0 - timedelta(seconds=2))
    assert lapse_of(WATCH, pending, T0) is None


def test_the_product_default_timeout_when_the_server_says_none() -> None:
    pending = _pending(T0 - timedelta(seconds=70))
    pending.ClearField("activity_options")
    assert lapse_of(WATCH, pending, T0) is None  # 150 s: a beat every 50 s, late from 75 s on
    assert lapse_of(WATCH, _pending(T0 - timedelta(seconds=76), timeout=150), T0) is not None


def test_a_live_attempt_beside_a_dead_one_is_no_news() -> None:
    """A worker's start replaces a silent attempt at once: until the dead attempt's heartbeat
    timeout the watch has two pending activities, and the live one is what the DPU phases come
    from. Read as a whole, the watch beats (the first lapse alone said stale while it was not)."""
    dead = _pending(T0 - timedelta(seconds=40))
    live = _pending(T0 - timedelta(seconds=2))
    assert lapse_of(WATCH, dead, T0) is not None
    assert watch_lapse_of(WATCH, [dead, live], T0) is None
    assert watch_lapse_of(WATCH, [live, dead], T0) is None
    assert watch_lapse_of(WATCH, [dead], T0) == lapse_of(WATCH, dead, T0)
    assert watch_lapse_of(WATCH, [], T0) is None
