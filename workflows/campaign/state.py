"""What a campaign knows and decides: `CampaignState`, the one state object of `CampaignWorkflow`.

It holds every fact of the run (where each host is, the counts, the batch and the canary, the
halt, pause, abort and stop, pacing, the changes made outside its hosts) and decides what follows
from them: what the admission means for each host (`admitted`), what a request's outcome or an
operation's end does to a host, what the runbook does at each step (`next_step`: a put-off host
due again, a batch's end and the canary's verdict, a failed canary's deployment put back, why
nothing may start, the deployments to point, the hosts to start), when the failure budget is
spent, what it waits for (`liveness`) and when to wake, whether it is over and how it ends, and
what each operator update does. The runbook (workflows/campaign/workflow.py) asks it, then acts:
every phase, activity and timer is the runbook's. No clock (`now` is an argument), no I/O,
nothing of Temporal.

Its data shape is `CampaignProgress` (contracts/models/campaign_progress.py), so the run
continues as new with this object as its input's `progress`, whole: counts stay exact. It is
built in layers, each a module: where each host is and how it moves (`HostLedger`, ledger.py);
the DPUDeployment changes (`DeploymentLedger`, changes.py); the canary and the batches
(`CanaryLedger`, canary.py); the operator's updates (`OperatorControls`, controls.py); windows,
budget and limits are plan.py's rules, and the admission before the first host admission.py's.

The rules a campaign stakes a fleet on, checked after every step of a model of it
(tests/fast/test_campaign_model.py) and listed in README ("Fleet campaigns"):

1. A deployment change only ever selects hosts the campaign holds and runs (or the whole
   deployment, when asked for): the admission and `skip_blocked`.
2. The fleet's deployment is never pointed before a canary host is done at the target and none
   failed; when no canary host can run, the campaign stops and says why (canary.py).
3. Liveness: after every step it has work in flight, a timer with a stated time and reason, an
   operator's pause or decision to wait for, or it has ended (`liveness`); never a pending host it
   could start but does not.
4. Every ending puts back what it changed unless asked to keep it (`restores_at_end`), and no
   abort leaves a DPU owed a reboot that no operation gives (`to_abort`: `finish_installing`).
5. The failure budget only grows toward its limit between an operator's resets (ledger.py).

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
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from contracts.models.campaign import (
    CampaignHost,
    CampaignInput,
    CampaignProgress,
    Deferred,
    Failure,
    FailureBudget,
    HostFinished,
    HostRequestInput,
    HostRequestOutcome,
    InFlight,
    Limits,
    Window,
    degraded_words,
)
from contracts.wording import is_completed, iso_z, plural
from workflows.campaign import plan
from workflows.campaign.admission import Admission
from workflows.campaign.controls import OperatorControls
from workflows.campaign.ledger import (
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
    STOPPED,
    STOPPING,
    WAITING,
    S,
    name_recent,
)

__all__ = [
    "ABORTED", "ABORTING", "CANARY", "COMPLETED", "HALTED", "OUTSIDE_WINDOW", "PAUSED", "POINTING",
    "RUNNING", "SELECTING", "SOAKING", "STOPPED", "STOPPING", "CampaignState", "Step",
]  # fmt: skip

ABORTED_AWAITING_APPROVAL: Final = "campaign aborted while awaiting approval"

# What a campaign waits for after its step (`liveness`; the status's `waiting_on`).
IN_FLIGHT: Final = "in-flight"
CAN_START: Final = "can-start"
TIMER: Final = "timer"
OPERATOR: Final = "operator"
ENDED: Final = "ended"


@dataclass
class Step:
    """What the runbook does now, as the state decided it (`next_step`), in this order: show a
    halt it caused, put back `restore`, show `phase`, point `point`, then read `start` at the
    target and ask the others' entities. `over`: nothing more to do; the campaign ends."""

    phase: tuple[str, str]
    halt: str | None = None
    restore: list[int] = field(default_factory=list)
    point: list[int] = field(default_factory=list)
    start: list[CampaignHost] = field(default_factory=list)
    over: bool = False


def maintenance_skip(refusal: str) -> str:
    """Why a host the entity refused as in maintenance (`InMaintenance`) is skipped: the refusal's
    first words (the maintenance: since when, who set it, why), and that a campaign never takes
    such a host. Nothing is asked again once the maintenance ends: a later run decides anew."""
    words = refusal.split(" refused (to run it anyway", 1)[0].rsplit("; ", 1)[0]
    words = words.split(" is ", 1)[1] if words.startswith("host ") and " is " in words else words
    return f"{words}; a campaign never takes a host in maintenance"


