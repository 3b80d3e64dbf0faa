"""The campaign's decisions (workflows/campaign/state.py, `CampaignState`), without a server: the
canary's verdict, when a batch ends and the next soaks, the failure budget, what each entity's
answer and each operation's end does to a host, when a put-off host is asked again and when the
campaign wakes, what abort, pause, resume, retry_failed and skip do, which deployment changes are
due, the request ids, and the state carried whole over continue-as-new through the data
converter. The end-to-end tests (tests/test_campaign*.py) show the same decisions wired to the
runbook; these show each rule alone.
"""

from __future__ import annotations

import warnings
from datetime import UTC, datetime, timedelta

from contracts.converter import DATA_CONVERTER
from contracts.models.campaign import (
    AbortRequest,
    CampaignHost,
    CampaignInput,
    CampaignPolicy,
    CampaignTarget,
    ClaimResult,
    Deferred,
    DeploymentChange,
    Failure,
    FailureBudget,
    HostFinished,
    HostGroup,
    HostRequestOutcome,
    HostSelection,
    HostsQuery,
    HostState,
    Limits,
    Roster,
    SelectHostsResult,
    TargetKind,
    Window,
)
from contracts.models.control import OperatorRequest
from drivers.campaign import host_reading
from workflows.campaign import admission, views
from workflows.campaign.admission import Admission
from workflows.campaign.state import (
    ABORTED_AWAITING_APPROVAL,
    ABORTING,
    HALTED,
    OUTSIDE_WINDOW,
    PAUSED,
    SOAKING,
    CampaignState,
)

NOW = datetime(2026, 11, 28, 2, 0, tzinfo=UTC)  # a Saturday
ASKER = "campaign/fleet@0b7a-first-run"
OPERATOR = OperatorRequest(requested_by="alice", reason="night shift")
S = HostState


def _input(**changes: object) -> CampaignInput:
    values: dict[str, object] = {
        "name": "fleet",
        "target": CampaignTarget(kind=TargetKind.REPROVISION),
        "selection": HostSelection(all=True),
        "requested_by": "ops@dc",
        "policy": CampaignPolicy(busy_retry_seconds=300, sweep_seconds=600),
    }
    values.update(changes)
    return CampaignInput.model_validate(values)


def _state(n: int = 5, *, canary: int = 0, batch: int = 2, in_flight: int = 10) -> CampaignState:
    """`n` hosts h0.. (no group, no shared BMC limit), selected with a canary of `canary`."""
    limits = Limits(batch_size=batch, max_in_flight=in_flight, max_per_bmc=0)
    state = CampaignState.first(asker=ASKER, limits=limits, now=NOW)
    state.admitted(Admission(roster=Roster.of([CampaignHost(host_id=f"h{i}") for i in range(n)])), canary)
    return state


def _answer(state: CampaignState, outcomes: dict[str, str], **changes: object) -> str | None:
    """The entities' answers to a round that asked these hosts (`outcome` by host)."""
    hosts = [state.roster.host(state.roster.ids.index(h)) for h in outcomes]
    answers = [
        HostRequestOutcome(host_id=h, outcome=o, workflow_id=f"reprovision/{h}", message=f"{o} ({h})")  # type: ignore[arg-type]
        for h, o in outcomes.items()
    ]
    return state.answered(answers, hosts, now=NOW, start=_input(**changes))


def _end(state: CampaignState, host_id: str, outcome: str, budget: FailureBudget | None = None) -> str | None:
    """The entity's `host_finished` for the host's operation, counted (no read-back)."""
    state.heard.append(HostFinished(host_id=host_id, workflow_id=f"reprovision/{host_id}", outcome=outcome))
    return state.absorb_heard(verify=False, budget=budget or FailureBudget())


def _run(state: CampaignState, *outcomes: tuple[str, str]) -> None:
    """Start these hosts and end each with its outcome."""
    _answer(state, {h: "started" for h, _ in outcomes})
    for host_id, outcome in outcomes:
        _end(state, host_id, outcome)


# -- the canary and batches -------------------------------------------------------------------------


def test_a_canary_with_a_host_done_passes_and_the_first_batch_soaks_first() -> None:
    """The soak follows the canary as it follows every batch (issue 38: with `--soak 5m` batch 1
    started ~10 s after the canary ended; two attackers read README's soak as after the canary)."""
    state = _state(canary=1, batch=2)
    assert [h.host_id for h in state.to_start()] == ["h0"], "the canary is one host"
    _answer(state, {"h0": "started"})
    assert state.end_batch_if_done(now=NOW, soak_seconds=600) is None and not state.canary_passed
    assert state.canary_verdict() is None, "not ended while its host runs"
    _end(state, "h0", "completed")
    assert state.canary_verdict() == "passed"
    assert state.end_batch_if_done(now=NOW, soak_seconds=600) is None
    soaked = NOW + timedelta(seconds=600)
    assert (state.canary_passed, state.batch, state.batch_left, state.soak_until) == (True, 1, 2, soaked)
    assert state.blocked(NOW, ()) == (SOAKING, "batch 1 starts at 2026-11-28T02:10:00Z")
    assert state.blocked(soaked, ()) is None
    assert [h.host_id for h in state.to_start()] == ["h1", "h2"]


