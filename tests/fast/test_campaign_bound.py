"""The campaign's state (workflows/campaign/state.py), without a server: it stays bounded at
10,000 hosts, its failure budget counts monotonically, a percentage budget is of the hosts
selected, and a canary passes only with a host done and none failed.

The 10,000-host campaign itself, with 9,000 hosts skipped, is bench/bench_campaign.py; this
checks the same bound on the worst case the state can hold (every reason at its longest, the
most hosts in flight and put off, hosts retried). The selection's bound, which reads a site
file, is tests/test_campaign_selection_bound.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.converter import DATA_CONVERTER
from contracts.models.campaign import (
    REASON_CHARS,
    CampaignHost,
    CampaignInput,
    CampaignTarget,
    Deferred,
    FailureBudget,
    HostFinished,
    HostSelection,
    InFlight,
    Limits,
    Roster,
    TargetKind,
)
from workflows.campaign import plan
from workflows.campaign.admission import Admission
from workflows.campaign.state import CampaignState

NOW = datetime(2026, 11, 28, 2, 0, tzinfo=UTC)
PAYLOAD_LIMIT = 2 * 1024 * 1024  # Temporal's, per payload (docs/DOMAIN.md section 6)
BOUND = 1024 * 1024  # what the campaign promises at 10,000 hosts: half the limit, for margin


def _host(i: int) -> CampaignHost:
    # Long ids and keys: a worst case, not the simulated site's short `host-001`.
    return CampaignHost(host_id=f"rack{i // 40:03d}-node{i:05d}.dc1", site="dc1", group=f"rack-{i // 40:03d}",
                        bmc=f"{i:010x}")  # fmt: skip


def _ledger(n: int, canary: int = 0) -> CampaignState:
    ledger = CampaignState.first(asker=f"campaign/bound@{'r' * 36}", limits=Limits(), now=NOW)
    ledger.admitted(Admission(roster=Roster.of([_host(i) for i in range(n)])), canary)
    return ledger


def test_the_state_of_10000_hosts_fits_far_under_the_payload_limit() -> None:
    ledger = _ledger(10_000)
    long_reason = "x" * 5 * REASON_CHARS
    ids = ledger.roster.ids
    for host_id in ids[:9_000]:
        ledger.skip(host_id, f"instance assigned: {long_reason}")
    for i, host_id in enumerate(ids[9_000:9_800]):
        ledger.start(InFlight(host=ledger.roster.host(9_000 + i), workflow_id=f"reprovision/{host_id}",
                              started_at=NOW))  # fmt: skip
    for host_id in ids[9_800:9_900]:
        ledger.defer(Deferred(host_id=host_id, retry_at=NOW + timedelta(minutes=5), reason=long_reason))
    for host_id in ids[9_900:9_950]:
        ledger.fail(host_id, long_reason)
    ledger.retry_failed()  # 50 hosts with a retry count, each failing again
    for host_id in ids[9_900:9_950]:
        ledger.fail(host_id, long_reason)
    request = CampaignInput(
        name="bound", target=CampaignTarget(kind=TargetKind.REPROVISION),
        selection=HostSelection.made(HostSelection(hosts=ids)), requested_by="test", progress=ledger,
    )  # fmt: skip
    # The continue-as-new input: the heaviest payload a campaign sends (the selection listed too).
    [payload] = DATA_CONVERTER.payload_converter.to_payloads([request])
    size = len(payload.data)
    assert size < BOUND < PAYLOAD_LIMIT, f"{size} bytes for 10,000 hosts"
    assert (ledger.skipped, len(ledger.recent_skipped), len(ledger.recent_failed)) == (9_000, 100, 100)
    assert all(len(f.reason) <= REASON_CHARS for f in ledger.recent_skipped)
    # Carried whole: the next run counts the same.
    [carried] = DATA_CONVERTER.payload_converter.from_payloads([payload], [CampaignInput])
    assert carried.progress is not None
    again = CampaignState.carried(carried.progress)
    assert (again.skipped, again.failed, len(again.in_flight), again.not_started()) == (9_000, 50, 800, 150)


def _resume_a_halt(ledger: CampaignState) -> None:
    ledger.halt("failure budget spent")
    ledger.resume()


def test_skipping_a_failed_host_after_a_resume_never_frees_the_budget() -> None:
    """The issue's case: resume a halt, skip a failed host, the next failure must halt."""
    budget = FailureBudget(max_failures=0)
    ledger = _ledger(5)
    a, b, c = ledger.roster.ids[:3]
    ledger.fail(a, "boom")
    assert plan.budget_exceeded(budget, ledger.budget_failures(), ledger.total)
    _resume_a_halt(ledger)  # counts from now
    assert ledger.budget_failures() == 0
    ledger.skip(a, "skipped by op")
    assert ledger.budget_failures() == 0 and ledger.failed == 0 and ledger.skipped == 1
    ledger.fail(b, "boom again")
    assert ledger.budget_failures() == 1
    assert plan.budget_exceeded(budget, ledger.budget_failures(), ledger.total), "the next failure halts"
    del c