class CampaignState(OperatorControls):
    """Every fact of one campaign and the decisions over them; see the module docstring."""

    @classmethod
    def first(cls, *, asker: str, limits: Limits, now: datetime) -> CampaignState:
        """A campaign's first run, before it selected its hosts."""
        return cls(asker=asker, limits=limits, started_at=now)

    @classmethod
    def carried(cls, progress: CampaignProgress) -> CampaignState:
        """What the last run knew (its `progress`), as this run's state."""
        return cls.model_validate(dict(progress))

    # -- before the first host: the admission ------------------------------------------------------
    def admitted(self, admission: Admission, canary: int) -> None:
        """The admission's decision (admission.py): every host of the roster pending but those
        left out (skipped, with why), its changes (nothing pointed yet but what a campaign that
        no longer runs left), and the canary: the canary deployment's hosts, first, or the first
        `canary` hosts (none: the first batch starts at once). Applied even when refused, so the
        changes taken over are put back as the run ends."""
        self.roster = admission.roster
        self.states = S.PENDING * len(self.roster)
        self._reindex()
        for group in admission.left_out:
            for host_id in group.host_ids:
                self.skip(host_id, group.reason)
        self.changes = list(admission.changes)
        self.canary_pool = [h for h in admission.canary_pool if self.state(h) == S.PENDING]
        if self.canary_pool:
            for host_id in self.canary_pool:
                self.put_first(host_id)
            self.canary_passed, self.batch, self.batch_left = False, 0, len(self.canary_pool)
            return
        canary = min(canary, self.not_started())
        self.canary_passed = canary == 0
        self.batch = 0 if canary else 1
        self.batch_left = canary if canary else self.limits.batch_size

    # -- asking the hosts' entities ---------------------------------------------------------------
    def request_id(self, host_id: str) -> str:
        """This campaign's ask of `host_id` (the module docstring says what it must match)."""
        return f"{self.asker}/{host_id}#{self.retried.get(host_id, 0)}"

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
                site_check=degraded_words(start.site_degraded, h.host_id),
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
        busy put off for `busy_retry_seconds`, assigned, unanswered, in maintenance or held back
        (an operator's no to automation, `AutomationHeldBack`) skipped, refused failed; a
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
            elif outcome.outcome == "maintenance":  # the entity's refusal names who set it
                self.skip(host.host_id, maintenance_skip(outcome.message))
            elif outcome.outcome == "held-back":  # an operator said no to automation on it: no failure
                self.skip(host.host_id, outcome.message)
            elif outcome.outcome == "assigned":
                note = self.outdated_note(host.host_id)
                self.skip(host.host_id, f"instance assigned: {outcome.message}{note}")
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
        self.finishing.pop(event.host_id, None)
        left = self.abort_left.pop(event.host_id, "")
        if event.host_id in self.operator_accepted:
            self.operator_accepted.remove(event.host_id)
        host_id = event.host_id
        failed = False
        if is_completed(event.outcome):
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
            name_recent(self.recent_aborted, host_id, event.outcome + (f"; left: {left}" if left else ""))
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

    # -- the failure budget -----------------------------------------------------------------------
    def budget_failures(self) -> int:
        """Failures the budget counts: since the start or the last resume of a halt (or
        retry_failed), with hosts waiting for an operator (not accepted by that resume)."""
        waiting = len(self.needs_operator.keys() - set(self.operator_accepted))
        return self.failures_total - self.budget_failures_base + waiting

    def check_budget(self, budget: FailureBudget) -> str | None:
        """Halt when the budget is spent (and not halted already); returns the halt's reason."""
        failed, selected = self.budget_failures(), self.total
        if self.halted_reason is None and plan.budget_exceeded(budget, failed, selected):
            if self.deployment_canary and self.canary_failed:
                return self._canary_failed()  # the canary's verdict, in its words
            return self.halt(f"failure budget spent: {plan.describe_budget(budget, failed, selected)}")
        return None

    def halt(self, reason: str) -> str:
        self.halted_reason = reason
        return reason

    # -- a step of the runbook ---------------------------------------------------------------------
    def next_step(self, now: datetime, start: CampaignInput) -> Step:
        """What the runbook does now (`Step`): hosts put off due again wait first; a batch that
        ended ends (the canary's verdict: a halt, a pass, a stop); a failed deployment canary's
        deployment is put back (kept with `keep_changes`); then, unless something blocks new
        starts, the deployments due and the hosts to start."""
        self.requeue_due(now)
        halt = self.end_batch_if_done(now=now, soak_seconds=start.soak_seconds)
        for index in self.due_points():
            if (refusal := self.repoint_blocked(index)) is not None and self.stopped_reason is None:
                self.stopped_reason = refusal
        restore = self.canary_restore()
        if restore and (start.policy.keep_changes or self.keep_changes):
            for index in restore:
                self.keep(index)
            restore = []
        if self.over():
            return Step(phase=self.running(), halt=halt, over=True)
        blocked = self.blocked(now, start.windows)
        if blocked is not None:
            return Step(phase=blocked, halt=halt, restore=restore)
        self.soak_until = None  # a soak that ended is over
        return Step(
            phase=self.running(),
            halt=halt,
            restore=restore,
            point=self.due_points(),
            start=self.to_start() if self.has_pending() else [],
        )

    def blocked(self, now: datetime, windows: Sequence[Window]) -> tuple[str, str] | None:
        """Why no new host may start now, as (phase, details); None: they may."""
        in_flight = len(self.in_flight)
        if self.abort_request is not None:
            finishing = (
                f" ({plural(len(self.finishing), 'host')} finishing a reboot round)" if self.finishing else ""
            )
            return ABORTING, f"asked by {self.abort_request.requested_by}; {in_flight} in flight{finishing}"
        if self.stopped_reason is not None:
            return STOPPING, f"{self.stopped_reason}; {in_flight} in flight"
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
        """The halt and the updates it accepts now (a failed deployment canary refuses resume)."""
        accepted = "retry_failed or abort" if self.resume_refusal() else "resume, retry_failed or abort"
        return f"{self.halted_reason}; waiting for {accepted}"

    def wake(self, now: datetime, windows: Sequence[Window]) -> tuple[datetime, str] | None:
        """When to look again with nothing heard, and why: the first of a put-off host's retry,
        the soak's end, the window's next edge (while hosts or a deployment wait for it), the
        sweep of in-flight hosts.
        A time already past is acted on, not slept for."""
        times = [
            (d.retry_at, f"{d.host_id} is asked again (put off: {d.reason})")
            for d in self.deferred.values()
            if d.retry_at is not None
        ]
        if self.soak_until is not None:
            times.append((self.soak_until, f"the soak ends: batch {self.batch} starts"))
        if windows and (self.has_pending() or self.deferred or self.due_points()):
            change = plan.next_window_change(windows, now)
            if change is not None:
                opens = "opens" if not plan.window_open(windows, now) else "closes"
                times.append((change, f"the maintenance window {opens}"))
        if self.in_flight and self.next_sweep is not None:
            times.append((self.next_sweep, "the sweep of the hosts in flight"))
        later = [t for t in times if t[0] > now]
        return min(later, key=lambda t: t[0]) if later else None

    def next_wake(self, now: datetime, windows: Sequence[Window]) -> datetime | None:
        wake = self.wake(now, windows)
        return wake[0] if wake else None

    def liveness(self, now: datetime, windows: Sequence[Window]) -> tuple[str, str] | None:
        """What the campaign waits for, in (kind, words): work in flight, a host it can start now,
        a timer (its time and reason), an operator (a pause, a halt), or nothing: it has ended.
        None: none of them, a campaign that would wait for ever (the model's invariant 3)."""
        if self.over():
            return ENDED, f"nothing left to do: it ends {self.outcome()}"
        if self.in_flight or self.verifying:
            named = ", ".join(sorted(self.in_flight)[:5])
            words = f"{len(self.in_flight)} in flight ({named})" if self.in_flight else "the read-back"
            if self.finishing:
                words += f"; {', '.join(sorted(self.finishing))} finishing a reboot round"
            return IN_FLIGHT, words
        if self.halted_reason is not None:
            return OPERATOR, self.halted_details()
        if self.paused_by is not None:
            return OPERATOR, f"paused by {self.paused_by.requested_by}: `resume` goes on"
        if self.blocked(now, windows) is None and self.has_pending() and (ready := self.to_start()):
            return CAN_START, f"{', '.join(h.host_id for h in ready[:5])} may start now"
        wake = self.wake(now, windows)
        if wake is not None:
            return TIMER, f"at {iso_z(wake[0])}: {wake[1]}"
        return None

    def sweep_due(self, now: datetime) -> bool:
        return self.next_sweep is not None and now >= self.next_sweep

    def sweeping(self, now: datetime, sweep_seconds: float) -> list[InFlight]:
        """A sweep starts: the next one is due `sweep_seconds` from now; the hosts to read."""
        self.next_sweep = now + timedelta(seconds=sweep_seconds)
        return list(self.in_flight.values())

    # -- the end ------------------------------------------------------------------------------------
    def over(self) -> bool:
        """Aborting or stopping: once nothing is in flight or being read back. Else: once every
        host ended, no halt waits for an operator and no change is due to be pointed."""
        if self.abort_request is not None or self.stopped_reason is not None:
            return not self.in_flight and not self.verifying
        return not self.unfinished() and self.halted_reason is None and not self.due_points()

    def outcome(self) -> str:
        """How it ends: aborted (an operator's abort), stopped (on its own: `stopped_reason`), or
        completed."""
        if self.abort_request is not None:
            return ABORTED
        if self.stopped_reason is not None:
            return STOPPED
        return COMPLETED

    def ending(self, *, keep: bool) -> list[int]:
        """The end: hosts an abort or a stop left unstarted are skipped; the changes to put back
        (`restores_at_end`; `keep`: the operator's `keep_changes`)."""
        outcome = self.outcome()
        if outcome == ABORTED:
            self.skip_unstarted("not started: aborted")
        elif outcome == STOPPED:
            self.skip_unstarted("not started: the campaign stopped")
        return self.restores_at_end(outcome, keep=keep or self.keep_changes)