def test_a_failed_canary_halts_once_naming_its_hosts() -> None:
    state = _state(2, canary=2)
    _run(state, ("h0", "completed"), ("h1", "failed: DPU in Error"))
    assert state.canary_verdict() == "failed"
    halt = state.end_batch_if_done(now=NOW, soak_seconds=0)
    assert halt == "the canary failed on h1" and state.halted_reason == halt
    assert state.end_batch_if_done(now=NOW, soak_seconds=0) is None, "halted once"
    assert state.blocked(NOW, ()) == (HALTED, f"{halt}; waiting for resume, retry_failed or abort")
    assert not state.over(), "every host ended, but a halt waits for an operator"


def test_a_canary_that_proved_nothing_takes_the_next_host() -> None:
    state = _state(4, canary=1)
    _answer(state, {"h0": "assigned"})  # skipped before it started: the canary still has room
    assert [h.host_id for h in state.to_start()] == ["h1"]
    _answer(state, {"h1": "awaiting-approval"})
    _end(state, "h1", "expired: not approved within 3600 s")  # started, then skipped: proves nothing
    assert state.canary_verdict() == "empty"
    state.end_batch_if_done(now=NOW, soak_seconds=0)
    assert (state.canary_passed, state.batch_left) == (False, 1), "one more canary host"
    _run(state, ("h2", "completed"))
    state.end_batch_if_done(now=NOW, soak_seconds=0)
    assert state.canary_passed and state.batch == 1


def test_a_batch_ends_when_its_hosts_ended_and_the_next_one_soaks_first() -> None:
    state = _state(6, batch=2)
    _answer(state, {"h0": "started", "h1": "started"})
    _end(state, "h0", "completed")
    assert state.end_batch_if_done(now=NOW, soak_seconds=600) is None and state.batch == 1, "h1 runs"
    _end(state, "h1", "completed")
    state.end_batch_if_done(now=NOW, soak_seconds=600)
    assert (state.batch, state.batch_left, state.soak_until) == (2, 2, NOW + timedelta(seconds=600))
    assert state.blocked(NOW, ()) == (SOAKING, "batch 2 starts at 2026-11-28T02:10:00Z")
    assert state.blocked(NOW + timedelta(seconds=600), ()) is None


# -- the failure budget -----------------------------------------------------------------------------


def test_the_budget_halts_past_its_bound_counting_hosts_that_wait_for_an_operator() -> None:
    budget = FailureBudget(max_failures=1)
    state = _state(4)
    _answer(state, {"h0": "started", "h1": "started", "h2": "started"})
    assert _end(state, "h0", "failed: boom", budget) is None, "1 failure is within a budget of 1"
    waits = Failure(host_id="h1", reason="needs an operator: BMC refused")
    halt = state.swept((), (waits,), budget)
    assert halt == "failure budget spent: 2 failures counted; halts past 1", "the waiting host counts"
    assert state.check_budget(budget) is None, "halted once"
    state.resume()
    assert state.budget_failures() == 0, "a resume counts from now and accepts the waiting host"
    assert _end(state, "h2", "failed: again", budget) is None
    assert _end(state, "h1", "failed: gave up", budget) is not None, "the next failure past 1 halts"


def test_a_refused_request_fails_its_host_and_may_spend_the_budget() -> None:
    state = _state(3)
    halt = _answer(state, {"h0": "refused", "h1": "refused"}, budget=FailureBudget(max_failures=0))
    assert halt == "failure budget spent: 1 failure counted; halts past 0", "halts at the first refusal"
    assert state.failed == 2 and [f.reason for f in state.recent_failed] == [
        "refused: refused (h0)",
        "refused: refused (h1)",
    ]


# -- what each answer and each ending does ----------------------------------------------------------


def test_each_answer_of_an_entity_moves_its_host() -> None:
    state = _state(8)
    state.skip_host("h7", OPERATOR)  # skipped by an operator while the request was out
    _answer(
        state,
        {"h0": "started", "h1": "awaiting-approval", "h2": "busy", "h3": "not-asked",
         "h4": "unanswered", "h5": "assigned", "h6": "refused", "h7": "started"},
    )  # fmt: skip
    assert state.states == "rrwpssfs"
    assert state.in_flight["h1"].awaiting_approval and not state.in_flight["h0"].awaiting_approval
    assert state.deferred["h2"] == Deferred(
        host_id="h2", retry_at=NOW + timedelta(seconds=300), reason="busy (h2)"
    )
    assert (
        state.recent_skipped[-2].reason == "asked, but no answer before the abort (unanswered (h4)): check h4"
    )
    assert state.recent_skipped[-1].reason == "instance assigned: assigned (h5)"
    assert state.next_sweep == NOW + timedelta(seconds=600), "hosts in flight are swept"


def test_a_host_put_off_says_when_it_is_asked_again_and_why_and_no_other_host_does() -> None:
    state = _state(3)
    _answer(state, {"h0": "started", "h1": "busy"})
    assert views.deferral(state, "h1") == (
        Deferred(host_id="h1", retry_at=NOW + timedelta(seconds=300), reason="busy (h1)"),
    )
    assert views.deferral(state, "h0") == () and views.deferral(state, "h9") == ()


