"""The canary and the batches, as a part of the campaign's state object (`CampaignState`,
state.py, derives from `CanaryLedger` here): which hosts start now, when a batch ends, and the
canary's verdict.

Two canaries:

- **A deployment canary** (a BFB or flavor campaign with `--canary-deployment`): its hosts are the
  canary deployment's hosts the campaign runs (`canary_pool`, from the admission); only they start
  while it runs, all of them (under the limits). Once none of them waits, runs or is read back,
  its verdict: `failed` (one failed: halted for an operator, who may `retry_failed` it or abort;
  `resume` would point the fleet's deployment without a passed canary, and is refused), `passed`
  (at least one done at the target, none failed: the fleet's deployment may be pointed), or
  `empty` (each skipped or already at the target: nothing proven). An empty one stops the
  campaign, saying why: it never passes and never waits.
- **A canary of the first N hosts** (any other campaign): the first `canary` hosts to start; one
  that proved nothing (skipped or at the target) makes room for the next pending host, until one
  is done or none is left. Failed, it halts; a `resume` takes it as it is.

Batches after the canary: `batch_size` hosts each, each one, the first included, soaking
`soak_seconds` first (the soak follows the canary as it follows every batch; issue 38: batch 1
started seconds after the canary with `--soak 5m`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from contracts.models.campaign import CampaignHost, DeploymentChange
from workflows.campaign import plan
from workflows.campaign.changes import DeploymentLedger
from workflows.campaign.ledger import CANARY, RUNNING, S

OPEN = (S.PENDING, S.REQUEUED, S.DEFERRED, S.IN_FLIGHT, S.VERIFYING)
Verdict = Literal["passed", "failed", "empty"]


class CanaryLedger(DeploymentLedger):
    """The canary, the batches and which hosts start now (module docstring)."""

    @property
    def deployment_canary(self) -> bool:
        """A deployment canary runs (not passed yet)."""
        return bool(self.canary_pool) and not self.canary_passed

    def to_start(self) -> list[CampaignHost]:
        """The hosts to start now: the batch's room under the limits; while a deployment canary
        runs, its hosts only (every one of them may start)."""
        running = (f.host for f in self.in_flight.values())
        if self.deployment_canary:
            pool = set(self.canary_pool)
            waiting = (h for h in self.pending() if h.host_id in pool)
            return plan.pick_starts(waiting, running, self.limits, len(pool))
        return plan.pick_starts(self.pending(), running, self.limits, self.batch_left)

    def canary_open(self) -> bool:
        """Whether a canary host still waits, runs or is read back."""
        if self.canary_pool:
            return any(self.state(h) in OPEN for h in self.canary_pool)
        return bool(self.in_flight or self.verifying or (self.batch_left > 0 and self.has_pending()))

    def canary_verdict(self) -> Verdict | None:
        """Once every canary host has ended: "passed" (at least one done, none failed), "failed",
        or "empty" (none done, none failed: skipped or at target only, proving nothing). None:
        not ended yet."""
        if self.canary_open():
            return None
        if self.canary_failed:
            return "failed"
        return "passed" if self.canary_done else "empty"

    def end_batch_if_done(self, *, now: datetime, soak_seconds: float) -> str | None:
        """A batch ends when all its hosts started and finished (or nothing is left to start);
        the canary's verdict then (module docstring). Returns a halt it causes (a failed canary);
        an empty deployment canary stops the campaign (`stopped_reason`)."""
        if self.deployment_canary:
            return self._end_deployment_canary(now=now, soak_seconds=soak_seconds)
        if self.in_flight or self.verifying:
            return None
        nothing_left = not self.has_pending() and not self.deferred
        if self.batch_left > 0 and not nothing_left:
            return None
        if not self.canary_passed:
            verdict = self.canary_verdict()
            if verdict == "failed":
                return self._canary_failed()
            if verdict == "empty" and not nothing_left:
                self.batch_left = 1  # nothing proven yet: one more canary host
                return None
            if verdict == "empty":
                return None  # nothing left to prove it with: the campaign ends, nothing passed
            self.canary_passed = True
        if nothing_left:
            return None
        self.batch += 1
        self.batch_left = self.limits.batch_size
        if soak_seconds > 0:  # after the canary too: batch 1 soaks as every later one does
            self.soak_until = now + timedelta(seconds=soak_seconds)
        return None

    def _end_deployment_canary(self, *, now: datetime, soak_seconds: float) -> str | None:
        verdict = self.canary_verdict()
        if verdict is None or self.abort_request is not None:
            return None  # an abort ends it: no verdict (its hosts were aborted or never started)
        if verdict == "failed":
            return self._canary_failed()
        if verdict == "empty":
            if self.stopped_reason is None:
                self.stopped_reason = self._canary_proves_nothing()
            return None
        self.canary_passed = True
        self.batch, self.batch_left = 1, self.limits.batch_size
        if soak_seconds > 0:  # the fleet's first batch soaks after the canary, as after a batch
            self.soak_until = now + timedelta(seconds=soak_seconds)
        return None

    def _canary_failed(self) -> str | None:
        if self.halted_reason is not None:
            return None
        failed = [f.host_id for f in self.recent_failed if f.host_id in self.canary_hosts]
        self.halted_reason = f"the canary failed on {', '.join(failed) or 'its hosts'}"
        return self.halted_reason

    def _canary_proves_nothing(self) -> str:
        skipped = {f.host_id: f.reason for f in self.recent_skipped}
        words = [
            f"{h}: already at the target"
            if self.state(h) == S.AT_TARGET
            else f"{h}: skipped ({skipped.get(h, '')})"
            for h in self.canary_pool[:10]
        ]
        deployment = next((c.deployment for c in self.changes if c.role == "canary"), "its deployment")
        fleet = next((c.deployment for c in self.changes if c.role == "fleet"), "the fleet's")
        taken = "; ".join(self._leftover_words(c) for c in self.changes if c.role == "leftover")
        if taken:  # a rerun after a terminated campaign: what its records say was done with them
            taken = f"; left by a campaign that no longer runs: {taken}"
        # No advice: whether another canary, or none, would be admitted only the admission can say.
        return (
            f"the canary cannot run: no host of DPUDeployment {deployment} is left to prove the "
            f"target ({'; '.join(words)}); {fleet} is not pointed by this campaign{taken}"
        )

    @staticmethod
    def _leftover_words(change: DeploymentChange) -> str:
        """A leftover change as its record says: put back, left as found (what it holds), or not yet."""
        name = f"{change.deployment} {change.field}"
        if change.restored_at is None:
            return f"{name} {change.value} -> {change.previous or '-'} to put back"
        if change.left_as_found:
            return f"{name} {change.note}"
        return f"{name} put back to {change.previous or '-'}"

    def canary_failed_now(self) -> bool:
        """A deployment canary failed (halted): its deployment is put back at once."""
        return self.deployment_canary and self.canary_verdict() == "failed"

    def canary_restore(self) -> list[int]:
        """The failed deployment canary's pointed change, to put back now (not one kept)."""
        if not self.canary_failed_now():
            return []
        return [i for i in self.pointed(("canary",)) if not self.changes[i].note]

    def running(self) -> tuple[str, str]:
        """The phase while hosts may start: the canary's, or running, with the batch and counts."""
        return (CANARY if not self.canary_passed else RUNNING), f"batch {self.batch}: {self.counts()}"
