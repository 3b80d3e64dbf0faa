"""Kubernetes Events from the worker: what on-call sees in `kubectl describe dpunode` and
`kubectl get events`, written the way controllers write them (events.k8s.io/v1).

Design. Workflows hand every phase change to the worker (`contracts.events`, called by
`workflows.kernel.enter_phase`, skipped on replay); `Emitter` queues it, and a background task
turns the changes listed below into Events and writes them (`drivers.kube_events.EventWriter`).
No activity, no history event, no RPC in any workflow: an operation's history is the same with
Events on or off.

| workflow: phase | Event reason (type) |
| --- | --- |
| host entity: `running <operation>` | `OperationStarted` (Normal) |
| host entity: `awaiting-approval` | `NeedsApproval` (Normal) |
| host entity: `maintenance-on`, `maintenance-off` | `MaintenanceOn`, `MaintenanceOff` (Normal) |
| reboot, reset `--both`/`--full`: `power-cycled` (the BMC took the cycle) | `PowerCycleIssued` (Normal) |
| reboot, entity: `unplanned-power` (a power change metalflow did not cause) | `UnplannedPower` (Warning) |
| host reboot: `waiting-for-manual-reboot` | `ManualRebootRequired` (Warning) |
| host operation: `manual-intervention-required` | `ManualInterventionRequired` (Warning) |
| host operation: `dpf-step-overdue` (a step only DPF takes, overdue) | `DPFStepOverdue` (Warning) |
| any entity operation (a row's child): ended | `OperationSucceeded`, `OperationFailed`, `OperationAborted` |
| monitor: `host-out-of-pool` (services down) | `DPUOutOfPool` (Warning) |
| monitor: back to `watching` (services up) | `DPUBackInPool` (Normal) |
| monitor: `unplanned-reset` (a Ready DPU reset that no operation explains) | `UnplannedReset` (Warning) |
| campaign: `campaign-started` (reported as its first run selects) | `CampaignStarted` (Normal) |
| campaign: `halted` | `CampaignHalted` (Warning) |
| campaign: ended | `CampaignCompleted`, `CampaignStopped`, `CampaignFailed`, `CampaignAborted` |
| rollout: `preparing` (its first run's first phase) | `RolloutStarted` (Normal) |
| rollout: `paused` | `RolloutPaused` (Warning) |
| rollout: ended | `RolloutSucceeded`, `RolloutRolledBack`, `RolloutFailed`, `RolloutAborted` |

`unplanned-reset` and `power-cycled` are no phases: the monitor and the reboot report them (and
the entity its `maintenance-on` and `maintenance-off`: who, why, since when; a reboot and the
entity `unplanned-power`) (`workflows.kernel.report`) and stay in their phase. A reboot reports
`power-cycled` after its cycle (or ForceOff and On) returned, not on entering `powering` (a reset
its ForceOff ... On around the DPU resets once the host is On again), the generation it reached
in its words (`workflows/parts/boot_generation.py`): a
cycle the BMC refused (wrong credentials, unreachable) is no `PowerCycleIssued`, only the
`ManualRebootRequired` or `ManualInterventionRequired` that follows; a cycle someone else made
(`already_done`) neither.
A host's Events are `regarding` its DPUNode (`node-<host>` in the DPF namespace), a rollout's
its PodCliqueSet. Failed, aborted (an operator's abort, or a cancel of the workflow: both
`...Aborted`, the note says which and why), stopped and rolled-back endings are Warnings, the rest
Normal; a manual intervention's note is its reason, an ending's its final details. A rollout and a
campaign start once and end once whatever their continue-as-new runs: the start phase is entered
by the first run only, and a campaign writes no Event per host (10,000 hosts: its start, its
halts and its end; each host's own operation tells its DPUNode).

Every Event has `reportingController: metalflow`, `reportingInstance: metalflow-<hostname>`
(client-go's `NewRecorder` convention), `action` the operation (its row's `action`:
`Reprovision`, `Reset`, ...; `PowerCycle` for a reboot's cycle), the phase's details as `note`
(at most 1,024 characters, the API's limit), and the workflow id as the note's last words. A
reboot run inside an operation reports its power cycle only (its ending is the operation's). A
campaign is no Kubernetes object and its hosts' Events carry their own: the API accepts an Event
regarding nothing only in `default` or `kube-system` (pkg/apis/core/validation/events.go), so
campaign Events go to `default`.

Deduplication: like client-go's events broadcaster (tools/events/event_broadcaster.go), an Event
isomorphic to one written in the last 6 minutes (same regarding, reason, type, action, reporting
controller and instance; metalflow adds the note, so two different intervention reasons are two
Events) is not written again: its `series` (`count`, `lastObservedTime`) is patched, at most once
per `SERIES_PATCH_SECONDS` per series (the counts in between are folded into the next patch). A
wait that is stuck and re-entered every few seconds costs one patch per 30 s, not an Event each.

Guarantees: at most once per phase change, and one Event per fact (`Facts`: not on replay; a
retried workflow task is recognised by run, phase and history length, a run's ending by run and
phase alone; an operation's start is not told again while it runs), best effort: the queue holds
`QUEUE_SIZE` changes (client-go's `maxQueuedEvents`) and drops beyond; a write that fails is
tried `WRITE_ATTEMPTS` times with a short pause, then dropped and counted; a worker that dies
loses what it had queued. Emitting never fails or slows an operation: the workflow's only cost
is a thread-safe hand-off, and every write has a 5 s limit on a thread of its own.

Cost per host operation (a reprovision with one power cycle): 3 Events (started, power cycle,
ended), each one `create` RPC to the API server, plus one `get` of the DPUNode per host at most
every `UID_TTL_SECONDS` (its uid, which `kubectl describe` matches on); 0 history events, 0
activities. An operation that waits for an operator adds one Event per distinct reason.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from contracts import events, names
from contracts.events import PhaseChange
from contracts.host_requests import ENTITY_REQUESTS, REBOOT
from contracts.models.dpf import DPF_VERSION, PROVISIONING_GROUP
from contracts.models.grove import GROVE_GROUP, GROVE_VERSION
from drivers.kube_events import EventWriter
from drivers.settings import Settings
from metalflow.runtime.run_events import CAMPAIGN_ENDINGS, ONCE_PER_RUN, ROLLOUT_ENDINGS, RUN_REASONS

log = logging.getLogger(__name__)

REPORTING_CONTROLLER = "metalflow"
QUEUE_SIZE = 1000
SERIES_FINISH_SECONDS = 6 * 60.0  # client-go's finishTime
SERIES_PATCH_SECONDS = 30.0
SWEEP_SECONDS = 5.0
SERIES_KEPT = 10_000
SEEN_KEPT = 4096
UID_TTL_SECONDS = 300.0
WRITE_ATTEMPTS = 3
NOTE_LIMIT = 1024
CAMPAIGN_NAMESPACE = "default"

# Every entity operation is a row of the requests' table: its child workflow, its planned final
# phase and its action word are read from there, so a new row reports its start and its ending.
OPERATION_WORKFLOWS = {kind.child for kind in ENTITY_REQUESTS} - {REBOOT.child}  # a reboot: below
ENDINGS = {
    **{kind.ended: ("OperationSucceeded", "Normal") for kind in ENTITY_REQUESTS},
    "failed": ("OperationFailed", "Warning"),
    "aborted": ("OperationAborted", "Warning"),
    "cancelled": ("OperationAborted", "Warning"),
}
ACTIONS = {
    **{kind.operation: kind.action for kind in ENTITY_REQUESTS},
    names.MONITOR: "Monitor",
    names.ROLLOUT: "Rollout",
    names.CAMPAIGN_OPERATION: "Campaign",
}
ONE_EVENT_EACH = frozenset(
    {
        "OperationStarted",
        "RolloutStarted",
        "CampaignStarted",
        *(reason for reason, _ in ENDINGS.values()),
        *(reason for reason, _ in ROLLOUT_ENDINGS.values()),
        *(reason for reason, _ in CAMPAIGN_ENDINGS.values()),
    }
)
"""An operation's start and end: one Event per run, never counted into an isomorphic one's series."""
UNPLANNED_POWER = "unplanned-power"  # workflows/host_reboot/failure.py, workflows/host/state.py
MAINTENANCE_EVENTS = {"maintenance-on": "MaintenanceOn", "maintenance-off": "MaintenanceOff"}
HOST_KEYED = frozenset({names.HOST, *(kind.operation for kind in ENTITY_REQUESTS)})
"""The first word of a workflow id followed by the host's id (`host/<id>`, `<operation>/<id>`)."""