def test_how_an_operation_ended_counts_and_a_stale_or_duplicate_end_is_ignored() -> None:
    state = _state(5)
    _answer(state, {h: "started" for h in ("h0", "h1", "h2", "h3")})
    _end(state, "h0", "completed")
    _end(state, "h0", "completed")  # the sweep after the signal
    state.heard.append(HostFinished(host_id="h1", workflow_id="reprovision/h1-earlier", outcome="failed: x"))
    _end(state, "h2", "expired: not approved within 3600 s")
    _end(state, "h3", "failed: DPU in Error")
    assert state.states == "drsfp" and (state.done, state.failed, state.skipped) == (1, 1, 1)
    state.heard.append(HostFinished(host_id="h1", workflow_id="reprovision/h1", outcome="completed"))
    state.absorb_heard(verify=True, budget=FailureBudget())
    assert state.states[1] == S.VERIFYING and state.verifying == ["h1"], "read back before done"
    assert state.next_sweep is None, "nothing in flight: no sweep"
    state.read_back(["h1"], set(), {"h1": "node-h1: bfb old"}, _input())
    assert state.recent_failed[-1].reason == "completed, but not at reprovision: reads node-h1: bfb old"


def test_a_busy_host_is_asked_again_at_its_retry_time_before_the_others() -> None:
    state = _state(4, batch=4)
    _answer(state, {"h0": "busy"})
    state.requeue_due(NOW + timedelta(seconds=299))
    assert state.state("h0") == S.DEFERRED and [h.host_id for h in state.pending()] == ["h1", "h2", "h3"]
    state.requeue_due(NOW + timedelta(seconds=300))
    assert [h.host_id for h in state.pending()] == ["h0", "h1", "h2", "h3"], "retried ones first"


def test_the_campaign_wakes_for_the_first_retry_soak_window_edge_or_sweep_and_never_in_the_past() -> None:
    state = _state(4)
    assert state.next_wake(NOW, ()) is None, "nothing to wait for"
    state.next_sweep = NOW + timedelta(seconds=600)
    assert state.next_wake(NOW, ()) is None, "no sweep without hosts in flight"
    weekend = (Window(days=(5,), start_minute=180, end_minute=240),)  # Saturday 03:00-04:00
    assert state.next_wake(NOW, weekend) == NOW + timedelta(hours=1), "hosts wait for the window"
    _answer(state, {"h0": "busy", "h1": "started"})
    assert state.next_wake(NOW, ()) == NOW + timedelta(seconds=300), "the retry, before the sweep"
    state.soak_until = NOW + timedelta(seconds=60)
    assert state.next_wake(NOW, weekend) == NOW + timedelta(seconds=60)
    assert state.next_wake(NOW + timedelta(seconds=60), ()) == NOW + timedelta(seconds=300), "a past soak"
    assert state.next_wake(NOW + timedelta(seconds=400), ()) == NOW + timedelta(seconds=600), "the sweep"
    assert state.blocked(NOW + timedelta(seconds=61), weekend) == (
        OUTSIDE_WINDOW,
        "next window opens 2026-11-28T03:00:00Z",
    )


# -- the operator's updates -------------------------------------------------------------------------


def test_pause_stops_new_starts_and_resume_goes_on() -> None:
    state = _state(3)
    _answer(state, {"h0": "started"})
    assert state.pause(OPERATOR) == "paused: no new host starts; 1 host in flight finishes"
    assert state.blocked(NOW, ()) == (PAUSED, "by alice; 1 in flight")
    assert state.resume() == "resumed" and state.blocked(NOW, ()) is None


def test_resuming_a_failed_canary_takes_it_as_it_is() -> None:
    state = _state(4, canary=1)
    _run(state, ("h0", "failed: DPU in Error"))
    halt = state.end_batch_if_done(now=NOW, soak_seconds=0)
    assert state.resume() == f"resumed after the halt ({halt}); the failure budget counts from now"
    assert state.canary_passed and state.halted_reason is None and state.budget_failures() == 0


def test_an_abort_lets_the_running_hosts_finish_then_skips_the_rest() -> None:
    state = _state(4)
    _answer(state, {"h0": "started"})
    request = AbortRequest(requested_by="bob", reason="bad BFB")
    state.take_abort(request)
    state.abort_request = request  # as the kernel's `accept_abort` records it
    assert (
        state.abort_promise(keep_changes=False)
        == "aborting: no new host starts; 1 in flight, letting them finish"
    )
    assert state.blocked(NOW, ()) == (ABORTING, "asked by bob; 1 in flight")
    assert not state.over(), "h0 still runs"
    assert state.abort_escalates(AbortRequest(requested_by="bob", cancel_running=True))
    assert not state.abort_escalates(request), "a second plain abort adds nothing"
    _end(state, "h0", "completed")
    assert state.over()
    assert state.ending(keep=False) == [] and state.states == "dsss", "unstarted hosts skipped"
    assert state.recent_skipped[-1].reason == "not started: aborted"


def test_an_abort_that_cancels_the_running_hosts_sends_once_and_counts_them_aborted() -> None:
    budget = FailureBudget(max_failures=0)
    state = _state(3)
    _answer(state, {"h0": "started", "h1": "awaiting-approval"})
    state.take_abort(AbortRequest(requested_by="bob", cancel_running=True))
    running, waiting = state.to_abort()
    assert ([f.host.host_id for f in running], [f.host.host_id for f in waiting]) == (["h0"], ["h1"])
    assert not state.cancel_running, "sent once"
    assert _end(state, "h0", "aborted by bob: campaign fleet aborted", budget) is None, "no budget spent"
    _end(state, "h1", "withdrawn by bob")
    assert (state.aborted, state.failed, state.skipped) == (1, 0, 1)
    assert state.recent_skipped[-1].reason == f"{ABORTED_AWAITING_APPROVAL}: withdrawn by bob"


