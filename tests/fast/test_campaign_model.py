"""A model of a campaign: Hypothesis drives the campaign's own decision code through random fleets
and event orders, and checks the rules README promises after every step, without a server.

What is driven is the real code: the admission (workflows/campaign/admission.py) over facts drawn
for a fleet, the claims registry's state (workflows/campaign_claims/state.py) with a running and a
terminated campaign already in it, the campaign's `CampaignState` step by step, and the host
operation's own rule for an abort (`HostOperationState.installing_refusal`). The machine plays the
runbook's part (workflows/campaign/workflow.py: `_admit`, the loop over `next_step`, `_finish`,
`_wind_down`) and the world's: each host's entity answers as drawn (started, busy, assigned,
refused, awaiting approval), operations pass their hold, end (completed, failed, expired), wait
for an operator; time passes; the operator pauses, resumes, aborts (with or without
`cancel_running` and `keep_changes`), retries the failed hosts and skips hosts; the worker
restarts (the state replayed through the data converter, as continue-as-new carries it); the
run fails or is cancelled; or it is terminated and a campaign of the same name takes over.

The invariants (README, "Fleet campaigns"), each shown to fail on a deliberately broken core:

1. A deployment change only ever selects hosts the campaign holds and runs (or the whole
   deployment, when asked for): checked at the moment each deployment is pointed.
2. The fleet's deployment is never pointed before a canary host is done at the target and none
   failed; a canary that cannot run stops the campaign (never passes, never waits).
3. Liveness: once the runbook would sleep, the campaign has work in flight, a timer with a stated
   time and reason, an operator's pause or halt, or it has ended; its status names which. It never
   waits with a host it could start, and an ended campaign runs nothing of its own.
4. Every ending puts back what it changed unless asked to keep it (a completed one keeps its
   target); changes left by a terminated campaign are put back by the one that takes over; no
   abort leaves a DPU owed a reboot that no operation will give.
5. The failure budget only grows toward its limit between an operator's resets, counted as README
   says (failures since the start, the last resume or retry; a skipped failure stays counted; a
   host waiting for an operator counts while it waits), and halts once past it: the limit computed
   here from README's words (`N` hosts, or `X%` of those selected rounded down), never by the
   code under test.
6. No host in maintenance is ever taken: never asked when the admission saw it, and refused by
   its entity (`maintenance_refusal`) when visibility had not shown it yet; skipped, never failed.

Each check was seen to fail on a deliberately broken core (each break made, run, restored): the
admission checking deployments against the whole roster, skipped hosts included (1); an empty
deployment canary taken as passed (2); the canary's end counted by its batch, as before the fix
(3: the hang); an ending that forgets its own changes, a takeover that does not put back what the
terminated campaign left, an operation that takes a campaign's abort while its DPUs install (4);
a skip that takes a failed host off the budget (5); an admission that takes hosts in maintenance,
an entity's maintenance refusal counted as a failure (6). After an independent reviewer's attack: a
whole deployment pointed over a host another running campaign holds (1), a restore that puts the
value found back over an operator's patch (the world's `an_operator_patches_a_deployment`: 4), a
share of the budget rounded up (5). It found, while it was written, three holes
in the canary and a campaign that waited for a window with no alarm set (tests of their own in
test_campaign_state.py). Derandomized: the same fleets and orders every run, in a few seconds.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from contracts.campaign_claims import as_result, merged
from contracts.converter import DATA_CONVERTER
from contracts.host_requests import of_operation
from contracts.models.campaign import (
    AbortAnswer,
    AbortRequest,
    CampaignHost,
    CampaignInput,
    CampaignPolicy,
    CampaignTarget,
    ClaimRequest,
    ClaimResult,
    DeploymentFacts,
    DeploymentRecord,
    DeploymentsRead,
    Failure,
    FailureBudget,
    HostFinished,
    HostRequestOutcome,
    HostSelection,
    HostState,
    Limits,
    RecordRequest,
    Roster,
    SelectHostsResult,
    TargetKind,
    Window,
)
from contracts.models.control import OperatorRequest
from contracts.models.host import HostOperationInput, HostOperationKind, Maintenance
from workflows.campaign import admission, views
from workflows.campaign.state import CampaignState
from workflows.campaign_claims.state import ClaimsState
from workflows.host.state import maintenance_refusal
from workflows.host_operation.state import HostOperationState

NOW = datetime(2026, 11, 28, 0, 0, tzinfo=UTC)  # a Saturday, 00:00 UTC
ME, OTHER, GONE = "campaign/fleet", "campaign/other", "campaign/gone"
ORIGINAL, NEW = "bf-orig", "bf-new"
CANARY, FLEET = "canary-dep", "fleet-dep"
OPERATOR = OperatorRequest(requested_by="alice")
S = HostState
ANSWERS = ["started", "started", "started", "busy", "assigned", "refused", "awaiting-approval"]
KINDS = ["reprovision", "firmware", "bfb-canary", "bfb-canary", "bfb"]
EVENTS = ["ends", "ends", "ends", "fails", "fails", "hold", "hold", "hold", "waits"]
ACTIONS = [
    "pause", "resume", "resume", "retry", "retry", "skip", "skip", "skip", "abort", "abort-cancel",
    "abort-cancel", "abort-cancel", "abort-keep", "restart", "restart", "fail", "terminate",
]  # fmt: skip
RARE = [False] * 9 + [True]


@dataclass
class Host:
    """What the world says of one host, drawn once."""

    no_dpf: bool = False
    assigned: bool = False  # an instance in the inventory
    held_by: str | None = None  # OTHER (running) or GONE (terminated)
    at_target: bool = False
    reaches: bool = True  # a completed operation leaves it at the target
    answer: str = "started"  # what its entity answers (busy: once, then started)
    canary: bool = False  # its DPUs are the canary deployment's
    quick: bool = False  # its operation releases the hold at once: its DPUs install from the start
    # In maintenance (`metalflow host maintenance`): "seen" by visibility at the admission, or
    # "late" (set as the campaign read: only its entity's refusal, `InMaintenance`, tells).
    maintenance: str | None = None


@dataclass
class Op:
    """An operation the campaign asked for, as the world runs it."""

    workflow_id: str
    approval: bool
    installing: bool = False  # past its hold: its DPUs install and will ask for a reboot
    needs_operator: bool = False
    aborted: bool = False


@dataclass
class World:
    kind: str
    hosts: dict[str, Host]
    outside: int  # hosts outside the roster its fleet deployment selects
    whole: tuple[str, ...]  # the deployments asked for whole, by name
    canary: int
    leftover: bool  # GONE left the fleet deployment pointed at NEW
    budget: int
    percent: int | None  # the budget as a share of the hosts selected, instead of `budget` hosts
    limits: Limits
    keep: bool
    windows: tuple[Window, ...]
    soak: float
    values: dict[str, str] = field(default_factory=dict)  # deployment -> its value now
    owed: set[str] = field(default_factory=set)  # hosts whose DPUs wait for a reboot no one gives


@st.composite
def worlds(draw: Any) -> World:
    kind = draw(st.sampled_from(KINDS))
    count = draw(st.integers(2, 6))
    hosts = {}
    for i in range(count):
        hosts[f"h{i}"] = Host(
            no_dpf=draw(st.sampled_from(RARE)),
            assigned=draw(st.sampled_from(RARE)),
            held_by=draw(st.sampled_from([None] * 12 + [OTHER, GONE])),
            at_target=kind != "reprovision" and draw(st.sampled_from([False, False, True])),
            reaches=draw(st.sampled_from([True] * 5 + [False])),
            answer=draw(st.sampled_from(ANSWERS)),
            canary=kind == "bfb-canary" and (i == 0 or draw(st.sampled_from([False, False, True]))),
            quick=draw(st.sampled_from([False, True])),
            maintenance=draw(st.sampled_from([None] * 8 + ["seen", "late"])),
        )
    return World(
        kind=kind,
        hosts=hosts,
        outside=draw(st.sampled_from([0] * 7 + [1])),
        whole=draw(st.sampled_from([(), (), (), (FLEET,), (CANARY, FLEET)])),
        canary=1 if kind == "bfb-canary" else 0 if kind == "bfb" else draw(st.integers(0, 2)),
        leftover=kind.startswith("bfb") and draw(st.booleans()),
        budget=draw(st.integers(0, 2)),
        percent=draw(st.sampled_from([None, None, 10, 25, 40])),
        limits=Limits(
            batch_size=draw(st.integers(1, 3)), max_in_flight=draw(st.integers(1, 3)), max_per_bmc=0
        ),
        keep=draw(st.sampled_from([False, False, True])),
        windows=draw(st.sampled_from([(), (), (Window(start_minute=60, end_minute=180),)])),
        soak=draw(st.sampled_from([0.0, 0.0, 600.0])),
    )


def _target(world: World) -> CampaignTarget:
    if world.kind == "reprovision":
        return CampaignTarget(kind=TargetKind.REPROVISION)
    if world.kind == "firmware":
        return CampaignTarget(kind=TargetKind.FIRMWARE, value="32.45", image_uri="http://fw")
    canary = CANARY if world.kind == "bfb-canary" else ""
    return CampaignTarget(
        kind=TargetKind.BFB,
        value=NEW,
        deployment=FLEET,
        canary_deployment=canary,
        whole_deployment=tuple(n for n in world.whole if n in (canary, FLEET)),
    )


def _roundtrip(state: CampaignState) -> CampaignState:
    """The state as a worker that restarted (or a continued run) has it: through the converter."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        [payload] = DATA_CONVERTER.payload_converter.to_payloads([state])
    [decoded] = DATA_CONVERTER.payload_converter.from_payloads([payload], [CampaignState])
    assert isinstance(decoded, CampaignState)
    return CampaignState.carried(decoded)


