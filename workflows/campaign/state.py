"""What a campaign knows and decides: `CampaignState`, the one state object of `CampaignWorkflow`.

It holds every fact of the run (where each host is, the counts, the batch and the canary, the
halt, pause and abort, pacing, the changes made outside its hosts) and decides what follows from
them: which hosts start now, what a request's outcome or an operation's end does to a host, when
a batch ends and whether the canary passed, when the failure budget is spent, why nothing may
start now, when to wake, whether the campaign is over, and what each operator update does. The
runbook (workflows/campaign/workflow.py) asks it, then acts: every phase, activity and timer is
the runbook's. No clock (`now` is an argument), no I/O, nothing of Temporal.

Its data shape is `CampaignProgress` (contracts/models/campaign_progress.py), so the run
continues as new with this object as its input's `progress`, whole: counts stay exact. Where
each host is and how it moves is its base, `HostLedger` (ledger.py); windows, budget and limits
are plan.py's rules.

A host's request id (`request_id`) is `<asker>/<host>#<n>`: `asker` is the campaign's workflow id
and its first run's id (a later campaign of the same name is another asker), `n` how often
`retry_failed` re-queued the host. So it is the same on every attempt of the request activity,
after a continue-as-new, and when a host put off (its entity busy or silent) is asked again, and
new for a re-ask after a failure, whose attempts must not take the host's failed operation for
their own.

Cost: no history events; worker memory O(hosts) at ~31 bytes a host plus O(in flight).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Final

from contracts.models.campaign import (
    AbortRequest,
    CampaignHost,
    CampaignInput,
    CampaignProgress,
    Deferred,
    DeploymentChange,
    Failure,
    FailureBudget,
    HostFinished,
    HostGroup,
    HostRequestInput,
    HostRequestOutcome,
    InFlight,
    Limits,
    Roster,
    Window,
)
from contracts.models.control import OperatorRequest
from contracts.wording import iso_z, plural
from workflows.campaign import plan
from workflows.campaign.ledger import WAITING, HostLedger, S, name_recent

ABORTED_AWAITING_APPROVAL: Final = "campaign aborted while awaiting approval"

# The phases the runbook shows (the `Phase` search attribute).
SELECTING: Final = "selecting"
POINTING: Final = "pointing-deployment"
CANARY: Final = "canary"
RUNNING: Final = "running"
SOAKING: Final = "soaking"
OUTSIDE_WINDOW: Final = "outside-window"
PAUSED: Final = "paused"
HALTED: Final = "halted"
ABORTING: Final = "aborting"
COMPLETED: Final = "completed"
ABORTED: Final = "aborted"


class CampaignState(HostLedger):
    """Every fact of one campaign and the decisions over them; see the module docstring."""

    @classmethod
    def first(cls, *, asker: str, limits: Limits, now: datetime) -> CampaignState:
        """A campaign's first run, before it selected its hosts."""
        return cls(asker=asker, limits=limits, started_at=now)

    @classmethod
    def carried(cls, progress: CampaignProgress) -> CampaignState:
        """What the last run knew (its `progress`), as this run's state."""
        return cls.model_validate(dict(progress))

    # -- before the first host: selection, claims, deployments ---------------------------------
    def selected(self, roster: Roster, left_out: Iterable[HostGroup], canary: int) -> None:
        """The selected hosts, every one pending but those left out (skipped, with why); the
        canary is the first `canary` of them (none: the first batch starts at once)."""
        self.roster = roster
        self.states = S.PENDING * len(roster)
        self._reindex()
        for group in left_out:
            for host_id in group.host_ids:
                self.skip(host_id, group.reason)
        canary = min(canary, self.not_started())
        self.canary_passed = canary == 0
        self.batch = 0 if canary else 1
        self.batch_left = canary if canary else self.limits.batch_size

    def to_claim(self) -> tuple[str, ...]:
        return tuple(h for h in self.roster.ids if self.state(h) == S.PENDING)

    def held(self, groups: Iterable[HostGroup]) -> None:
        """Hosts another running campaign holds: skipped, naming it; a canary left with no host
        to run is no canary."""
        for group in groups:
            for host_id in group.host_ids:
                self.skip(host_id, group.reason)
        if not self.canary_passed:
            self.batch_left = min(self.batch_left, self.not_started())
            if self.batch_left == 0:
                self._no_canary()

    def prepared(self, changes: Sequence[DeploymentChange], canary_hosts: Iterable[str]) -> None:
        """A deployment campaign's changes (nothing pointed yet); its canary is the hosts of the
        canary deployment, which go first."""
        self.changes = list(changes)
        if self.canary_passed:
            return
        canary = [h for h in canary_hosts if self.state(h) == S.PENDING]
        for host_id in canary:
            self.put_first(host_id)
        self.batch_left = len(canary)
        if not canary:
            self._no_canary()

    def _no_canary(self) -> None:
        self.canary_passed, self.batch, self.batch_left = True, 1, self.limits.batch_size

    # -- asking the hosts' entities ---------------------------------------------------------------
    def request_id(self, host_id: str) -> str:
        """This campaign's ask of `host_id` (the module docstring says what it must match)."""
        return f"{self.asker}/{host_id}#{self.retried.get(host_id, 0)}"

    def to_start(self) -> list[CampaignHost]:
        """The hosts to start now: the batch's room under the limits (while a deployment
        campaign's canary runs, only the canary deployment's hosts)."""
        only = self._canary_only()
        pending = (h for h in self.pending() if only is None or h.host_id in only)
        running = (f.host for f in self.in_flight.values())
        return plan.pick_starts(pending, running, self.limits, self.batch_left)

    def _canary_only(self) -> set[str] | None:
        if self.canary_passed or not any(c.role == "canary" for c in self.changes):
            return None
        requeued = {h for h in self.roster.ids if self.state(h) == S.REQUEUED}
        return requeued | set(self.canary_hosts)

    def asks(
        self, hosts: Iterable[CampaignHost], start: CampaignInput, *, name: str, workflow_id: str
    ) -> tuple[HostRequestInput, ...]:
        """The requests to the hosts' entities, from the campaign `name` (its workflow id's: a
        scheduled run's carries its time) whose workflow `workflow_id` hears how they end."""
        return tuple(
            HostRequestInput(
                host_id=h.host_id,
                site=h.site,
                target=start.target,
                campaign=name,
                campaign_workflow_id=workflow_id,
                request_id=self.request_id(h.host_id),
                requested_by=f"campaign {name} ({start.requested_by})",
                reason=start.reason,
                refuse_if_assigned=start.policy.assigned == "skip",
                host_policy=start.host_policy,
            )
            for h in hosts
        )

    def answered(
        self,
        outcomes: Iterable[HostRequestOutcome],
        hosts: Iterable[CampaignHost],
        *,
        now: datetime,
        start: CampaignInput,
    ) -> str | None:
        """What each entity's answer does to its host: started (or awaiting approval) in flight,
        busy put off for `busy_retry_seconds`, assigned or unanswered skipped, refused failed; a
        host an operator skipped meanwhile stays skipped. Returns a halt it caused (the budget)."""
        by_id = {h.host_id: h for h in hosts}
        halt = None
        for outcome in outcomes:
            host = by_id[outcome.host_id]
            if self.state(host.host_id) not in WAITING:
                continue  # skipped by an operator while the request was out
            if outcome.outcome in ("started", "awaiting-approval"):
                approval = outcome.outcome == "awaiting-approval"
                flight = InFlight(
                    host=host, workflow_id=outcome.workflow_id, started_at=now, awaiting_approval=approval
                )
                self.start(flight)
            elif outcome.outcome == "busy":
                retry_at = now + timedelta(seconds=start.policy.busy_retry_seconds)
                self.defer(Deferred(host_id=host.host_id, retry_at=retry_at, reason=outcome.message))
            elif outcome.outcome == "not-asked":
                pass  # aborting: reported as not started
            elif outcome.outcome == "unanswered":  # its entity may still take the request later
                reason = f"asked, but no answer before the abort ({outcome.message}): check {host.host_id}"
                self.skip(host.host_id, reason)
            elif outcome.outcome == "assigned":
                self.skip(host.host_id, f"instance assigned: {outcome.message}")
            else:
                self.fail(host.host_id, f"refused: {outcome.message}")
                halt = halt or self.check_budget(start.budget)
        if self.in_flight and self.next_sweep is None:
            self.next_sweep = now + timedelta(seconds=start.policy.sweep_seconds)
        return halt

    # -- operations that ended -------------------------------------------------------------------
    def absorb(self, event: HostFinished, *, verify: bool) -> bool:
        """Count how an in-flight host's operation ended; True when it counts as a failure. A
        completed operation is read back first (`verify`) before it counts done."""
        flight = self.in_flight.get(event.host_id)
        if flight is None or flight.workflow_id != event.workflow_id:
            return False  # a duplicate (signal and sweep), or another operation of that host
        del self.in_flight[event.host_id]
        self.needs_operator.pop(event.host_id, None)
        if event.host_id in self.operator_accepted:
            self.operator_accepted.remove(event.host_id)
        host_id = event.host_id
        failed = False
        if event.outcome == "completed":
            if verify:
                self._set(host_id, S.VERIFYING)
                self.verifying.append(host_id)
            else:
                self.succeed(host_id)
        elif event.outcome.startswith("expired"):
            self.skip(host_id, f"not approved: {event.outcome}")
        elif flight.workflow_id in self.abort_sent and event.outcome.startswith("withdrawn"):
            self.skip(host_id, f"{ABORTED_AWAITING_APPROVAL}: {event.outcome}")  # never started
        elif flight.workflow_id in self.abort_sent:
            # The operator's abort cut it: not a failure of the host, nor of the budget's.
            self._set(host_id, S.ABORTED)
            self.aborted += 1
            name_recent(self.recent_aborted, host_id, event.outcome)
        else:
            self.fail(host_id, event.outcome)
            failed = True
        if flight.workflow_id in self.abort_sent:
            self.abort_sent.remove(flight.workflow_id)
        return failed

    def absorb_heard(self, *, verify: bool, budget: FailureBudget) -> str | None:
        """Count the operations that ended (signalled or swept); returns a halt a failure caused."""
        heard, self.heard = self.heard, []
        halt = None
        for event in heard:
            if self.absorb(event, verify=verify):
                halt = halt or self.check_budget(budget)
        if not self.in_flight:
            self.next_sweep = None
        return halt

    def swept(
        self, finished: Iterable[HostFinished], needs_operator: Iterable[Failure], budget: FailureBudget
    ) -> str | None:
        """A sweep's reading: the operations that ended are heard, and which in-flight hosts wait
        for an operator (they count against the budget while they wait)."""
        self.heard.extend(finished)
        self.needs_operator = {f.host_id: f for f in needs_operator if f.host_id in self.in_flight}
        return self.check_budget(budget)

    def verified(self, host_id: str, at_target: bool, read: str, target: str) -> bool:
        """A completed host read back: done at the target, else failed with what it read. True
        when it failed."""
        if host_id in self.verifying:
            self.verifying.remove(host_id)
        if at_target:
            self.succeed(host_id)
            return False
        self.fail(host_id, f"completed, but not at {target}: reads {read}")
        return True

    def read_back(
        self, hosts: Iterable[str], at_target: set[str], readings: dict[str, str], start: CampaignInput
    ) -> str | None:
        """The read-back of completed hosts (`verified` each); returns a halt a failure caused."""
        halt = None
        for host_id in hosts:
            read = readings.get(host_id, "nothing")
            if self.verified(host_id, host_id in at_target, read, start.target.describe()):
                halt = halt or self.check_budget(start.budget)
        return halt

    # -- the failure budget, batches and the canary ----------------------------------------------
    def budget_failures(self) -> int:
        """Failures the budget counts: since the start or the last resume of a halt (or
        retry_failed), with hosts waiting for an operator (not accepted by that resume)."""
        waiting = len(self.needs_operator.keys() - set(self.operator_accepted))
        return self.failures_total - self.budget_failures_base + waiting

    def check_budget(self, budget: FailureBudget) -> str | None:
        """Halt when the budget is spent (and not halted already); returns the halt's reason."""
        failed, selected = self.budget_failures(), self.total
        if self.halted_reason is None and plan.budget_exceeded(budget, failed, selected):
            return self.halt(f"failure budget spent: {plan.describe_budget(budget, failed, selected)}")
        return None

    def halt(self, reason: str) -> str:
        self.halted_reason = reason
        return reason

    def canary_verdict(self) -> str | None:
        """Once every canary host has ended: "passed" (at least one done, none failed), "failed",
        or "empty" (none done, none failed: skipped or at target only, proving nothing). None: not
        ended yet."""
        if self.in_flight or self.verifying or (self.batch_left > 0 and self.has_pending()):
            return None
        if self.canary_failed:
            return "failed"
        return "passed" if self.canary_done else "empty"

    def end_batch_if_done(self, *, now: datetime, soak_seconds: float) -> str | None:
        """A batch ends when all its hosts started and finished (or nothing is left to start).
        The canary passes only with at least one host done and none failed: a canary whose
        hosts were all skipped or already at the target proved nothing, so the next pending host
        joins it (one at a time) until one is done, or none is left. A failed canary halts
        (returned); a new batch after the first soaks `soak_seconds` first."""
        if self.in_flight or self.verifying:
            return None
        nothing_left = not self.has_pending() and not self.deferred
        if self.batch_left > 0 and not nothing_left:
            return None
        if not self.canary_passed:
            verdict = self.canary_verdict()
            if verdict == "failed":
                if self.halted_reason is not None:
                    return None
                failed = [f.host_id for f in self.recent_failed if f.host_id in self.canary_hosts]
                return self.halt(f"the canary failed on {', '.join(failed) or 'its hosts'}")
            if verdict == "empty" and not nothing_left:
                self.batch_left = 1  # nothing proven yet: one more canary host
                return None
            self.canary_passed = True
        if nothing_left:
            return None
        self.batch += 1
        self.batch_left = self.limits.batch_size
        if soak_seconds > 0 and self.batch > 1:
            self.soak_until = now + timedelta(seconds=soak_seconds)
        return None

    # -- pacing -----------------------------------------------------------------------------------
    def blocked(self, now: datetime, windows: Sequence[Window]) -> tuple[str, str] | None:
        """Why no new host may start now, as (phase, details); None: they may."""
        in_flight = len(self.in_flight)
        if self.abort_request is not None:
            return ABORTING, f"asked by {self.abort_request.requested_by}; {in_flight} in flight"
        if self.halted_reason is not None:
            return HALTED, self.halted_details()
        if self.paused_by is not None:
            return PAUSED, f"by {self.paused_by.requested_by}; {in_flight} in flight"
        if self.soak_until is not None and now < self.soak_until:
            return SOAKING, f"batch {self.batch} starts at {iso_z(self.soak_until)}"
        if not plan.window_open(windows, now):
            opens = plan.next_window_open(windows, now)
            return OUTSIDE_WINDOW, f"next window opens {iso_z(opens, none='never')}"
        return None

    def halted_details(self) -> str:
        return f"{self.halted_reason}; waiting for resume, retry_failed or abort"

    def running(self) -> tuple[str, str]:
        """The phase while hosts may start: the canary's, or running, with the batch and counts."""
        return (CANARY if not self.canary_passed else RUNNING), f"batch {self.batch}: {self.counts()}"

    def next_wake(self, now: datetime, windows: Sequence[Window]) -> datetime | None:
        """When to look again with nothing heard: the first of a put-off host's retry, the soak's
        end, the window's next edge (while hosts wait), the sweep of in-flight hosts. A time
        already past is acted on, not slept for."""
        times = [d.retry_at for d in self.deferred.values()]
        if self.soak_until is not None:
            times.append(self.soak_until)
        if windows and (self.has_pending() or self.deferred):
            change = plan.next_window_change(windows, now)
            if change is not None:
                times.append(change)
        if self.in_flight and self.next_sweep is not None:
            times.append(self.next_sweep)
        later = [t for t in times if t > now]
        return min(later) if later else None

    def sweep_due(self, now: datetime) -> bool:
        return self.next_sweep is not None and now >= self.next_sweep

    def sweeping(self, now: datetime, sweep_seconds: float) -> list[InFlight]:
        """A sweep starts: the next one is due `sweep_seconds` from now; the hosts to read."""
        self.next_sweep = now + timedelta(seconds=sweep_seconds)
        return list(self.in_flight.values())

    def over(self) -> bool:
        """Aborting: once nothing is in flight or being read back. Else: once every host ended
        and no halt waits for an operator."""
        if self.abort_request is not None:
            return not self.in_flight and not self.verifying
        return not self.unfinished() and self.halted_reason is None

    # -- what the campaign changed outside its hosts ---------------------------------------------
    def due_points(self) -> list[int]:
        """The changes to point now (inside a window, not halted or paused): the canary
        deployment while the canary runs, the fleet's once it passed; each not pointed yet, or
        restored since."""
        return [
            index
            for index, change in enumerate(self.changes)
            if (change.role == "canary" or self.canary_passed)
            and (change.pointed_at is None or change.restored_at is not None)
        ]

    def pointed(self, roles: Sequence[str]) -> list[int]:
        """The changes of `roles` pointed and not put back."""
        return [
            index
            for index, change in enumerate(self.changes)
            if change.role in roles and change.pointed_at is not None and change.restored_at is None
        ]

    def keep(self, index: int) -> str:
        """A pointed change kept as it is (`keep_changes`); what was done, in words."""
        change = self.changes[index]
        self.changes[index] = change.model_copy(update={"note": "kept as pointed (keep_changes)"})
        return f"kept {change.deployment} {change.field}={change.value}"

    def failed_canary_pointed(self) -> bool:
        """A halted canary's deployment still pointed (not kept): to be put back."""
        return (
            self.halted_reason is not None
            and not self.canary_passed
            and any(not self.changes[i].note for i in self.pointed(("canary",)))
        )

    # -- the operator's updates -------------------------------------------------------------------
    def pause(self, request: OperatorRequest) -> str:
        self.paused_by = request
        flying = len(self.in_flight)
        return f"paused: no new host starts; {plural(flying, 'host')} in flight " + (
            "finishes" if flying == 1 else "finish"
        )

    def resume(self) -> str:
        """Go on after a pause or a halt; a halt's resume counts the budget from now, accepts the
        hosts waiting for an operator now, and takes a failed canary whose hosts ended as it is."""
        message = "resumed"
        if self.halted_reason is not None:
            message = f"resumed after the halt ({self.halted_reason}); the failure budget counts from now"
            self.halted_reason = None
            self.budget_failures_base = self.failures_total
            self.operator_accepted.extend(h for h in self.needs_operator if h not in self.operator_accepted)
            if not self.canary_passed and self.canary_verdict() == "failed":
                self.canary_passed = True
        self.paused_by = None
        return message

    def abort_escalates(self, request: AbortRequest) -> bool:
        """An abort after an abort is taken only to also abort the running hosts."""
        return request.cancel_running and not self.cancel_running

    def take_abort(self, request: AbortRequest) -> None:
        """Start no new host; abort the running ones too (`cancel_running`); keep the changes
        outside the hosts (`keep_changes`, never undone by a later abort)."""
        self.keep_changes = self.keep_changes or request.keep_changes
        self.cancel_running = request.cancel_running

    def abort_promise(self, *, keep_changes: bool) -> str:
        fate = "aborting them" if self.cancel_running else "letting them finish"
        promise = f"aborting: no new host starts; {len(self.in_flight)} in flight, {fate}"
        pointed = [self.changes[i] for i in self.pointed(("canary", "fleet"))]
        if pointed:
            verb = "keeping" if self.keep_changes or keep_changes else "then restoring"
            promise += f"; {verb} " + ", ".join(f"{c.deployment} {c.field}={c.previous}" for c in pointed)
        return promise

    def to_abort(self) -> tuple[list[InFlight], list[InFlight]]:
        """`abort` with `cancel_running`, once: the running operations to abort and the requests
        awaiting approval to withdraw; each stays in flight until its entity says how it ended,
        and counts as aborted (or skipped, withdrawn unstarted), never as a failure."""
        self.cancel_running = False
        running = [f for f in self.in_flight.values() if not f.awaiting_approval]
        waiting = [f for f in self.in_flight.values() if f.awaiting_approval]
        self.abort_sent.extend(
            f.workflow_id for f in (*running, *waiting) if f.workflow_id not in self.abort_sent
        )
        return running, waiting

    def retry_refusal(self) -> str | None:
        if self.abort_request is not None:
            return f"the campaign is aborting (asked by {self.abort_request.requested_by})"
        return None if self.failed else "no host has failed"

    def retry_failed(self) -> str:
        """Put every failed host back at the front of the queue (a failed canary as the canary),
        each with a new request id; the budget counts from now and a halt is cleared."""
        hosts = [self.roster.ids[i] for i, state in enumerate(self.states) if state == S.FAILED]
        for host_id in hosts:
            self._set(host_id, S.REQUEUED)
            self.retried[host_id] = self.retried.get(host_id, 0) + 1
        self.failed = 0
        self.budget_failures_base = self.failures_total
        if not self.canary_passed:
            self.batch_left += len(hosts)
            self.canary_failed = 0
        self.halted_reason = None
        return f"retrying {len(hosts)} failed hosts"

    def skip_refusal(self, host_id: str) -> str | None:
        if (flight := self.in_flight.get(host_id)) is not None:
            return f"host {host_id} is in flight ({flight.workflow_id}); abort that operation instead"
        if not self.waiting(host_id):
            return f"host {host_id} is not waiting in this campaign (done, skipped or unknown)"
        return None

    def skip_host(self, host_id: str, by: OperatorRequest) -> str:
        reason = f"skipped by {by.requested_by}" + (f": {by.reason}" if by.reason else "")
        self.skip(host_id, reason)
        return f"{host_id} {reason}"

    def set_limits(self, limits: Limits) -> str:
        old, self.limits = self.limits, limits
        return f"limits {plan.describe_limits(old)} -> {plan.describe_limits(limits)}"
