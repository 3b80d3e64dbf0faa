"""Where each host of a campaign is, how it moves, and the counts: `HostLedger`, the part of the
campaign's state object (`CampaignState`, state.py, derives from it) that every decision moves
hosts through. No decision here: what to do with a host is the state's.

Bounded for 10,000 hosts: each host is one entry of the roster and one character of `states`
(its `HostState`); only the hosts in flight, put off or being read back are objects, and only
the newest RECENT_HOSTS failed, skipped and aborted hosts are named with their reason. Every
count is an integer kept as it changes; the failure budget's two counters are monotonic (every
failure ever, and those at the last resume), so a skip or a retry of a failed host never
subtracts. Cost: `pending` walks the states lazily (O(hosts) at worst per step); a move rewrites
`states` (O(hosts) bytes copied, microseconds at 10,000).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any, Final

from pydantic import PrivateAttr

from contracts.models.campaign import (
    RECENT_HOSTS,
    CampaignHost,
    CampaignProgress,
    Deferred,
    Failure,
    HostState,
    InFlight,
    short,
)

S = HostState
WAITING: Final = (S.PENDING, S.REQUEUED)
# A host's end in this campaign: nothing moves it again (`retry_failed` re-queues failed ones only).
ENDED_HERE: Final = (S.DONE, S.AT_TARGET, S.SKIPPED, S.ABORTED)

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
STOPPING: Final = "stopping"
COMPLETED: Final = "completed"
ABORTED: Final = "aborted"
STOPPED: Final = "stopped"


def name_recent(items: list[Failure], host_id: str, reason: str) -> None:
    """Name a host (with its reason, cut short) among the newest RECENT_HOSTS of `items`."""
    items.append(Failure(host_id=host_id, reason=short(reason)))
    del items[:-RECENT_HOSTS]


class HostLedger(CampaignProgress):
    """Each host's place and the counts, over the carried `CampaignProgress`."""

    _index: dict[str, int] = PrivateAttr(default_factory=dict)  # host id -> roster index
    _waiting: int = PrivateAttr(default=0)  # hosts pending or re-queued

    def model_post_init(self, context: Any, /) -> None:
        self._reindex()

    def _reindex(self) -> None:
        self._index = {h: i for i, h in enumerate(self.roster.ids)}
        self._waiting = sum(1 for c in self.states if c in WAITING)

    # -- where hosts are ------------------------------------------------------------------------
    @property
    def total(self) -> int:
        return len(self.roster)

    def state(self, host_id: str) -> str | None:
        index = self._index.get(host_id)
        return None if index is None else self.states[index]

    def _set(self, host_id: str, state: str) -> None:
        index = self._index[host_id]
        before = self.states[index]
        self._waiting += (state in WAITING) - (before in WAITING)
        self.states = self.states[:index] + state + self.states[index + 1 :]

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

    def waiting(self, host_id: str) -> bool:
        """Whether the host waits to start: pending, put off, or failed."""
        return self.state(host_id) in (S.PENDING, S.REQUEUED, S.DEFERRED, S.FAILED)

    # -- moves ----------------------------------------------------------------------------------
    def start(self, flight: InFlight) -> None:
        self._set(flight.host.host_id, S.IN_FLIGHT)
        self.in_flight[flight.host.host_id] = flight
        self.batch_left -= 1
        if not self.canary_passed and flight.host.host_id not in self.canary_hosts:
            self.canary_hosts.append(flight.host.host_id)

    def put_first(self, host_id: str) -> None:
        """A pending host waits before every other (the canary's)."""
        self._set(host_id, S.REQUEUED)

    def defer(self, deferred: Deferred) -> None:
        self._set(deferred.host_id, S.DEFERRED)
        self.deferred[deferred.host_id] = deferred

    def requeue_due(self, now: datetime) -> None:
        """Hosts put off whose retry time has come wait again, before the others."""
        for host_id in [h for h, d in self.deferred.items() if d.retry_at is not None and d.retry_at <= now]:
            del self.deferred[host_id]
            self._set(host_id, S.REQUEUED)

    def reached(self, host_id: str) -> None:
        """Already at the target: counted done, never touched."""
        self._set(host_id, S.AT_TARGET)
        self.already_at_target += 1

    def found_at_target(self, host_id: str) -> None:
        """A host read at the target before it is asked: already there, untouched (`reached`);
        or, retried after a failure, brought there by this campaign's earlier operation: done."""
        if self.retried.get(host_id):
            self.succeed(host_id)
        else:
            self.reached(host_id)

    def skip(self, host_id: str, reason: str) -> None:
        """Left out (assigned, claimed by another campaign, skipped by an operator, ...). A failed
        host skipped leaves the failed count; the failure stays in the budget's counters."""
        if self.state(host_id) == S.FAILED:  # one truth: no longer named failed, the failure still counted
            self.failed -= 1
            had = next((f.reason for f in reversed(self.recent_failed) if f.host_id == host_id), "")
            self.recent_failed = [f for f in self.recent_failed if f.host_id != host_id]
            reason += f" (it had failed{': ' + had if had else ''}; the failure budget still counts it)"
        self.deferred.pop(host_id, None)
        self._set(host_id, S.SKIPPED)
        self.skipped += 1
        name_recent(self.recent_skipped, host_id, reason)

    def fail(self, host_id: str, reason: str) -> None:
        """A host failed (its operation, its request refused, or not at the target after it)."""
        self._set(host_id, S.FAILED)
        self.failed += 1
        self.failures_total += 1
        self.attempts_total += 1
        if self._in_canary(host_id):
            self.canary_failed += 1
        name_recent(self.recent_failed, host_id, reason)

    def succeed(self, host_id: str) -> None:
        self._set(host_id, S.DONE)
        self.done += 1
        self.attempts_total += 1
        if self._in_canary(host_id):
            self.canary_done += 1

    def _in_canary(self, host_id: str) -> bool:
        """Whether the host's end counts for the canary: the canary runs (batch 0, where only its
        hosts start) and it is one of them; one whose ask was refused counts too (it never
        started: a refused canary host is a failed canary, not one that proved nothing)."""
        if self.canary_passed or self.batch != 0:
            return False
        if host_id not in self.canary_hosts:
            self.canary_hosts.append(host_id)
        return True

    def skip_unstarted(self, reason: str) -> int:
        """An ended campaign's hosts not started (aborted, stopped): skipped. Returns how many. A
        host it had put off (its entity busy) stays deferred, with when it would have been asked
        again and why: it waited for the host, it was never left out."""
        unstarted = [self.roster.ids[i] for i, c in enumerate(self.states) if c in (S.PENDING, S.REQUEUED)]
        for host_id in unstarted:
            self.skip(host_id, reason)
        return len(unstarted)

    def to_release(self, *, points_deployment: bool) -> tuple[str, ...]:
        """The hosts whose claim the campaign gives up while it runs on: those that ended here
        (done, at the target, skipped, aborted) not yet released, so another campaign may take
        them. None while nothing is claimed, and none for a campaign that points a DPUDeployment
        (BFB, flavor): its deployment may still select them, and a deployment never selects a host
        the campaign does not hold; it releases them at its end, once the deployment is put back."""
        if points_deployment or not self.claimed:
            return ()
        return tuple(
            self.roster.ids[i]
            for i, state in enumerate(self.states)
            if state in ENDED_HERE and self.released[i : i + 1] != "1"
        )

    def marked_released(self, host_ids: tuple[str, ...]) -> None:
        """These hosts' claims were released (`to_release`)."""
        marks = list(self.released.ljust(len(self.states), "0"))
        for host_id in host_ids:
            marks[self._index[host_id]] = "1"
        self.released = "".join(marks)

    def counts(self) -> str:
        """Done, in flight, failed, skipped (and aborted), in words: the campaign's details."""
        verifying = f", {len(self.verifying)} verifying" if self.verifying else ""
        return (
            f"{self.done + self.already_at_target}/{self.total} done ({self.already_at_target} already "
            f"at target), {len(self.in_flight)} in flight{verifying}, {self.failed} failed, "
            f"{self.skipped} skipped" + (f", {self.aborted} aborted" if self.aborted else "")
        )
