"""The campaign's ledger (workflows/campaign/progress.py), without a server: its state stays
bounded at 10,000 hosts, its failure budget counts monotonically, a percentage budget is of the
hosts selected, and a canary passes only with a host done and none failed.

The 10,000-host campaign itself, with 9,000 hosts skipped, is bench/bench_campaign.py; this
checks the same bound on the worst case the state can hold (every reason at its longest, the
most hosts in flight and put off).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

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
    Progress,
    Roster,
    SelectHostsInput,
    TargetKind,
)
from drivers.campaign import Fleet
from drivers.inventory import Inventory
from drivers.kube import Kube
from drivers.settings import Settings
from workflows.campaign import plan
from workflows.campaign.progress import Ledger

NOW = datetime(2026, 11, 28, 2, 0, tzinfo=UTC)
PAYLOAD_LIMIT = 2 * 1024 * 1024  # Temporal's, per payload (docs/DOMAIN.md section 6)
BOUND = 1024 * 1024  # what the campaign promises at 10,000 hosts: half the limit, for margin


def _host(i: int) -> CampaignHost:
    # Long ids and keys: a worst case, not the simulated site's short `host-001`.
    return CampaignHost(host_id=f"rack{i // 40:03d}-node{i:05d}.dc1", site="dc1", group=f"rack-{i // 40:03d}",
                        bmc=f"{i:010x}")  # fmt: skip


def _ledger(n: int) -> Ledger:
    ledger = Ledger(Progress())
    ledger.load(Roster.of([_host(i) for i in range(n)]))
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
    snapshot = ledger.snapshot()
    request = CampaignInput(
        name="bound", target=CampaignTarget(kind=TargetKind.REPROVISION),
        selection=HostSelection.made(HostSelection(hosts=ids)), requested_by="test", progress=snapshot,
    )  # fmt: skip
    # The continue-as-new input: the heaviest payload a campaign sends (the selection listed too).
    [payload] = DATA_CONVERTER.payload_converter.to_payloads([request])
    size = len(payload.data)
    assert size < BOUND < PAYLOAD_LIMIT, f"{size} bytes for 10,000 hosts"
    assert (ledger.skipped, len(snapshot.recent_skipped), len(snapshot.recent_failed)) == (9_000, 100, 50)
    assert all(len(f.reason) <= REASON_CHARS for f in snapshot.recent_skipped)
    # Carried whole: the next run counts the same.
    again = Ledger(Progress.model_validate_json(snapshot.model_dump_json()))
    assert (again.skipped, again.failed, len(again.in_flight), again.not_started()) == (9_000, 50, 800, 150)


def test_skipping_a_failed_host_after_a_resume_never_frees_the_budget() -> None:
    """The issue's case: resume a halt, skip a failed host, the next failure must halt."""
    budget = FailureBudget(max_failures=0)
    ledger = _ledger(5)
    a, b, c = ledger.roster.ids[:3]
    ledger.fail(a, "boom")
    assert plan.budget_exceeded(budget, ledger.budget_failures(), ledger.total)
    ledger.accept_halt()  # resume: counts from now
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
            ledger.accept_halt()
        elif action == "retry":
            ledger.retry_failed()
        after = ledger.budget_failures()
        assert after >= 0
        if action not in ("resume", "retry"):
            assert after >= before, f"{action} lowered the budget's count"
        counted = ledger.done + ledger.at_target + ledger.failed + ledger.skipped + ledger.not_started()
        assert counted == ledger.total, "every host is counted exactly once"


def test_a_percentage_budget_is_of_the_hosts_selected() -> None:
    budget = FailureBudget(max_percent=10)
    assert budget.allowed(100) == 10
    assert not plan.budget_exceeded(budget, 1, 100), "1 failure of 1 attempted is 1% of 100 hosts"
    assert not plan.budget_exceeded(budget, 10, 100)
    assert plan.budget_exceeded(budget, 11, 100)
    assert budget.allowed(5) == 0 and plan.budget_exceeded(budget, 1, 5)
    assert plan.describe_budget(budget, 3, 100) == "3 failed; halts past 10 (10% of 100 hosts)"


def _finish(ledger: Ledger, host_id: str, outcome: str) -> None:
    flight = InFlight(
        host=ledger.roster.host(ledger.index[host_id]), workflow_id=f"op/{host_id}", started_at=NOW
    )
    ledger.start(flight)
    ledger.absorb(
        HostFinished(host_id=host_id, workflow_id=flight.workflow_id, outcome=outcome), verify=False
    )


def test_a_canary_passes_only_with_a_host_done_and_none_failed() -> None:
    empty = _ledger(3)
    empty.batch_left = 1
    _finish(empty, empty.roster.ids[0], "expired: not approved within 3600 s")
    assert empty.canary_verdict() == "empty", "a canary whose only host was skipped proves nothing"
    failed = _ledger(3)
    failed.batch_left = 2
    _finish(failed, failed.roster.ids[0], "completed")
    _finish(failed, failed.roster.ids[1], "failed: DPU in Error")
    assert failed.canary_verdict() == "failed"
    passed = _ledger(3)
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


async def test_the_selection_of_10000_hosts_with_9000_assigned_fits_too(tmp_path: Path) -> None:
    """The selection's result (one activity result: one payload), as `Fleet.select` makes it from
    a site file of 10,000 hosts, 9,000 with an instance (each its own)."""
    credentials = tmp_path / "bmc.json"
    credentials.write_text('{"username": "u", "password": "p"}')
    lines = ["name: bound", "hosts:"]
    for i in range(10_000):
        host = _host(i)
        lines += [
            f"  - id: {host.host_id}",
            f"    groups: [{host.group}]",
            f"    bmc: {{endpoint: 'https://bmc-{host.host_id}.example.net', "
            f"credentials: {{file: '{credentials}'}}}}",
        ]
        if i % 10:
            lines.append(f"    instance: vm-{i:05d}-{'x' * 20}")
    site = tmp_path / "site.yaml"
    site.write_text("\n".join(lines) + "\n")
    settings = Settings(site_file=site, inventory="site")
    kube = Kube(settings)

    async def every_host() -> set[str]:
        return {_host(i).host_id for i in range(10_000)}

    fleet = Fleet(Inventory(settings, kube), kube, dpf_hosts=every_host)
    result = await fleet.select(
        SelectHostsInput(
            selection=HostSelection(all=True),
            target=CampaignTarget(kind=TargetKind.REPROVISION),
            skip_assigned=True,
        )
    )
    assert sum(len(g.host_ids) for g in result.left_out) == 9_000
    [payload] = DATA_CONVERTER.payload_converter.to_payloads([result])
    assert len(payload.data) < BOUND, f"{len(payload.data)} bytes"
