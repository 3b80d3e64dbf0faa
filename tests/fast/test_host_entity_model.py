"""A model of a host's entity and its monitor: Hypothesis drives their own decision code
(`HostEntityState`, `MonitorState`) through random orders of events, and checks the host
invariants (workflows/host/invariants.py; README, "Host invariants") after every step, without a
server.

The machine plays the runbooks' part as they call the states (workflows/host/workflow.py: a
request's handler, `approve` with its check of the monitor's reason, `withdraw`, `release_automation`,
an operation's end with the power read of an end that says none (`power_watch.power_after_end`),
the power watch at rest, the approval's expiry, continue-as-new; workflows/monitor/workflow.py:
`_reprovision_overdue`, `_withdraw_stale`, `host_finished`, `resume`), and the world's: DPF's DPUs
fall to Node Effect and recover, removals take them out of DPF and provisions bring them back,
operations end every way (completed, failed or aborted saying the host is on, OFF or untouched,
terminated by hand with the host On or Off, the BMC answering the read at the end or not), a
person powers the host on, time passes, the host is assigned and released. Requests come from an
operator (the CLI), the monitor and a campaign.

After every step: an idle host that is Off says so in words (1, after a run; within a run it is
`PowerCustody`'s, tests/fast/test_host_power_model.py); an operator's no to the monitor's request
holds automation back until an operator ends it, no automatic request is accepted meanwhile, and
the monitor asks nothing within its back-off unless resumed, saying it holds back (2); no
request is accepted for a DPU DPF no longer has (3); a request awaiting approval can be withdrawn
(4); an approval never starts the monitor's request whose DPUs are Ready again, and says why (5).

Each check was seen to fail on a deliberately broken core (each break made, run, undone): the
entity reading no power at an end that says none (`power_to_read`), `finish` not marking the
host OFF, any later end ending the doubt of an unread one (`doubt_after_end`) (1: a hole this
model found while it was written, closed meanwhile by `power_doubt.py`); the entity taking
automatic requests while held (`refuse_automatic`), an operator's no holding nothing
(`hold_after`), the monitor asking within its hold-back (`overdue`) (2); the entity taking a
reprovision of a removed DPU (`refuse_if_removed`) (3); `host abort` not reaching a request
awaiting approval (`what_abort_reaches`), `withdraw` refusing it (`to_withdraw`) (4); an
approval not checking the monitor's reason (`reason_to_check`), `approve` not naming a
withdrawn request (`nothing_awaits`) (5). Derandomized: the same orders every run.
"""

from __future__ import annotations

import warnings
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from contracts import names
from contracts.converter import DATA_CONVERTER
from contracts.errors import (
    DPUsRemoved,
    InMaintenance,
    InvalidInput,
    MetalflowError,
    NothingAwaitsApproval,
    ReasonNoLongerHolds,
)
from contracts.host_requests import PROVISION, REBOOT, REMOVAL, REPROVISION, RESET, EntityRequest
from contracts.models.campaign import HostFinished
from contracts.models.control import OperatorRequest
from contracts.models.dpf import DPUNodeState, DPUState, HostDPFState
from contracts.models.host import (
    ApproveRequest,
    AssignInstanceRequest,
    HostWorkflowInput,
    OperationPolicy,
    OperationRequest,
    PendingOperation,
    ResetRequest,
    ResetTarget,
    WithdrawRequest,
)
from contracts.models.monitor import HostMonitorInput, MonitorPolicy, OwnerReprovisionResult
from workflows.host import invariants
from workflows.host.abort_rule import WITHDRAW_REQUEST, what_abort_reaches
from workflows.host.power_rest import after_power_set, after_reading
from workflows.host.state import HostEntityState
from workflows.host.takeover_rules import outcome_after_read, power_to_read
from workflows.monitor.state import MonitorState
from workflows.parts.host_power import HOST_IS_ON, POWER_NOT_TOUCHED

T0 = datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
HOST = "host-001"
DPUS = (f"{HOST}-dpu-0", f"{HOST}-dpu-1")
MONITOR = names.monitor_workflow_id(HOST)
CAMPAIGN = "campaign/fw-1"
BACK_OFF = 600.0  # the monitor's hold_back_seconds
POLICY = OperationPolicy(approval_timeout_seconds=3600.0)
MONITOR_POLICY = MonitorPolicy(reprovision_after_seconds=60.0, hold_back_seconds=BACK_OFF)
POWERING = (names.PROVISION, names.REPROVISION, names.REBOOT, names.FIRMWARE, "reset")  # may leave it OFF
OFF_WORDS = f"the host {HOST} is OFF: metalflow turned it off (ForceOff) and could not power it back on"
KINDS: dict[str, EntityRequest[Any]] = {
    "reprovision": REPROVISION, "reset-dpu": RESET, "reset-host": RESET, "reboot": REBOOT,
    "provision": PROVISION, "remove": REMOVAL,
}  # fmt: skip