@dataclass(frozen=True)
class Regarding:
    api_version: str
    kind: str
    namespace: str
    name: str


@dataclass(frozen=True)
class EventSpec:
    """What one phase change reports: an Event before its name, uid and times."""

    namespace: str
    reason: str
    type: str
    action: str
    note: str
    regarding: Regarding | None
    host_id: str | None = None


def host_of(change: PhaseChange) -> str | None:
    """The host a workflow is about: its `HostId`, else read from its id (`host/<id>`,
    `<operation>/<id>` for every entity operation, `reboot/<id>/generation-<n>`,
    `monitor/host-<id>`)."""
    if change.host_id:
        return change.host_id
    parts = change.workflow_id.split("/")
    if len(parts) < 2:
        return None
    if parts[0] == names.MONITOR:
        return parts[1].removeprefix("host-")
    if parts[0] in HOST_KEYED:
        return parts[1]
    return None


def _operation(change: PhaseChange) -> str:
    return change.operation or change.workflow_id.split("/", 1)[0]


def describe(change: PhaseChange, dpf_namespace: str, parent_is_operation: bool = False) -> EventSpec | None:
    """The Event a phase change reports (the table of the module docstring), or None."""
    kind, phase = change.workflow_type, change.phase
    reason: tuple[str, str] | None = None
    action = ACTIONS.get(_operation(change), "Operate")
    if kind == "HostWorkflow":
        if phase.startswith("running "):
            reason, action = (
                ("OperationStarted", "Normal"),
                ACTIONS.get(phase.removeprefix("running "), action),
            )
        elif phase == "awaiting-approval":
            reason, action = ("NeedsApproval", "Normal"), "Approve"
        elif phase in MAINTENANCE_EVENTS:
            reason, action = (MAINTENANCE_EVENTS[phase], "Normal"), "Maintenance"
        elif phase == UNPLANNED_POWER:
            reason, action = ("UnplannedPower", "Warning"), "Power"
    elif kind == "HostRebootWorkflow":
        if phase == UNPLANNED_POWER:
            reason, action = ("UnplannedPower", "Warning"), "PowerCycle"
        elif phase == "power-cycled":  # reported once the BMC took it: a refused cycle is none
            reason, action = ("PowerCycleIssued", "Normal"), "PowerCycle"
        elif phase == "waiting-for-manual-reboot":
            reason, action = ("ManualRebootRequired", "Warning"), "PowerCycle"
        elif phase in ENDINGS and not parent_is_operation:
            reason = ENDINGS[phase]
    elif kind in OPERATION_WORKFLOWS:
        if phase == "power-cycled":  # a reset's own host ForceOff ... On (`--both`, `--full`)
            reason, action = ("PowerCycleIssued", "Normal"), "PowerCycle"
        elif phase == "manual-intervention-required":
            reason = ("ManualInterventionRequired", "Warning")
        elif phase == "dpf-step-overdue":  # reported, no phase (workflows/host_operation/dpf_owed.py)
            reason = ("DPFStepOverdue", "Warning")
        elif phase in ENDINGS:
            reason = ENDINGS[phase]
    elif kind == "HostMonitorWorkflow":
        if phase == "host-out-of-pool" and change.details.startswith("critical DPU services down"):
            reason = ("DPUOutOfPool", "Warning")
        elif phase == "watching" and change.details == "every DPU's services are up":
            reason = ("DPUBackInPool", "Normal")
        elif phase == "unplanned-reset":
            reason = ("UnplannedReset", "Warning")
    elif kind in RUN_REASONS:  # a rollout's, a campaign's start, pause or halt, and end
        reason = RUN_REASONS[kind].get(phase)
    if reason is None:
        return None
    note = f"{change.details} ({change.workflow_id})"
    if len(note) > NOTE_LIMIT:
        note = note[: NOTE_LIMIT - 1] + "…"
    if kind == "RolloutWorkflow":
        parts = change.workflow_id.split("/")
        if len(parts) < 3:
            return None
        regarding = Regarding(f"{GROVE_GROUP}/{GROVE_VERSION}", "PodCliqueSet", parts[1], parts[2])
        return EventSpec(parts[1], reason[0], reason[1], action, note, regarding)
    if kind == "CampaignWorkflow":
        return EventSpec(CAMPAIGN_NAMESPACE, reason[0], reason[1], action, note, None)
    host_id = host_of(change)
    if host_id is None:
        return None
    node = Regarding(f"{PROVISIONING_GROUP}/{DPF_VERSION}", "DPUNode", dpf_namespace, f"node-{host_id}")
    return EventSpec(dpf_namespace, reason[0], reason[1], action, note, node, host_id)


