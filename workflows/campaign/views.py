"""What a campaign shows of its state: the `status` query, a page of the `hosts` query, one host's
`deferral` (for `host status`) and the result, each a pure function of `CampaignState`
(workflows/campaign/state.py) and the input.

Bounded whatever the fleet: `status` and the result name the newest RECENT_HOSTS hosts of each
outcome; every host's outcome is read page by page (`hosts`, at most HOSTS_PAGE_MAX a page).
Cost: O(hosts) per `hosts` page (one walk of the states), O(in flight) per `status`.
"""

from __future__ import annotations

from datetime import datetime

from contracts import names
from contracts.models.campaign import (
    RECENT_HOSTS,
    CampaignInput,
    CampaignResult,
    CampaignStatus,
    Deferred,
    Failure,
    HostOutcome,
    HostsPage,
    HostsQuery,
    HostState,
)
from workflows.campaign import plan
from workflows.campaign.state import CampaignState

ENDED_PHASES = ("completed", "aborted", "stopped", "failed", "cancelled")

ASKED = (HostState.IN_FLIGHT, HostState.VERIFYING, HostState.DONE, HostState.FAILED, HostState.ABORTED)
"""The states of a host whose entity was asked (its operation's workflow id is known)."""


def status(state: CampaignState, name: str, start: CampaignInput, now: datetime) -> CampaignStatus:
    """Counts, the newest hosts of each outcome by name, batch, window, budget, changes."""
    windows = start.windows
    in_flight = state.in_flight.items()
    waiting_on, waiting_for = state.liveness(now, windows) or ("", "")
    if state.phase in ENDED_PHASES:
        waiting_on, waiting_for = "ended", state.phase
    elif not state.roster.ids:  # before its admission: nothing decided yet
        waiting_on, waiting_for = "in-flight", "its selection, claims and deployments being read"
    return CampaignStatus(
        name=name,
        target=start.target.describe(),
        phase=state.phase,
        total=state.total,
        done=state.done,
        already_at_target=state.already_at_target,
        in_flight=tuple(sorted(k for k, f in in_flight if not f.awaiting_approval)),
        awaiting_approval=tuple(sorted(k for k, f in in_flight if f.awaiting_approval)),
        failed=state.failed,
        failures=tuple(state.recent_failed),
        skipped=state.skipped,
        skipped_hosts=tuple(state.recent_skipped),
        deferred=tuple(list(state.deferred)[:RECENT_HOSTS]),
        remaining=state.remaining(),
        batch=state.batch,
        canary_passed=state.canary_passed,
        window_open=plan.window_open(windows, now),
        next_window=plan.next_window_open(windows, now) if windows else None,
        soak_until=state.soak_until,
        budget=plan.describe_budget(start.budget, state.budget_failures(), state.total),
        halted_reason=state.halted_reason,
        paused_by=state.paused_by.requested_by if state.paused_by else None,
        aborting=state.abort_request.requested_by if state.abort_request else None,
        limits=state.limits,
        runs=state.runs,
        needs_operator=tuple(state.needs_operator.values()),
        aborted=state.aborted,
        aborted_hosts=tuple(state.recent_aborted),
        verifying=len(state.verifying),
        changes=tuple(state.changes),
        deferred_count=len(state.deferred),
        deferred_hosts=deferred_hosts(state),
        waiting_on=waiting_on,
        waiting_for=waiting_for,
        stopped_reason=state.stopped_reason,
        finishing=tuple(Failure(host_id=h, reason=r) for h, r in sorted(state.finishing.items())),
        abort_reason=state.abort_request.reason if state.abort_request else "",
    )


def deferred_hosts(state: CampaignState) -> tuple[Deferred, ...]:
    """The newest hosts put off, each with when it is asked again; once the campaign ended
    (aborted, stopped) none is asked again: each is left deferred with no retry time."""
    shown = list(state.deferred.values())[:RECENT_HOSTS]
    if state.phase in ENDED_PHASES:
        return tuple(d.model_copy(update={"retry_at": None}) for d in shown)
    return tuple(shown)


def deferral(state: CampaignState, host_id: str) -> tuple[Deferred, ...]:
    """Whether the campaign put `host_id` off (its entity was busy): when it asks again and why,
    as one item; none when it did not. For `host status` of one host: O(1), whatever the fleet."""
    deferred = state.deferred.get(host_id)
    return () if deferred is None else (deferred,)


def hosts_page(state: CampaignState, page: HostsQuery, start: CampaignInput) -> HostsPage:
    """Every host's outcome, `page.limit` at a time: a reason is kept for the newest
    RECENT_HOSTS of each outcome and for the hosts in flight or put off; an operation's own
    failure is on its workflow."""
    words = HostState.WORDS
    named = (*state.recent_failed, *state.recent_skipped, *state.recent_aborted)
    reasons = {f.host_id: f.reason for f in (*named, *state.needs_operator.values())}
    reasons.update({h: d.reason for h, d in state.deferred.items()})
    indexes = [i for i, c in enumerate(state.states) if page.outcome is None or words.get(c) == page.outcome]
    chosen = indexes[page.offset : page.offset + page.limit]
    operation = start.target.spec.request
    rows = []
    for index in chosen:
        host_id, host_state = state.roster.ids[index], state.states[index]
        flight = state.in_flight.get(host_id)
        workflow_id = flight.workflow_id if flight else ""
        if not workflow_id and host_state in ASKED:
            workflow_id = names.host_operation_workflow_id(operation, host_id)
        outcome = HostOutcome(
            host_id=host_id,
            outcome=words[host_state],
            workflow_id=workflow_id,
            reason=reasons.get(host_id, ""),
        )
        rows.append(outcome)
    end = page.offset + len(chosen)
    return HostsPage(hosts=tuple(rows), next_offset=end if end < len(indexes) else None, total=len(indexes))


def result(state: CampaignState, name: str, outcome: str, now: datetime) -> CampaignResult:
    """How the campaign ended: counts, the newest hosts named per outcome, its changes."""
    return CampaignResult(
        name=name,
        outcome=outcome,
        total=state.total,
        done=state.done,
        already_at_target=state.already_at_target,
        failed=state.failed,
        skipped=state.skipped,
        aborted=state.aborted,
        deferred=len(state.deferred),
        failures=tuple(state.recent_failed),
        skipped_hosts=tuple(state.recent_skipped),
        aborted_hosts=tuple(state.recent_aborted),
        runs=state.runs,
        finished_at=now,
        changes=tuple(state.changes),
        stopped_reason=state.stopped_reason,
    )