def _through_converter(value: Any, kind: type) -> Any:
    """What continue-as-new carries: the value through the run's data converter."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        [payload] = DATA_CONVERTER.payload_converter.to_payloads([value])
        [back] = DATA_CONVERTER.payload_converter.from_payloads([payload], [kind])
    return back


class HostEntityModel(RuleBasedStateMachine):
    """The entity and the monitor of one host, driven as their runbooks drive them."""

    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.state = HostEntityState.of(HostWorkflowInput(host_id=HOST, policy=POLICY))
        self.monitor = MonitorState.of(HostMonitorInput(host_id=HOST, policy=MONITOR_POLICY), T0)
        self.phases = dict.fromkeys(DPUS, "Ready")  # DPF's DPUs (a removed one is absent)
        self.power = "On"  # the host's PowerState, as its BMC says it
        self.no_to: str | None = None  # the monitor's request an operator said no to, standing
        self.no: tuple[datetime, str] | None = None  # when, and the words the monitor was told

    @initialize(assigned=st.booleans(), down=st.sampled_from([(), DPUS[:1], DPUS]))
    def a_host(self, assigned: bool, down: tuple[str, ...]) -> None:
        """The host as the run finds it: assigned to an instance or not, DPUs fallen from Ready to
        Node Effect as the monitor starts, or not."""
        if assigned:
            self.state.assign("i-1")
        self.monitor.observe(self._dpf(), self.now)
        for dpu in down:
            self.phases[dpu] = "Node Effect"
        self.monitor.observe(self._dpf(), self.now)

    # -- the world ----------------------------------------------------------------------------
    def _dpf(self) -> HostDPFState:
        dpus = tuple(
            DPUState(name=f"n-{d}", uid=f"u-{d}", dpu_id=d, phase=p, agent_started_at="t")
            for d, p in self.phases.items()
        )
        return HostDPFState(
            host_id=HOST, node=DPUNodeState(name="node", uid="n") if dpus else None, dpus=dpus
        )

    def _check(self, found: list[str]) -> None:
        assert not found, found

    @rule(dpu=st.sampled_from(DPUS), phase=st.sampled_from(["Node Effect", "Ready"]), seen=st.booleans())
    def dpu_changes(self, dpu: str, phase: str, seen: bool) -> None:
        """A DPU falls to Node Effect (its critical services down) or recovers; the monitor sees it
        at once, or not yet (`seen`: its watcher's signal not delivered yet, or it is stopped: an
        approval may come first)."""
        if dpu in self.phases:
            self.phases[dpu] = phase
            if seen:
                self.monitor.observe(self._dpf(), self.now)
                self.monitor_looks()  # a DPF change wakes the monitor

    @rule(dpu_ids=st.sampled_from([None, DPUS[:1], DPUS[1:]]))
    def operator_removes_dpus(self, dpu_ids: tuple[str, ...] | None) -> None:
        """`metalflow host remove HOST [--dpus D]` approved and completed (one step: the model
        reaches a removed DPU more often so)."""
        try:
            current = self._ask("remove", dpu_ids, "alice", None)
        except MetalflowError:
            return
        if not current.approved:
            self.state.approve("carol", self.now)
            self.state.started(current, self.now)
        self.operation_ends("completed", answered=True)

    @rule(seconds=st.sampled_from([30, 90, 700, 4000]))
    def time_passes(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)
        current = self.state.current
        expires = self.state.approval_expires_at()
        if current is not None and expires is not None and self.now >= expires:  # `_await_approval`
            self._ended(current, "expired: not approved within 1:00:00")
        self.monitor_looks()  # its timer: a deadline, or the end of a hold-back

    @rule()
    def person_powers_host_on(self) -> None:
        """`metalflow bmc power HOST on` (the OFF WARNING's advice): the entity is told (`power_set`)."""
        self.power = "On"
        if self.state.current is None:
            self.state.power = after_power_set(self.state.power, "On", self.now)
            self.state.power_set_at_rest()  # it said the host's power: no longer "may be OFF"

    @precondition(lambda self: self.state.current is None)
    @rule()
    def power_watch_reads(self) -> None:
        """The entity's power watch at rest (`power_watch._read_power_at_rest`)."""
        self.state.off_at_rest_after_unread(self.power)
        self.state.read_at_rest(self.power, self.now)
        self.state.power, _ = after_reading(HOST, self.state.power, self.power, None, self.now, {})

    @rule(instance=st.sampled_from([None, "i-1"]))
    def assign_or_release(self, instance: str | None) -> None:
        """The host is given to an instance (its disruptive requests then await approval) or released."""
        if instance is None:
            if self.state.instance is not None:
                self.state.release()
            return
        try:
            self.state.refuse_assignment(AssignInstanceRequest(instance=instance, requested_by="tenant"))
        except MetalflowError:
            return
        self.state.assign(instance)

    @rule()
    def continue_as_new(self) -> None:
        """Both runs continue-as-new (or a worker replays them): their memory through the converter."""
        start = HostWorkflowInput(host_id=HOST, policy=POLICY).model_copy(update={"state": self.state})
        self.state = HostEntityState.of(_through_converter(start, HostWorkflowInput))
        memory = self.monitor.handed_over(None)
        carried = HostMonitorInput(host_id=HOST, policy=MONITOR_POLICY).model_copy(update={"memory": memory})
        self.monitor = MonitorState.of(_through_converter(carried, HostMonitorInput), self.now)

    # -- requests: the handler (`HostWorkflow._request`) ----------------------------------------
    def _ask(
        self, kind_name: str, dpu_ids: tuple[str, ...] | None, by: str, told: str | None
    ) -> PendingOperation:
        kind = KINDS[kind_name]
        if kind_name == "provision" and not self.phases:
            # The whole DPU node removed: provisioned whole, as the refusal advises (`metalflow host
            # provision HOST`). A provision naming some DPUs would bring back the node with those
            # only, and the entity, which knows no DPU list, would then take a reprovision of the
            # others: a known gap (issue 40, task i40u's report), not a rule this model checks.
            dpu_ids = None
        if kind_name.startswith("reset"):
            target = ResetTarget.DPU if kind_name == "reset-dpu" else ResetTarget.HOST
            named = (dpu_ids or DPUS) if target == ResetTarget.DPU else None
            request: Any = ResetRequest(
                requested_by=by, target=target, dpu_ids=named, campaign_workflow_id=told
            )
        else:
            request = OperationRequest(
                requested_by=by, reason="critical DPU services down for more than 60 s", dpu_ids=dpu_ids,
                campaign_workflow_id=told,
            )  # fmt: skip
        before, hold = self.state.current, self.state.automation_held_back
        gone = {d for d in DPUS if d not in self.phases}
        try:
            self.state.refuse_request(kind, request)
        except MetalflowError:
            assert self.state.current is before, "a refusal changed the entity"
            self._check(invariants.accepted_for_removed(gone, kind.operation, request, False, DPUS))
            raise
        self._check(invariants.automatic_accepted_while_held(HOST, hold, request, True))
        self._check(invariants.accepted_for_removed(gone, kind.operation, request, True, DPUS))
        current = self.state.record_request(kind, request, self.now)
        if not told:  # an operator's own request ends their hold (README)
            self.no_to = None
        if not self.state.needs_approval(kind, self.now):
            self.state.approve_at_once(current)
            self.state.started(current, self.now)
        return current

    @rule(
        kind=st.sampled_from(sorted(KINDS)),
        dpu_ids=st.sampled_from([None, DPUS[:1], DPUS[1:], DPUS]),
        campaign=st.booleans(),
    )
    def operator_or_campaign_asks(self, kind: str, dpu_ids: tuple[str, ...] | None, campaign: bool) -> None:
        try:
            self._ask(kind, dpu_ids, CAMPAIGN if campaign else "alice", CAMPAIGN if campaign else None)
        except MetalflowError:
            return

    @rule()
    def monitor_looks(self) -> None:
        """The monitor's loop: its overdue DPUs asked for (`_reprovision_overdue`), the entity's
        answer recorded; then a stale request of its own withdrawn (`_withdraw_stale`)."""
        due = self.monitor.overdue(self.now)
        if due:
            ids = tuple(sorted(d.dpu_id for d in due))
            try:
                current = self._ask("reprovision", ids, MONITOR, MONITOR)
            except DPUsRemoved as err:
                gone = tuple((err.details[0] if err.details else {}).get("dpu_ids") or ())
                answer = OwnerReprovisionResult(outcome="gone", message=str(err), gone=gone)
            except InMaintenance as err:
                answer = OwnerReprovisionResult(outcome="maintenance", message=str(err))
            except MetalflowError as err:
                answer = OwnerReprovisionResult(outcome="refused", message=str(err))
            else:
                waits = not current.approved
                answer = OwnerReprovisionResult(
                    outcome="awaiting-approval" if waits else "accepted",
                    workflow_id=current.record.workflow_id,
                )
            self.monitor.reprovision_answered(due, answer, self.now)
        self._check(
            invariants.monitor_holds_back(self.monitor.status(), self.now, self.no, BACK_OFF, asked=bool(due))
        )
        self._withdraw_stale()

    def _withdraw_stale(self) -> None:
        stale = self.monitor.stale_request()
        if stale is None:
            return
        workflow_id, why = stale
        dpu_ids = self.monitor.asked.dpu_ids if self.monitor.asked is not None else ()
        try:
            current = self.state.to_withdraw(
                WithdrawRequest(requested_by=MONITOR, reason=why, workflow_id=workflow_id)
            )
        except MetalflowError as err:
            self.monitor.withdrawal_answered(
                dpu_ids, OwnerReprovisionResult(outcome="refused", message=str(err))
            )
            return
        self._ended(current, f"withdrawn by {MONITOR}: {why}")
        answer = OwnerReprovisionResult(outcome="withdrawn", workflow_id=workflow_id, message="withdrawn")
        self.monitor.withdrawal_answered(dpu_ids, answer)

    # -- an operator's answers -------------------------------------------------------------------
    @precondition(lambda self: self.state.current is not None and not self.state.current.approved)
    @rule(recovered=st.booleans())
    def operator_approves_the_request(self, recovered: bool) -> None:
        """`metalflow approve HOST` while a request awaits approval (a rule of its own so the model
        reaches it often); `recovered`: the DPUs it names recovered a moment before, unseen by the
        monitor yet (the approval comes first)."""
        current = self.state.current
        if recovered and current is not None:
            for dpu in current.request.dpu_ids or DPUS:
                if dpu in self.phases:
                    self.phases[dpu] = "Ready"
        self.operator_approves()

    @rule()
    def operator_approves(self) -> None:
        """`metalflow approve HOST` (`HostWorkflow.approve`): the monitor's request re-read against DPF."""
        try:
            waiting = self.state.awaiting_approval(ApproveRequest(requested_by="carol"))
        except NothingAwaitsApproval as err:
            self._check(invariants.nothing_awaits_unsaid(self.state, str(err)))
            return
        record, dpf = waiting.record, self._dpf()
        from_monitor = (
            record.operation == names.REPROVISION and waiting.request.campaign_workflow_id == MONITOR
        )
        stale = invariants.reason_gone(record, waiting.request.dpu_ids, dpf)
        refusal = ""
        if self.state.reason_to_check(waiting):
            why = self.state.reason_gone(waiting, dpf)
            if why is not None:
                self._ended(waiting, self.state.withdrawn_at_approval("carol", why))
                refused: ReasonNoLongerHolds = self.state.refuse_stale_approval(waiting, why)
                refusal = str(refused)
        if not refusal:
            current = self.state.approve("carol", self.now)
            self.state.started(current, self.now)
        self._check(invariants.stale_approval(self.state, record, from_monitor, stale, not refusal, refusal))

    @precondition(lambda self: self.state.current is not None and not self.state.current.approved)
    @rule()
    def operator_withdraws(self) -> None:
        """`metalflow host abort HOST` of a request awaiting approval (the entity's `withdraw`, as
        the Temporal UI sends it too, with the id `host status` shows)."""
        shown = self.state.status().current
        if what_abort_reaches(shown) != WITHDRAW_REQUEST or shown is None:
            return
        current = self.state.to_withdraw(
            WithdrawRequest(requested_by="alice", reason="debugging", workflow_id=shown.workflow_id)
        )
        self._ended(current, "withdrawn by alice: debugging")
        assert self.state.current is None

    @rule(monitor_too=st.booleans())
    def operator_ends_the_hold(self, monitor_too: bool) -> None:
        """`metalflow host retry HOST` on the idle host (the entity's hold on automation ends), or
        `metalflow host monitor HOST --resume` (`monitor_too`: the monitor's hold-back ends too)."""
        if monitor_too:
            try:
                self.monitor.resume(OperatorRequest(requested_by="alice", reason="done"))
                self.no = None
            except ValueError:
                pass
        try:
            self.state.release_automation("alice")
        except InvalidInput:
            return
        self.no_to = None

    # -- an operation's end --------------------------------------------------------------------------
    @precondition(lambda self: self.state.current is not None and self.state.current.approved)
    @rule(power=st.sampled_from(["On", "Off"]), answered=st.booleans())
    def run_cut_by_hand(self, power: str, answered: bool) -> None:
        """The run terminated by hand (`temporal workflow terminate`): it says nothing of the host's
        power, left On or Off; the entity reads it, the BMC answering or not (a rule of its own so
        the model reaches these unsaid ends often)."""
        self.operation_ends(f"terminated, {power}", answered)

    @precondition(lambda self: self.state.current is not None and self.state.current.approved)
    @rule(
        how=st.sampled_from(
            ["completed", "failed, on", "failed, OFF", "aborted, on", "aborted, OFF", "aborted, untouched",
             "terminated, On", "terminated, Off"]
        ),
        answered=st.booleans(),
    )  # fmt: skip
    def operation_ends(self, how: str, answered: bool) -> None:
        """The run ends (`HostWorkflow._follow`); `answered`: the host's BMC answers the entity's
        read of its power at an end that says none."""
        current = self.state.current
        assert current is not None
        operation, named = current.record.operation, current.request.dpu_ids
        powers = operation in POWERING
        if not powers and ("OFF" in how or "Off" in how):
            how = "aborted, untouched"  # a removal never touches the host's power
        generation = None
        if how == "completed":
            if operation == names.REMOVE:
                for dpu in named or DPUS:
                    self.phases.pop(dpu, None)
            elif operation in (names.PROVISION, names.REPROVISION):
                for dpu in named or DPUS:
                    self.phases[dpu] = "Ready"
            if powers and not (isinstance(current.request, ResetRequest) and current.request.target == "dpu"):
                generation, self.power = self.state.boot_generation + 1, "On"
            outcome = "completed"
        elif how.endswith("untouched"):
            outcome = f"aborted by alice: debugging. Done: nothing; {POWER_NOT_TOUCHED}"
        elif how.startswith("terminated"):
            outcome, self.power = "terminated", how.split(", ")[1]
        else:
            said, self.power = (HOST_IS_ON, "On") if how.endswith("on") else (OFF_WORDS, "Off")
            outcome = (
                f"{how.split(',')[0]}{' by alice: debugging' if 'aborted' in how else ': BMC 401'}; {said}"
            )
        if power_to_read(operation, outcome):  # `PowerWatch.power_after_end`
            read = self.power if answered else None
            outcome = outcome_after_read(outcome, current.record.workflow_id, HOST, read, "no answer")
        self.state.reached(generation, self.now)
        self._ended(current, outcome)
        self.monitor.observe(self._dpf(), self.now)

    def _ended(self, current: PendingOperation, outcome: str) -> None:
        """`HostWorkflow._finish`, then `_notify_campaign`: the monitor is told its request's end."""
        self.state.finish(current, outcome, self.now)
        if current.request.campaign_workflow_id != MONITOR:
            return
        if invariants.operator_said_no(outcome, MONITOR):
            self.no_to = current.record.workflow_id
            self.no = (self.now, f"{current.record.workflow_id} {outcome}")
        self.monitor.request_ended(
            HostFinished(host_id=HOST, workflow_id=current.record.workflow_id, outcome=outcome), self.now
        )
        self._check(invariants.operator_no_kept(self.state, self.no_to))

    # -- the invariants, after every step -------------------------------------------------------------
    @invariant()
    def never_off_in_silence(self) -> None:
        self._check(invariants.found_off_unsaid(self.state, self.power))

    @invariant()
    def an_operators_no_is_kept(self) -> None:
        self._check(invariants.operator_no_kept(self.state, self.no_to))
        status = self.monitor.status()
        self._check(invariants.monitor_holds_back(status, self.now, self.no, BACK_OFF, asked=False))

    @invariant()
    def every_pending_request_can_be_withdrawn(self) -> None:
        self._check(invariants.not_withdrawable(self.state))


HostEntityModel.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=50,
    deadline=None,
    database=None,
    derandomize=True,  # the same event orders every run: each deliberate break is caught
    suppress_health_check=[HealthCheck.too_slow],
)
TestHostEntityModel = HostEntityModel.TestCase
