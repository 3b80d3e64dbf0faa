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
   `set_limits` are updates (workflows/campaign_control.py).

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
    from metalflow import activity_api, names
    from metalflow.models.campaign import (
        HOST_FINISHED_SIGNAL,
        STATUS_QUERY,
        AbortHostsInput,
        CampaignHost,
        CampaignInput,
        CampaignResult,
        CampaignStatus,
        CheckHostsInput,
        Deferred,
        Failure,
        HostFinished,
        HostRequestInput,
        HostRequestOutcome,
        HostRequestsInput,
        HostRequestsResult,
        InFlight,
        Progress,
        SelectHostsInput,
        SweepInput,
        TargetKind,
    )
    from metalflow.models.dpf import DeploymentBFBInput, DeploymentFlavorInput
    from workflows import campaign_plan as plan
    from workflows import common
    from workflows.campaign_control import (
        ABORTED,
        ABORTING,
        CANARY,
        COMPLETED,
        HALTED,
        OUTSIDE_WINDOW,
        PAUSED,
        POINTING,
        RUNNING,
        SELECTING,
        SOAKING,
        CampaignControl,
    )

FAILURES_SHOWN: Final = 200
FIRMWARE_AT_TARGET_PATCH: Final = "campaign-firmware-at-target"
PROMPT_ABORT_PATCH: Final = "campaign-prompt-abort"  # the request activity is cancelled on abort
REQUESTS: Final[workflow.ActivityConfig] = {
    "start_to_close_timeout": timedelta(minutes=5),
    "retry_policy": common.QUICK_RETRY,
}
CANCELLABLE_REQUESTS: Final[workflow.ActivityConfig] = {
    **REQUESTS,
    "heartbeat_timeout": timedelta(seconds=5),  # how soon an abort reaches the asking activity
}