def test_retry_failed_puts_the_failed_hosts_first_with_new_request_ids_and_clears_the_halt() -> None:
    state = _state(4, canary=2)
    _run(state, ("h0", "failed: a"), ("h1", "failed: b"))
    state.end_batch_if_done(now=NOW, soak_seconds=0)
    before = state.request_id("h0")
    assert state.retry_refusal() is None
    assert state.retry_failed() == "retrying 2 failed hosts"
    assert [h.host_id for h in state.pending()][:2] == ["h0", "h1"]
    assert (state.failed, state.halted_reason, state.budget_failures()) == (0, None, 0)
    assert (state.batch_left, state.canary_failed, state.canary_passed) == (2, 0, False), "the canary again"
    assert state.request_id("h0") != before and state.request_id("h2") == f"{ASKER}/h2#0"
    assert state.retry_refusal() == "no host has failed"


def test_skip_refuses_a_running_or_unknown_host_and_a_skipped_failure_stays_in_the_budget() -> None:
    state = _state(3)
    _answer(state, {"h0": "started", "h1": "refused"})
    assert state.skip_refusal("h0") == "host h0 is in flight (reprovision/h0); abort that operation instead"
    assert (
        state.skip_refusal("nobody")
        == "host nobody is not waiting in this campaign (done, skipped or unknown)"
    )
    assert state.skip_refusal("h1") is None
    assert state.skip_host("h1", OPERATOR) == "h1 skipped by alice: night shift"
    assert (state.failed, state.skipped, state.budget_failures()) == (0, 1, 1)
    assert state.skip_refusal("h1") is not None, "skipped once"


def test_new_limits_pace_the_next_starts() -> None:
    state = _state(6, batch=6, in_flight=6)
    message = state.set_limits(Limits(batch_size=6, max_in_flight=2, max_per_bmc=0))
    before, after = (
        "(batch 6, in flight 6, per group -, per BMC -)",
        "(batch 6, in flight 2, per group -, per BMC -)",
    )
    assert message == f"limits {before} -> {after}"
    assert [h.host_id for h in state.to_start()] == ["h0", "h1"]


# -- before the first host, and what it changes outside its hosts -----------------------------------


def test_hosts_left_out_or_held_are_skipped_and_a_canary_without_hosts_is_no_canary() -> None:
    start = _input(canary=5, limits=Limits(batch_size=3))
    roster = Roster.of([CampaignHost(host_id=f"h{i}") for i in range(3)])
    selected = SelectHostsResult(roster=roster, assigned=("h0",))
    assert admission.to_claim(start, selected) == ("h1", "h2")
    other = "claimed by running campaign campaign/other"
    held = ClaimResult(held=(HostGroup(reason=other, host_ids=("h1",)),))
    state = CampaignState.first(asker=ASKER, limits=start.limits, now=NOW)
    state.admitted(admission.admit(start, selected, held, None, NOW), start.canary)
    assert (state.states, state.batch_left, state.canary_passed) == ("ssp", 1, False), "a canary of 1 left"
    assert state.recent_skipped[-1].reason == "claimed by running campaign campaign/other"
    everyone = ClaimResult(held=(HostGroup(reason="claimed by campaign/other", host_ids=("h1", "h2")),))
    state = CampaignState.first(asker=ASKER, limits=start.limits, now=NOW)
    state.admitted(admission.admit(start, selected, everyone, None, NOW), start.canary)
    assert (state.canary_passed, state.batch, state.batch_left) == (True, 1, 3), "no host left: no canary"
    assert state.next_step(NOW, start).over


def _change(role: str, **changes: object) -> DeploymentChange:
    values: dict[str, object] = {
        "deployment": f"{role}-dep",
        "field": "bfb",
        "previous": "bf-old",
        "value": "bf-new",
        "role": role,
    }
    values.update(changes)
    return DeploymentChange.model_validate(values)


def _deployment_state(n: int, pool: tuple[str, ...]) -> CampaignState:
    """`n` hosts h0.. of a BFB campaign whose canary deployment selects `pool`."""
    state = CampaignState.first(asker=ASKER, limits=Limits(batch_size=2, max_per_bmc=0), now=NOW)
    roster = Roster.of([CampaignHost(host_id=f"h{i}") for i in range(n)])
    changes = (_change("canary"), _change("fleet"))
    state.admitted(Admission(roster=roster, changes=changes, canary_pool=pool), 1)
    return state


def test_while_a_deployment_canary_runs_only_the_canary_deployments_hosts_start() -> None:
    state = _deployment_state(4, ("h2",))
    assert [h.host_id for h in state.to_start()] == ["h2"]
    _answer(state, {"h2": "started"})
    assert state.to_start() == [], "a fleet host waits for its deployment to be pointed"


