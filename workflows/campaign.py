"""CampaignWorkflow (`campaign/<name>`): bring many hosts to one target, paced and guarded.

The runbook, top to bottom in `run`:

1. Select the hosts (`select_campaign_hosts`: all, a list, a label selector or a group of the
   site inventory; unknown hosts or a selection matching nothing fail the campaign before it
   touches anything). For a new BFB or flavor, point the DPUDeployment at it (DPF under
   `OnDelete` then marks the DPUs outdated and waits: the campaign paces the reprovisions).
2. The canary batch (`canary` hosts) must succeed entirely; a failure halts the campaign for an
   operator (`resume` accepts it, `retry_failed` runs the failed canaries again, `abort`).
3. Then batches of `batch_size`, a soak time between batches; within a batch, hosts start under
   `max_in_flight`, `max_per_group` and `max_per_bmc`, and only inside a maintenance window
   (running ones finish when it closes). Before starting, hosts already at the target
   (`check_campaign_hosts`: DPUs at the BFB or flavor in DPF, or every DPU's BMC running the
   firmware) are counted done without being touched; a reprovision has no such state.
4. Each host is asked of its entity `host/<id>` (`request_campaign_hosts`, an update-with-start),
   never around it: the one-owner rule and approvals hold. A busy host is asked again after
   `busy_retry_seconds` (the entity refuses a second operation, so it is never doubled); an
   assigned host is skipped, or waits for its approval, per `policy.assigned`. The entity
   signals `host_finished` when the operation ends (and tags it `Campaign=<name>`); a sweep every
   `sweep_seconds` reads the in-flight hosts' entities, so a lost signal strands nothing.
5. A failure budget (more than N failed, or X% of those attempted) halts the campaign: nothing new
   starts until an operator decides. `pause`, `resume`, `abort`, `retry_failed`, `skip_host`,
   `set_limits` are updates (workflows/campaign_control.py). What the campaign counts and shows
   (outcomes, the budget, `status`, the progress carried over continue-as-new) is
   workflows/campaign_progress.py.
6. A host whose operation waits for an operator (Phase `manual-intervention-required`: a stall
   past its phase timeout, a BMC that cannot reboot it, ...) is neither done nor failed: the
   operation still owns the host and may yet succeed once the operator answers it. The campaign
   keeps it in flight (its slot stays taken: the host is not free), shows it under
   `needs_operator` with the operation's reason, and its failure budget counts it as failed (and
   attempted) while it waits, so hosts that wait for people halt a campaign as failures do. It is
   seen by the sweep (every `sweep_seconds`), which asks each in-flight operation its phase. A
   `resume` of the halt accepts the hosts waiting then (the budget stops counting them); when the
   operation ends, the host counts as what it became (done, or failed once).

Scale and cost: fan-out is bounded by `max_in_flight` (<= 1000); the campaign keeps no timer per
host (one alarm at a time: the next soak end, window edge, busy retry or sweep). Per host about
5 history events (its share of one request activity per start round, its `host_finished` signal,
its share of a workflow task); per batch one at-target check activity. The campaign
continues-as-new past `policy.max_history_events` (default 4,000, at most 9,000), carrying
`Progress` whole, so counts stay exact; the worst-case history of one run is that threshold plus
one step's events (at most 3 x `max_in_flight` signals and tasks + ~20), i.e. < 10,240 at the
defaults, and <= 3,020 + 9,000 only with both raised to their maximum. The input carries the
hosts not yet finished (~100 bytes each: ~1 MB for 10,000 hosts, under the 2 MB payload limit).
Worker CPU: O(pending) per step for `pick_starts`. Measured (time-skipping server, stand-in
operations, 400 hosts, 50 in flight): one run of 1,371 events, ~3.4 per host, so 10,000 hosts
make ~9 runs of <= ~4,100 events; the process running worker and client peaked at 383 MiB RSS.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Final

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api, names
    from contracts.models.campaign import (
        AbortHostsInput,
        CampaignHost,
        CampaignInput,
        CampaignResult,
        CheckHostsInput,
        Deferred,
        Failure,
        HostRequestInput,
        HostRequestOutcome,
        HostRequestsInput,
        HostRequestsResult,
        InFlight,
        SelectHostsInput,
        SweepInput,
        TargetKind,
    )
    from contracts.models.dpf import DeploymentBFBInput, DeploymentFlavorInput
    from contracts.wording import iso_z, plural
    from workflows import campaign_plan as plan
    from workflows import common
    from workflows.campaign_control import (
        ABORTING,
        HALTED,
        OUTSIDE_WINDOW,
        PAUSED,
        POINTING,
        SELECTING,
        SOAKING,
    )
    from workflows.campaign_progress import ABORTED_AWAITING_APPROVAL, CampaignProgress

FIRMWARE_AT_TARGET_PATCH: Final = "campaign-firmware-at-target"
PROMPT_ABORT_PATCH: Final = "campaign-prompt-abort"  # the request activity is cancelled on abort
ABORT_RUNNING_PATCH: Final = "campaign-abort-withdraws-approvals-counts-aborted"
REQUESTS: Final[workflow.ActivityConfig] = {
    "start_to_close_timeout": timedelta(minutes=5),
    "retry_policy": common.QUICK_RETRY,
}
CANCELLABLE_REQUESTS: Final[workflow.ActivityConfig] = {
    **REQUESTS,
    "heartbeat_timeout": timedelta(seconds=5),  # how soon an abort reaches the asking activity
}


@workflow.defn(name="CampaignWorkflow")
class CampaignWorkflow(CampaignProgress):
    """Drive a fleet to one target through the hosts' entities; see the module docstring."""

    @workflow.init
    def __init__(self, start: CampaignInput) -> None:
        super().__init__(start)
        self._alarm: asyncio.Task[None] | None = None
        self._alarm_at: datetime | None = None

    @workflow.run
    async def run(self, start: CampaignInput) -> CampaignResult:
        """Select, point the deployment, canary, batches; see the module docstring."""
        workflow.upsert_search_attributes(
            [names.CAMPAIGN.value_set(self._name), names.OPERATION.value_set(names.CAMPAIGN_OPERATION)]
        )
        if start.progress is None:
            await self._select()
        if start.target.kind in (TargetKind.BFB, TargetKind.FLAVOR) and not self._deployment_pointed:
            await self._point_deployment()
        while True:
            self._absorb()
            if self._over():
                break
            if self._history_is_long():
                await workflow.wait_condition(workflow.all_handlers_finished)
                self._absorb()
                workflow.continue_as_new(self._input.model_copy(update={"progress": self._snapshot()}))
            if self._aborting is not None and self._cancel_running:
                await self._abort_running()
            started = await self._start_hosts()
            if started:
                continue  # at-target hosts left room: look again before sleeping
            await self._sleep_until_something_happens()
        return self._finish()

    # -- the runbook's steps -------------------------------------------------------------------------
    async def _select(self) -> None:
        self._enter(SELECTING, self._input.selection.describe())
        selected = await workflow.execute_activity(
            activity_api.select_campaign_hosts,
            SelectHostsInput(selection=self._input.selection),
            **common.options(common.INVENTORY, f"select {self._input.selection.describe()}"),
        )
        self._pending = list(selected.hosts)
        self._total = len(self._pending)
        self._batch_left = min(self._input.canary, self._total)
        self._canary_passed = self._batch_left == 0
        self._batch = 0 if self._batch_left else 1
        if self._canary_passed:
            self._batch_left = self._limits.batch_size

    async def _point_deployment(self) -> None:
        target = self._input.target
        self._enter(POINTING, f"DPUDeployment {target.deployment} -> {target.kind} {target.value}")
        summary = f"point {target.deployment} at {target.describe()}"
        if target.kind == TargetKind.BFB:
            await workflow.execute_activity(
                activity_api.update_deployment_bfb,
                DeploymentBFBInput(deployment=target.deployment, bfb=target.value),
                **common.options(common.KUBE_WRITE, summary),
            )
        else:
            await workflow.execute_activity(
                activity_api.update_deployment_flavor,
                DeploymentFlavorInput(deployment=target.deployment, flavor=target.value),
                **common.options(common.KUBE_WRITE, summary),
            )
        self._deployment_pointed = True

    def _blocked(self) -> tuple[str, str] | None:
        """Why no new host may start now, as (phase, details); None: they may."""
        now = workflow.now()
        if self._aborting is not None:
            return ABORTING, f"asked by {self._aborting}; {len(self._in_flight)} in flight"
        if self._halted_reason is not None:
            return HALTED, f"{self._halted_reason}; waiting for resume, retry_failed or abort"
        if self._paused_by is not None:
            return PAUSED, f"by {self._paused_by}; {len(self._in_flight)} in flight"
        if self._soak_until is not None and now < self._soak_until:
            return SOAKING, f"batch {self._batch} starts at {iso_z(self._soak_until)}"
        if not plan.window_open(self._input.windows, now):
            opens = plan.next_window_open(self._input.windows, now)
            return OUTSIDE_WINDOW, f"next window opens {iso_z(opens, none='never')}"
        return None

    async def _start_hosts(self) -> bool:
        """Start what the batch, the limits and the window allow; True if any host left the queue."""
        self._promote_deferred()
        self._end_batch_if_done()
        blocked = self._blocked()
        if blocked is not None:
            self._enter(*blocked)
            return False
        self._soak_until = None
        room = self._batch_left
        chosen = plan.pick_starts(
            self._pending, (f.host for f in self._in_flight.values()), self._limits, room
        )
        self._show_running()
        if not chosen:
            return False
        at_target = await self._at_target(chosen)
        for host in chosen:
            if host.host_id in at_target:
                self._pending.remove(host)
                self._at_target_count += 1
        to_ask = [h for h in chosen if h.host_id not in at_target and h in self._pending]
        if to_ask:
            await self._request(to_ask)
        # Hosts that left the queue without going in flight (skipped, refused) wake nothing, as
        # at-target ones do not: with nothing in flight and no alarm due, look again, or a round
        # of only such hosts waits forever (for an operator's update).
        stuck = bool(to_ask) and not self._in_flight and self._aborting is None and self._next_wake() is None
        return bool(at_target) or stuck

    async def _at_target(self, hosts: list[CampaignHost]) -> set[str]:
        kind = self._input.target.kind
        if kind == TargetKind.REPROVISION:
            return set()  # a reprovision is never done before
        # Firmware: each DPU's BMC says what runs. Campaigns started before the patch left that to
        # the firmware workflow (which ends at once, no reboot, but through the host's entity).
        if kind == TargetKind.FIRMWARE and not workflow.patched(FIRMWARE_AT_TARGET_PATCH):
            return set()
        preset = common.BMC_READ if kind == TargetKind.FIRMWARE else common.KUBE_READ
        checked = await workflow.execute_activity(
            activity_api.check_campaign_hosts,
            CheckHostsInput(target=self._input.target, host_ids=tuple(h.host_id for h in hosts)),
            **common.options(
                preset, f"check {plural(len(hosts), 'host')} against {self._input.target.describe()}"
            ),
        )
        return set(checked.at_target)

    async def _request(self, hosts: list[CampaignHost]) -> None:
        requests = tuple(
            HostRequestInput(
                host_id=h.host_id,
                site=h.site,
                target=self._input.target,
                campaign=self._name,
                campaign_workflow_id=workflow.info().workflow_id,
                requested_by=f"campaign {self._name} ({self._input.requested_by})",
                reason=self._input.reason,
                refuse_if_assigned=self._input.policy.assigned == "skip",
                host_policy=self._input.host_policy,
            )
            for h in hosts
        )
        answered = await self._ask_entities(HostRequestsInput(requests=requests))
        by_id = {h.host_id: h for h in hosts}
        now = workflow.now()
        for outcome in answered.outcomes:
            host = by_id[outcome.host_id]
            if host not in self._pending:
                continue  # skipped by an operator while the request was out
            self._pending.remove(host)
            if outcome.outcome in ("started", "awaiting-approval"):
                self._in_flight[host.host_id] = InFlight(
                    host=host,
                    workflow_id=outcome.workflow_id,
                    started_at=now,
                    awaiting_approval=outcome.outcome == "awaiting-approval",
                )
                self._batch_left -= 1
                if not self._canary_passed:
                    self._canary_hosts.add(host.host_id)
            elif outcome.outcome == "busy":
                retry_at = now + timedelta(seconds=self._input.policy.busy_retry_seconds)
                self._deferred.append(Deferred(host=host, retry_at=retry_at, reason=outcome.message))
            elif outcome.outcome == "not-asked":
                self._pending.append(host)  # aborting: reported as not started
            elif outcome.outcome == "unanswered":  # its entity may still take the request later
                reason = f"asked, but no answer before the abort ({outcome.message}): check {host.host_id}"
                self._skipped.append(Failure(host=host, reason=reason))
            elif outcome.outcome == "assigned":
                self._skipped.append(Failure(host=host, reason=f"instance assigned: {outcome.message}"))
            else:
                self._record_failure(host, f"refused: {outcome.message}")
        if self._in_flight and self._next_sweep is None:
            self._next_sweep = now + timedelta(seconds=self._input.policy.sweep_seconds)

    async def _ask_entities(self, requests: HostRequestsInput) -> HostRequestsResult:
        """The request activity; an abort cancels it, so the campaign stops asking at once
        (within a heartbeat) instead of after every host of the round was asked."""
        asked = plural(len(requests.requests), "host")
        summary = f"ask the entities of {asked} for {self._input.target.describe()}"
        if not workflow.patched(PROMPT_ABORT_PATCH):
            return await workflow.execute_activity(
                activity_api.request_campaign_hosts, requests, **common.options(REQUESTS, summary)
            )
        asking = workflow.start_activity(
            activity_api.request_campaign_hosts,
            requests,
            **common.options(
                CANCELLABLE_REQUESTS,
                summary,
                cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            ),
        )
        await workflow.wait_condition(lambda: asking.done() or self._aborting is not None)
        if not asking.done():
            asking.cancel()
        try:
            return await asking
        except ActivityError as err:
            if not isinstance(err.cause, CancelledError):
                raise
            # Cancelled before an attempt ran: no host was asked (an attempt that ran returns).
            return HostRequestsResult(
                outcomes=tuple(
                    HostRequestOutcome(host_id=r.host_id, outcome="not-asked") for r in requests.requests
                )
            )

    def _promote_deferred(self) -> None:
        now = workflow.now()
        due = [d for d in self._deferred if d.retry_at <= now]
        if due:
            self._deferred = [d for d in self._deferred if d.retry_at > now]
            self._pending[:0] = [d.host for d in due]

    def _end_batch_if_done(self) -> None:
        """A batch ends when all its hosts started and finished (or nothing is left to start)."""
        if self._in_flight:
            return
        nothing_left = not self._pending and not self._deferred
        if self._batch_left > 0 and not nothing_left:
            return
        if not self._canary_passed:
            canary_failures = [f for f in self._failed if f.host.host_id in self._canary_hosts]
            if canary_failures:
                if self._halted_reason is None:
                    self._halt(f"the canary failed on {', '.join(f.host.host_id for f in canary_failures)}")
                return
            self._canary_passed = True
        if nothing_left:
            return
        self._batch += 1
        self._batch_left = self._limits.batch_size
        if self._input.soak_seconds > 0 and self._batch > 1:
            self._soak_until = workflow.now() + timedelta(seconds=self._input.soak_seconds)

    async def _sleep_until_something_happens(self) -> None:
        """One alarm at a time (never a timer per host): the soak end, the window's next edge, a
        busy host's retry, or the sweep of in-flight hosts; or a signal or an update."""
        if self._next_sweep is not None and workflow.now() >= self._next_sweep:
            await self._sweep()
            return
        self._set_alarm(self._next_wake())
        alarm = self._alarm
        await workflow.wait_condition(
            lambda: bool(self._finished) or self._poked or (alarm is not None and alarm.done())
        )
        self._poked = False

    def _next_wake(self) -> datetime | None:
        now = workflow.now()
        times = [d.retry_at for d in self._deferred]
        if self._soak_until is not None:
            times.append(self._soak_until)
        if self._input.windows and (self._pending or self._deferred):
            change = plan.next_window_change(self._input.windows, now)
            if change is not None:
                times.append(change)
        if self._in_flight and self._next_sweep is not None:
            times.append(self._next_sweep)
        later = [t for t in times if t > now]  # a time already past is acted on, not slept for
        return min(later) if later else None

    def _set_alarm(self, when: datetime | None) -> None:
        if when == self._alarm_at and self._alarm is not None and not self._alarm.done():
            return
        if self._alarm is not None and not self._alarm.done():
            self._alarm.cancel()
        self._alarm_at = when
        self._alarm = None
        if when is not None:
            delay = max((when - workflow.now()).total_seconds(), 1.0)
            # Labelled in the UI's timeline (it read `1 (10m)`): what the campaign wakes for.
            summary = f"campaign {self._name}: look again at {iso_z(when)} (soak, window, retry or sweep)"
            self._alarm = asyncio.create_task(workflow.sleep(delay, summary=summary))

    async def _sweep(self) -> None:
        """Read the in-flight hosts' entities: an operation that ended without a signal is seen."""
        self._next_sweep = workflow.now() + timedelta(seconds=self._input.policy.sweep_seconds)
        swept = await workflow.execute_activity(
            activity_api.sweep_campaign_hosts,
            SweepInput(in_flight=tuple(self._in_flight.values())),
            **common.options(common.KUBE_READ, f"sweep {len(self._in_flight)} in-flight hosts"),
        )
        self._finished.extend(swept.finished)
        self._needs_operator = {
            f.host.host_id: f for f in swept.needs_operator if f.host.host_id in self._in_flight
        }
        self._check_budget()

    async def _abort_running(self) -> None:
        """`abort` with `cancel_running`: abort the running operations and withdraw the requests
        awaiting approval (their entities end the wait: nothing is left pending). Each stays in
        flight until its entity says how it ended, and counts as aborted (or skipped, withdrawn
        unstarted), never as a failure. Runs aborted before `ABORT_RUNNING_PATCH` dropped the
        awaiting hosts unwithdrawn and counted the aborted ones failed."""
        self._cancel_running = False
        running = [f for f in self._in_flight.values() if not f.awaiting_approval]
        waiting = [f for f in self._in_flight.values() if f.awaiting_approval]
        patched = workflow.patched(ABORT_RUNNING_PATCH)
        if not patched:
            for flight in waiting:
                del self._in_flight[flight.host.host_id]
                self._skipped.append(Failure(host=flight.host, reason=ABORTED_AWAITING_APPROVAL))
            waiting = []
        else:
            self._abort_sent.update(f.workflow_id for f in (*running, *waiting))
        if running or waiting:
            summary = f"abort {len(running)} running host operations"
            if waiting:
                summary += f", withdraw {len(waiting)} awaiting approval"
            await workflow.execute_activity(
                activity_api.abort_campaign_hosts,
                AbortHostsInput(
                    workflow_ids=tuple(f.workflow_id for f in running),
                    requested_by=self._aborting or "operator",
                    reason=f"campaign {self._name} aborted",
                    withdraw=tuple(waiting),
                ),
                **common.options(REQUESTS, summary),
            )