def micro_time(when: datetime) -> str:
    """A `MicroTime` as the API writes it: RFC 3339 with microseconds, UTC."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_INVALID = re.compile(r"[^a-z0-9.-]+")


def event_name(spec: EventSpec, now_ns: int) -> str:
    """`<regarding name>.<hex nanoseconds>`, as client-go names Events (a DNS subdomain)."""
    base = spec.regarding.name if spec.regarding else f"metalflow-{spec.reason.lower()}"
    base = _INVALID.sub("-", base.lower()).strip(".-")[:200] or "metalflow"
    return f"{base}.{now_ns:x}"


class Facts:
    """Which phase changes are new facts, so each fact is one Event (one observation of it):

    - a change seen before is not (a retried workflow task that ran its code again: the same
      run, phase and history length, `PhaseChange.key`);
    - a run ends once: its final phase (`ENDINGS`; a rollout's and a campaign's start and end
      phases, `ONCE_PER_RUN`) is a fact once per run, whatever the history
      length (a workflow task that failed or timed out after entering it runs again, with a
      longer history; without this, one abort read `OperationAborted (x2)` and a host's
      `OperationSucceeded` outnumbered its operations);
    - an operation starts once: the host entity's `running <operation>` shown again for the same
      request without leaving it (an instance assigned while it runs; its next run after
      continue-as-new) is no new start.

    Bounded: the last `SEEN_KEPT` changes and the last phase of as many workflows."""

    def __init__(self, kept: int = SEEN_KEPT) -> None:
        self._kept = kept
        self._seen: OrderedDict[tuple[str, str, int], None] = OrderedDict()
        self._phase: OrderedDict[str, tuple[str, str]] = OrderedDict()  # workflow id -> last shown

    def new(self, change: PhaseChange) -> bool:
        """Whether `change` is a new fact (and remember it)."""
        once = change.phase in ONCE_PER_RUN.get(change.workflow_type, ENDINGS)
        key = (change.run_id, change.phase, -1) if once else change.key
        if key in self._seen:
            return False
        self._remember(self._seen, key, None)
        # The entity's details: "<operation> (<id>) requested by <who>; <instance>": the part
        # before ";" names the operation, the rest may change while it runs.
        shown = (change.phase, change.details.split(";", 1)[0])
        previous = self._phase.get(change.workflow_id)
        self._remember(self._phase, change.workflow_id, shown)
        return not (
            change.workflow_type == "HostWorkflow"
            and change.phase.startswith("running ")
            and previous == shown
        )

    def _remember(self, kept: OrderedDict[Any, Any], key: Any, value: Any) -> None:
        kept[key] = value
        kept.move_to_end(key)
        while len(kept) > self._kept:
            kept.popitem(last=False)


@dataclass
class _Series:
    namespace: str
    name: str
    count: int = 1
    last_observed: datetime = field(default_factory=lambda: datetime.now(UTC))
    patched_count: int = 1
    patched_at: float = 0.0


@dataclass
class Stats:
    """What the emitter did since start (shown on /metrics as `metalflow_events_total`)."""

    created: int = 0
    series_patched: int = 0
    deduplicated: int = 0
    dropped: int = 0
    failed: int = 0

    def as_labels(self) -> dict[str, int]:
        return {
            "created": self.created,
            "series_patched": self.series_patched,
            "deduplicated": self.deduplicated,
            "dropped": self.dropped,
            "failed": self.failed,
        }


class Emitter:
    """The worker's Event writer: queue, deduplication, series, bounded writes."""

    def __init__(self, settings: Settings, writer: EventWriter | None = None) -> None:
        self.settings = settings
        self.writer = writer or EventWriter(settings)
        self.instance = f"{REPORTING_CONTROLLER}-{socket.gethostname()}"[:128]
        self.stats = Stats()
        self._queue: asyncio.Queue[PhaseChange] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._facts = Facts()
        self._series: OrderedDict[tuple[Any, ...], _Series] = OrderedDict()
        self._uids: dict[tuple[str, str, str], tuple[str | None, float]] = {}
        self._pending = 0

    # -- the hand-off (any thread) ----------------------------------------------------------------
    def offer(self, change: PhaseChange) -> None:
        """Queue a phase change; called on the workflow's thread. Never blocks, never raises."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self._put, change)
        except RuntimeError:  # the loop is closing
            return

    def _put(self, change: PhaseChange) -> None:
        assert self._queue is not None
        try:
            self._queue.put_nowait(change)
        except asyncio.QueueFull:
            self.stats.dropped += 1

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        """Install the feed and start the background tasks (on the worker's loop)."""
        self._loop = asyncio.get_running_loop()
        self._queue = asyncio.Queue(QUEUE_SIZE)
        self._tasks = [
            asyncio.create_task(self._drain(), name="metalflow-events"),
            asyncio.create_task(self._sweep(), name="metalflow-event-series"),
        ]
        events.install(self.offer)
        log.info(
            "Kubernetes Events on: reportingController %s, instance %s", REPORTING_CONTROLLER, self.instance
        )

    async def stop(self, grace: float = 2.0) -> None:
        """Stop the feed, write what is queued for up to `grace` seconds, then give up on the rest."""
        events.install(None)
        if self._queue is not None and self._tasks:
            try:
                await asyncio.wait_for(self._queue.join(), grace)
            except TimeoutError:
                pass
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        await self._flush_series(force=True, grace=grace)
        self.writer.close()

    # -- the background work -------------------------------------------------------------------
    async def _drain(self) -> None:
        assert self._queue is not None
        while True:
            change = await self._queue.get()
            try:
                await self.record(change)
            except Exception as err:  # noqa: BLE001 - an Event must never stop the emitter
                self.stats.failed += 1
                log.warning("could not write the Event for %s %s: %s", change.workflow_id, change.phase, err)
            finally:
                self._queue.task_done()

    async def record(self, change: PhaseChange) -> None:
        """Turn one phase change into an Event (or a series patch, or nothing)."""
        if not self._facts.new(change):
            return
        spec = describe(change, self.settings.dpf_namespace, _inside_operation(change))
        if spec is None:
            return
        # An operation's start and its end are one Event each, never a series: two runs of the same
        # operation of a host (the same words, minutes apart) read `COUNT 2` on one Event otherwise.
        own = change.key if spec.reason in ONE_EVENT_EACH else None
        await self.emit(spec, change.at, own)

    async def emit(self, spec: EventSpec, at: datetime, own: object = None) -> None:
        """Write `spec` as a new Event, or count it into the series of an isomorphic one (`own`:
        a fact of its own, never counted into another's series)."""
        key = (spec.namespace, spec.regarding, spec.reason, spec.type, spec.action, spec.note, own)
        now = time.monotonic()
        series = self._series.get(key)
        if series is not None and (at - series.last_observed).total_seconds() < SERIES_FINISH_SECONDS:
            series.count += 1
            series.last_observed = at
            self._series.move_to_end(key)
            self.stats.deduplicated += 1
            if now - series.patched_at >= SERIES_PATCH_SECONDS:
                await self._patch_series(series, now)
            return
        uid = await self._uid(spec)
        body = self.body(spec, at, uid)
        created = await self._write(lambda: self.writer.create(spec.namespace, body))
        if created is None:
            return
        self.stats.created += 1
        self._series[key] = _Series(spec.namespace, body["metadata"]["name"], 1, at, 1, now)
        while len(self._series) > SERIES_KEPT:
            self._series.popitem(last=False)

    def body(self, spec: EventSpec, at: datetime, uid: str | None) -> dict[str, Any]:
        """The events.k8s.io/v1 Event of `spec`."""
        body: dict[str, Any] = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": event_name(spec, time.time_ns()), "namespace": spec.namespace},
            "eventTime": micro_time(at),
            "reportingController": REPORTING_CONTROLLER,
            "reportingInstance": self.instance,
            "action": spec.action,
            "reason": spec.reason,
            "type": spec.type,
            "note": spec.note,
        }
        if spec.regarding is not None:
            regarding = {
                "apiVersion": spec.regarding.api_version,
                "kind": spec.regarding.kind,
                "namespace": spec.regarding.namespace,
                "name": spec.regarding.name,
            }
            if uid:
                regarding["uid"] = uid
            body["regarding"] = regarding
        return body

    async def _uid(self, spec: EventSpec) -> str | None:
        regarding = spec.regarding
        if regarding is None:
            return None
        key = (regarding.kind, regarding.namespace, regarding.name)
        cached = self._uids.get(key)
        if cached is not None and time.monotonic() - cached[1] < UID_TTL_SECONDS and cached[0]:
            return cached[0]
        try:
            if regarding.kind == "PodCliqueSet":
                uid = await self.writer.uid_of_podcliqueset(regarding.namespace, regarding.name)
            else:
                uid = await self.writer.uid_of_node(
                    spec.host_id or regarding.name, regarding.namespace, regarding.name
                )
        except Exception as err:  # noqa: BLE001 - the Event still goes out, found by name
            log.debug("no uid for %s %s: %s", regarding.kind, regarding.name, err)
            uid = None
        if len(self._uids) > SERIES_KEPT:
            self._uids.clear()
        self._uids[key] = (uid, time.monotonic())
        return uid

    async def _write(self, call: Any) -> Any:
        for attempt in range(WRITE_ATTEMPTS):
            try:
                return await call()
            except Exception as err:  # noqa: BLE001 - best effort: counted and logged
                if attempt + 1 == WRITE_ATTEMPTS:
                    self.stats.failed += 1
                    log.warning("Kubernetes Event not written after %d attempts: %s", WRITE_ATTEMPTS, err)
                    return None
                await asyncio.sleep(0.5 * (attempt + 1))
        return None

    async def _patch_series(self, series: _Series, now: float) -> None:
        patch = {"series": {"count": series.count, "lastObservedTime": micro_time(series.last_observed)}}
        series.patched_at, series.patched_count = now, series.count
        if await self._write(lambda: self.writer.patch(series.namespace, series.name, patch)) is not None:
            self.stats.series_patched += 1

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            await self._flush_series()

    async def _flush_series(self, *, force: bool = False, grace: float = 5.0) -> None:
        """Patch series with counts not yet written (when due, or all with `force`); forget
        series that ended (nothing isomorphic for `SERIES_FINISH_SECONDS`)."""
        now, wall = time.monotonic(), datetime.now(UTC)
        deadline = now + grace
        for key, series in list(self._series.items()):
            if time.monotonic() > deadline and force:
                break
            if series.count != series.patched_count and (
                force or now - series.patched_at >= SERIES_PATCH_SECONDS
            ):
                await self._patch_series(series, now)
            if (wall - series.last_observed).total_seconds() >= SERIES_FINISH_SECONDS:
                self._series.pop(key, None)


def _inside_operation(change: PhaseChange) -> bool:
    """A reboot run by an operation (its id's owner is not the host entity): see `describe`."""
    return change.parent_workflow_id is not None and not change.parent_workflow_id.startswith(
        f"{names.HOST}/"
    )
