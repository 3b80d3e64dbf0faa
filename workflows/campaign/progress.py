"""What a campaign knows of its hosts: where each one is (waiting, put off, in flight, verifying,
done, at target, failed, skipped, aborted), the current batch and the canary, and what its failure
budget counts.

A plain state object, `Ledger`, that `CampaignWorkflow` (workflows/campaign/workflow.py) holds: the
runbook and the operator's updates change it through these methods, which issue no commands, so
every phase change, halt and activity stays in the runbook. It is carried whole over
continue-as-new (`Progress`), so counts stay exact across runs.

Bounded for 10,000 hosts: each host is one entry of the roster (id, site and group indexes, BMC
key; ~30 bytes in a payload) and one character of `states`; only the hosts in flight (at most
`max_in_flight`), put off, or being read back are carried as objects, and only the newest
RECENT_HOSTS failed, skipped and aborted hosts with their reason. Every count is an integer kept
as it changes. The failure budget counts with two monotonic counters (every failure ever, and
the failures at the last resume): a skip or a retry of a failed host never subtracts.

Cost: no history events; worker memory and continue-as-new input O(hosts) at ~31 bytes a host,
plus O(in flight); `pending` walks the states lazily (O(hosts) at worst per step).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from contracts.models.campaign import (
        RECENT_HOSTS,
        CampaignHost,
        Deferred,
        Failure,
        HostFinished,
        HostState,
        InFlight,
        Progress,
        Roster,
        short,
    )

ABORTED_AWAITING_APPROVAL: Final = "campaign aborted while awaiting approval"
S = HostState


def _recent(items: list[Failure], host_id: str, reason: str) -> None:
    items.append(Failure(host_id=host_id, reason=short(reason)))
    del items[:-RECENT_HOSTS]


class Ledger:
    """Each host's place and the counts; restored from, and carried as, `Progress`."""

    def __init__(self, p: Progress) -> None:
        self.roster: Roster = p.roster
        self.index: dict[str, int] = {h: i for i, h in enumerate(p.roster.ids)}
        self.states: list[str] = list(p.states)
        self.in_flight: dict[str, InFlight] = {f.host.host_id: f for f in p.in_flight}
        self.deferred: dict[str, Deferred] = {d.host_id: d for d in p.deferred}
        self.verifying: list[str] = list(p.verifying)
        self.done = p.done
        self.at_target = p.already_at_target
        self.failed = p.failed
        self.skipped = p.skipped
        self.aborted = p.aborted
        self.failures_total = p.failures_total
        self.attempts_total = p.attempts_total
        self.budget_failures_base = p.budget_failures_base
        self.recent_failed: list[Failure] = list(p.recent_failed)
        self.recent_skipped: list[Failure] = list(p.recent_skipped)
        self.recent_aborted: list[Failure] = list(p.recent_aborted)
        self.abort_sent: set[str] = set(p.abort_sent)
        self.canary_hosts: set[str] = set(p.canary_hosts)
        self.canary_done = p.canary_done
        self.canary_failed = p.canary_failed
        self.canary_passed = p.canary_passed
        self.batch = p.batch  # the current batch's number (0: the canary)
        self.batch_left = p.batch_left  # hosts of the current batch not yet started
        # In flight, waiting for an operator (the last sweep); of those, accepted by a resume.
        self.needs_operator: dict[str, Failure] = {f.host_id: f for f in p.needs_operator}
        self.operator_accepted: set[str] = set(p.operator_accepted)
        self._waiting = sum(1 for c in self.states if c in (S.PENDING, S.REQUEUED))

    def load(self, roster: Roster) -> None:
        """The selected hosts, every one pending."""
        self.roster = roster
        self.index = {h: i for i, h in enumerate(roster.ids)}
        self.states = [S.PENDING] * len(roster)
        self._waiting = len(roster)

    def snapshot(self, **control: Any) -> Progress:
        """The `Progress` to carry over continue-as-new: this ledger and the campaign's `control`
        state (phase, pacing, halt, pause, abort, changes)."""
        return Progress(
            roster=self.roster,
            states="".join(self.states),
            in_flight=tuple(self.in_flight.values()),
            deferred=tuple(self.deferred.values()),
            verifying=tuple(self.verifying),
            done=self.done,
            already_at_target=self.at_target,
            failed=self.failed,
            skipped=self.skipped,
            aborted=self.aborted,
            failures_total=self.failures_total,
            attempts_total=self.attempts_total,
            budget_failures_base=self.budget_failures_base,
            recent_failed=tuple(self.recent_failed),
            recent_skipped=tuple(self.recent_skipped),
            recent_aborted=tuple(self.recent_aborted),
            abort_sent=tuple(sorted(self.abort_sent)),
            canary_hosts=tuple(sorted(self.canary_hosts)),
            canary_done=self.canary_done,
            canary_failed=self.canary_failed,
            canary_passed=self.canary_passed,
            batch=self.batch,
            batch_left=self.batch_left,
            needs_operator=tuple(self.needs_operator.values()),
            operator_accepted=tuple(sorted(self.operator_accepted)),
            **control,
        )

    # -- where hosts are ------------------------------------------------------------------------------
    @property
    def total(self) -> int:
        return len(self.roster)

    def state(self, host_id: str) -> str | None:
        index = self.index.get(host_id)
        return None if index is None else self.states[index]

    def _set(self, host_id: str, state: str) -> None:
        index = self.index[host_id]
        before = self.states[index]
        self._waiting += (state in (S.PENDING, S.REQUEUED)) - (before in (S.PENDING, S.REQUEUED))
        self.states[index] = state

    def pending(self) -> Iterator[CampaignHost]:
        """The hosts waiting to start, in order: retried ones first, then the roster's order.
        Lazy: a caller that stops after a few hosts reads a few."""
        for wanted in (S.REQUEUED, S.PENDING):
            for index, state in enumerate(self.states):
                if state == wanted:
                    yield self.roster.host(index)

    def has_pending(self) -> bool:
        return self._waiting > 0

    def not_started(self) -> int:
        return self._waiting + len(self.deferred)

    def unfinished(self) -> bool:
        return bool(self._waiting or self.deferred or self.in_flight or self.verifying)

    def remaining(self) -> int:
        return self._waiting + len(self.deferred) + len(self.in_flight) + len(self.verifying)

    # -- moves ---------------------------------------------------------------------------------------
    def start(self, flight: InFlight) -> None:
        self._set(flight.host.host_id, S.IN_FLIGHT)
        self.in_flight[flight.host.host_id] = flight
        self.batch_left -= 1
        if not self.canary_passed:
            self.canary_hosts.add(flight.host.host_id)

    def put_first(self, host_id: str) -> None:
        """A pending host waits before every other (the canary's)."""
        self._set(host_id, S.REQUEUED)

    def defer(self, deferred: Deferred) -> None:
        self._set(deferred.host_id, S.DEFERRED)
        self.deferred[deferred.host_id] = deferred

    def requeue_due(self, now: Any) -> None:
        """Hosts put off whose retry time has come wait again, before the others."""
        for host_id in [h for h, d in self.deferred.items() if d.retry_at <= now]:
            del self.deferred[host_id]
            self._set(host_id, S.REQUEUED)

    def reached(self, host_id: str) -> None:
        """Already at the target: counted done, never touched."""
        self._set(host_id, S.AT_TARGET)
        self.at_target += 1

    def skip(self, host_id: str, reason: str) -> None:
        """Left out (assigned, claimed by another campaign, skipped by an operator, ...). A failed
        host skipped leaves the failed count; the failure stays in the budget's counters."""
        if self.state(host_id) == S.FAILED:
            self.failed -= 1
        self.deferred.pop(host_id, None)
        self._set(host_id, S.SKIPPED)
        self.skipped += 1
        _recent(self.recent_skipped, host_id, reason)

    def fail(self, host_id: str, reason: str) -> None:
        """A host failed (its operation, its request refused, or not at the target after it)."""
        self._set(host_id, S.FAILED)
        self.failed += 1
        self.failures_total += 1
        self.attempts_total += 1
        if host_id in self.canary_hosts and not self.canary_passed:
            self.canary_failed += 1
        _recent(self.recent_failed, host_id, reason)

    def succeed(self, host_id: str) -> None:
        self._set(host_id, S.DONE)
        self.done += 1
        self.attempts_total += 1
        if host_id in self.canary_hosts and not self.canary_passed:
            self.canary_done += 1

    # -- outcomes -------------------------------------------------------------------------------------
    def absorb(self, event: HostFinished, *, verify: bool) -> bool:
        """Count how an in-flight host's operation ended; True when it counts as a failure. A
        completed operation is read back first (`verify`) before it counts done."""
        flight = self.in_flight.get(event.host_id)
        if flight is None or flight.workflow_id != event.workflow_id:
            return False  # a duplicate (signal and sweep), or another operation of that host
        del self.in_flight[event.host_id]
        self.needs_operator.pop(event.host_id, None)
        self.operator_accepted.discard(event.host_id)
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
            _recent(self.recent_aborted, host_id, event.outcome)
        else:
            self.fail(host_id, event.outcome)
            failed = True
        self.abort_sent.discard(flight.workflow_id)
        return failed

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

    def budget_failures(self) -> int:
        """Failures the budget counts: since the start or the last resume of a halt (or
        retry_failed), with hosts waiting for an operator (not accepted by that resume)."""
        waiting = len(self.needs_operator.keys() - self.operator_accepted)
        return self.failures_total - self.budget_failures_base + waiting

    def counts(self) -> str:
        """Done, in flight, failed, skipped (and aborted), in words: the campaign's details."""
        verifying = f", {len(self.verifying)} verifying" if self.verifying else ""
        return (
            f"{self.done + self.at_target}/{self.total} done ({self.at_target} already "
            f"at target), {len(self.in_flight)} in flight{verifying}, {self.failed} failed, "
            f"{self.skipped} skipped" + (f", {self.aborted} aborted" if self.aborted else "")
        )

    # -- the canary ---------------------------------------------------------------------------------
    def canary_verdict(self) -> str | None:
        """Once every canary host has ended: "passed" (at least one done, none failed), "failed",
        or "empty" (none done, none failed: skipped or at target only, proving nothing). None: not
        ended yet."""
        if self.in_flight or self.verifying or (self.batch_left > 0 and self.has_pending()):
            return None
        if self.canary_failed:
            return "failed"
        return "passed" if self.canary_done else "empty"

    # -- what the operator's updates change ----------------------------------------------------------
    def accept_halt(self) -> None:
        """A `resume` of a halt: the budget counts from now, the hosts waiting for an operator
        now are accepted, and a failed canary whose every host has ended is taken as it is."""
        self.budget_failures_base = self.failures_total
        self.operator_accepted |= self.needs_operator.keys()
        if not self.canary_passed and self.canary_verdict() == "failed":
            self.canary_passed = True

    def retry_failed(self) -> int:
        """Put every failed host back at the front of the queue (a failed canary as the canary);
        the budget counts from now. Returns how many."""
        hosts = [self.roster.ids[i] for i, state in enumerate(self.states) if state == S.FAILED]
        for host_id in hosts:
            self._set(host_id, S.REQUEUED)
        self.failed = 0
        self.budget_failures_base = self.failures_total
        if not self.canary_passed:
            self.batch_left += len(hosts)
            self.canary_failed = 0
        return len(hosts)

    def waiting(self, host_id: str) -> bool:
        """Whether the host waits to start: pending, put off, or failed."""
        return self.state(host_id) in (S.PENDING, S.REQUEUED, S.DEFERRED, S.FAILED)

    def abort_unstarted(self) -> int:
        """An aborted campaign's hosts not started: skipped. Returns how many."""
        unstarted = [
            self.roster.ids[i] for i, c in enumerate(self.states) if c in (S.PENDING, S.REQUEUED, S.DEFERRED)
        ]
        for host_id in unstarted:
            self.skip(host_id, "not started: aborted")
        return len(unstarted)