def test_a_deployment_campaign_points_the_canary_first_and_the_fleet_once_it_passed() -> None:
    state = _deployment_state(4, ("h2", "h3"))
    assert state.due_points() == [0], "only the canary's deployment while the canary runs"
    assert [h.host_id for h in state.to_start()] == ["h2", "h3"], "its hosts only, first"
    state.changes[0] = state.changes[0].model_copy(update={"pointed_at": NOW})
    _run(state, ("h2", "completed"), ("h3", "failed: bad"))
    assert state.end_batch_if_done(now=NOW, soak_seconds=0) == "the canary failed on h3"
    assert state.canary_restore() == [0], "a failed canary's deployment is put back"
    assert state.keep(0) == "kept canary-dep bfb=bf-new" and state.canary_restore() == []
    assert state.resume_refusal() is not None, "resuming would point the fleet without a passed canary"
    state.retry_failed()
    assert state.due_points() == [], "the canary's deployment is still pointed"
    _run(state, ("h3", "completed"))
    state.end_batch_if_done(now=NOW, soak_seconds=600)
    assert state.canary_passed and state.due_points() == [1], "the fleet's, once the canary passed"
    assert state.soak_until == NOW + timedelta(seconds=600), "the fleet's first batch soaks first"
    assert state.pointed(("canary", "fleet")) == [0]


def test_a_deployment_canary_that_proves_nothing_stops_the_campaign_and_puts_back_its_deployment() -> None:
    state = _deployment_state(3, ("h0",))
    step = state.next_step(NOW, _input())
    assert (step.point, [h.host_id for h in step.start]) == ([0], ["h0"])
    state.changes[0] = state.changes[0].model_copy(update={"pointed_at": NOW})
    state.found_at_target("h0")  # its read before the ask
    step = state.next_step(NOW, _input())
    assert step.over and state.outcome() == "stopped" and not state.canary_passed
    assert state.stopped_reason is not None and "h0: already at the target" in state.stopped_reason
    assert state.ending(keep=False) == [0], "the canary's deployment is put back; the fleet's never pointed"
    assert state.states == "tss"


# -- request ids and continue-as-new ----------------------------------------------------------------


def test_a_request_id_holds_for_retries_deferrals_and_runs_and_differs_for_another_campaign() -> None:
    state = _state(3)
    asked = state.asks(state.to_start()[:1], _input(), name="fleet", workflow_id="campaign/fleet")
    [request] = asked
    assert (request.request_id, request.requested_by) == (f"{ASKER}/h0#0", "campaign fleet (ops@dc)")
    _answer(state, {"h0": "busy"})
    state.requeue_due(NOW + timedelta(hours=1))
    assert state.request_id("h0") == request.request_id, "a host put off is asked under the same id"
    again = CampaignState.carried(_carried(state).progress)  # type: ignore[arg-type]
    assert again.request_id("h0") == request.request_id, "the next run asks under the same id"
    other = CampaignState.first(asker="campaign/fleet@a-later-run", limits=Limits(), now=NOW)
    assert other.request_id("h0") != request.request_id, "a later campaign of the same name is another"


def _carried(state: CampaignState) -> CampaignInput:
    """The state through a continue-as-new: the next run's input, encoded and decoded as
    Temporal does (a serializer warning is an error: the state must encode as its data shape)."""
    start = _input().model_copy(update={"progress": state})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        [payload] = DATA_CONVERTER.payload_converter.to_payloads([start])
    [decoded] = DATA_CONVERTER.payload_converter.from_payloads([payload], [CampaignInput])
    assert isinstance(decoded, CampaignInput)
    return decoded


def test_the_state_continues_as_new_whole_through_the_data_converter() -> None:
    state = _state(9, canary=1, batch=3)
    _answer(state, {"h0": "started", "h1": "awaiting-approval", "h2": "busy", "h3": "refused"})
    state.heard.append(HostFinished(host_id="h0", workflow_id="reprovision/h0", outcome="completed"))
    state.swept((), (Failure(host_id="h1", reason="needs an operator"),), FailureBudget())
    state.retry_failed()
    state.pause(OPERATOR)
    state.take_abort(AbortRequest(requested_by="bob", cancel_running=True, keep_changes=True))
    state.abort_request = AbortRequest(requested_by="bob", cancel_running=True)
    state.changes = [_change("canary", pointed_at=NOW)]
    state.soak_until, state.claimed, state.phase = NOW + timedelta(minutes=5), True, PAUSED
    progress = _carried(state).progress
    assert progress is not None
    again = CampaignState.carried(progress)
    assert again.model_dump() == state.model_dump() | {"abort_request": {"requested_by": "bob", "reason": ""}}
    assert [h.host_id for h in again.pending()] == [h.host_id for h in state.pending()]
    assert (again.not_started(), again.remaining(), again.budget_failures()) == (
        state.not_started(), state.remaining(), state.budget_failures()
    )  # fmt: skip
    assert again.next_wake(NOW, ()) == state.next_wake(NOW, ()) and again.over() == state.over()
    assert again.absorb_heard(verify=False, budget=FailureBudget()) is None and again.done == 1


# -- what it shows ----------------------------------------------------------------------------------


