"""What a campaign knows of its hosts: where each one is (waiting, put off, in flight, done,
failed, skipped, aborted), the current batch and the canary, and what its failure budget counts.

A plain state object, `Ledger`, that `CampaignWorkflow` (workflows/campaign.py) holds: the
runbook and the operator's updates change it through these methods, which issue no commands, so
every phase change, halt and activity stays in the runbook. It is carried whole over
continue-as-new (`Progress`), so counts stay exact across runs.

Cost: no history events; O(hosts not finished + failures + skipped) in the worker's memory and in
the continue-as-new input (~100 bytes per host).
"""

from __future__ import annotations

from typing import Any, Final

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from contracts.models.campaign import (
        CampaignHost,
        Deferred,
        Failure,
        HostFinished,
        InFlight,
        Progress,
    )

ABORTED_AWAITING_APPROVAL: Final = "campaign aborted while awaiting approval"


class Ledger:
    """Each host's place and the counts; restored from, and carried as, `Progress`."""

    def __init__(self, p: Progress) -> None:
        self.total = p.total
        self.pending: list[CampaignHost] = list(p.pending)  # not started yet, in order
        self.in_flight: dict[str, InFlight] = {f.host.host_id: f for f in p.in_flight}
        self.deferred: list[Deferred] = list(p.deferred)  # busy: asked again at `retry_at`
        self.done = p.done
        self.at_target = p.already_at_target  # counted done without being touched
        self.failed: list[Failure] = list(p.failed)
        self.skipped: list[Failure] = list(p.skipped)
        self.aborted: list[Failure] = list(p.aborted)  # cut by an abort: not failures
        self.abort_sent: set[str] = set(p.abort_sent)  # operations (and requests) an abort was sent
        self.attempted = p.attempted  # operations finished (succeeded or failed)
        self.budget_failed_base = p.budget_failed_base  # before the last resume of a halt
        self.budget_attempted_base = p.budget_attempted_base
        self.canary_hosts: set[str] = set(p.canary_hosts)
        self.canary_passed = p.canary_passed
        self.batch = p.batch  # the current batch's number (0: the canary)
        self.batch_left = p.batch_left  # hosts of the current batch not yet started
        # In flight, waiting for an operator (the last sweep); of those, accepted by a resume.
        self.needs_operator: dict[str, Failure] = {f.host.host_id: f for f in p.needs_operator}
        self.operator_accepted: set[str] = set(p.operator_accepted)

    def snapshot(self, **control: Any) -> Progress:
        """The `Progress` to carry over continue-as-new: this ledger and the campaign's `control`
        state (phase, pacing, halt, pause, abort)."""
        return Progress(
            total=self.total,
            pending=tuple(self.pending),
            in_flight=tuple(self.in_flight.values()),
            deferred=tuple(self.deferred),
            done=self.done,
            already_at_target=self.at_target,
            failed=tuple(self.failed),
            skipped=tuple(self.skipped),
            attempted=self.attempted,
            budget_failed_base=self.budget_failed_base,
            budget_attempted_base=self.budget_attempted_base,
            canary_hosts=tuple(sorted(self.canary_hosts)),
            canary_passed=self.canary_passed,
            batch=self.batch,
            batch_left=self.batch_left,
            needs_operator=tuple(self.needs_operator.values()),
            operator_accepted=tuple(sorted(self.operator_accepted)),
            aborted=tuple(self.aborted),
            abort_sent=tuple(sorted(self.abort_sent)),
            **control,
        )

    # -- outcomes -------------------------------------------------------------------------------------
    def absorb(self, event: HostFinished) -> bool:
        """Count how an in-flight host's operation ended; True when it counts as a failure."""
        flight = self.in_flight.get(event.host_id)
        if flight is None or flight.workflow_id != event.workflow_id:
            return False  # a duplicate (signal and sweep), or another operation of that host
        del self.in_flight[event.host_id]
        self.needs_operator.pop(event.host_id, None)
        self.operator_accepted.discard(event.host_id)
        failed = False
        if event.outcome == "completed":
            self.done += 1
            self.attempted += 1
        elif event.outcome.startswith("expired"):
            self.skipped.append(Failure(host=flight.host, reason=f"not approved: {event.outcome}"))
        elif flight.workflow_id in self.abort_sent and event.outcome.startswith("withdrawn"):
            reason = f"{ABORTED_AWAITING_APPROVAL}: {event.outcome}"
            self.skipped.append(Failure(host=flight.host, reason=reason))  # never started
        elif flight.workflow_id in self.abort_sent:
            # The operator's abort cut it: not a failure of the host, nor of the budget's.
            self.aborted.append(Failure(host=flight.host, reason=event.outcome))
        else:
            self.fail(flight.host, event.outcome)
            failed = True
        self.abort_sent.discard(flight.workflow_id)
        return failed

    def fail(self, host: CampaignHost, reason: str) -> None:
        """A host failed (its operation, or its request refused): one more failed attempt."""
        self.failed.append(Failure(host=host, reason=reason))
        self.attempted += 1

    def budget_counts(self) -> tuple[int, int]:
        """(failed, attempted) as the budget counts them: since the last resume of a halt, hosts
        waiting for an operator (not accepted by that resume) included as failed attempts."""
        waiting = len(self.needs_operator.keys() - self.operator_accepted)
        return (
            len(self.failed) - self.budget_failed_base + waiting,
            self.attempted - self.budget_attempted_base + waiting,
        )

    def not_started(self) -> list[CampaignHost]:
        return self.pending + [d.host for d in self.deferred]

    def counts(self) -> str:
        """Done, in flight, failed, skipped (and aborted), in words: the campaign's details."""
        return (
            f"{self.done + self.at_target}/{self.total} done ({self.at_target} already "
            f"at target), {len(self.in_flight)} in flight, {len(self.failed)} failed, "
            f"{len(self.skipped)} skipped" + (f", {len(self.aborted)} aborted" if self.aborted else "")
        )

    # -- what the operator's updates change ----------------------------------------------------------
    def accept_halt(self) -> None:
        """A `resume` of a halt: the budget counts from now, the hosts waiting for an operator
        now are accepted, and a canary whose every host has ended is taken as it is."""
        self.budget_failed_base = len(self.failed)
        self.budget_attempted_base = self.attempted
        self.operator_accepted |= self.needs_operator.keys()
        if not self.canary_passed and self.batch_left == 0 and not self.in_flight:
            self.canary_passed = True

    def retry_failed(self) -> int:
        """Put every failed host back at the front of the queue (a failed canary as the canary);
        the budget counts from now. Returns how many."""
        hosts = [f.host for f in self.failed]
        self.failed.clear()
        self.pending[:0] = hosts
        self.budget_failed_base = 0
        self.budget_attempted_base = self.attempted
        if not self.canary_passed:
            self.batch_left += len(hosts)
        return len(hosts)

    def waiting(self, host_id: str) -> bool:
        """Whether the host waits to start: pending, put off, or failed."""
        return any(host.host_id == host_id for host in self._waiting())

    def skip(self, host_id: str, reason: str) -> bool:
        """Leave a waiting host out of the campaign (skipped, with `reason`); False: not waiting."""
        for queue in (self.pending, self.deferred, self.failed):
            for entry in queue:
                host = entry if isinstance(entry, CampaignHost) else entry.host
                if host.host_id == host_id:
                    queue.remove(entry)  # type: ignore[arg-type]
                    self.skipped.append(Failure(host=host, reason=reason))
                    return True
        return False

    def _waiting(self) -> list[CampaignHost]:
        return self.not_started() + [f.host for f in self.failed]
