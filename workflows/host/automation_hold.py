"""An operator's abort is sovereign (issue 40): the entity's rule for holding automation back.

An operator who aborts (or withdraws) the monitor's request for a host has said no to the
automation: the entity records it (`AutomationHold`: who, why, since when, which request) and
refuses every later automatic request for the host (the monitor's, a campaign's: a request that
names a workflow to tell, `campaign_workflow_id`), naming the hold, until an operator ends it:
`metalflow host retry HOST` on the idle host, or an operator's own request (one that names no
workflow to tell). The hold lives in the entity, so a restarted monitor (`host monitor --stop`,
then start) finds it; a terminated entity's successor takes it over (`takeover_rules.py`).

Set only after the monitor's request: a campaign aborted with `--cancel-running` aborts its own
requests in the operator's name, which is no word about the host. Not an operator's no: the
monitor's own withdrawal, a withdrawal at approval whose reason no longer held, a completion,
failure or expiry. Pure: no Temporal, no clock, no I/O.
"""

from __future__ import annotations

from datetime import datetime

from contracts import names
from contracts.errors import AutomationHeldBack
from contracts.models.host import AutomationHold, EntityRequestBody, OperationRecord, PendingOperation
from contracts.wording import iso_z

# `kernel.Runbook.aborted`, a host operation's abort (its words before issue 40's attack too)
RUN_WORDS = ("; ", ". Boot generation ", ". Generation reached ", ". No boot generation reached ")
ENDS_IT = "metalflow host retry {host}, or an operator's own request"


def hold_after(host_id: str, current: PendingOperation, outcome: str, now: datetime) -> AutomationHold | None:
    """The hold an ended request leaves: an operator's abort or withdrawal of the monitor's
    request (see the module docstring); None otherwise."""
    monitor = names.monitor_workflow_id(host_id)
    if current.request.campaign_workflow_id != monitor:
        return None
    return _hold(monitor, current.record.workflow_id, current.record.requested_by, outcome, now)


def hold_after_run(
    host_id: str, workflow_id: str, requested_by: str, outcome: str, now: datetime
) -> AutomationHold | None:
    """The hold a run that ended unrecorded leaves (its entity was terminated: a new entity finds
    it closed, `takeover_rules._record_ended`), by the same rule as an own child's end. The run's
    input keeps no `campaign_workflow_id`: the monitor's request is the one it asked in its own
    name (`requested_by` is its workflow id, workflows/monitor/workflow.py)."""
    monitor = names.monitor_workflow_id(host_id)
    if requested_by != monitor:
        return None
    return _hold(monitor, workflow_id, requested_by, outcome, now)


def _hold(
    monitor: str, workflow_id: str, asked_by: str, outcome: str, now: datetime
) -> AutomationHold | None:
    """The hold `outcome` of the monitor's request `workflow_id` leaves (None: no operator's no)."""
    if outcome.startswith("withdrawn by "):
        if outcome.startswith(f"withdrawn by {monitor}"):
            return None
        by, _, reason = outcome.removeprefix("withdrawn by ").partition(": ")
    elif outcome.startswith("aborted by "):
        by, _, reason = outcome.removeprefix("aborted by ").partition(": ")
    elif outcome.startswith(("aborted", "terminated", "cancelled")):  # cut by hand: nobody named
        by, reason = "an operator", outcome
    else:
        return None
    for then in RUN_WORDS:  # what the run says it left follows the operator's words: not the reason
        reason = reason.split(then)[0]
    return AutomationHold(
        by=by, reason=reason or "no reason given", since=now, after=workflow_id, asked_by=asked_by
    )


def hold_words(host_id: str, hold: AutomationHold) -> str:
    """The hold in words, as `host status` and the refusals say it."""
    return (
        f"automation held back by {hold.by}: {hold.reason} (since {iso_z(hold.since)}, after "
        f"{hold.after} asked by {hold.asked_by}) until {ENDS_IT.format(host=host_id)}"
    )


def automatic(request: EntityRequestBody) -> bool:
    """An automation's request: it names a workflow to tell how it ends (the monitor, a campaign);
    an operator's (the CLI, a script) names none."""
    return bool(request.campaign_workflow_id)


def refuse_automatic(
    host_id: str, hold: AutomationHold | None, operation: str, request: EntityRequestBody
) -> None:
    """An automatic request while automation is held back is refused, naming the hold."""
    if hold is None or not automatic(request):
        return
    raise AutomationHeldBack(
        f"host {host_id}: {hold_words(host_id, hold)}; "
        f"{operation} requested by {request.requested_by} refused",
        {"by": hold.by},
    )


def released(host_id: str, hold: AutomationHold, by: str, how: str) -> str:
    """The words of an operator ending the hold (`how`: `host retry`, or their own request)."""
    return f"automation no longer held back: {how} by {by} (it was {hold_words(host_id, hold)})"


def nothing_to_retry(host_id: str, last: OperationRecord | None) -> str:
    """`host retry` of an idle host with no hold: the refusal, naming how the last operation
    ended (who aborted it and when, its failure, ...), so a retry that came after someone else's
    abort (or any end) says why there is nothing left to retry."""
    words = f"host {host_id}: no operation in flight and automation is not held back; nothing to retry"
    if last is None:
        return words
    return (
        f"{words}: the last operation, {last.workflow_id} ({last.operation} requested by "
        f"{last.requested_by}), ended at {iso_z(last.finished_at)}: {last.outcome}"
    )
