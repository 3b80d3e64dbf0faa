"""Is the site's DPF watch alive? What `host status` and `host list` say when it is not.

An operation learns of its DPUs' phases from the site watch (`workflows/site_watch`). When the
worker running the watch's activity dies (`kill -9`, a lost node), nobody watches until Temporal
times the activity out and retries it on another worker: up to the heartbeat timeout plus the
retry backoff (`contracts.models.dpf.site_watch_takeover_seconds`, 160 s by default). Meanwhile
a restarted worker answers queries at once, and the DPU phases it shows are those of the watch's
last beat. `watch_lapse` tells that from one describe of the watch workflow (its pending
activity): no per-host cost, nothing reaches a worker.

The rule (`lapse_of`, pure): the watch is lapsed when its activity is not running (a retry is
scheduled, waiting for a worker), or its last beat (its start when it has not beaten yet) is
older than its idle beat (a third of its heartbeat timeout: `site_watch_idle_beat_seconds`) plus
half of that again (the beat's own jitter). The DPU phases shown are then from the last beat at
the latest, and the takeover is expected by the last beat plus the takeover time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from temporalio.api.enums.v1 import PendingActivityState
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.client import Client
from temporalio.service import RPCError

from contracts import names
from contracts.models.dpf import (
    SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS,
    site_watch_idle_beat_seconds,
    site_watch_takeover_seconds,
)
from contracts.models.inventory import DPF_NAMESPACE
from contracts.wording import iso_z
from drivers.settings import Settings

DESCRIBE_TIMEOUT = timedelta(seconds=5)
GRACE = 0.5  # of the idle beat: how late a beat may be before the watch reads as lapsed


@dataclass(frozen=True)
class WatchLapse:
    """The site watch is not beating: since when, and by when another worker should have it."""

    workflow_id: str
    since: datetime  # its last beat (or start): the DPU phases shown are from then at the latest
    expected_by: datetime  # the last beat plus the takeover time

    def words(self, now: datetime | None = None) -> str:
        """One line for a person (`host status`, `host list`)."""
        said = (
            f"the DPU phases shown are from {iso_z(self.since)}: the site watch {self.workflow_id} "
            "has not beaten since (its worker stopped)"
        )
        if (now or datetime.now(UTC)) <= self.expected_by:
            return f"{said} and is being taken over by another worker (expected by {iso_z(self.expected_by)})"
        return f"{said}, and no worker has taken it over by {iso_z(self.expected_by)}: is a worker running?"

    def as_json(self) -> dict[str, str]:
        return {
            "site_watch": self.workflow_id,
            "dpu_phases_from": iso_z(self.since),
            "takeover_expected_by": iso_z(self.expected_by),
        }


def _time(stamp: object, field: str) -> datetime | None:
    if not stamp.HasField(field):  # type: ignore[attr-defined]
        return None
    return getattr(stamp, field).ToDatetime(tzinfo=UTC)  # type: ignore[no-any-return]


def lapse_of(workflow_id: str, pending: PendingActivityInfo, now: datetime) -> WatchLapse | None:
    """The watch's lapse, from its pending activity as the server describes it; None: beating."""
    timeout = SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS
    options = pending.activity_options if pending.HasField("activity_options") else None
    if options is not None and options.HasField("heartbeat_timeout"):
        timeout = options.heartbeat_timeout.ToTimedelta().total_seconds() or timeout
    last = (
        _time(pending, "last_heartbeat_time")
        or _time(pending, "last_started_time")
        or _time(pending, "scheduled_time")
    )
    if last is None:
        return None
    started = _time(pending, "last_started_time")
    if started is not None and started > last:  # a new attempt that has not beaten yet
        last = started
    running = pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
    beat = site_watch_idle_beat_seconds(timeout)
    if running and (now - last).total_seconds() <= beat * (1 + GRACE):
        return None
    return WatchLapse(workflow_id, last, last + timedelta(seconds=site_watch_takeover_seconds(timeout)))


async def watch_lapse(
    client: Client, namespace: str, task_queue: str = names.TASK_QUEUE
) -> WatchLapse | None:
    """The lapse of the site watch of DPF `namespace` served by `task_queue`; None when it beats,
    or runs no activity, or cannot be described (a read: the rest of the status still shows).
    Cost: one describe."""
    workflow_id = names.dpf_watch_workflow_id(namespace, task_queue)
    try:
        described = await client.get_workflow_handle(workflow_id).describe(rpc_timeout=DESCRIBE_TIMEOUT)
    except RPCError:
        return None
    return watch_lapse_of(workflow_id, described.raw_description.pending_activities, datetime.now(UTC))


def watch_lapse_of(
    workflow_id: str, pending: Sequence[PendingActivityInfo], now: datetime
) -> WatchLapse | None:
    """The watch's lapse from all its pending activities: None when any of them beats. A worker's
    start replaces a silent attempt at once (`site_watch` start signal): until the dead one's
    heartbeat timeout both are pending, and the live one is what the DPU phases come from."""
    lapses = [lapse_of(workflow_id, p, now) for p in pending]
    if not lapses or any(lapse is None for lapse in lapses):
        return None
    return lapses[0]


def dpf_namespace() -> str:
    """The DPF namespace the settings name (`METALFLOW_DPF_NAMESPACE`), or DPF's default."""
    try:
        return Settings.from_env().dpf_namespace
    except ValueError:  # a bad setting (other commands name it): the watch of the default namespace
        return DPF_NAMESPACE


async def lapse_of_operation(client: Client, workflow_id: str) -> WatchLapse | None:
    """The lapse of the site watch an operation's DPU phases come from: the watch of the DPF
    namespace on the operation's task queue. Cost: two describes (the operation's, the watch's)."""
    try:
        described = await client.get_workflow_handle(workflow_id).describe(rpc_timeout=DESCRIBE_TIMEOUT)
    except RPCError:
        return None
    task_queue = described.raw_description.workflow_execution_info.task_queue or names.TASK_QUEUE
    return await watch_lapse(client, dpf_namespace(), task_queue)
