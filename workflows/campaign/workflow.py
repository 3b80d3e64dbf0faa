"""CampaignWorkflow (`campaign/<name>`): bring many hosts to one target, paced and guarded.

The runbook, top to bottom in `run`:

1. Read and admit (admission.py, the same decision `metalflow campaign plan` and `start` make):
   select the hosts (an unknown host or an empty selection fails the campaign before it touches
   anything); claim them and, for a BFB or flavor campaign, its DPUDeployments
   (workflows/campaign_claims/workflow.py: one campaign per host and per deployment; what a
   campaign that no longer runs left changed is taken over); read the deployments; then admit:
   hosts left out are skipped with why (unknown to DPF, assigned, held by a running campaign),
   or the campaign is refused, naming why. The changes it will make are recorded in the
   registry before the first is made, and changes taken over are put back first. Every ending
   releases the claims; a host that ended here (done, at the target, skipped) is released at the
   next step, so another campaign may take it (not in a BFB or flavor campaign: its deployment
   may still select the host, which it holds until the deployment is put back, at its end).
2. The canary, then batches, a soak between batches; hosts start under the limits and only
   inside a maintenance window. Hosts already at the target are counted done untouched. The
   canary runs on a deployment of its own, pointed when it starts; the fleet's is pointed once
   the canary passed (a host done, none failed), inside a window; a canary that cannot prove
   anything stops the campaign, saying why. An abort, a cancel, a failure, a stop or a failed
   canary puts the deployments back unless `keep_changes`.
3. Each host is asked of its entity `host/<id>` (an update-with-start carrying the campaign's
   request id for it), never around it: the one-owner rule and approvals hold. A busy host is
   asked again later; an assigned one is skipped or waits for its approval. The entity signals
   `host_finished`; a sweep reads the in-flight hosts' operations, so a lost signal strands
   nothing. A round of only skipped or at-target hosts looks again at once.
4. A completed operation counts done only once the host reads at the target; else it fails with
   what it read. The failure budget, spent, halts: nothing new starts until an operator decides
   (`resume`, `retry_failed`, `abort`); `pause`, `skip_host`, `set_limits` too, each with a
   validator that refuses what does not apply now. The campaign's `abort` takes `AbortRequest`
   (`cancel_running`, `keep_changes`) over the kernel's validator and acceptance; the running
   operations it aborts refuse when their DPUs already install, and finish their reboot round.

What the campaign knows and decides is its state, `CampaignState` (state.py), carried whole over
continue-as-new (past `policy.max_history_events`): each step of the loop is the state's
`next_step`, which the runbook carries out; what it waits for, `liveness`, is in its status;
what it shows, views.py; what it holds and changes outside its hosts (the reads and claims of
step 1, the deployments it points and puts back, the release), the runbook's base, footprint.py.
Handlers only change the state and wake the runbook, which acts at its next step. Every activity
goes through the kernel's `call`, none abortable (an abort only stops new starts) but the round
of asks, which an abort cancels and whose answers still count. Bounded at 10,000 hosts: fan-out
at most `max_in_flight`, one alarm at a time (never a timer per host), every host's outcome read
page by page (`hosts`); figures in bench/README.md.
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
        DEFERRAL_QUERY,
        HOST_FINISHED_SIGNAL,
        HOSTS_QUERY,
        RETRY_FAILED_UPDATE,
        SET_LIMITS_UPDATE,
        SITE_BLOCKED_UPDATE,
        SKIP_HOST_UPDATE,
        AbortHostsInput,
        AbortHostsResult,
        AbortRequest,
        CampaignHost,
        CampaignInput,
        CampaignResult,
        CampaignStatus,
        CheckHostsInput,
        Deferred,
        HostFinished,
        HostRequestsInput,
        HostRequestsResult,
        HostSelection,
        HostsPage,
        HostsQuery,
        LimitsRequest,
        SiteBlockedRequest,
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
    from contracts.models.operation_policy import RebootMethod
    from contracts.wording import iso_z, plural
    from workflows import kernel
    from workflows.campaign import views
    from workflows.campaign.footprint import Footprint
    from workflows.campaign.state import HALTED, STOPPED, CampaignState, Step

REQUESTS: Final[workflow.ActivityConfig] = {
    "start_to_close_timeout": timedelta(minutes=5),
    "heartbeat_timeout": kernel.CALL_HEARTBEAT,
    "retry_policy": kernel.QUICK_RETRY,
}
CANCELLABLE_REQUESTS: Final[workflow.ActivityConfig] = {
    **REQUESTS,
    "heartbeat_timeout": timedelta(seconds=5),  # how soon an abort reaches the asking activity
}
SWEEP: Final[workflow.ActivityConfig] = {
    "start_to_close_timeout": timedelta(minutes=5),  # 1,000 in flight read in parallel, heartbeating
    "heartbeat_timeout": kernel.CALL_HEARTBEAT,
    "retry_policy": kernel.QUICK_RETRY,
}


@workflow.defn(name="CampaignWorkflow")
class CampaignWorkflow(Footprint):
    """Drive a fleet to one target through the hosts' entities; see the module docstring."""

    ENDED = (*kernel.Runbook.ENDED, STOPPED)

    @workflow.init
    def __init__(self, start: CampaignInput) -> None:
        self.state = CampaignState()  # the kernel's starting phase, pause and abort land here ...
        super().__init__()
        if start.progress is None:  # ... and are replaced by the first run's, or the carried ones
            info = workflow.info()
            asker = f"{info.workflow_id}@{info.first_execution_run_id}"
            self.state = CampaignState.first(asker=asker, limits=start.limits, now=workflow.now())
        else:
            self.state = CampaignState.carried(start.progress)
        self._input = start.model_copy(update={"progress": None})  # what was asked; the state is apart
        self._name = workflow.info().workflow_id.removeprefix("campaign/")
        self._poked = False  # a handler changed something the runbook must look at
        self._alarm: asyncio.Task[None] | None = None
        self._alarm_at: datetime | None = None

    @workflow.run
    async def run(self, start: CampaignInput) -> CampaignResult:
        """Select, claim, check the deployments, canary, batches; see the module docstring."""
        workflow.upsert_search_attributes(
            [names.CAMPAIGN.value_set(self._name), names.OPERATION.value_set(names.CAMPAIGN_OPERATION)]
        )
        return await self.to_the_end(lambda: self._runbook(first_run=start.progress is None), self._wind_down)

    async def _runbook(self, *, first_run: bool) -> CampaignResult:
        if first_run:
            await self._admit()
        while True:
            self._absorb()
            await self._verify()
            await self._release_ended()
            step = self.state.next_step(workflow.now(), self._input)
            self._halted(step.halt)
            if step.over:
                break
            await self._continue_as_new_if_long()
            if self.aborting and self.state.cancel_running:
                await self._abort_running()
            if await self._take(step):
                continue  # at-target hosts left room: look again before sleeping
            await self._sleep_until_something_happens()
        return await self._finish()

    # -- the kernel's phase, pause and abort are facts of the state (carried with it) ------------
    @property
    def phase(self) -> str:
        return self.state.phase

    @phase.setter
    def phase(self, value: str) -> None:
        self.state.phase = value

    @property
    def paused_by(self) -> OperatorRequest | None:
        return self.state.paused_by

    @paused_by.setter
    def paused_by(self, value: OperatorRequest | None) -> None:
        self.state.paused_by = value

    @property
    def abort_request(self) -> OperatorRequest | None:
        return self.state.abort_request

    @abort_request.setter
    def abort_request(self, value: OperatorRequest | None) -> None:
        self.state.abort_request = value

    # -- operator control: handlers change the state and wake the runbook; none awaits ----------------

    def _accepted(self, message: str) -> OperatorAnswer:
        self._poked = True
        return OperatorAnswer(accepted=True, message=message)

    @workflow.update(name=PAUSE_UPDATE)
    def pause(self, request: OperatorRequest) -> OperatorAnswer:
        """Start no new host; running ones finish. `resume` goes on."""
        return self._accepted(self.state.pause(request))

    @pause.validator
    def _validate_pause(self, request: OperatorRequest) -> None:
        self.validate_pause()

    @workflow.update(name=RESUME_UPDATE)
    def resume(self, request: OperatorRequest) -> OperatorAnswer:
        """Go on after a pause or a halt (the failure budget then counts from here)."""
        return self._accepted(self.state.resume())

    @resume.validator
    def _validate_resume(self, request: OperatorRequest) -> None:
        self.validate_resume(also=self.state.halted_reason is not None)
        if (refusal := self.state.resume_refusal()) is not None:
            raise ValueError(refusal)

    @workflow.update(name=ABORT_UPDATE)
    def abort(self, request: AbortRequest) -> OperatorAnswer:
        """Start no new host; let running ones finish, or abort them (`cancel_running`); then put
        back what the campaign changed outside its hosts (unless `keep_changes`)."""
        self.state.take_abort(request)
        return self.accept_abort(request)

    @abort.validator
    def _validate_abort(self, request: AbortRequest) -> None:
        # Once aborting, only an abort that also aborts the running hosts is taken.
        self.validate_abort(again=self.state.abort_escalates(request))

    def abort_promise(self) -> str:
        return self.state.abort_promise(keep_changes=self._input.policy.keep_changes)

    def on_abort(self) -> None:
        self._poked = True

    @workflow.update(name=RETRY_FAILED_UPDATE)
    def retry_failed(self, request: OperatorRequest) -> OperatorAnswer:
        """Put every failed host back at the front of the queue; clears a halt."""
        return self._accepted(self.state.retry_failed())

    @retry_failed.validator
    def _validate_retry_failed(self, request: OperatorRequest) -> None:
        self.validate_running("retry_failed")
        if (refusal := self.state.retry_refusal()) is not None:
            raise ValueError(refusal)

    @workflow.update(name=SKIP_HOST_UPDATE)
    def skip_host(self, request: SkipRequest) -> OperatorAnswer:
        """Leave a host that has not started (or failed) out of the campaign: counted skipped;
        a failure it had stays counted by the budget."""
        return self._accepted(self.state.skip_host(request.host_id, request))

    @skip_host.validator
    def _validate_skip(self, request: SkipRequest) -> None:
        self.validate_running("skip_host")
        whole = self._input.target.whole_deployment
        if (refusal := self.state.skip_refusal(request.host_id, whole_deployment=whole)) is not None:
            raise ValueError(refusal)

    @workflow.update(name=SET_LIMITS_UPDATE)
    def set_limits(self, request: LimitsRequest) -> OperatorAnswer:
        """New limits; the next start obeys them (a new batch size applies from the next batch)."""
        return self._accepted(self.state.set_limits(request.limits))

    @set_limits.validator
    def _validate_limits(self, request: LimitsRequest) -> None:
        self.validate_running("set_limits")

    @workflow.update(name=SITE_BLOCKED_UPDATE)
    def site_blocked(self, request: SiteBlockedRequest) -> OperatorAnswer:
        """A newer `metalflow site check`: the hosts it blocks this campaign's operation on that
        have not started are skipped with its reason (the admission's rule, held while it runs)."""
        target, policy = self._input.target, self._input.host_policy
        manual = policy is not None and policy.reboot_method == RebootMethod.MANUAL
        groups = request.groups_for(target.spec.request, manual_reboot=manual)
        return self._accepted(self.state.site_blocked(groups, whole_deployment=target.whole_deployment))

    @site_blocked.validator
    def _validate_site_blocked(self, request: SiteBlockedRequest) -> None:
        self.validate_running("site_blocked")

    # -- what the campaign hears and tells ---------------------------------------------------------
    @workflow.signal(name=HOST_FINISHED_SIGNAL)
    def host_finished(self, finished: HostFinished) -> None:
        """A host's entity saw this campaign's operation end (counted at the runbook's next step)."""
        self.state.heard.append(finished)

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> CampaignStatus:
        """Counts, the newest hosts of each outcome by name, batch, window, budget, changes."""
        return views.status(self.state, self._name, self._input, workflow.now())

    @workflow.query(name=HOSTS_QUERY)
    def hosts(self, page: HostsQuery) -> HostsPage:
        """Every host's outcome, a page at a time: never the whole fleet in one payload."""
        return views.hosts_page(self.state, page, self._input)

    @workflow.query(name=DEFERRAL_QUERY)
    def deferral(self, host_id: str) -> tuple[Deferred, ...]:
        """Whether this campaign put `host_id` off: when it asks again and why (`host status`)."""
        return views.deferral(self.state, host_id)

    # -- a step of the loop --------------------------------------------------------------------------
    async def _take(self, step: Step) -> bool:
        """Carry out the state's step: put back, show, point, then start (read at the target
        first, ask the others' entities); True if any host left the queue."""
        for index in step.restore:
            await self._point(index, restore=True)
        self._show_phase(*step.phase)
        for index in step.point:
            await self._point(index, restore=False)
            if self.state.point_refusal(index) is not None:
                return True  # someone else's value found: halted, no host starts on it
        if not step.start:
            return False
        self._show_phase(*self.state.running())
        chosen = step.start
        at_target, _ = await self._check([h.host_id for h in chosen])
        for host in chosen:
            if host.host_id in at_target:
                self.state.found_at_target(host.host_id)
        to_ask = [h for h in chosen if h.host_id not in at_target]
        if to_ask:
            await self._request(to_ask)
        # Look again at once: hosts at target, skipped (assigned), refused or put off leave room
        # and wake nothing (a round of only skipped hosts would otherwise sleep forever).
        return True

    async def _check(self, host_ids: list[str]) -> tuple[set[str], dict[str, str]]:
        """The hosts already at the target (DPF's DPUs, or each DPU's BMC for firmware), and what
        the others read."""
        target = self._input.target
        if target.spec.at_target == "never":
            return set(), {}  # e.g. a reprovision is never done before
        preset = kernel.BMC_READ if target.spec.at_target == "bmc" else kernel.KUBE_READ
        checked = await self.call(
            activity_api.check_campaign_hosts,
            CheckHostsInput(target=target, host_ids=tuple(host_ids)),
            kernel.options(preset, f"check {plural(len(host_ids), 'host')} against {target.describe()}"),
            abortable=False,
        )
        return set(checked.at_target), {r.host_id: r.read for r in checked.readings}

    async def _verify(self) -> None:
        """Completed hosts count done once they read at the target, else fail with what they read."""
        hosts = list(self.state.verifying)
        if not hosts:
            return
        at_target, readings = await self._check(hosts)
        self._halted(self.state.read_back(hosts, at_target, readings, self._input))

    async def _request(self, hosts: list[CampaignHost]) -> None:
        requests = self.state.asks(
            hosts, self._input, name=self._name, workflow_id=workflow.info().workflow_id
        )
        answered = await self._ask_entities(HostRequestsInput(requests=requests))
        self._halted(self.state.answered(answered.outcomes, hosts, now=workflow.now(), start=self._input))

    async def _ask_entities(self, requests: HostRequestsInput) -> HostRequestsResult:
        """The request activity; an abort cancels it, so the campaign stops asking at once
        (within a heartbeat) instead of after every host of the round was asked. Not `call`: an
        abort does not end the round, whose answers (what was asked) the campaign still counts."""
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
            return HostRequestsResult.none_asked(requests)  # cancelled before an attempt ran

    async def _sleep_until_something_happens(self) -> None:
        """One alarm at a time (never a timer per host): the soak end, the window's next edge, a
        busy host's retry, or the sweep of in-flight hosts; or a signal or an update."""
        if self.state.sweep_due(workflow.now()):
            await self._sweep()
            return
        self._set_alarm(self.state.wake(workflow.now(), self._input.windows))
        alarm = self._alarm
        # Not abortable: an abort wakes it (`on_abort`), and the campaign ends once nothing runs.
        await self.wait(
            lambda: bool(self.state.heard) or self._poked or (alarm is not None and alarm.done()),
            abortable=False,
        )
        self._poked = False

    def _set_alarm(self, wake: tuple[datetime, str] | None) -> None:
        when = wake[0] if wake is not None else None
        if when == self._alarm_at and self._alarm is not None and not self._alarm.done():
            return
        if self._alarm is not None and not self._alarm.done():
            self._alarm.cancel()
        self._alarm_at = when
        self._alarm = None
        if wake is not None:
            delay = max((wake[0] - workflow.now()).total_seconds(), 1.0)
            # Labelled in the UI's timeline (it read `1 (10m)`): what the campaign wakes for.
            summary = f"campaign {self._name}: look again at {iso_z(wake[0])} ({wake[1]})"
            self._alarm = asyncio.create_task(workflow.sleep(delay, summary=summary[:400]))

    async def _sweep(self) -> None:
        """Read the in-flight hosts' entities: an operation that ended without a signal is seen."""
        in_flight = self.state.sweeping(workflow.now(), self._input.policy.sweep_seconds)
        swept = await self.call(
            activity_api.sweep_campaign_hosts,
            SweepInput(in_flight=tuple(in_flight)),
            kernel.options(SWEEP, f"sweep {len(in_flight)} in-flight hosts"),
            abortable=False,
        )
        self._halted(self.state.swept(swept.finished, swept.needs_operator, self._input.budget))

    async def _abort_running(self) -> None:
        """`abort` with `cancel_running`: abort the running operations and withdraw the requests
        awaiting approval (their entities end the wait: nothing is left pending)."""
        running, waiting = self.state.to_abort()
        if not running and not waiting:
            return
        summary = f"abort {len(running)} running host operations"
        if waiting:
            summary += f", withdraw {len(waiting)} awaiting approval"
        answered: AbortHostsResult = await self.call(
            activity_api.abort_campaign_hosts,
            AbortHostsInput(
                workflow_ids=tuple(f.workflow_id for f in running),
                requested_by=self.abort_request.requested_by if self.abort_request else "operator",
                reason=f"campaign {self._name} aborted",
                withdraw=tuple(waiting),
            ),
            kernel.options(REQUESTS, summary),
            abortable=False,  # it is the abort
        )
        self.state.abort_answered(answered.answers)

    def _absorb(self) -> None:
        """Count the operations that ended (signalled or swept); a failure may spend the budget."""
        verify = self._input.target.spec.at_target != "never"
        self._halted(self.state.absorb_heard(verify=verify, budget=self._input.budget))

    def _halted(self, reason: str | None) -> None:
        """Show a halt the state just decided (nothing new starts until an operator decides)."""
        if reason is None:
            return
        self._show_phase(HALTED, self.state.halted_details())
        workflow.logger.warning("campaign %s halted: %s", self._name, reason)

    # -- the end -------------------------------------------------------------------------------------
    async def _finish(self) -> CampaignResult:
        """The planned end: hosts an abort or a stop left unstarted skipped, the changes put back
        as the state says (`ending`), the claims released."""
        state = self.state
        outcome = state.outcome()
        await self._restore(state.ending(keep=self._input.policy.keep_changes))
        await self._release()
        details = state.counts() + (f"; {state.stopped_reason}" if state.stopped_reason else "")
        await self.finish(outcome, details)
        return views.result(state, self._name, outcome, workflow.now())

    async def _wind_down(self, err: BaseException) -> str:
        """A run that ends early (failed, cancelled): restore its changes, release its hosts; the
        words for the final phase."""
        keep = self._input.policy.keep_changes or self.state.keep_changes
        done = await self._restore(self.state.restores_at_end("failed", keep=keep))
        await self._release()
        return "; ".join([*done, f"{len(self.state.in_flight)} host operations left running"])

    # -- a long run -----------------------------------------------------------------------------------
    async def _continue_as_new_if_long(self) -> None:
        """Past `max_history_events` (or when Temporal suggests it), go on in a new run whose input
        carries the state whole (and a listed selection not twice: the roster has its hosts)."""
        info = workflow.info()
        long = info.get_current_history_length() > self._input.policy.max_history_events
        if not (long or info.is_continue_as_new_suggested()):
            return
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._absorb()
        self.state.runs += 1
        selection = HostSelection.made(self._input.selection)
        self.settle_upserts()  # the phase entered in this activation goes with the run
        workflow.continue_as_new(
            self._input.model_copy(update={"progress": self.state, "selection": selection})
        )