def test_the_hosts_page_names_each_outcome_its_reason_and_operation() -> None:
    state = _state(4)
    _answer(state, {"h0": "started", "h1": "busy", "h2": "refused"})
    page = views.hosts_page(state, HostsQuery(limit=2), _input())
    assert [(h.host_id, h.outcome, h.workflow_id) for h in page.hosts] == [
        ("h0", "in-flight", "reprovision/h0"), ("h1", "deferred", ""),
    ]  # fmt: skip
    assert (page.next_offset, page.total) == (2, 4) and page.hosts[1].reason == "busy (h1)"
    failed = views.hosts_page(state, HostsQuery(outcome="failed"), _input())
    assert [(h.host_id, h.workflow_id, h.reason) for h in failed.hosts] == [
        ("h2", "reprovision/h2", "refused: refused (h2)")
    ]
    firmware = _input(target=CampaignTarget(kind=TargetKind.FIRMWARE, value="32.45", image_uri="http://fw"))
    assert (
        views.hosts_page(state, HostsQuery(outcome="failed"), firmware).hosts[0].workflow_id == "firmware/h2"
    )


def test_a_deployment_due_with_no_host_left_to_run_waits_for_its_window_on_an_alarm() -> None:
    """Found by the model (test_campaign_model.py): every host left out, the whole deployment
    asked for, outside the window: the change is due and no host pends, so no alarm was set
    and the campaign waited for nothing."""
    state = _deployment_state(2, ())
    state.canary_passed = True  # canary 0: both deployments are due at once
    for host_id in ("h0", "h1"):
        state.skip(host_id, "instance assigned")
    night = (Window(days=(5,), start_minute=180, end_minute=240),)  # Saturday 03:00-04:00
    step = state.next_step(NOW, _input(windows=night))
    assert step.phase[0] == OUTSIDE_WINDOW and not step.over and state.due_points() == [0, 1]
    assert state.wake(NOW, night) == (NOW + timedelta(hours=1), "the maintenance window opens")
    assert state.liveness(NOW, night) == ("timer", "at 2026-11-28T03:00:00Z: the maintenance window opens")


def test_a_canary_host_may_not_be_skipped_and_a_skipped_one_stops_a_second_canary() -> None:
    """A failed canary host skipped would let the fleet's deployment be pointed after a failed
    canary; one skipped by its entity (an instance assigned since) would turn Outdated again when
    the canary's deployment, put back after a failure, is pointed again by `retry_failed`."""
    state = _deployment_state(4, ("h0", "h1"))
    state.changes[0] = state.changes[0].model_copy(update={"pointed_at": NOW})
    _answer(state, {"h0": "started", "h1": "assigned"})
    assert state.skip_refusal("h2") is not None, "a fleet host waits for its deployment to be pointed"
    _end(state, "h0", "failed: DPU in Error")
    assert state.skip_refusal("h0") is not None, "a failed canary host is retried or the campaign aborted"
    state.end_batch_if_done(now=NOW, soak_seconds=0)
    state.changes[0] = state.changes[0].model_copy(update={"restored_at": NOW})  # put back (canary_restore)
    state.retry_failed()
    step = state.next_step(NOW, _input())
    assert step.over and state.outcome() == "stopped" and step.point == []
    assert (
        state.stopped_reason is not None
        and "selects h1, skipped since it was first pointed" in state.stopped_reason
    )


def test_a_canary_host_whose_ask_is_refused_fails_the_canary() -> None:
    """Found by the model: a refused canary host never started, so it did not count for the
    canary, and one done host let the fleet's deployment be pointed after a failed canary."""
    state = _deployment_state(4, ("h0", "h1"))
    _answer(state, {"h0": "started", "h1": "refused"}, budget=FailureBudget(max_failures=5))
    _end(state, "h0", "completed")
    assert state.canary_verdict() == "failed"
    assert state.end_batch_if_done(now=NOW, soak_seconds=0) == "the canary failed on h1"
    assert not state.canary_passed and state.due_points() == [0], "the canary's only, never the fleet's"


def test_a_halted_canary_says_its_failure_and_only_the_updates_it_accepts() -> None:
    """An independent reviewer's attack (item 5): a failed deployment canary (budget 0) read
    "failure budget spent" and "waiting for resume, retry_failed or abort" though resume is
    refused there."""
    state = _deployment_state(4, ("h2", "h3"))
    state.changes[0] = state.changes[0].model_copy(update={"pointed_at": NOW})
    _answer(state, {"h2": "started", "h3": "started"})
    assert (
        _end(state, "h2", "failed: DPU in Error", FailureBudget(max_failures=0)) == "the canary failed on h2"
    )
    _end(state, "h3", "completed")
    state.end_batch_if_done(now=NOW, soak_seconds=0)
    assert state.resume_refusal() is not None
    assert state.halted_details() == "the canary failed on h2; waiting for retry_failed or abort"
    plain = _state(3)
    plain.halt("failure budget spent")
    assert plain.halted_details().endswith("waiting for resume, retry_failed or abort")


def test_an_aborted_deployment_canary_is_no_canary_verdict() -> None:
    """An independent reviewer's attack (item 5): an abort during the canary read "stopped: the
    canary cannot run ... (c1: skipped (); c2: skipped ())"."""
    state = _deployment_state(3, ("h0", "h1"))
    state.changes[0] = state.changes[0].model_copy(update={"pointed_at": NOW})
    _answer(state, {"h0": "started", "h1": "started"})
    state.take_abort(AbortRequest(requested_by="alice", cancel_running=True))
    state.abort_request = OperatorRequest(requested_by="alice")
    state.to_abort()
    _end(state, "h0", "aborted by alice")
    _end(state, "h1", "aborted by alice")
    step = state.next_step(NOW, _input())
    assert step.over and state.outcome() == "aborted" and state.stopped_reason is None
    assert state.ending(keep=False) == [0]