class CampaignModel(RuleBasedStateMachine):
    """The campaign's decisions, driven as its runbook drives them (module docstring)."""

    world: World
    start: CampaignInput
    state: CampaignState
    registry: ClaimsState

    def __init__(self) -> None:
        super().__init__()
        self.now = NOW
        self.ops: dict[str, Op] = {}
        self.asked = 0
        self.ended: str | None = None  # how the run ended, once it did
        self.refused: str | None = None
        self.heard_budget = 0  # failures the budget counts, as the model counts them (invariant 5)
        self.canary_latest: dict[str, str] = {}  # canary host -> "done" or "failed", as the world ended it
        self.patched: dict[str, str] = {}  # deployment -> the value an operator set by hand, last
        self.asked_in_maintenance: list[str] = []  # hosts asked although visibility showed them (6)

    # -- the run's start: facts, claims, admission (the runbook's `_admit`) ------------------------
    @initialize(world=worlds())
    def admit(self, world: World) -> None:
        self.world = world
        target = _target(world)
        self.start = CampaignInput(
            name="fleet",
            target=target,
            selection=HostSelection(all=True),
            canary=world.canary,
            limits=world.limits,
            soak_seconds=world.soak,
            windows=world.windows,
            budget=FailureBudget(max_failures=world.budget)
            if world.percent is None
            else FailureBudget(max_percent=world.percent),
            policy=CampaignPolicy(busy_retry_seconds=300, sweep_seconds=600, keep_changes=world.keep),
            requested_by="ops",
        )
        world.values = {CANARY: ORIGINAL, FLEET: NEW if world.leftover else ORIGINAL}
        self.registry = ClaimsState()
        for holder in (OTHER, GONE):
            hosts = tuple(h for h, facts in world.hosts.items() if facts.held_by == holder)
            self.registry.claim(ClaimRequest(campaign=holder, host_ids=hosts))
        if world.leftover:
            self.registry.claim(ClaimRequest(campaign=GONE, host_ids=(), deployments=(FLEET,)))
            record = DeploymentRecord(deployment=FLEET, field="bfb", previous=ORIGINAL, value=NEW)
            self.registry.record(RecordRequest(campaign=GONE, changes=(record,)))
        self.state = CampaignState.first(asker=f"{ME}@run-1", limits=world.limits, now=NOW)
        self._admit_as(self.state, ME)

    def _selected(self) -> SelectHostsResult:
        hosts = self.world.hosts
        needs_dpf = self.start.target.spec.needs_dpf
        return SelectHostsResult(
            roster=Roster.of([CampaignHost(host_id=h) for h in hosts]),
            no_dpf=tuple(h for h, f in hosts.items() if f.no_dpf and needs_dpf),
            assigned=tuple(h for h, f in hosts.items() if f.assigned),
            maintenance={h: ("alice", NOW) for h, f in hosts.items() if f.maintenance == "seen"},
        )

    def _claim(self, campaign: str, hosts: tuple[str, ...], deployments: tuple[str, ...]) -> ClaimResult:
        """The claims client's two steps (contracts/campaign_claims.py), OTHER running."""
        answer = self.registry.claim(ClaimRequest(campaign=campaign, host_ids=hosts, deployments=deployments))
        gone = {h for h in (*answer.held, *answer.held_deployments) if h != OTHER}
        if gone:
            again = self.registry.claim(
                ClaimRequest(
                    campaign=campaign,
                    host_ids=tuple(h for g in gone for h in answer.held.get(g, ())),
                    deployments=tuple(d for g in gone for d in answer.held_deployments.get(g, ())),
                    take_from=tuple(sorted(gone)),
                )
            )
            answer = merged(answer, again, gone)
        return as_result(answer, set())

    def _read(self) -> DeploymentsRead | None:
        if not self.start.target.points_deployment:
            return None
        hosts, known = self.world.hosts, [h for h, f in self.world.hosts.items() if not f.no_dpf]
        fleet, value = tuple(h for h in known if not hosts[h].canary), self.world.values[FLEET]
        facts = [DeploymentFacts(role="fleet", name=FLEET, strategy="OnDelete", value=value,
                                 covered=fleet, outside=self.world.outside)]  # fmt: skip
        if self.start.target.canary_deployment:
            covered = tuple(h for h in known if hosts[h].canary)
            facts.insert(0, DeploymentFacts(role="canary", name=CANARY, strategy="OnDelete",
                                            value=self.world.values[CANARY], covered=covered))  # fmt: skip
        return DeploymentsRead(deployments=tuple(facts))

    def _admit_as(self, state: CampaignState, campaign: str) -> admission.Admission:
        selected = self._selected()
        claims = self._claim(
            campaign, admission.to_claim(self.start, selected), admission.deployments(self.start)
        )
        decided = admission.admit(self.start, selected, claims, self._read(), self.now)
        state.admitted(decided, self.start.canary)
        if decided.refusal is not None:
            self.refused = decided.refusal
            self._wind_down(
                state
            )  # the runbook raises InvalidInput: the early end puts back what it took over
            self.ended = self.ended or "failed"
            return decided
        self.registry.record(RecordRequest(campaign=campaign, changes=decided.records()))
        for index in state.leftovers():
            self._apply(state, index, restore=True)
        if state is self.state:
            self._settle()
        return decided

    # -- the world's side of a change -------------------------------------------------------------
    def _apply(self, state: CampaignState, index: int, *, restore: bool) -> None:
        """The deployment activity over the world: a point writes the value; a restore writes
        what `restore_write` says of the value read (compare and set)."""
        change = state.changes[index]
        before = self.world.values[change.deployment]
        if not restore:
            self._check_point(state, index)
            if (write := change.point_write(before)) is not None:  # compare and set, as the activity
                self.world.values[change.deployment] = write
            state.changes[index] = change.pointed_over(before, self.now)
            if before == self.patched.get(change.deployment):  # invariant 4: never over someone's change
                assert self.world.values[change.deployment] == before, (
                    f"{change.deployment}: the operator's {before} overwritten by a point to {change.value}"
                )
            return
        write = change.restore_write(before)
        if write is not None:
            self.world.values[change.deployment] = write
        state.changes[index] = change.restored(before, self.now)
        if before == self.patched.get(change.deployment):  # invariant 4: never over someone's change
            assert self.world.values[change.deployment] == before, (
                f"{change.deployment}: the operator's {before} overwritten by a restore to {change.previous}"
            )

    def _check_point(self, state: CampaignState, index: int) -> None:
        """Invariants 1 and 2, as a deployment is pointed."""
        change = state.changes[index]
        hosts = self.world.hosts
        known = [h for h, f in hosts.items() if not f.no_dpf]
        selects = [h for h in known if hosts[h].canary == (change.role == "canary")]
        for host_id in selects:  # whole or not: never over a host another running campaign holds
            assert self.registry._holder_of.get(host_id) in (ME, None), (
                f"{change.deployment} pointed over {host_id}, held by {self.registry._holder_of.get(host_id)}"
            )
        if change.deployment not in self.start.target.whole_deployment:
            assert change.role != "fleet" or self.world.outside == 0, "the fleet's selects hosts outside"
            for host_id in selects:
                held = self.registry.deployments.get(change.deployment)
                assert held is not None and held.holder == ME, f"{change.deployment} pointed, not held"
                assert self.registry._holder_of.get(host_id) == ME, (
                    f"{change.deployment} selects {host_id}, not held"
                )
                assert state.state(host_id) != S.SKIPPED, f"{change.deployment} selects {host_id}, skipped"
        if change.role == "fleet" and self.start.target.canary_deployment and self.start.canary > 0:
            done = [h for h, how in self.canary_latest.items() if how == "done"]
            failed = [h for h, how in self.canary_latest.items() if how == "failed"]
            assert done and not failed, f"the fleet's deployment pointed: canary done {done}, failed {failed}"

    # -- the runbook's loop -------------------------------------------------------------------------
    def _settle(self) -> None:
        """The runbook's loop until it would sleep (or ends)."""
        for _ in range(200):
            if self.ended is not None:
                return
            self.state.absorb_heard(verify=self._verifies(), budget=self.start.budget)
            self._verify()
            step = self.state.next_step(self.now, self.start)
            if step.over:
                self._finish()
                return
            if self.state.abort_request is not None and self.state.cancel_running:
                self._abort_running()
            for index in step.restore:
                self._apply(self.state, index, restore=True)
            refused = False
            for index in step.point:
                self._apply(self.state, index, restore=False)
                if refused := self.state.point_refusal(index) is not None:
                    break  # the runbook's `_take`: halted, no host starts
            if refused:
                continue
            if step.start:
                self._start(step.start)
                continue
            if self.state.sweep_due(self.now):
                self._sweep()
                continue
            return
        raise AssertionError("the runbook never sleeps")

    def _verifies(self) -> bool:
        return self.start.target.spec.at_target != "never"

    def _verify(self) -> None:
        hosts = list(self.state.verifying)
        if not hosts:
            return
        at = {h for h in hosts if self.world.hosts[h].at_target}
        for host_id in hosts:
            if host_id in self.state.canary_pool and not self.state.canary_passed:
                self.canary_latest[host_id] = "done" if host_id in at else "failed"
            if host_id not in at:
                self.heard_budget += 1
        self.state.read_back(hosts, at, {h: "old" for h in hosts}, self.start)

    def _start(self, hosts: list[CampaignHost]) -> None:
        at = {h.host_id for h in hosts if self._verifies() and self.world.hosts[h.host_id].at_target}
        for host in hosts:
            if host.host_id in at:
                if self.state.retried.get(host.host_id) and host.host_id in self.state.canary_pool:
                    self.canary_latest[host.host_id] = "done"
                self.state.found_at_target(host.host_id)
        asked = [h for h in hosts if h.host_id not in at]
        outcomes = []
        for host in asked:
            facts = self.world.hosts[host.host_id]
            if facts.maintenance is not None:  # the entity's own rule, whatever else it would answer
                if facts.maintenance == "seen":
                    self.asked_in_maintenance.append(host.host_id)
                held = Maintenance(by="alice", reason="fan", since=NOW)
                refusal = maintenance_refusal(host.host_id, held, of_operation(self._operation()), False)
                assert refusal is not None
                outcomes.append(
                    HostRequestOutcome(host_id=host.host_id, outcome="maintenance", message=refusal)
                )
                continue
            answer = facts.answer
            if answer == "busy":
                facts.answer = "started"  # busy once
            self.asked += 1
            workflow_id = f"op/{host.host_id}#{self.asked}"
            if answer in ("started", "awaiting-approval"):
                approval = answer == "awaiting-approval"
                installing = facts.quick and not approval
                self.ops[host.host_id] = Op(workflow_id=workflow_id, approval=approval, installing=installing)
            if answer == "refused":
                self.heard_budget += 1
                if host.host_id in self.state.canary_pool and not self.state.canary_passed:
                    self.canary_latest[host.host_id] = "failed"
            outcomes.append(HostRequestOutcome(host_id=host.host_id, outcome=answer, workflow_id=workflow_id))  # type: ignore[arg-type]
        self.state.answered(outcomes, asked, now=self.now, start=self.start)

    def _sweep(self) -> None:
        flights = self.state.sweeping(self.now, self.start.policy.sweep_seconds)
        waiting = [
            Failure(host_id=f.host.host_id, reason="needs an operator")
            for f in flights
            if self.ops.get(f.host.host_id) and self.ops[f.host.host_id].needs_operator
        ]
        self.state.swept((), waiting, self.start.budget)

    def _abort_running(self) -> None:
        """The abort activity over the world: withdrawn requests end unstarted; each running
        operation takes the abort or refuses it by its own rule (`finish_installing`)."""
        running, waiting = self.state.to_abort()
        for flight in waiting:
            self._end(flight.host.host_id, "withdrawn by alice")
        answers = []
        for flight in running:
            op = self.ops.get(flight.host.host_id)
            if op is None or op.workflow_id != flight.workflow_id:
                continue
            request = HostOperationInput.model_construct(
                host_id=flight.host.host_id, kind=HostOperationKind.REPROVISION
            )
            operation = HostOperationState.start(request, self.now)
            operation.hold_released = op.installing
            refusal = operation.installing_refusal()
            if refusal is not None:
                answers.append(AbortAnswer(host_id=flight.host.host_id, workflow_id=op.workflow_id,
                                           answer="finishing", words=refusal))  # fmt: skip
                continue
            if op.installing:
                self.world.owed.add(flight.host.host_id)  # aborted with its DPUs installing
            answers.append(AbortAnswer(host_id=flight.host.host_id, workflow_id=op.workflow_id,
                                       answer="aborted", words=operation.abort_leaves()))  # fmt: skip
            op.aborted = True
        self.state.abort_answered(tuple(answers))
        for flight in running:
            op = self.ops.get(flight.host.host_id)
            if op is not None and op.aborted:
                self._end(flight.host.host_id, "aborted by alice: campaign fleet aborted")

    def _end(self, host_id: str, outcome: str) -> None:
        op = self.ops.pop(host_id)
        if outcome == "completed":
            self.world.hosts[host_id].at_target = self.world.hosts[host_id].reaches
        elif outcome.startswith("failed"):
            self.heard_budget += 1
        if (
            host_id in self.state.canary_pool
            and not self.state.canary_passed
            and outcome.startswith("failed")
        ):
            self.canary_latest[host_id] = "failed"  # a completed one is done once read back (`_verify`)
        self.state.heard.append(HostFinished(host_id=host_id, workflow_id=op.workflow_id, outcome=outcome))

    def _finish(self) -> None:
        """The planned end (`_finish`): the changes the state says to put back, the release."""
        outcome = self.state.outcome()
        for index in self.state.ending(keep=self.start.policy.keep_changes):
            self._apply(self.state, index, restore=True)
        self.registry.release(ME)
        self.ended = outcome

    def _wind_down(self, state: CampaignState) -> None:
        """An early end (failed, cancelled, refused): `_wind_down`."""
        keep = self.start.policy.keep_changes or state.keep_changes
        for index in state.restores_at_end("failed", keep=keep):
            self._apply(state, index, restore=True)
        self.registry.release(ME)

    # -- the world's events -----------------------------------------------------------------------
    def _running(self) -> list[str]:
        return sorted(h for h, op in self.ops.items() if not op.approval and h in self.state.in_flight)

    @precondition(lambda self: self.ended is None and bool(self.ops))
    @rule(data=st.data(), event=st.sampled_from(EVENTS))
    def an_operation_moves(self, data: st.DataObject, event: str) -> None:
        """An operation passes its hold (its DPUs install), waits for an operator, or ends."""
        host_id = data.draw(st.sampled_from(sorted(self.ops)))
        op = self.ops[host_id]
        if event == "hold" and not op.approval:
            op.installing = True
        elif event == "waits" and not op.approval:
            op.needs_operator = True
        elif op.approval:
            self._end(host_id, "expired: not approved within 3600 s")
        else:
            self._end(host_id, "failed: DPU in Error" if event == "fails" else "completed")
        self._settle()

    @precondition(lambda self: self.ended is None and self.start.target.points_deployment)
    @rule(data=st.data())
    def an_operator_patches_a_deployment(self, data: st.DataObject) -> None:
        """Someone else sets a deployment's value by hand (`kubectl patch`): no restore may put
        the campaign's `previous` over it (README rule 4: compare and set)."""
        name = data.draw(st.sampled_from([CANARY, FLEET]))
        self.patched[name] = self.world.values[name] = f"bf-op{len(self.patched)}"
        self._settle()

    @rule(minutes=st.sampled_from([5, 11, 40, 120]))
    def time_passes(self, minutes: int) -> None:
        self.now += timedelta(minutes=minutes)
        self._settle()  # nothing once it ended

    # -- the operator, the worker, the end ----------------------------------------------------------
    @precondition(lambda self: self.ended is None)
    @rule(data=st.data(), action=st.sampled_from(ACTIONS))
    def someone_acts(self, data: st.DataObject, action: str) -> None:
        """An operator's update (only as its validator takes it), a worker that restarts, a run
        that fails or is cancelled, or one terminated and taken over."""
        state = self.state
        if action == "pause" and state.paused_by is None and state.abort_request is None:
            state.pause(OPERATOR)
        elif (
            action == "resume" and (state.paused_by or state.halted_reason) and state.resume_refusal() is None
        ):
            if state.halted_reason is not None:
                self.heard_budget = 0
            state.resume()
        elif action.startswith("abort"):
            self._abort(AbortRequest(requested_by="alice", cancel_running=action == "abort-cancel",
                                     keep_changes=action == "abort-keep"))  # fmt: skip
        elif action == "retry" and state.failed and state.retry_refusal() is None:
            self.heard_budget = 0
            for host_id in [h for h in self.canary_latest if state.state(h) == S.FAILED]:
                del self.canary_latest[host_id]
            state.retry_failed()
        elif action == "skip":  # a failed host more often than not: a skip must not lower the budget
            failed = sorted(h for h in self.world.hosts if state.state(h) == S.FAILED)
            host_id = data.draw(st.sampled_from(failed or sorted(self.world.hosts)))
            if state.skip_refusal(host_id, whole_deployment=self.start.target.whole_deployment) is None:
                state.skip_host(host_id, OPERATOR)
        elif action == "restart":
            again = _roundtrip(state)  # a replay rebuilds the same state; continue-as-new carries it
            assert again.model_dump() == state.model_dump()
            self.state = again
        elif action == "fail":
            self._wind_down(state)
            self.ended = "failed"
        elif action == "terminate":
            self._terminated_then_taken_over()
        self._settle()

    def _abort(self, request: AbortRequest) -> None:
        if self.state.abort_request is not None and not self.state.abort_escalates(request):
            return  # the validator refuses it
        self.state.take_abort(request)
        self.state.abort_request = request  # the kernel's `accept_abort`

    def _terminated_then_taken_over(self) -> None:
        """Terminated: nothing of the run's own runs; the next campaign of the name takes over."""
        self.ended = "terminated"
        successor = CampaignState.first(asker=f"{ME}@run-2", limits=self.world.limits, now=self.now)
        self._admit_as(successor, ME)
        own = [c for c in successor.changes if c.role != "leftover"]
        found = [c for c in own if c.previous not in (ORIGINAL, self.patched.get(c.deployment))]
        assert not found, f"the value found is neither the original nor the operator's: {found}"
        for name, value in self.world.values.items():
            assert value in (ORIGINAL, self.patched.get(name)), (
                f"what the terminated campaign changed is not put back: {self.world.values}"
            )
        self.registry.release(ME)

    # -- the invariants -----------------------------------------------------------------------------
    @invariant()
    def it_waits_for_something_it_names(self) -> None:
        """Invariant 3."""
        if self.ended is not None:
            if self.ended != "terminated":
                mine = [h for h, op in self.ops.items() if h in self.state.in_flight and not op.aborted]
                assert not mine or self.ended == "failed", f"ended {self.ended} with {mine} still running"
            return
        live = self.state.liveness(self.now, self.start.windows)
        assert live is not None, f"waits for nothing: {self.state.phase} {self.state.counts()}"
        kind, words = live
        assert kind != "can-start", f"asleep with a host it could start: {words}"
        if kind == "timer":
            wake = self.state.wake(self.now, self.start.windows)
            assert wake is not None and wake[0] > self.now and wake[1]
        shown = views.status(self.state, "fleet", self.start, self.now)
        assert (shown.waiting_on, shown.waiting_for) == live

    @invariant()
    def every_ending_puts_back_what_it_changed(self) -> None:
        """Invariant 4."""
        assert not self.world.owed, f"aborted with their DPUs installing: {sorted(self.world.owed)}"
        if self.ended is None or self.ended == "terminated":
            return
        kept = self.ended == "completed" or self.start.policy.keep_changes or self.state.keep_changes
        for change in self.state.changes:
            if change.role == "leftover":
                assert change.restored_at is not None, (
                    f"ended {self.ended}: {change.deployment} left as taken over"
                )
            elif not kept and self.world.values[change.deployment] != self.patched.get(change.deployment):
                assert self.world.values[change.deployment] == change.previous, (
                    f"ended {self.ended}: {change.deployment} left at {self.world.values[change.deployment]}"
                )
        assert ME not in self.registry.holders and ME not in self.registry.deployment_holders().values()

    def _operation(self) -> str:
        return "firmware" if self.world.kind == "firmware" else "reprovision"

    @invariant()
    def no_host_in_maintenance_is_ever_taken(self) -> None:
        """Invariant 6: a host in maintenance never runs an operation of the campaign, never fails
        it or counts in its budget (skipped, naming the maintenance); one the admission saw is
        never even asked."""
        assert not self.asked_in_maintenance, f"asked hosts in maintenance: {self.asked_in_maintenance}"
        for host_id, facts in self.world.hosts.items():
            if facts.maintenance is None:
                continue
            assert host_id not in self.ops, f"{host_id} in maintenance runs an operation of the campaign"
            assert host_id not in self.state.in_flight
            assert self.state.state(host_id) != S.FAILED, f"{host_id} in maintenance counted as failed"

    @invariant()
    def the_budget_only_grows_toward_its_limit(self) -> None:
        """Invariant 5."""
        if self.ended is not None:
            return
        counted = self.state.budget_failures()
        waiting = len(self.state.needs_operator.keys() - set(self.state.operator_accepted))
        assert counted == self.heard_budget + waiting, (
            f"budget counts {counted}, README {self.heard_budget}+{waiting}"
        )
        # README's words, computed here (never by the code under test): `N` halts past N failures;
        # `X%` is of the hosts selected, rounded down (10% of 100 hosts halts at the 11th).
        percent, total = self.world.percent, self.state.total
        limit = self.world.budget if percent is None else (percent * total) // 100
        if counted > limit:
            assert (
                self.state.halted_reason is not None
                or self.state.abort_request is not None
                or (self.state.stopped_reason is not None)
            ), f"{counted} failed past the budget, not halted"


CampaignModel.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=25,
    deadline=None,
    database=None,
    derandomize=True,  # the same fleets and event orders every run: each deliberate break is caught
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestCampaignModel = CampaignModel.TestCase
