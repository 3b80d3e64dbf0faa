"""The invariants of every host operation (issue 40; README, "Host invariants"), as code: each
function returns the violations of one rule (empty: it holds), from the host entity's state
(`HostEntityState`), the monitor's status and what the world is (DPF's DPUs, the host's power).
`tests/fast/test_host_entity_model.py` checks them after every step of a Hypothesis state machine
that drives the entity and the monitor through requests (an operator's, the monitor's, a
campaign's), approvals, aborts, withdrawals, DPU removals and recoveries, operation ends of every
kind and time passing; each is shown there to fail on a deliberately broken core. Each check
reads the world as the model keeps it, never the rule it checks (the removed DPUs from DPF, a
request's reason from DPF's phases, an operator's no from the outcome's words).

1. **Never off in silence** (`found_off_unsaid`): within a run, `PowerCustody`
   (workflows/parts/host_power.py `may_end`, `waits_rightly`; tests/fast/test_host_power_model.py):
   a host a run powered off is powered back on, or handed to a person saying "the host ... is
   OFF" with `retry` and `abort`, before the run ends, however it ends. After it (the issue's
   Done-when): an idle host whose power is Off says so in its status in words: the run that
   left it OFF (`left_off_by`, whose outcome says `is OFF`), or "may be OFF" after a run whose
   end's read was not answered (the next reading at rest then marks it).
2. **An operator's abort is sovereign** (`operator_no_kept`, `automatic_accepted_while_held`,
   `monitor_holds_back`): after an operator aborts, withdraws, terminates or cancels the
   monitor's request, the entity holds automation back (the monitor's and campaigns' requests
   refused) until an operator ends it, and the monitor asks nothing for `hold_back_seconds`
   unless an operator resumes it, its status saying it holds back, until when, and why.
3. **No request for a DPU DPF no longer has** (`accepted_for_removed`), whoever asks: no
   reprovision, and no reset naming it, of a DPU a removal took out, until a provision brings it.
4. **Every pending request can be withdrawn** (`not_withdrawable`): a request awaiting approval
   is what `metalflow host abort` reaches as `withdraw` (`abort_rule.what_abort_reaches`), the
   entity's `withdraw` update (the Temporal UI's and CLI's) takes its id as `host status` shows
   it, and it expires at a stated time.
5. **No approval runs a stale request unsaid** (`stale_approval`): an approval of the monitor's
   reprovision whose DPUs are all Ready again (or gone from DPF) starts nothing, and says why in
   its refusal and the host's record; one that finds nothing awaiting names how the last request
   ended when it ended unstarted.

Pure: no Temporal, no clock, no I/O (a `lint-imports` contract).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from contracts import names
from contracts.errors import NothingAwaitsApproval, OperationStarted
from contracts.models.dpf import PHASE_READY, HostDPFState
from contracts.models.host import EntityRequestBody, OperationRecord, ResetRequest, WithdrawRequest
from contracts.models.host_records import AutomationHold
from contracts.models.monitor import HostMonitorStatus
from workflows.host.abort_rule import WITHDRAW_REQUEST, what_abort_reaches
from workflows.host.state import HostEntityState
from workflows.host.takeover_rules import MAYBE_OFF
from workflows.parts.host_power import HOST_IS_OFF


def found_off_unsaid(state: HostEntityState, power_state: str | None) -> list[str]:
    """Rule 1, after a run: the host idle and Off (`power_state`, as the world has it) is said so
    by its status: the run that left it OFF (`left_off_by`; its recorded outcome, while `recent`
    holds it, says `is OFF`), or the run whose end's read was not answered, its outcome saying
    `may be OFF` (`maybe_off_after`: `host status` and `host list` say it, and a reading at rest
    decides): no later end that says nothing of the host's power (a withdrawal, an expiry, a
    removal) ends that doubt (`power_doubt.py`)."""
    if state.current is not None or power_state != "Off":
        return []
    status, host = state.status(), state.host_id
    said = [r.outcome for r in status.recent]  # ids repeat (`reprovision/HOST`): every record with it
    if status.left_off_by:
        words = [r.outcome for r in status.recent if r.workflow_id == status.left_off_by]
        if words and not any(HOST_IS_OFF in w or MAYBE_OFF in w for w in words):
            return [f"{host} marked OFF by {status.left_off_by}, whose outcome says neither: {words}"]
        return []
    doubt = status.maybe_off_after  # `host status` says the host may be OFF after that run
    if doubt:
        words = [r.outcome for r in status.recent if r.workflow_id == doubt]
        if words and not any(MAYBE_OFF in w for w in words):
            return [f"{host} said to be maybe OFF after {doubt}, whose outcome says nothing of it: {words}"]
        return []
    last = said[-1] if said else "no run recorded"
    return [f"{host} is Off and idle, and its status says nothing of it (last: {last})"]


def operator_said_no(outcome: str, monitor_id: str) -> bool:
    """Whether an ended request's outcome is an operator's no, from its words alone: aborted,
    terminated or cancelled by hand, or withdrawn by someone other than the monitor (which
    withdraws its own stale request; a withdrawal at approval reads `withdrawn at its approval`)."""
    if outcome.startswith(("aborted", "terminated", "cancelled")):
        return True
    return outcome.startswith("withdrawn by ") and not outcome.startswith(f"withdrawn by {monitor_id}")


def operator_no_kept(state: HostEntityState, no_to: str | None) -> list[str]:
    """Rule 2, the entity: `no_to` is the monitor's request an operator last said no to, no
    operator having ended the hold since (None: none stands): automation is held back after it."""
    if no_to is None:
        return []
    hold = state.automation_held_back
    if hold is None:
        return [f"{state.host_id}: an operator said no to {no_to}, and automation is not held back"]
    if hold.after != no_to:
        return [f"{state.host_id}: automation held back after {hold.after}, not after {no_to}"]
    return []


def automatic_accepted_while_held(
    host_id: str, hold: AutomationHold | None, request: EntityRequestBody, accepted: bool
) -> list[str]:
    """Rule 2, a request: an automation's request (it names a workflow to tell: the monitor, a
    campaign) is never accepted while an operator holds automation back (`hold`: the entity's,
    as the request found it)."""
    if not accepted or hold is None or not request.campaign_workflow_id:
        return []
    return [
        f"{host_id}: {request.requested_by}'s request accepted while automation is held back by {hold.by}"
    ]


def monitor_holds_back(
    status: HostMonitorStatus, now: datetime, no: tuple[datetime, str] | None, back_off_seconds: float,
    *, asked: bool,
) -> list[str]:  # fmt: skip
    """Rule 2, the monitor at `now`: `no` is the last operator's no to its request (when, and the
    words it was told), no `resume` since (None: none). Within the back-off it asked nothing
    (`asked`: it asked the entity at this step), and its status says it holds back, until when,
    and after what, with the way to resume."""
    if no is None or back_off_seconds <= 0 or now >= no[0] + timedelta(seconds=back_off_seconds):
        return []
    out, hold = [], status.hold_back
    if asked:
        out.append(f"the monitor of {status.host_id} asked again within the back-off after {no[1]}")
    if hold is None:
        return [*out, f"the monitor of {status.host_id} does not say it holds back after {no[1]}"]
    if hold.why != no[1] or hold.until != no[0] + timedelta(seconds=back_off_seconds):
        out.append(f"the monitor holds back after {hold.why} until {hold.until}, not after {no[1]}")
    if "holding back until" not in status.waiting_for or "--resume" not in status.waiting_for:
        out.append(f"the monitor's status does not say it holds back: {status.waiting_for}")
    return out


def accepted_for_removed(
    gone: set[str], operation: str, request: EntityRequestBody, accepted: bool, every_dpu: tuple[str, ...]
) -> list[str]:
    """Rule 3: a request accepted (`accepted`) for DPUs DPF no longer has (`gone`, as the world
    has it: "" the whole DPU node), whoever asked: a reprovision of them (`dpu_ids`, or every DPU
    of the host `every_dpu` when it names none) or a reset naming them."""
    named_reset = isinstance(request, ResetRequest) and request.target == "dpu"
    if not accepted or not gone or (operation != names.REPROVISION and not named_reset):
        return []
    named = request.dpu_ids or every_dpu
    hit = sorted(d for d in named if d in gone or "" in gone)
    if not hit:
        return []
    return [f"{operation} of {', '.join(hit)} accepted from {request.requested_by}: DPF no longer has it"]


def not_withdrawable(state: HostEntityState) -> list[str]:
    """Rule 4: a request awaiting approval is what `host abort` withdraws, the `withdraw` update
    takes it by the id the status shows, and the status says when it expires."""
    status = state.status()
    current = status.current
    if current is None or state.current is None or state.current.approved:
        return []
    out = []
    if what_abort_reaches(current) != WITHDRAW_REQUEST:
        out.append(
            f"host abort reaches {what_abort_reaches(current)}, not withdraw, for {current.workflow_id}"
        )
    try:
        state.to_withdraw(WithdrawRequest(requested_by="anyone", workflow_id=current.workflow_id))
    except (NothingAwaitsApproval, OperationStarted) as refused:
        out.append(f"withdraw of {current.workflow_id}, awaiting approval, refused: {refused}")
    if status.awaiting is None or status.approval_expires_at is None:
        out.append(f"{current.workflow_id} awaits approval: the status does not say what, or until when")
    return out


def reason_gone(record: OperationRecord, dpu_ids: tuple[str, ...] | None, dpf: HostDPFState) -> bool:
    """Whether the monitor's request `record` (naming `dpu_ids`; None every DPU) has lost its
    reason now: each DPU it named is Ready in DPF, or gone from it."""
    named = dpu_ids or tuple(d.dpu_id for d in dpf.dpus if d.dpu_id)
    return all((dpu := dpf.dpu(d)) is None or dpu.phase == PHASE_READY for d in named)


def stale_approval(
    state: HostEntityState,
    record: OperationRecord,
    from_monitor: bool,
    stale: bool,
    started: bool,
    refusal: str,
) -> list[str]:
    """Rule 5, one `approve` of `record` (`from_monitor`: the monitor's own reprovision; `stale`:
    its reason gone by DPF now, `reason_gone`): a stale one is never `started`, the refusal says
    its reason no longer holds, and the host records it withdrawn at its approval. An approve that
    found nothing (`record` ended before) is refused naming how it ended, if unstarted."""
    out = []
    if from_monitor and stale:
        if started:
            out.append(f"approve started {record.workflow_id}, whose reason no longer holds")
        elif "no longer holds" not in refusal:
            out.append(f"approve of stale {record.workflow_id} refused without saying why: {refusal}")
        last = state.recent[-1] if state.recent else None
        if not started and (last is None or not last.outcome.startswith("withdrawn at its approval by ")):
            out.append(f"stale {record.workflow_id} not recorded as withdrawn at its approval: {last}")
    return out


def nothing_awaits_unsaid(state: HostEntityState, refusal: str) -> list[str]:
    """Rule 5, an `approve` with nothing awaiting: when the last request ended unstarted
    (withdrawn, e.g. by the monitor once its DPUs were Ready again, or expired), the refusal names
    it and how it ended."""
    last = state.recent[-1] if state.recent else None
    if last is None or last.started_at is not None or not last.outcome.startswith(("withdrawn", "expired")):
        return []
    if last.workflow_id not in refusal or last.outcome not in refusal:
        return [f"approve refused without naming {last.workflow_id} ({last.outcome}): {refusal}"]
    return []