def test_a_terminated_campaigns_status_reads_ended_not_running() -> None:
    """An independent reviewer's attack (item 5): `status K` of a terminated K read "K running ...
    waiting for: in-flight: 3 in flight (g1, g2, g3); campaign/K was terminated"."""
    state = _state(3)
    _answer(state, {"h0": "started"})
    shown = views.status(state, "K", _input(), NOW)
    assert shown.waiting_on == "in-flight"
    how = "campaign/K was terminated: by alice"
    ended = shown.as_ended(how)
    assert (ended.phase, ended.waiting_on, ended.waiting_for, ended.ended) == (
        "terminated",
        "ended",
        how,
        how,
    )


def test_a_canary_at_the_target_after_a_terminated_run_names_what_it_takes_over_and_how_to_go_on() -> None:
    """An independent reviewer's attack (item 3): a same-name rerun after K was terminated once
    the fleet was pointed refused with "the canary cannot run ... gpu-compute is not pointed",
    naming neither the leftovers it would put back nor how to go on."""
    state = CampaignState.first(asker=ASKER, limits=Limits(batch_size=2, max_per_bmc=0), now=NOW)
    roster = Roster.of([CampaignHost(host_id=f"h{i}") for i in range(3)])
    left = _change("leftover", deployment="fleet-dep", previous="bf-old", value="bf-new")
    changes = (left, _change("canary"), _change("fleet"))
    state.admitted(Admission(roster=roster, changes=changes, canary_pool=("h0",)), 1)
    state.found_at_target("h0")
    state.changes[0] = left.restored("bf-op", NOW)  # taken over: an operator's value, left as found
    state.next_step(NOW, _input())
    assert state.stopped_reason is not None
    # Found by an independent reviewer's second attack (item 3): the words said the leftovers
    # would be "put back first" while their records said neither was, and advised `--canary 0`,
    # which the admission then refused: the words come from the records, and no advice is given.
    assert state.stopped_reason.endswith(
        "fleet-dep is not pointed by this campaign; left by a campaign that no longer runs: "
        "fleet-dep bfb not restored: changed since by someone else (now bf-op)"
    ), state.stopped_reason
    assert "--canary 0" not in state.stopped_reason and "put back first" not in state.stopped_reason


def test_a_dpu_on_the_target_outdated_only_until_its_deployment_is_pointed_is_judged_alike() -> None:
    """An independent reviewer's attack (item 1): after a canary that passed and was aborted,
    c1 ran the target BFB while `canary` was put back (Outdated). `plan` read it before pointing
    (not at the target: the canary runs, exit 0), the workflow after (at the target: the canary
    cannot run, stopped). `as_pointed` judges it as it will read once pointed, for plan and start."""
    dpu = {
        "metadata": {"name": "c1-dpu"},
        "spec": {"bfb": "bf-3", "dpuNodeName": "node-c1"},
        "status": {"phase": "Ready", "conditions": [{"type": "Outdated", "status": "True"}]},
    }
    assert host_reading([dpu], "c1", TargetKind.BFB, "bf-3", "ns")[0] is False
    assert host_reading([dpu], "c1", TargetKind.BFB, "bf-3", "ns", as_pointed=True) == (True, "")
    assert host_reading([dpu], "c1", TargetKind.BFB, "bf-4", "ns", as_pointed=True)[0] is False


def test_retry_failed_never_points_a_canary_deployment_over_someone_elses_value() -> None:
    """Found by an independent reviewer's second attack (item 1): after a failed canary whose
    deployment an operator had patched (its restore left it as found), `retry-failed` pointed it
    over the operator's value, and `abort` then put back a value the status said it had not.
    Pointing is compare-and-set: it halts, naming the deployment and what it holds."""
    state = _deployment_state(4, ("h0",))
    state.changes[0] = state.changes[0].pointed_over("bf-old", NOW)
    _answer(state, {"h0": "started"})
    _end(state, "h0", "failed: DPU in Error")
    assert state.end_batch_if_done(now=NOW, soak_seconds=0) == "the canary failed on h0"
    [index] = state.next_step(NOW, _input()).restore
    state.changes[index] = state.changes[index].restored("bf-op", NOW)  # the operator's bf-op
    state.retry_failed()
    step = state.next_step(NOW, _input())
    assert step.point == [0]
    change = state.changes[0]
    assert change.point_write("bf-op") is None and change.point_write("bf-old") == "bf-new"
    state.changes[0] = change.pointed_over("bf-op", NOW)
    halt = state.point_refusal(0)
    assert (
        halt is not None and "canary-dep bfb not pointed: changed since by someone else (now bf-op)" in halt
    )
    assert "set it back to bf-old and `resume`, or `abort`" in halt
    assert state.next_step(NOW, _input()).start == [], "no host starts on someone else's value"
    assert (
        state.changes[0]
        .describe()
        .endswith("bf-old -> bf-new: not pointed: changed since by someone else (now bf-op)")
    )
    state.take_abort(AbortRequest(requested_by="alice"))
    state.abort_request = OperatorRequest(requested_by="alice")
    assert state.ending(keep=False) == [], "abort never writes over a value it did not write"
    state.resume()  # the operator set it back: pointed again, and the note says so
    assert state.changes[0].pointed_over("bf-old", NOW).note == ""


