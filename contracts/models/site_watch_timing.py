"""The site DPF watch's timing (`contracts/models/dpf.py` re-exports it): its heartbeat timeout,
how often an idle watch beats, what that costs a day, and the worst-case takeover after a worker
dies. Pure."""

from __future__ import annotations

import math
from typing import Final

SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS: Final = 150.0
"""The site watch's default heartbeat timeout. Idle, the watch heartbeats every third of it (two
beats may be lost before it fires): 50 s, 1,728 Actions a day per site (issue 37: at most 2,000).
A worker that dies running it loses it for at most this plus the retry backoff: 160 s, DPF
changes waiting meanwhile (none lost: the next attempt resumes from the checkpoint); a worker
that starts cuts it short (`SITE_WATCH_PROBE_SECONDS`). README's deployment section says so."""
SITE_WATCH_RETRY_MAX_SECONDS: Final = 10.0  # the longest wait between two attempts (retry policy)
SITE_WATCH_PROBE_SECONDS: Final = 5.0  # a worker started: a silent attempt is taken for dead after it


def site_watch_idle_beat_seconds(
    heartbeat_timeout_seconds: float = SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS,
) -> float:
    """How often an idle site watch heartbeats: a third of its heartbeat timeout."""
    return heartbeat_timeout_seconds / 3


def site_watch_idle_actions_per_day(
    heartbeat_timeout_seconds: float = SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS,
) -> int:
    """Billable Actions a day of an idle site watch: its heartbeats (nothing else reaches the server)."""
    return math.ceil(86_400 / site_watch_idle_beat_seconds(heartbeat_timeout_seconds))


def site_watch_takeover_seconds(
    heartbeat_timeout_seconds: float = SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS,
) -> float:
    """Worst case from a worker's death to the watch's next attempt starting elsewhere: the
    heartbeat timeout counted from the last beat (the worker may die just after one), plus the
    longest retry backoff."""
    return heartbeat_timeout_seconds + SITE_WATCH_RETRY_MAX_SECONDS
