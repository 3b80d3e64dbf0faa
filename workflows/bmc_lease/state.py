"""What one BMC's lease knows and decides: `LeaseBook`, the carried `BMCLeaseState` with its rules.

The book is the lease's whole state (its slots' holders in the order granted, the runs waiting
in the order they asked, the request ids recently given back, the limit and the reclaim period
of the latest request, the slots reclaimed) and the rules of the counting semaphore:

- first come, first served: a slot goes to the first waiter, and only while fewer than `limit`
  hold one; `acquire_now` is granted at once only when nobody queued before it;
- a request already known (holding, waiting, or given back recently) is ignored: activity
  retries resend it, and a late duplicate must not queue a run again;
- a holder whose run closed is dropped (reclaimed), as is one whose grant cannot be delivered;
- the lease's loop wakes when a slot can be granted, when it went idle, or when its first waiter
  came or its last one left (the reclaim check runs only while runs wait).

Why a subclass of the contract's model: the lease continues as new with the book itself, whose
data is exactly `BMCLeaseState` (the activities start the lease with one); the grants of this
run are a private attribute, never carried, because `GRANTS_PER_RUN` bounds each run's history.
No temporalio here, no clock, no I/O: tests/fast/test_bmc_lease_state.py asks the rules directly.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

from pydantic import PrivateAttr

from contracts.models.bmc_lease import BMCLeaseState, BMCLeaseStatus, LeaseHolder, LeaseRequest

RELEASED_REMEMBERED: Final = 200  # request ids given back that a late duplicate is checked against


class LeaseBook(BMCLeaseState):
    """The lease's state (carried over continue-as-new) and its decisions."""

    _granted: int = PrivateAttr(default=0)  # grants in this run (not carried)

    @classmethod
    def of(cls, state: BMCLeaseState) -> LeaseBook:
        """The book of a run started (or continued) with `state`."""
        return cls.model_validate(state.model_dump())

    @property
    def granted(self) -> int:
        """Grants in this run."""
        return self._granted

    @property
    def idle(self) -> bool:
        """No run holds a slot or waits for one: the lease may end."""
        return not self.holders and not self.waiting

    def holds(self, request_id: str) -> bool:
        return any(h.request_id == request_id for h in self.holders)

    def queue(self, request: LeaseRequest) -> None:
        """`acquire`: queue the request's run for a slot, unless the request is already known;
        its limit and reclaim period become the lease's (the latest request's apply)."""
        request_id = request.holder.request_id
        known = self.holds(request_id) or request_id in self.released
        if known or any(w.request_id == request_id for w in self.waiting):
            return
        self.limit = request.limit
        self.reclaim_check_seconds = request.reclaim_check_seconds
        self.waiting = (*self.waiting, request.holder)

    def can_grant(self) -> bool:
        """Someone waits and a slot is free."""
        return bool(self.waiting) and len(self.holders) < self.limit

    def grant_next(self) -> LeaseHolder:
        """The first waiter takes a slot (call only when `can_grant`)."""
        holder, self.waiting = self.waiting[0], self.waiting[1:]
        self.holders = (*self.holders, holder)
        self._granted += 1
        return holder

    def grant_now(self, request_id: str) -> bool:
        """`acquire_now`'s answer once the request is queued: granted when it is the first waiter
        and a slot is free (nobody queued before it), or when it holds one already."""
        if self.waiting and self.waiting[0].request_id == request_id and self.can_grant():
            self.grant_next()
        return self.holds(request_id)

    def forget(self, request_id: str) -> None:
        """A slot, or a place in the queue, given back (or taken back); remembered a while, so a
        late duplicate of its request is ignored."""
        self.holders = tuple(h for h in self.holders if h.request_id != request_id)
        self.waiting = tuple(w for w in self.waiting if w.request_id != request_id)
        if request_id not in self.released:
            self.released = (*self.released, request_id)[-RELEASED_REMEMBERED:]

    def reclaim(self, holder: LeaseHolder) -> None:
        """`holder`'s run is gone (closed, or its grant could not be delivered): its slot is freed."""
        self.reclaimed += 1
        self.forget(holder.request_id)

    def closed_holders(self, closed: Collection[tuple[str, str]]) -> list[LeaseHolder]:
        """The holders whose runs (workflow id, run id) are among `closed`."""
        return [h for h in self.holders if (h.workflow_id, h.run_id) in closed]

    def should_wake(self, had_waiters: bool) -> bool:
        """The loop's wait ends: a slot can be granted, the lease went idle, or the queue became
        empty or not (a first waiter also wakes it: its wait for holders to close is checked on)."""
        return self.can_grant() or self.idle or bool(self.waiting) != had_waiters

    def wait_seconds(self, had_waiters: bool, audit_seconds: float) -> float:
        """How long the loop waits before checking the holders: the reclaim period while runs
        wait, else the audit period."""
        return self.reclaim_check_seconds if had_waiters else audit_seconds

    def status(self) -> BMCLeaseStatus:
        return BMCLeaseStatus(
            limit=self.limit, holders=self.holders, waiting=self.waiting, granted=self._granted,
            reclaimed=self.reclaimed,
        )  # fmt: skip

    def slots_words(self) -> str:
        return f"{len(self.holders)} of {self.limit} slots held, {len(self.waiting)} waiting"