ACTIONS = st.lists(
    st.tuples(st.sampled_from(["fail", "skip", "resume", "retry", "succeed"]), st.integers(0, 19)),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(ACTIONS)
def test_the_budget_never_goes_below_zero_and_only_a_resume_or_retry_lowers_it(
    actions: list[tuple[str, int]],
) -> None:
    ledger = _ledger(20)
    for action, index in actions:
        host_id = ledger.roster.ids[index]
        before = ledger.budget_failures()
        state = ledger.state(host_id)
        if action == "fail" and state in ("p", "q"):
            ledger.fail(host_id, "x")
        elif action == "succeed" and state in ("p", "q"):
            ledger.succeed(host_id)
        elif action == "skip" and ledger.waiting(host_id):
            ledger.skip(host_id, "x")
        elif action == "resume":
            _resume_a_halt(ledger)
        elif action == "retry":
            ledger.retry_failed()
        after = ledger.budget_failures()
        assert after >= 0
        if action not in ("resume", "retry"):
            assert after >= before, f"{action} lowered the budget's count"
        counted = (
            ledger.done + ledger.already_at_target + ledger.failed + ledger.skipped + ledger.not_started()
        )
        assert counted == ledger.total, "every host is counted exactly once"


def test_a_percentage_budget_is_of_the_hosts_selected() -> None:
    budget = FailureBudget(max_percent=10)
    assert budget.allowed(100) == 10
    assert not plan.budget_exceeded(budget, 1, 100), "1 failure of 1 attempted is 1% of 100 hosts"
    assert not plan.budget_exceeded(budget, 10, 100)
    assert plan.budget_exceeded(budget, 11, 100)
    assert budget.allowed(5) == 0 and plan.budget_exceeded(budget, 1, 5)
    assert plan.describe_budget(budget, 3, 100) == "3 failures counted; halts past 10 (10% of 100 hosts)"


def _finish(ledger: CampaignState, host_id: str, outcome: str) -> None:
    flight = InFlight(
        host=ledger.roster.host(ledger.roster.ids.index(host_id)), workflow_id=f"op/{host_id}", started_at=NOW
    )
    ledger.start(flight)
    ledger.absorb(
        HostFinished(host_id=host_id, workflow_id=flight.workflow_id, outcome=outcome), verify=False
    )


def test_a_canary_passes_only_with_a_host_done_and_none_failed() -> None:
    empty = _ledger(3, canary=1)
    empty.batch_left = 1
    _finish(empty, empty.roster.ids[0], "expired: not approved within 3600 s")
    assert empty.canary_verdict() == "empty", "a canary whose only host was skipped proves nothing"
    failed = _ledger(3, canary=1)
    failed.batch_left = 2
    _finish(failed, failed.roster.ids[0], "completed")
    _finish(failed, failed.roster.ids[1], "failed: DPU in Error")
    assert failed.canary_verdict() == "failed"
    passed = _ledger(3, canary=1)
    passed.batch_left = 1
    _finish(passed, passed.roster.ids[0], "completed")
    assert passed.canary_verdict() == "passed"


def test_limits_hold_over_a_lazy_queue() -> None:
    ledger = _ledger(50)
    chosen = plan.pick_starts(ledger.pending(), [], Limits(max_in_flight=7, max_per_group=4), 10)
    assert (
        len(chosen) == 7
        and max(sum(1 for h in chosen if h.group == g) for g in {h.group for h in chosen}) <= 4
    )
