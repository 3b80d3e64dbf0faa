"""The BMC lease's rules (`workflows/bmc_lease/state.py`, `LeaseBook`), without a server: first
come first served within the limit, known requests ignored, `acquire_now` only for the first in
line, holders reclaimed, when the loop wakes; and that the book continues as new as exactly the
contract's `BMCLeaseState`, its run's grant count left behind.

tests/test_bmc_lease.py and test_bmc_lease_one_step.py run the lease with real reboots; these
prove the rules, also as invariants of a Hypothesis state machine over random requests.
"""

from __future__ import annotations

import warnings

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from contracts.converter import DATA_CONVERTER
from contracts.models.bmc_lease import BMCLeaseState, LeaseHolder, LeaseRequest
from workflows.bmc_lease.state import RELEASED_REMEMBERED, LeaseBook


def holder(n: int) -> LeaseHolder:
    return LeaseHolder(workflow_id=f"reboot/h{n}/generation-1", run_id=f"run-{n}", request_id=f"q{n}")


def ask(n: int, limit: int = 1, reclaim: float = 30.0) -> LeaseRequest:
    return LeaseRequest(holder=holder(n), limit=limit, reclaim_check_seconds=reclaim)


def book(limit: int = 1) -> LeaseBook:
    return LeaseBook.of(BMCLeaseState(limit=limit))


def test_slots_go_first_come_first_served_within_the_limit() -> None:
    lease = book()
    for n in (1, 2, 3):
        lease.queue(ask(n, limit=2))
    assert lease.limit == 2 and lease.can_grant()
    assert [lease.grant_next().request_id for _ in range(2)] == ["q1", "q2"]
    assert not lease.can_grant() and [w.request_id for w in lease.waiting] == ["q3"]
    lease.forget("q1")
    assert lease.can_grant() and lease.grant_next() == holder(3)
    assert (lease.granted, lease.idle) == (3, False)


def test_a_known_request_is_ignored_and_the_latest_new_one_sets_the_limit() -> None:
    lease = book()
    lease.queue(ask(1, limit=3, reclaim=10))
    lease.queue(ask(1, limit=5))  # a retry of the same request: ignored, limit unchanged
    assert [w.request_id for w in lease.waiting] == ["q1"] and lease.limit == 3
    lease.grant_next()
    lease.queue(ask(1))  # a holder's duplicate
    lease.forget("q1")
    lease.queue(ask(1))  # a late duplicate after its release
    assert lease.idle and lease.released == ("q1",) and lease.reclaim_check_seconds == 10


def test_acquire_now_is_granted_only_to_the_first_in_line_with_a_free_slot() -> None:
    lease = book(limit=1)
    lease.queue(ask(1))
    assert lease.grant_now("q1")
    lease.queue(ask(2))
    assert not lease.grant_now("q2")  # the slot is taken: queued
    lease.queue(ask(3, limit=2))
    assert not lease.grant_now("q3")  # a slot is free now, but q2 asked first
    assert lease.grant_now("q1") and lease.granted == 1  # a holder's answer: as it stands


def test_given_back_requests_are_remembered_a_while() -> None:
    lease = book()
    for n in range(RELEASED_REMEMBERED + 10):
        lease.forget(f"q{n}")
    assert len(lease.released) == RELEASED_REMEMBERED and lease.released[-1] == f"q{RELEASED_REMEMBERED + 9}"


def test_closed_holders_are_reclaimed_and_counted() -> None:
    lease = book(limit=3)
    for n in (1, 2, 3):
        lease.queue(ask(n, limit=3))
        lease.grant_next()
    closed = lease.closed_holders({("reboot/h2/generation-1", "run-2"), ("elsewhere", "run-9")})
    assert closed == [holder(2)]
    for gone in closed:
        lease.reclaim(gone)
    assert [h.request_id for h in lease.holders] == ["q1", "q3"] and lease.reclaimed == 1


def test_the_loop_wakes_for_a_grant_an_idle_lease_or_a_change_of_queue() -> None:
    lease = book(limit=1)
    assert lease.should_wake(had_waiters=False)  # idle
    lease.queue(ask(1))
    lease.grant_next()
    assert not lease.should_wake(had_waiters=False)  # one holder, nobody waits
    lease.queue(ask(2))
    assert lease.should_wake(had_waiters=False)  # a first waiter
    assert not lease.should_wake(had_waiters=True)  # still waiting for the holder
    lease.forget("q1")
    assert lease.should_wake(had_waiters=True)  # its slot can be granted
    assert lease.wait_seconds(True, 600) == 30.0 and lease.wait_seconds(False, 600) == 600


def test_the_book_continues_as_new_as_the_contracts_state_without_its_runs_grants() -> None:
    lease = book(limit=2)
    lease.queue(ask(1, limit=2, reclaim=7))
    lease.grant_next()
    lease.queue(ask(2, limit=2, reclaim=7))
    plain = BMCLeaseState(limit=2, holders=(holder(1),), waiting=(holder(2),), reclaim_check_seconds=7)
    converter = DATA_CONVERTER.payload_converter
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # pydantic's serializer warns of a mismatched shape
        [carried] = converter.to_payloads([lease])
    assert carried.data == converter.to_payloads([plain])[0].data
    [read] = converter.from_payloads([carried], [BMCLeaseState])
    again = LeaseBook.of(read)
    assert again == LeaseBook.of(plain) and again.granted == 0 and lease.granted == 1


class Lease(RuleBasedStateMachine):
    """Runs ask (by signal or update), get granted, give back, close; the limit changes with the
    workers' setting. A slot is granted only when free and only to the first waiter; nobody
    holds and waits at once; a known request never queues twice."""

    def __init__(self) -> None:
        super().__init__()
        self.lease = book()
        self.asked: list[int] = []

    @rule(n=st.integers(0, 6), limit=st.integers(1, 3), now=st.booleans())
    def a_run_asks(self, n: int, limit: int, now: bool) -> None:
        before = self.lease.holds(f"q{n}")
        self.lease.queue(ask(n, limit=limit))
        if now:
            first = self.lease.waiting[0].request_id if self.lease.waiting else None
            free = len(self.lease.holders) < self.lease.limit
            answer = self.lease.grant_now(f"q{n}")
            assert answer == (before or (first == f"q{n}" and free))

    @rule()
    def the_loop_grants(self) -> None:
        while self.lease.can_grant():
            first = self.lease.waiting[0]
            assert len(self.lease.holders) < self.lease.limit
            assert self.lease.grant_next() == first

    @rule(n=st.integers(0, 6))
    def a_run_gives_back(self, n: int) -> None:
        self.lease.forget(f"q{n}")

    @rule(n=st.integers(0, 6))
    def a_run_closes_holding(self, n: int) -> None:
        for gone in self.lease.closed_holders({(holder(n).workflow_id, holder(n).run_id)}):
            self.lease.reclaim(gone)

    @invariant()
    def each_request_in_one_place(self) -> None:
        ids = [h.request_id for h in self.lease.holders] + [w.request_id for w in self.lease.waiting]
        assert len(ids) == len(set(ids))
        assert not set(ids) & set(self.lease.released)


TestLease = Lease.TestCase
TestLease.settings = settings(max_examples=60, stateful_step_count=20, deadline=None)
