"""CampaignWorkflow (`campaign/<name>`): bring many hosts to one target, paced and guarded.

The runbook, top to bottom in `run`:

1. Select the hosts (`select_campaign_hosts`: all, a list, a label selector or a group of the
   site inventory; unknown hosts or a selection matching nothing fail the campaign before it
   touches anything). Left out at once, counted skipped with why: hosts DPF does not know (a
   reprovision, BFB or flavor campaign; none known fails the campaign naming `provision`), and
   hosts the inventory shows assigned when the campaign skips them.
2. Claim them (`claim_campaign_hosts`, workflows/campaign_claims/workflow.py): one campaign per host. A
   host another running campaign holds is skipped, naming it (the campaign does not wait for
   it). Every ending releases the claims (`release_campaign_hosts`).
3. A BFB or flavor campaign checks its DPUDeployments before anything changes
   (`prepare_campaign_deployments`: strategy OnDelete, no host outside the campaign unless
   `whole_deployment`, every host reached) and records their values. The canary runs on a
   DPUDeployment of its own (`canary_deployment`: its hosts are the canary), pointed when the
   canary starts; the fleet's deployment is pointed only after the canary passed, inside a
   window. An abort, a cancel, a failure or a failed canary (at its halt) puts them back unless
   `keep_changes`; `retry_failed` or `resume` points them again. Each change is in `status`.
4. The canary batch, then batches of `batch_size`, a soak time between batches; within a batch,
   hosts start under `max_in_flight`, `max_per_group` and `max_per_bmc`, and only inside a
   maintenance window (each in its IANA zone; running ones finish when it closes). Before
   starting, hosts already at the target (`check_campaign_hosts`) are counted done untouched. The
   canary passes only with at least one host done and none failed; a canary of skipped or
   at-target hosts takes the next host. A failed canary halts for an operator (`resume`
   accepts it, `retry_failed` runs it again, `abort`).
5. Each host is asked of its entity `host/<id>` (`request_campaign_hosts`, an update-with-start),
   never around it: the one-owner rule and approvals hold. A busy host is asked again after
   `busy_retry_seconds`; an assigned host is skipped, or waits for its approval, per
   `policy.assigned`. The entity signals `host_finished` when the operation ends; a sweep every
   `sweep_seconds` reads the in-flight hosts' operations (in parallel), so a lost signal strands
   nothing. A round whose hosts were all skipped or at target looks again at once (it never
   sleeps waiting for nothing).
6. Verified completion: a completed operation counts done only once the host reads at the target
   (`check_campaign_hosts` again: DPF for BFB and flavor, the DPUs' BMCs for firmware); else the
   host fails with what it read. A reprovision is done when its operation is (DPUs Ready).
7. The failure budget (`FailureBudget`: more than N failed, or than X% of the hosts selected)
   counts monotonic failures since the start or the last resume (a skipped failure stays
   counted); spent, it halts: nothing new starts until an operator decides. `pause`, `resume`,
   `abort`, `retry_failed`, `skip_host`, `set_limits` are updates, each with a validator that
   refuses what does not apply now (with the reason); `pause`, `resume` and `abort` are the
   kernel's (workflows/kernel.py), the campaign's `abort` taking `AbortRequest`
   (`cancel_running`, `keep_changes`). Where each host is is a plain state object, `Ledger`
   (workflows/campaign/progress.py), carried whole over continue-as-new; the pure decisions are
   workflows/campaign/plan.py.
8. A host whose operation waits for an operator (Phase `manual-intervention-required`) stays in
   flight, is shown under `needs_operator`, and counts against the budget while it waits; a
   `resume` of the halt accepts the hosts waiting then.

Scale and cost, for 10,000 hosts and days of running: fan-out is bounded by `max_in_flight`
(<= 1000); one alarm at a time (never a timer per host). Per host about 5 history events (its
share of a request activity, its `host_finished` signal, its share of a workflow task), plus
its share of one at-target check per start round and one read-back per step that has completed
hosts; per campaign two claim updates and, for a BFB or flavor, one check and one edit per
deployment change. Payloads: the state is ~31 bytes a selected host (`Progress`: roster and
state string), plus in flight (~250 bytes each) and 3 x RECENT_HOSTS named hosts; the selection
result ~30 bytes a host plus ~15 a host left out; a check or request round <= `max_in_flight`
entries. So the continue-as-new input, the heaviest payload, stays under 1 MB at 10,000 hosts
(tests/test_campaign_bound.py: 0.66 MB at the worst case it builds; bench/bench_campaign.py
measures the largest event of a real 10,000-host campaign with 9,000 skipped). Every host's
outcome is read page by page (query `hosts`), never in one payload. The campaign continues-as-new
past `policy.max_history_events` (default 4,000, at most 9,000), carrying `Progress` whole.
Worker CPU: O(hosts) per step at worst (walking the state string for pending hosts).
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Final

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api, names
    from contracts.models.campaign import (
        HOST_FINISHED_SIGNAL,
        HOSTS_QUERY,
        RECENT_HOSTS,
        RETRY_FAILED_UPDATE,
        SET_LIMITS_UPDATE,
        SKIP_HOST_UPDATE,
        AbortHostsInput,
        AbortRequest,
        CampaignHost,
        CampaignInput,
        CampaignResult,
        CampaignStatus,
        CheckHostsInput,
        ClaimInput,
        Deferred,
        DeploymentChange,
        DeploymentsInput,
        HostFinished,
        HostOutcome,
        HostRequestInput,
        HostRequestOutcome,
        HostRequestsInput,
        HostRequestsResult,
        HostSelection,
        HostsPage,
        HostsQuery,
        HostState,
        InFlight,
        Limits,
        LimitsRequest,
        PointInput,
        Progress,
        ReleaseInput,
        SelectHostsInput,
        SkipRequest,
        SweepInput,
    )
    from contracts.models.control import (
        ABORT_UPDATE,
        PAUSE_UPDATE,
        RESUME_UPDATE,
        STATUS_QUERY,
        OperatorAnswer,
        OperatorRequest,
    )
    from contracts.wording import iso_z, plural
    from workflows import kernel
    from workflows.campaign import plan
    from workflows.campaign.progress import Ledger

SELECTING = "selecting"
POINTING = "pointing-deployment"
CANARY = "canary"
RUNNING = "running"
SOAKING = "soaking"
OUTSIDE_WINDOW = "outside-window"
PAUSED = "paused"
HALTED = "halted"
ABORTING = "aborting"
COMPLETED = "completed"
ABORTED = "aborted"

REQUESTS: Final[workflow.ActivityConfig] = {
    "start_to_close_timeout": timedelta(minutes=5),
    "retry_policy": kernel.QUICK_RETRY,
}
CANCELLABLE_REQUESTS: Final[workflow.ActivityConfig] = {
    **REQUESTS,
    "heartbeat_timeout": timedelta(seconds=5),  # how soon an abort reaches the asking activity
}
SWEEP: Final[workflow.ActivityConfig] = {
    "start_to_close_timeout": timedelta(minutes=5),  # 1,000 in flight read in parallel, heartbeating
    "heartbeat_timeout": timedelta(seconds=30),
    "retry_policy": kernel.QUICK_RETRY,
}


@workflow.defn(name="CampaignWorkflow")
class CampaignWorkflow(kernel.Abortable):
    """Drive a fleet to one target through the hosts' entities; see the module docstring."""

    @workflow.init
    def __init__(self, start: CampaignInput) -> None:
        super().__init__()
        self._input = start
        self._name = workflow.info().workflow_id.removeprefix("campaign/")
        self._finished: list[HostFinished] = []  # signalled, absorbed at the runbook's next step
        self._poked = False  # a handler changed something the runbook must look at
        self._alarm: asyncio.Task[None] | None = None
        self._alarm_at: datetime | None = None
        # The first run's defaults, or what the last run carried (`_snapshot`).
        p = start.progress or Progress(limits=start.limits, started_at=workflow.now())
        self.ledger = Ledger(p)
        self.phase = p.phase
        self.paused_by = OperatorRequest(requested_by=p.paused_by) if p.paused_by is not None else None
        self.abort_request = (
            AbortRequest(requested_by=p.aborting, cancel_running=p.cancel_running)
            if p.aborting is not None
            else None
        )
        self._cancel_running: bool = p.cancel_running  # the running operations are still to be aborted
        self._keep_changes: bool = p.keep_changes  # an abort asked to keep the changes outside its hosts
        self._halted_reason: str | None = p.halted_reason
        self._soak_until: datetime | None = p.soak_until
        self._limits: Limits = p.limits
        self._next_sweep: datetime | None = p.next_sweep  # the sweep of in-flight hosts
        self._changes: list[DeploymentChange] = list(p.changes)
        self._claimed: bool = p.claimed
        self._runs: int = p.runs
        self._started_at: datetime | None = p.started_at

    @workflow.run
    async def run(self, start: CampaignInput) -> CampaignResult:
        """Select, claim, check the deployments, canary, batches; see the module docstring."""
        workflow.upsert_search_attributes(
            [names.CAMPAIGN.value_set(self._name), names.OPERATION.value_set(names.CAMPAIGN_OPERATION)]
        )
        try:
            if start.progress is None:
                await self._select()
                await self._claim()
                if start.target.points_deployment:
                    await self._prepare_deployments()
            while True:
                self._absorb()
                await self._verify()
                if self._over():
                    break
                if self._history_is_long():
                    await workflow.wait_condition(workflow.all_handlers_finished)
                    self._absorb()
                    workflow.continue_as_new(self._carried())
                if self.aborting and self._cancel_running:
                    await self._abort_running()
                started = await self._start_hosts()
                if started:
                    continue  # at-target hosts left room: look again before sleeping
                await self._sleep_until_something_happens()
            return await self._finish()
        except (asyncio.CancelledError, CancelledError, ActivityError, ApplicationError) as err:
            # Failed or cancelled: put back what it changed outside its hosts and free its hosts,
            # then end as it would (the world and the Phase true).
            left = await self._wind_down(keep=self._input.policy.keep_changes)
            await self.end_early(err, left)
            raise

    # -- operator control ----------------------------------------------------------------------------
    # Handlers only change the state and wake the runbook, which acts at its next step; no handler
    # awaits, so none races a start. About 4 history events per update.

    @workflow.update(name=PAUSE_UPDATE)
    def pause(self, request: OperatorRequest) -> OperatorAnswer:
        """Start no new host; running ones finish. `resume` goes on."""
        self.paused_by = request
        self._poked = True
        return OperatorAnswer(
            accepted=True,
            message=f"paused: no new host starts; {plural(len(self.ledger.in_flight), 'host')} in flight "
            + ("finishes" if len(self.ledger.in_flight) == 1 else "finish"),
        )

    @pause.validator
    def _validate_pause(self, request: OperatorRequest) -> None:
        self.validate_pause()

    @workflow.update(name=RESUME_UPDATE)
    def resume(self, request: OperatorRequest) -> OperatorAnswer:
        """Go on after a pause or a halt (the failure budget then counts from here)."""
        message = "resumed"
        if self._halted_reason is not None:
            message = f"resumed after the halt ({self._halted_reason}); the failure budget counts from now"
            self._halted_reason = None
            self.ledger.accept_halt()  # hosts waiting for people now are accepted; so is the canary
        self.paused_by = None
        self._poked = True
        return OperatorAnswer(accepted=True, message=message)

    @resume.validator
    def _validate_resume(self, request: OperatorRequest) -> None:
        self.validate_resume(also=self._halted_reason is not None)

    # The kernel's `abort` under the same name (the SDK takes this method), with the campaign's
    # `AbortRequest`: `cancel_running` also aborts the running hosts, and may follow an abort that
    # let them finish. (mypy sees the narrower request as an incompatible override.)
    @workflow.update(name=ABORT_UPDATE)
    def abort(self, request: AbortRequest) -> OperatorAnswer:  # type: ignore[override]
        """Start no new host; let running ones finish, or abort them (`cancel_running`); then put
        back what the campaign changed outside its hosts (unless `keep_changes`)."""
        self.abort_request = request
        self._keep_changes = self._keep_changes or request.keep_changes
        self._cancel_running = request.cancel_running
        self.on_abort()
        return OperatorAnswer(accepted=True, message=self.abort_promise())

    @abort.validator
    def _validate_campaign_abort(self, request: AbortRequest) -> None:
        self.validate_running("abort")
        escalates = request.cancel_running and not self._cancel_running
        if self.abort_request is not None and not escalates:
            raise ValueError(f"already aborting (asked by {self.abort_request.requested_by})")

    def abort_promise(self) -> str:
        fate = "aborting them" if self._cancel_running else "letting them finish"
        promise = f"aborting: no new host starts; {len(self.ledger.in_flight)} in flight, {fate}"
        pointed = [c for c in self._changes if c.pointed_at is not None and c.restored_at is None]
        if pointed:
            verb = "keeping" if self._keep_changes or self._input.policy.keep_changes else "then restoring"
            promise += f"; {verb} " + ", ".join(f"{c.deployment} {c.field}={c.previous}" for c in pointed)
        return promise

    def on_abort(self) -> None:
        self._poked = True

    @workflow.update(name=RETRY_FAILED_UPDATE)
    def retry_failed(self, request: OperatorRequest) -> OperatorAnswer:
        """Put every failed host back at the front of the queue; clears a halt."""
        retried = self.ledger.retry_failed()
        self._halted_reason = None
        self._poked = True
        return OperatorAnswer(accepted=True, message=f"retrying {retried} failed hosts")

    @retry_failed.validator
    def _validate_retry_failed(self, request: OperatorRequest) -> None:
        self.validate_running("retry_failed")
        if self.abort_request is not None:
            raise ValueError(f"the campaign is aborting (asked by {self.abort_request.requested_by})")
        if not self.ledger.failed:
            raise ValueError("no host has failed")

    @workflow.update(name=SKIP_HOST_UPDATE)
    def skip_host(self, request: SkipRequest) -> OperatorAnswer:
        """Leave a host that has not started (or failed) out of the campaign: counted skipped;
        a failure it had stays counted by the budget."""
        reason = f"skipped by {request.requested_by}" + (f": {request.reason}" if request.reason else "")
        self.ledger.skip(request.host_id, reason)
        self._poked = True
        return OperatorAnswer(accepted=True, message=f"{request.host_id} {reason}")

    @skip_host.validator
    def _validate_skip(self, request: SkipRequest) -> None:
        self.validate_running("skip_host")
        if (flight := self.ledger.in_flight.get(request.host_id)) is not None:
            raise ValueError(
                f"host {request.host_id} is in flight ({flight.workflow_id}); abort that operation instead"
            )
        if not self.ledger.waiting(request.host_id):
            raise ValueError(
                f"host {request.host_id} is not waiting in this campaign (done, skipped or unknown)"
            )

    @workflow.update(name=SET_LIMITS_UPDATE)
    def set_limits(self, request: LimitsRequest) -> OperatorAnswer:
        """New limits; the next start obeys them (a new batch size applies from the next batch)."""
        old, self._limits = self._limits, request.limits
        self._poked = True
        return OperatorAnswer(
            accepted=True,
            message=f"limits {plan.describe_limits(old)} -> {plan.describe_limits(request.limits)}",
        )

    @set_limits.validator
    def _validate_limits(self, request: LimitsRequest) -> None:
        self.validate_running("set_limits")

    # -- what the campaign hears and tells -----------------------------------------------------------
    @workflow.signal(name=HOST_FINISHED_SIGNAL)
    def host_finished(self, finished: HostFinished) -> None:
        """A host's entity saw this campaign's operation end (handled in the runbook's next step)."""
        self._finished.append(finished)

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> CampaignStatus:
        """Counts, the newest hosts of each outcome by name, batch, window, budget, changes."""
        now = workflow.now()
        ledger = self.ledger
        windows = self._input.windows
        return CampaignStatus(
            name=self._name,
            target=self._input.target.describe(),
            phase=self.phase,
            total=ledger.total,
            done=ledger.done,
            already_at_target=ledger.at_target,
            in_flight=tuple(sorted(k for k, f in ledger.in_flight.items() if not f.awaiting_approval)),
            awaiting_approval=tuple(sorted(k for k, f in ledger.in_flight.items() if f.awaiting_approval)),
            failed=ledger.failed,
            failures=tuple(ledger.recent_failed),
            skipped=ledger.skipped,
            skipped_hosts=tuple(ledger.recent_skipped),
            deferred=tuple(list(ledger.deferred)[:RECENT_HOSTS]),
            remaining=ledger.remaining(),
            batch=ledger.batch,
            canary_passed=ledger.canary_passed,
            window_open=plan.window_open(windows, now),
            next_window=plan.next_window_open(windows, now) if windows else None,
            soak_until=self._soak_until,
            budget=plan.describe_budget(self._input.budget, ledger.budget_failures(), ledger.total),
            halted_reason=self._halted_reason,
            paused_by=self.paused_by.requested_by if self.paused_by else None,
            aborting=self.abort_request.requested_by if self.abort_request else None,
            limits=self._limits,
            runs=self._runs,
            needs_operator=tuple(ledger.needs_operator.values()),
            aborted=ledger.aborted,
            aborted_hosts=tuple(ledger.recent_aborted),
            verifying=len(ledger.verifying),
            changes=tuple(self._changes),
        )

    @workflow.query(name=HOSTS_QUERY)
    def hosts(self, page: HostsQuery) -> HostsPage:
        """Every host's outcome, `page.limit` at a time (at most HOSTS_PAGE_MAX): never the whole
        fleet in one payload. A reason is kept for the newest RECENT_HOSTS of each outcome and for
        the hosts in flight or put off; an operation's own failure is on its workflow."""
        ledger = self.ledger
        words = HostState.WORDS
        named = (*ledger.recent_failed, *ledger.recent_skipped, *ledger.recent_aborted)
        reasons = {f.host_id: f.reason for f in (*named, *ledger.needs_operator.values())}
        reasons.update({h: d.reason for h, d in ledger.deferred.items()})
        indexes = [
            i for i, c in enumerate(ledger.states) if page.outcome is None or words.get(c) == page.outcome
        ]
        chosen = indexes[page.offset : page.offset + page.limit]
        operation = self._input.target.spec.request  # its operation's workflow id: `<operation>/<host>`
        rows = []
        for index in chosen:
            host_id, state = ledger.roster.ids[index], ledger.states[index]
            flight = ledger.in_flight.get(host_id)
            asked = state in (HostState.IN_FLIGHT, HostState.VERIFYING, HostState.DONE, HostState.FAILED,
                              HostState.ABORTED)  # fmt: skip
            workflow_id = flight.workflow_id if flight else ""
            if not workflow_id and asked:
                workflow_id = names.host_operation_workflow_id(operation, host_id)
            rows.append(
                HostOutcome(
                    host_id=host_id,
                    outcome=words[state],
                    workflow_id=workflow_id,
                    reason=reasons.get(host_id, ""),
                )  # fmt: skip
            )
        end = page.offset + len(chosen)
        return HostsPage(
            hosts=tuple(rows), next_offset=end if end < len(indexes) else None, total=len(indexes)
        )

    # -- the runbook's steps -------------------------------------------------------------------------
    async def _select(self) -> None:
        self._show_phase(SELECTING, self._input.selection.describe())
        target = self._input.target
        selected = await workflow.execute_activity(
            activity_api.select_campaign_hosts,
            SelectHostsInput(
                selection=self._input.selection,
                target=target,
                skip_assigned=self._input.policy.assigned == "skip",
            ),
            # The inventory and one DPUNode list: retried while the API server answers 5xx, 10 minutes
            # at most (a failure then changed nothing).
            **kernel.options(
                kernel.bounded(kernel.KUBE_READ, 600), f"select {self._input.selection.describe()}"
            ),
        )
        ledger = self.ledger
        ledger.load(selected.roster)
        for group in selected.left_out:
            for host_id in group.host_ids:
                ledger.skip(host_id, group.reason)
        canary = min(self._input.canary, ledger.not_started())
        ledger.batch_left = canary
        ledger.canary_passed = canary == 0
        ledger.batch = 0 if canary else 1
        if ledger.canary_passed:
            ledger.batch_left = self._limits.batch_size

    async def _claim(self) -> None:
        """One campaign per host: claim the hosts still to run; those another running campaign
        holds are skipped, naming it."""
        ledger = self.ledger
        ids = tuple(h for h in ledger.roster.ids if ledger.state(h) == HostState.PENDING)
        if not ids:
            return
        self._show_phase(SELECTING, f"claiming {len(ids)} hosts")
        self._claimed = True  # before the call: a claim made by an attempt is released whatever follows
        claimed = await workflow.execute_activity(
            activity_api.claim_campaign_hosts,
            ClaimInput(campaign_workflow_id=workflow.info().workflow_id, host_ids=ids),
            **kernel.options(kernel.KUBE_WRITE, f"claim {len(ids)} hosts"),
        )
        for group in claimed.held:
            for host_id in group.host_ids:
                ledger.skip(host_id, group.reason)
        if not ledger.canary_passed:
            ledger.batch_left = min(ledger.batch_left, ledger.not_started())
            if ledger.batch_left == 0:
                ledger.canary_passed, ledger.batch, ledger.batch_left = True, 1, self._limits.batch_size

    async def _prepare_deployments(self) -> None:
        """A BFB or flavor campaign: check the DPUDeployments before anything changes (refused:
        InvalidInput naming the strategy or the hosts outside), record their current values, and
        make the canary the hosts of the canary deployment."""
        target = self._input.target
        self._show_phase(SELECTING, f"checking DPUDeployment {target.deployment}")
        ledger = self.ledger
        prepared = await workflow.execute_activity(
            activity_api.prepare_campaign_deployments,
            DeploymentsInput(target=target, host_ids=ledger.roster.ids),
            **kernel.options(kernel.KUBE_READ, f"check the DPUDeployments of {target.describe()}"),
        )
        self._changes = list(prepared.changes)
        if ledger.canary_passed:
            return
        canary = [h for h in prepared.canary_hosts if ledger.state(h) == HostState.PENDING]
        for host_id in canary:
            ledger.put_first(host_id)  # the canary's hosts go first
        ledger.batch_left = len(canary)
        if not canary:
            ledger.canary_passed, ledger.batch, ledger.batch_left = True, 1, self._limits.batch_size

    def _canary_only(self) -> set[str] | None:
        """While a deployment campaign's canary runs, only the canary deployment's hosts start."""
        if self.ledger.canary_passed or not any(c.role == "canary" for c in self._changes):
            return None
        return {h for h in self.ledger.roster.ids if self.ledger.state(h) == HostState.REQUEUED} | set(
            self.ledger.canary_hosts
        )

    async def _point_due(self) -> None:
        """Point what should be pointed now (called inside an open window, not halted or
        paused): the canary deployment while the canary runs, the fleet's once it passed."""
        for index, change in enumerate(self._changes):
            due = change.role == "canary" or self.ledger.canary_passed
            if due and (change.pointed_at is None or change.restored_at is not None):
                await self._point(index, restore=False)

    async def _point(self, index: int, *, restore: bool) -> None:
        change = self._changes[index]
        verb = "restore" if restore else "point"
        value = change.previous if restore else change.value
        self._show_phase(POINTING, f"DPUDeployment {change.deployment}: {change.field} -> {value}")
        self._changes[index] = await workflow.execute_activity(
            activity_api.point_campaign_deployment,
            PointInput(change=change, restore=restore),
            **kernel.options(kernel.KUBE_WRITE, f"{verb} {change.deployment} {change.field}={value}"),
        )

    async def _restore(self, *, roles: tuple[str, ...], keep: bool) -> list[str]:
        """Put back the deployments of `roles` the campaign pointed (unless `keep`); what it did."""
        done = []
        for index, change in enumerate(self._changes):
            if change.role not in roles or change.pointed_at is None or change.restored_at is not None:
                continue
            if keep:
                self._changes[index] = change.model_copy(update={"note": "kept as pointed (keep_changes)"})
                done.append(f"kept {change.deployment} {change.field}={change.value}")
                continue
            await self._point(index, restore=True)
            done.append(f"restored {change.deployment} {change.field}={change.previous}")
        return done

    async def _release(self) -> None:
        if not self._claimed:
            return
        await workflow.execute_activity(
            activity_api.release_campaign_hosts,
            ReleaseInput(campaign_workflow_id=workflow.info().workflow_id),
            **kernel.options(kernel.KUBE_WRITE, "release the campaign's hosts"),
        )
        self._claimed = False

    async def _wind_down(self, *, keep: bool) -> str:
        """A run that ends early (failed, cancelled): restore its changes, release its hosts; the
        words for the final phase."""
        done = await self._restore(roles=("canary", "fleet"), keep=keep)
        await self._release()
        words = [*done, f"{len(self.ledger.in_flight)} host operations left running"]
        return "; ".join(words)

    def _blocked(self) -> tuple[str, str] | None:
        """Why no new host may start now, as (phase, details); None: they may."""
        now = workflow.now()
        in_flight = len(self.ledger.in_flight)
        if self.abort_request is not None:
            return ABORTING, f"asked by {self.abort_request.requested_by}; {in_flight} in flight"
        if self._halted_reason is not None:
            return HALTED, f"{self._halted_reason}; waiting for resume, retry_failed or abort"
        if self.paused_by is not None:
            return PAUSED, f"by {self.paused_by.requested_by}; {in_flight} in flight"
        if self._soak_until is not None and now < self._soak_until:
            return SOAKING, f"batch {self.ledger.batch} starts at {iso_z(self._soak_until)}"
        if not plan.window_open(self._input.windows, now):
            opens = plan.next_window_open(self._input.windows, now)
            return OUTSIDE_WINDOW, f"next window opens {iso_z(opens, none='never')}"
        return None

    async def _start_hosts(self) -> bool:
        """Start what the batch, the limits and the window allow; True if any host left the queue."""
        ledger = self.ledger
        ledger.requeue_due(workflow.now())
        self._end_batch_if_done()
        if self._halted_reason is not None and self._failed_canary_pointed():
            await self._restore(roles=("canary",), keep=self._input.policy.keep_changes)
        blocked = self._blocked()
        if blocked is not None:
            self._show_phase(*blocked)
            return False
        self._soak_until = None
        if not ledger.has_pending():
            self._show_running()
            return False
        await self._point_due()
        only = self._canary_only()
        pending = (h for h in ledger.pending() if only is None or h.host_id in only)
        chosen = plan.pick_starts(
            pending, (f.host for f in ledger.in_flight.values()), self._limits, ledger.batch_left
        )
        self._show_running()
        if not chosen:
            return False
        at_target, _ = await self._check(chosen)
        for host in chosen:
            if host.host_id in at_target:
                ledger.reached(host.host_id)
        to_ask = [h for h in chosen if h.host_id not in at_target]
        if to_ask:
            await self._request(to_ask)
        # Look again at once: hosts at target, skipped (assigned), refused or put off leave room
        # and wake nothing (a round of only skipped hosts would otherwise sleep forever).
        return True

    def _failed_canary_pointed(self) -> bool:
        return not self.ledger.canary_passed and any(
            c.role == "canary" and c.pointed_at is not None and c.restored_at is None and not c.note
            for c in self._changes
        )

    async def _check(self, hosts: list[CampaignHost] | list[str]) -> tuple[set[str], dict[str, str]]:
        """The hosts already at the target (DPF's DPUs, or each DPU's BMC for firmware), and what
        the others read."""
        reads = self._input.target.spec.at_target  # contracts/models/campaign_target.py
        ids = tuple(h if isinstance(h, str) else h.host_id for h in hosts)
        if reads == "never":
            return set(), {}  # e.g. a reprovision is never done before
        preset = kernel.BMC_READ if reads == "bmc" else kernel.KUBE_READ
        checked = await workflow.execute_activity(
            activity_api.check_campaign_hosts,
            CheckHostsInput(target=self._input.target, host_ids=ids),
            **kernel.options(
                preset, f"check {plural(len(ids), 'host')} against {self._input.target.describe()}"
            ),
        )
        return set(checked.at_target), {r.host_id: r.read for r in checked.readings}

    async def _verify(self) -> None:
        """A completed operation counts done only once the host reads at the target (BFB and
        flavor from DPF, firmware from the DPUs' BMCs); otherwise it fails with what it read."""
        ledger = self.ledger
        if not ledger.verifying:
            return
        hosts = list(ledger.verifying)
        at_target, readings = await self._check(hosts)
        target = self._input.target.describe()
        for host_id in hosts:
            if ledger.verified(host_id, host_id in at_target, readings.get(host_id, "nothing"), target):
                self._check_budget()

    async def _request(self, hosts: list[CampaignHost]) -> None:
        ledger = self.ledger
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
            if ledger.state(host.host_id) not in (HostState.PENDING, HostState.REQUEUED):
                continue  # skipped by an operator while the request was out
            if outcome.outcome in ("started", "awaiting-approval"):
                ledger.start(
                    InFlight(
                        host=host,
                        workflow_id=outcome.workflow_id,
                        started_at=now,
                        awaiting_approval=outcome.outcome == "awaiting-approval",
                    )
                )
            elif outcome.outcome == "busy":
                retry_at = now + timedelta(seconds=self._input.policy.busy_retry_seconds)
                ledger.defer(Deferred(host_id=host.host_id, retry_at=retry_at, reason=outcome.message))
            elif outcome.outcome == "not-asked":
                pass  # aborting: reported as not started
            elif outcome.outcome == "unanswered":  # its entity may still take the request later
                reason = f"asked, but no answer before the abort ({outcome.message}): check {host.host_id}"
                ledger.skip(host.host_id, reason)
            elif outcome.outcome == "assigned":
                ledger.skip(host.host_id, f"instance assigned: {outcome.message}")
            else:
                ledger.fail(host.host_id, f"refused: {outcome.message}")
                self._check_budget()
        if ledger.in_flight and self._next_sweep is None:
            self._next_sweep = now + timedelta(seconds=self._input.policy.sweep_seconds)

    async def _ask_entities(self, requests: HostRequestsInput) -> HostRequestsResult:
        """The request activity; an abort cancels it, so the campaign stops asking at once
        (within a heartbeat) instead of after every host of the round was asked."""
        asked = plural(len(requests.requests), "host")
        summary = f"ask the entities of {asked} for {self._input.target.describe()}"
        asking = kernel.start_cancellable(
            activity_api.request_campaign_hosts, requests, kernel.options(CANCELLABLE_REQUESTS, summary)
        )
        await kernel.await_unless(asking, lambda: self.aborting)
        try:
            return await asking  # cancelled after an attempt ran: it answers what it asked
        except ActivityError as err:
            if not isinstance(err.cause, CancelledError):
                raise
            # Cancelled before an attempt ran: no host was asked.
            return HostRequestsResult(
                outcomes=tuple(
                    HostRequestOutcome(host_id=r.host_id, outcome="not-asked") for r in requests.requests
                )
            )

    def _end_batch_if_done(self) -> None:
        """A batch ends when all its hosts started and finished (or nothing is left to start).
        The canary passes only with at least one host done and none failed: a canary whose
        hosts were all skipped or already at the target proved nothing, so the next pending host
        joins it (one at a time) until one is done, or none is left."""
        ledger = self.ledger
        if ledger.in_flight or ledger.verifying:
            return
        nothing_left = not ledger.has_pending() and not ledger.deferred
        if ledger.batch_left > 0 and not nothing_left:
            return
        if not ledger.canary_passed:
            verdict = ledger.canary_verdict()
            if verdict == "failed":
                if self._halted_reason is None:
                    failed = [f.host_id for f in ledger.recent_failed if f.host_id in ledger.canary_hosts]
                    self._halt(f"the canary failed on {', '.join(failed) or 'its hosts'}")
                return
            if verdict == "empty" and not nothing_left:
                ledger.batch_left = 1  # nothing proven yet: one more canary host
                return
            ledger.canary_passed = True
        if nothing_left:
            return
        ledger.batch += 1
        ledger.batch_left = self._limits.batch_size
        if self._input.soak_seconds > 0 and ledger.batch > 1:
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
        ledger = self.ledger
        now = workflow.now()
        times = [d.retry_at for d in ledger.deferred.values()]
        if self._soak_until is not None:
            times.append(self._soak_until)
        if self._input.windows and (ledger.has_pending() or ledger.deferred):
            change = plan.next_window_change(self._input.windows, now)
            if change is not None:
                times.append(change)
        if ledger.in_flight and self._next_sweep is not None:
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
        ledger = self.ledger
        self._next_sweep = workflow.now() + timedelta(seconds=self._input.policy.sweep_seconds)
        swept = await workflow.execute_activity(
            activity_api.sweep_campaign_hosts,
            SweepInput(in_flight=tuple(ledger.in_flight.values())),
            **kernel.options(SWEEP, f"sweep {len(ledger.in_flight)} in-flight hosts"),
        )
        self._finished.extend(swept.finished)
        ledger.needs_operator = {f.host_id: f for f in swept.needs_operator if f.host_id in ledger.in_flight}
        self._check_budget()

    async def _abort_running(self) -> None:
        """`abort` with `cancel_running`: abort the running operations and withdraw the requests
        awaiting approval (their entities end the wait: nothing is left pending). Each stays in
        flight until its entity says how it ended, and counts as aborted (or skipped, withdrawn
        unstarted), never as a failure."""
        self._cancel_running = False
        in_flight = self.ledger.in_flight.values()
        running = [f for f in in_flight if not f.awaiting_approval]
        waiting = [f for f in in_flight if f.awaiting_approval]
        self.ledger.abort_sent.update(f.workflow_id for f in (*running, *waiting))
        if running or waiting:
            summary = f"abort {len(running)} running host operations"
            if waiting:
                summary += f", withdraw {len(waiting)} awaiting approval"
            await workflow.execute_activity(
                activity_api.abort_campaign_hosts,
                AbortHostsInput(
                    workflow_ids=tuple(f.workflow_id for f in running),
                    requested_by=self.abort_request.requested_by if self.abort_request else "operator",
                    reason=f"campaign {self._name} aborted",
                    withdraw=tuple(waiting),
                ),
                **kernel.options(REQUESTS, summary),
            )

    # -- outcomes, the budget, the end -----------------------------------------------------------
    def _absorb(self) -> None:
        """Count the operations that ended (signalled or swept); a failure may spend the budget."""
        finished, self._finished = self._finished, []
        verify = self._input.target.spec.at_target != "never"
        for event in finished:
            if self.ledger.absorb(event, verify=verify):
                self._check_budget()
        if not self.ledger.in_flight:
            self._next_sweep = None

    def _check_budget(self) -> None:
        failed, selected = self.ledger.budget_failures(), self.ledger.total
        if self._halted_reason is None and plan.budget_exceeded(self._input.budget, failed, selected):
            self._halt(f"failure budget spent: {plan.describe_budget(self._input.budget, failed, selected)}")

    def _halt(self, reason: str) -> None:
        self._halted_reason = reason
        self._show_phase(HALTED, f"{reason}; waiting for resume, retry_failed or abort")
        workflow.logger.warning("campaign %s halted: %s", self._name, reason)

    def _over(self) -> bool:
        ledger = self.ledger
        if self.aborting:
            return not ledger.in_flight and not ledger.verifying
        return not ledger.unfinished() and self._halted_reason is None

    async def _finish(self) -> CampaignResult:
        ledger = self.ledger
        outcome = ABORTED if self.aborting else COMPLETED
        if self.aborting:
            # Hosts an abort left unstarted are skipped; its changes outside the hosts put back.
            ledger.abort_unstarted()
            keep = self._input.policy.keep_changes or self._keep_changes
            await self._restore(roles=("canary", "fleet"), keep=keep)
        await self._release()
        self._show_phase(outcome, ledger.counts())
        return CampaignResult(
            name=self._name,
            outcome=outcome,
            total=ledger.total,
            done=ledger.done,
            already_at_target=ledger.at_target,
            failed=ledger.failed,
            skipped=ledger.skipped,
            aborted=ledger.aborted,
            failures=tuple(ledger.recent_failed),
            skipped_hosts=tuple(ledger.recent_skipped),
            aborted_hosts=tuple(ledger.recent_aborted),
            runs=self._runs,
            finished_at=workflow.now(),
            changes=tuple(self._changes),
        )

    # -- visibility ------------------------------------------------------------------------------------
    def _show_phase(self, phase: str, details: str) -> None:
        """The runbook shows its phase at every step: a new phase is entered (one `Phase` upsert
        and one log line), the same one only gets new details."""
        if phase != self.phase:
            self.enter(phase, details)
        else:
            self.show(details)

    def _show_running(self) -> None:
        phase = CANARY if not self.ledger.canary_passed else RUNNING
        self._show_phase(phase, f"batch {self.ledger.batch}: {self.ledger.counts()}")

    # -- continue-as-new ------------------------------------------------------------------------------
    def _history_is_long(self) -> bool:
        info = workflow.info()
        return info.is_continue_as_new_suggested() or (
            info.get_current_history_length() > self._input.policy.max_history_events
        )

    def _carried(self) -> CampaignInput:
        """The next run's input: this one's, with the progress, and a listed selection not carried
        twice (the roster has its hosts)."""
        return self._input.model_copy(
            update={"progress": self._snapshot(), "selection": HostSelection.made(self._input.selection)}
        )

    def _snapshot(self) -> Progress:
        return self.ledger.snapshot(
            phase=self.phase,
            soak_until=self._soak_until,
            halted_reason=self._halted_reason,
            paused_by=self.paused_by.requested_by if self.paused_by else None,
            aborting=self.abort_request.requested_by if self.abort_request else None,
            cancel_running=self._cancel_running,
            keep_changes=self._keep_changes,
            changes=tuple(self._changes),
            claimed=self._claimed,
            runs=self._runs + 1,
            started_at=self._started_at,
            limits=self._limits,
            next_sweep=self._next_sweep,
        )