@workflow.defn(name="CampaignWorkflow")
class CampaignWorkflow(CampaignControl):
    """Drive a fleet to one target through the hosts' entities; see the module docstring."""

    @workflow.init
    def __init__(self, start: CampaignInput) -> None:
        super().__init__()
        self._input = start
        self._name = workflow.info().workflow_id.removeprefix("campaign/")
        self._finished: list[HostFinished] = []
        self._alarm: asyncio.Task[None] | None = None
        self._alarm_at: datetime | None = None
        self._next_sweep: datetime | None = None
        self._restore(start.progress or Progress(limits=start.limits, started_at=workflow.now()))

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
            return SOAKING, f"batch {self._batch} starts at {self._soak_until.isoformat()}"
        if not plan.window_open(self._input.windows, now):
            opens = plan.next_window_open(self._input.windows, now)
            return OUTSIDE_WINDOW, f"next window opens {opens.isoformat() if opens else 'never'}"
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
        return bool(at_target)

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
            **common.options(preset, f"check {len(hosts)} hosts against {self._input.target.describe()}"),
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
        summary = f"ask {len(requests.requests)} hosts' entities for {self._input.target.describe()}"
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
            self._alarm = asyncio.create_task(workflow.sleep(delay))

    async def _sweep(self) -> None:
        """Read the in-flight hosts' entities: an operation that ended without a signal is seen."""
        self._next_sweep = workflow.now() + timedelta(seconds=self._input.policy.sweep_seconds)
        swept = await workflow.execute_activity(
            activity_api.sweep_campaign_hosts,
            SweepInput(in_flight=tuple(self._in_flight.values())),
            **common.options(common.KUBE_READ, f"sweep {len(self._in_flight)} in-flight hosts"),
        )
        self._finished.extend(swept.finished)

    async def _abort_running(self) -> None:
        self._cancel_running = False
        running = [f for f in self._in_flight.values() if not f.awaiting_approval]
        for waiting in [f for f in self._in_flight.values() if f.awaiting_approval]:
            del self._in_flight[waiting.host.host_id]
            self._skipped.append(
                Failure(host=waiting.host, reason="campaign aborted while awaiting approval")
            )
        if running:
            await workflow.execute_activity(
                activity_api.abort_campaign_hosts,
                AbortHostsInput(
                    workflow_ids=tuple(f.workflow_id for f in running),
                    requested_by=self._aborting or "operator",
                    reason=f"campaign {self._name} aborted",
                ),
                **common.options(REQUESTS, f"abort {len(running)} running host operations"),
            )

    # -- outcomes -------------------------------------------------------------------------------------
    @workflow.signal(name=HOST_FINISHED_SIGNAL)
    def host_finished(self, finished: HostFinished) -> None:
        """A host's entity saw this campaign's operation end (handled in the runbook's next step)."""
        self._finished.append(finished)

    def _absorb(self) -> None:
        finished, self._finished = self._finished, []
        for event in finished:
            flight = self._in_flight.get(event.host_id)
            if flight is None or flight.workflow_id != event.workflow_id:
                continue  # a duplicate (signal and sweep), or another operation of that host
            del self._in_flight[event.host_id]
            if event.outcome == "completed":
                self._done += 1
                self._attempted += 1
            elif event.outcome.startswith("expired"):
                self._skipped.append(Failure(host=flight.host, reason=f"not approved: {event.outcome}"))
            else:
                self._record_failure(flight.host, event.outcome)
        if not self._in_flight:
            self._next_sweep = None

    def _record_failure(self, host: CampaignHost, reason: str) -> None:
        self._failed.append(Failure(host=host, reason=reason))
        self._attempted += 1
        failed = len(self._failed) - self._budget_failed_base
        attempted = self._attempted - self._budget_attempted_base
        if self._halted_reason is None and plan.budget_exceeded(self._input.budget, failed, attempted):
            self._halt(f"failure budget spent: {plan.describe_budget(self._input.budget, failed, attempted)}")

    def _halt(self, reason: str) -> None:
        self._halted_reason = reason
        self._enter(HALTED, f"{reason}; waiting for resume, retry_failed or abort")
        workflow.logger.warning("campaign %s halted: %s", self._name, reason)

    def _over(self) -> bool:
        if self._aborting is not None:
            return not self._in_flight
        return not (self._pending or self._deferred or self._in_flight) and self._halted_reason is None

    def _finish(self) -> CampaignResult:
        outcome = ABORTED if self._aborting is not None else COMPLETED
        self._enter(outcome, self._counts())
        return CampaignResult(
            name=self._name,
            outcome=outcome,
            total=self._total,
            done=self._done,
            already_at_target=self._at_target_count,
            failed=tuple(self._failed),
            skipped=tuple(
                self._skipped + [Failure(host=h, reason="not started: aborted") for h in self._not_started()]
            ),
            runs=self._runs,
            finished_at=workflow.now(),
        )

    def _not_started(self) -> list[CampaignHost]:
        return self._pending + [d.host for d in self._deferred]

    # -- visibility -----------------------------------------------------------------------------------
    def _counts(self) -> str:
        return (
            f"{self._done + self._at_target_count}/{self._total} done ({self._at_target_count} already "
            f"at target), {len(self._in_flight)} in flight, {len(self._failed)} failed, "
            f"{len(self._skipped)} skipped"
        )

    def _show_running(self) -> None:
        phase = CANARY if not self._canary_passed else RUNNING
        self._enter(phase, f"batch {self._batch}: {self._counts()}")

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> CampaignStatus:
        """Done / in flight / failed with reasons / skipped / remaining, batch, window, budget."""
        now = workflow.now()
        failed = len(self._failed) - self._budget_failed_base
        attempted = self._attempted - self._budget_attempted_base
        windows = self._input.windows
        return CampaignStatus(
            name=self._name,
            target=self._input.target.describe(),
            phase=self._phase,
            total=self._total,
            done=self._done,
            already_at_target=self._at_target_count,
            in_flight=tuple(sorted(k for k, f in self._in_flight.items() if not f.awaiting_approval)),
            awaiting_approval=tuple(sorted(k for k, f in self._in_flight.items() if f.awaiting_approval)),
            failed=len(self._failed),
            failures=tuple(self._failed[-FAILURES_SHOWN:]),
            skipped=len(self._skipped),
            skipped_hosts=tuple(self._skipped[-FAILURES_SHOWN:]),
            deferred=tuple(d.host.host_id for d in self._deferred),
            remaining=len(self._pending) + len(self._deferred) + len(self._in_flight),
            batch=self._batch,
            canary_passed=self._canary_passed,
            window_open=plan.window_open(windows, now),
            next_window=plan.next_window_open(windows, now) if windows else None,
            soak_until=self._soak_until,
            budget=plan.describe_budget(self._input.budget, failed, attempted),
            halted_reason=self._halted_reason,
            paused_by=self._paused_by,
            aborting=self._aborting,
            limits=self._limits,
            runs=self._runs,
        )

    # -- continue-as-new ------------------------------------------------------------------------------
    def _history_is_long(self) -> bool:
        info = workflow.info()
        return info.is_continue_as_new_suggested() or (
            info.get_current_history_length() > self._input.policy.max_history_events
        )

    def _snapshot(self) -> Progress:
        return Progress(
            phase=self._phase,
            total=self._total,
            pending=tuple(self._pending),
            in_flight=tuple(self._in_flight.values()),
            deferred=tuple(self._deferred),
            done=self._done,
            already_at_target=self._at_target_count,
            failed=tuple(self._failed),
            skipped=tuple(self._skipped),
            attempted=self._attempted,
            budget_failed_base=self._budget_failed_base,
            budget_attempted_base=self._budget_attempted_base,
            canary_hosts=tuple(sorted(self._canary_hosts)),
            canary_passed=self._canary_passed,
            batch=self._batch,
            batch_left=self._batch_left,
            soak_until=self._soak_until,
            halted_reason=self._halted_reason,
            paused_by=self._paused_by,
            aborting=self._aborting,
            cancel_running=self._cancel_running,
            deployment_pointed=self._deployment_pointed,
            runs=self._runs + 1,
            started_at=self._started_at,
            limits=self._limits,
            next_sweep=self._next_sweep,
        )

    def _restore(self, p: Progress) -> None:
        self._phase = p.phase
        self._total = p.total
        self._pending = list(p.pending)
        self._in_flight = {f.host.host_id: f for f in p.in_flight}
        self._deferred = list(p.deferred)
        self._done = p.done
        self._at_target_count = p.already_at_target
        self._failed = list(p.failed)
        self._skipped = list(p.skipped)
        self._attempted = p.attempted
        self._budget_failed_base = p.budget_failed_base
        self._budget_attempted_base = p.budget_attempted_base
        self._canary_hosts: set[str] = set(p.canary_hosts)
        self._canary_passed = p.canary_passed
        self._batch = p.batch
        self._batch_left = p.batch_left
        self._soak_until = p.soak_until
        self._halted_reason = p.halted_reason
        self._paused_by = p.paused_by
        self._aborting = p.aborting
        self._cancel_running = p.cancel_running
        self._deployment_pointed = p.deployment_pointed
        self._runs = p.runs
        self._started_at = p.started_at
        self._limits = p.limits
        self._next_sweep = p.next_sweep