def test_a_dpu_outdated_for_another_field_too_is_not_at_the_target_before_or_after_pointing() -> None:
    """Found by an independent reviewer's second attack (item 2): b1 ran the target BFB while its
    canary deployment held another and its flavor had changed too; `plan` and `start` (as pointed)
    dropped the Outdated report and refused ("already at the target") while the run, reading after
    pointing, found the flavor's drift and reprovisioned b1. Only the campaign's own field's drift
    is dropped: one outdated for another field is not at the target, and the reading says why."""
    message = "DPU template has changed (BFB: bf-9 -> bf-3, DPUFlavor: flavor-1 -> flavor-2)"
    dpu = {
        "metadata": {"name": "b1-dpu"},
        "spec": {"bfb": "bf-9", "dpuFlavor": "flavor-1", "dpuNodeName": "node-b1"},
        "status": {
            "phase": "Ready",
            "outdated": {"reason": "OutdatedBFB", "message": message},
            "conditions": [
                {"type": "Outdated", "status": "True", "reason": "OutdatedBFB", "message": message}
            ],
        },
    }
    ok, words = host_reading([dpu], "b1", TargetKind.BFB, "bf-9", "ns", as_pointed=True)
    assert not ok and "DPUFlavor: flavor-1 -> flavor-2" in words and "reprovision" in words
    after = {**dpu, "status": {"phase": "Ready", "outdated": {"reason": "OutdatedDPUFlavor"}}}
    assert host_reading([after], "b1", TargetKind.BFB, "bf-9", "ns")[0] is False, "the run, after pointing"
    only_bfb = {
        **dpu,
        "status": {"phase": "Ready", "outdated": {"reason": "OutdatedBFB", "message": "(BFB: a -> b)"}},
    }
    assert host_reading([only_bfb], "b1", TargetKind.BFB, "bf-9", "ns", as_pointed=True) == (True, "")
    flavor = host_reading([dpu], "b1", TargetKind.FLAVOR, "flavor-1", "ns", as_pointed=True)
    assert flavor[0] is False, "a flavor campaign: the BFB's drift is another field's"


def test_a_host_put_off_when_the_campaign_is_aborted_stays_deferred_with_no_retry_not_skipped() -> None:
    """Issue 38 item 2: a host the campaign waited for (its entity busy) read as `skipped` in
    `campaign status` once the campaign was aborted; it was never left out, so it stays counted
    deferred, with why. Its retry time went too (issue 38 deliver 2): an ended campaign asks
    nobody again, so a time would promise a retry that never happens."""
    state = _state(3, batch=3)
    _answer(state, {"h0": "busy", "h1": "started"})
    request = AbortRequest(requested_by="carol", reason="stop it")
    state.take_abort(request)
    state.abort_request = request
    _end(state, "h1", "completed")
    assert state.over()
    state.ending(keep=False)
    assert state.states == "wds", "h0 put off, h1 done, h2 never asked: skipped"
    shown = views.status(state, "c", _input(), NOW)
    assert (shown.skipped, shown.deferred_count, shown.deferred) == (1, 1, ("h0",))
    running = views.status(state.model_copy(update={"phase": "running"}), "c", _input(), NOW)
    assert running.deferred_hosts[0].retry_at == NOW + timedelta(seconds=300), "running: its time"
    state.phase = "aborted"
    shown = views.status(state, "c", _input(), NOW)
    assert shown.deferred_hosts[0].retry_at is None, "aborted: never asked again"
    assert shown.deferred_hosts[0].when() == "left with no retry"
    assert '"retry_at":null' in shown.model_dump_json()
    assert shown.deferred_hosts[0].reason == "busy (h0)"
    assert (shown.abort_reason, shown.aborting) == ("stop it", "carol")
    assert views.result(state, "c", "aborted", NOW).deferred == 1


def test_a_site_blocked_host_its_deployment_has_not_selected_yet_halts_the_campaign() -> None:
    """Issue 36 (low findings item 6): a newer site check blocking a fleet host of a BFB campaign
    whose DPUDeployment is not pointed yet could not skip it (it would turn Outdated once the
    deployment is pointed: "a deployment never selects a host the campaign does not hold"), and
    the host was started anyway. Decided: the campaign halts, naming the host and the finding;
    nothing more is pointed or started (a selector cannot leave one host out, so no re-point
    without it) until `resume` after the site is fixed, or `abort`."""
    state = _deployment_state(4, ("h0", "h1"))
    state.changes[0] = state.changes[0].model_copy(update={"pointed_at": NOW})  # the canary's
    why = "reprovision is blocked on it by the site check of 2026-11-28T00:00:00Z: DPU BMC unreachable"
    answer = state.site_blocked([HostGroup(reason=why, host_ids=("h3",))])
    assert answer.startswith("h3 not started, and the campaign halts: host h3 is selected by DPUDeployment")
    assert state.halted_reason is not None and f"h3 ({why})" in state.halted_reason
    step = state.next_step(NOW, _input())
    assert step.phase[0] == HALTED and not step.start and not step.point
    assert "resume" in step.phase[1] and "abort" in step.phase[1]
