"""RolloutWorkflow: a coherent rollout of one Grove PodCliqueSet under OnDelete (DOMAIN.md
section 3; Grove pinned at ai-dynamo/grove 6eaa77f0, v0.1.0-alpha.12's PodGangMap change; the
behaviour it relies on: `simulators/grove/BEHAVIOUR.md`).

Id `rollout/<namespace>/<pcs>` (`contracts.names.rollout_workflow_id`): the id is the lock. The
runbook, top to bottom in `run`:

1. Read the PodCliqueSet, its PodGangs and their pods. Refused, changing nothing: no such
   PodCliqueSet; a strategy other than OnDelete (Grove rolls RollingRecreate itself;
   `metalflow rollout status` shows its progress); an unknown clique or container; a bad image;
   a change that must take a replica below a minAvailable (every change of a standalone clique:
   Grove puts all its pods in the replica's one anchor PodGang) without `allow_replica_outage`.
2. Set the images (any container: "clique/container"), as field manager `metalflow-rollout`.
   Grove patches every PodClique in place (OnDelete) and nothing runs the new template yet. The
   targets are the per-clique pod-template hashes Grove then labels the PodCliques with.
3. Steps: per replica, its anchor PodGang, then its tails, one PodGang per replica at a time
   (`policy.replica_concurrency` replicas at once). A step deletes the PodGang's pods that are
   not at their clique's target, pinned by uid, all at once (a one-clique change deletes that
   clique's pods only); Grove recreates them from the patched PodCliques into the same PodGang,
   so the PodGang comes back whole at the new template. Before a step every other PodGang must
   be serving (each podgroup has minReplicas Ready pods); a step is done when the PodGang has
   its pods, all at the target and Ready (the watcher's signals show it; no polling). Its
   deadline is the smaller of `policy.step_deadline_seconds` and half the PodCliqueSet's
   terminationDelay, so a step that holds a replica below minAvailable is stopped well before
   Grove would gang-terminate the replica.
4. Never mix (what the rollout guarantees, and what it cannot): the template is one for the
   whole PodCliqueSet, so while PodGangs of two versions coexist, a pod Grove replaces (an
   eviction, a crash) comes back at the template's version, into whatever PodGang it belongs
   to. No client can stop that; the rollout (a) never mixes a PodGang itself (it replaces a
   PodGang's stale pods together), (b) heals a PodGang that Grove mixed at once, while rolling
   and while paused (a repair: its stale pods replaced, to the template's version), and
   (c) never ends with two versions: it completes (all new), rolls back, or, on `abort`, takes
   everything back to the previous version (the stuck step first, interrupted at once) and
   fails with `RolloutAborted`. Paused, the world is guarded, not frozen.
5. A step that misses its deadline, a PodGang that stops serving, or a template edit by
   someone else (named field by field, with who made it, from managedFields) pauses the
   rollout until an operator decides: `resume` (go on; after a foreign edit the template as it
   now is becomes the target), `rollback` (put back only the fields the rollout set, where they
   still hold its values, and roll every PodGang back under the same rules) or `abort`.
   A PodCliqueSet switched to RollingRecreate mid-rollout is Grove's to roll: the rollout stops
   driving and ends `handed-to-grove`.
6. However it ends, the watcher is cancelled and waited for, so the run has no pending activity.

Bounded history: between steps the run continues as new once its history passes
`policy.history_limit` events (or the server suggests it), carrying `RolloutCarry` (targets,
fields set, counters, the latest steps, the pending operator requests); the watcher starts
afresh in the new run. Cost per PodGang rolled, measured at 300 PodGangs (tests/
test_rollout_scale.py): one `roll_podgang` activity (3 events) and, from the watcher, one
signal per settle window that changed the PodGang (typically 2-4), each a signal event plus a
workflow task (3 events): about 20-30 events per PodGang; the signal payload holds only the
PodGangs that changed (~250 bytes each). So a run of `history_limit` 10,000 events rolls about
300-400 PodGangs and any PodCliqueSet fits, run after run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, ClassVar, TypeVar

from temporalio import workflow
from temporalio.exceptions import FailureError

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api, names
    from contracts.errors import InvalidInput, PodCliqueSetGone, RolloutAborted
    from contracts.models.control import (
        PAUSE_UPDATE,
        RESUME_UPDATE,
        STATUS_QUERY,
        OperatorAnswer,
        OperatorRequest,
    )
    from contracts.models.grove import (
        ON_DELETE,
        PCS_STATE_CHANGED_SIGNAL,
        ROLLBACK_UPDATE,
        SCALE_UPDATE,
        SUPERSEDE_UPDATE,
        FieldChange,
        GangState,
        PCSChange,
        PCSState,
        ProgressInput,
        RevertInput,
        RollGangInput,
        RolloutCarry,
        RolloutInput,
        RolloutResult,
        RolloutStatus,
        ScalePCSInput,
        ScaleRequest,
        SetImagesInput,
        StepRecord,
        SupersedeRequest,
        TemplateChangeInput,
        TemplateResult,
        WatchPCSInput,
    )
    from contracts.wording import plural
    from workflows import kernel
    from workflows.rollout import steps

ArgT = TypeVar("ArgT")
ResultT = TypeVar("ResultT")

PREPARING = "preparing"
ROLLING = "rolling"
ROLLING_BACK = "rolling-back"
PAUSED = "paused"
COMPLETED = "completed"
ROLLED_BACK = "rolled-back"
ABORTED = "aborted"
HANDED = "handed-to-grove"
DECISIONS = (RESUME_UPDATE, ROLLBACK_UPDATE)
"""What a paused rollout waits for (besides `abort`)."""
RECENT_STEPS = 20
"""Steps kept in the status and carried across continue-as-new (`steps_done` counts them all)."""


@workflow.defn(name="RolloutWorkflow")
class RolloutWorkflow(kernel.Abortable):
    """Roll one PodCliqueSet coherently; see the module docstring."""

    ENDED: ClassVar = (COMPLETED, ROLLED_BACK, ABORTED, HANDED)

    @workflow.init
    def __init__(self, request: RolloutInput) -> None:
        super().__init__()
        self.phase = PREPARING
        self._pcs = request.pcs
        self._policy = request.policy
        self._state: PCSState | None = None
        self._seq: tuple[int, int] = (-1, -1)
        self._original: dict[str, str] = {}
        self._targets: dict[str, str] = {}
        self._fields: tuple[FieldChange, ...] = ()
        self._written: dict[str, object] = {}
        self._written_at: datetime = workflow.now()
        self._generation = 0
        self._target_hash = ""
        self._previous_hash = ""
        self._rolling_back = False
        self._reverting_for_abort = False
        self._paused_reason: str | None = None
        self._rollback_request: OperatorRequest | None = None
        self._supersede: SupersedeRequest | None = None
        self._scale: ScaleRequest | None = None
        self._steps: list[StepRecord] = []
        self._steps_done = 0
        self._repairs = 0
        self._in_flight: dict[int, str] = {}  # replica -> PodGang whose step is not done
        self._interrupted: set[str] = set()
        self._guarding = False
        self._healing = 0
        self._started_at = workflow.now()
        self._runs = 1
        carry = request.carry
        if carry is not None:
            self._original, self._targets = dict(carry.original), dict(carry.targets)
            self._fields, self._written, self._written_at = (
                carry.fields,
                dict(carry.written),
                carry.written_at,
            )
            self._generation, self._target_hash = carry.generation, carry.target_hash
            self._previous_hash, self._rolling_back = carry.previous_hash, carry.rolling_back
            self.abort_request, self.paused_by = carry.aborting, carry.paused_by
            self._reverting_for_abort = carry.aborting is not None
            self._steps_done, self._steps = carry.steps_done, list(carry.recent_steps)
            self._repairs, self._started_at, self._runs = carry.repairs, carry.started_at, carry.runs + 1

    @workflow.run
    async def run(self, request: RolloutInput) -> RolloutResult:
        """Roll the PodCliqueSet to the new images; see the module docstring."""
        workflow.upsert_search_attributes([names.OPERATION.value_set(names.ROLLOUT)])
        if request.carry is None:
            self.enter(PREPARING, f"reading {self._pcs}")
            first = await self._read()
            self._refuse_unless_drivable(first, request)
            self._original = dict(first.summary.clique_hashes)
            self._previous_hash = first.summary.current_hash
        else:
            self.enter(ROLLING_BACK if self._rolling_back else ROLLING, f"run {self._runs} of this rollout")
            await self._read()
        watcher = kernel.start_cancellable(
            activity_api.watch_pcs,
            WatchPCSInput(pcs=self._pcs, heartbeat_seconds=kernel.WATCHER_HEARTBEAT_SECONDS),
            kernel.options(kernel.WATCHER, f"watch {self._pcs}, its PodGangs and pods"),
        )
        guard = asyncio.create_task(self._guard())
        outcome = COMPLETED
        try:
            if request.carry is None:
                written = await self._kube(
                    activity_api.set_pcs_images,
                    SetImagesInput(pcs=self._pcs, images=request.images),
                    kernel.KUBE_WRITE,
                    f"set the images of {self._pcs}",
                )
                self._fields = written.changed
                await self._adopt(written)
            outcome = await self._roll()
            if outcome == "continue-as-new":
                self._guarding = False
                guard.cancel()
                await kernel.cancel_and_wait(watcher)
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(request.model_copy(update={"carry": self._carry()}))
        except (FailureError, asyncio.CancelledError) as err:
            if isinstance(err, RolloutAborted) and self.abort_request is not None:
                self.enter(ABORTED, str(err.message))
            await self._publish(ended=True)
            raise
        finally:
            guard.cancel()
            await kernel.cancel_and_wait(watcher)
        await self._publish(ended=True)
        self.enter(outcome, f"{plural(self._steps_done, 'step')}; target {self._target_hash}")
        await workflow.wait_condition(workflow.all_handlers_finished)
        return RolloutResult(
            pcs=self._pcs,
            outcome=outcome,
            target_hash=self._target_hash,
            steps=tuple(self._steps),
            steps_done=self._steps_done,
            started_at=self._started_at,
            finished_at=workflow.now(),
        )

    def _refuse_unless_drivable(self, state: PCSState, request: RolloutInput) -> None:
        """Step 1's refusals (nothing has been written)."""
        s = state.summary
        if not s.exists:
            raise InvalidInput(f"no PodCliqueSet {self._pcs} (check the namespace and the name)")
        if s.update_strategy != ON_DELETE:
            raise InvalidInput(
                f"PodCliqueSet {self._pcs} has updateStrategy {s.update_strategy}: Grove rolls it itself, so "
                "metalflow does not drive it (`metalflow rollout status` shows Grove's own progress); "
                "a coherent rollout needs OnDelete"
            )
        if not self._policy.allow_replica_outage:
            refusal = steps.outage_refusal(state, str(self._pcs), dict(request.images))
            if refusal:
                raise InvalidInput(refusal)

    # -- messages ------------------------------------------------------------------------------------
    @workflow.signal(name=PCS_STATE_CHANGED_SIGNAL)
    def pcs_state_changed(self, change: PCSChange) -> None:
        """The watcher saw a change: applied in (attempt, sequence) order; a retried attempt's
        first signal is a full listing and replaces what is held."""
        if (change.attempt, change.sequence) < self._seq:
            return
        if change.attempt != self._seq[0] and not change.full:
            return  # a new attempt starts with a full listing; a stray delta waits for it
        self._seq = (change.attempt, change.sequence)
        if change.full or self._state is None:
            if change.summary is not None:
                self._state = PCSState(summary=change.summary, gangs=change.gangs)
            return
        gangs = {g.name: g for g in self._state.gangs}
        for name in change.removed:
            gangs.pop(name, None)
        for g in change.gangs:
            gangs[g.name] = g
        self._state = PCSState(
            summary=change.summary or self._state.summary,
            gangs=tuple(sorted(gangs.values(), key=lambda g: g.name)),
        )

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> RolloutStatus:
        """Where the rollout is: replicas and PodGangs in flight, done/total, the latest steps."""
        done, total = steps.progress(self._state, self._targets)
        return RolloutStatus(
            pcs=self._pcs,
            phase=self.phase,
            target_hash=self._target_hash,
            previous_hash=self._previous_hash,
            rolling_back=self._rolling_back,
            paused_reason=self._paused_reason,
            replicas=tuple(sorted(self._in_flight)),
            in_flight=tuple(sorted(self._in_flight.values())),
            done=done,
            total=total,
            steps=tuple(self._steps),
            steps_done=self._steps_done,
            repairs=self._repairs,
            pending_scale=self._scale.replicas if self._scale else None,
            updated_replicas=self._state.summary.updated_replicas if self._state else 0,
            fields=self._fields,
            runs=self._runs,
        )

    @workflow.update(name=PAUSE_UPDATE)
    def pause(self, request: OperatorRequest) -> OperatorAnswer:
        """Stop after the current step and wait for `resume`, `rollback` or `abort`."""
        self.paused_by = request
        return OperatorAnswer(accepted=True, message=f"pausing after the current step ({self.phase})")

    @pause.validator
    def _validate_pause(self, request: OperatorRequest) -> None:
        self.validate_pause()
        if self.phase == PAUSED:
            raise ValueError(f"already paused: {self._paused_reason}")

    @workflow.update(name=RESUME_UPDATE)
    def resume(self, request: OperatorRequest) -> OperatorAnswer:
        """Go on; before the pause was reached, it withdraws the pause request."""
        if not self.awaits(RESUME_UPDATE):
            self.paused_by = None
            return OperatorAnswer(accepted=True, message="pause request withdrawn; the rollout goes on")
        self.decide(RESUME_UPDATE, request)
        return OperatorAnswer(accepted=True, message=f"resuming ({self._paused_reason})")

    @resume.validator
    def _validate_resume(self, request: OperatorRequest) -> None:
        self.validate_resume(also=self.awaits(RESUME_UPDATE))

    @workflow.update(name=ROLLBACK_UPDATE)
    def rollback(self, request: OperatorRequest) -> OperatorAnswer:
        """Put back the fields the rollout set and roll every PodGang back: the decision of a
        paused rollout, or else at once (a step in flight is interrupted and taken back first)."""
        self._rollback_request = request
        if self.awaits(ROLLBACK_UPDATE):
            self.decide(ROLLBACK_UPDATE, request)
        return OperatorAnswer(accepted=True, message=f"rolling back to {self._previous_hash} now")

    @rollback.validator
    def _validate_rollback(self, request: OperatorRequest) -> None:
        self.validate_running(ROLLBACK_UPDATE)
        if self._rolling_back or self._rollback_request is not None:
            raise ValueError("the rollout is already rolling back")

    @workflow.update(name=SUPERSEDE_UPDATE)
    def supersede(self, request: SupersedeRequest) -> OperatorAnswer:
        """A newer rollout of this PodCliqueSet takes over after the current step."""
        self._supersede = request
        return OperatorAnswer(accepted=True, message="the new images take over after the current step")

    @supersede.validator
    def _validate_supersede(self, request: SupersedeRequest) -> None:
        self.validate_running(SUPERSEDE_UPDATE)
        if self._rolling_back:
            raise ValueError("the rollout is rolling back; start the new rollout once it finished")

    @workflow.update(name=SCALE_UPDATE)
    def scale(self, request: ScaleRequest) -> OperatorAnswer:
        """Queue a new replica count; applied between steps."""
        self._scale = request
        return OperatorAnswer(
            accepted=True, message=f"scaling to {request.replicas} replicas after the current step"
        )

    @scale.validator
    def _validate_scale(self, request: ScaleRequest) -> None:
        self.validate_running(SCALE_UPDATE)

    def abort_promise(self) -> str:
        return (
            f"aborting ({self.phase}): the step in flight is interrupted and every PodGang is taken back to "
            f"{self._previous_hash or 'the previous template'}"
        )

    def aborted(self, outcome: str = "", *details: Any) -> RolloutAborted:
        """The rollout's abort error (`RolloutAborted`): who, why, and what it leaves."""
        abort = self.abort_request
        assert abort is not None, "aborted() before an abort"
        why = f": {abort.reason}" if abort.reason else ""
        left = outcome or f"{plural(self._steps_done, 'step')} taken"
        return RolloutAborted(
            f"rollout of {self._pcs} aborted by {abort.requested_by}{why}; {left}", *details
        )

    # -- the runbook's steps -------------------------------------------------------------------------
    def _interrupt(self) -> bool:
        """An abort or rollback asked for and not yet acted on: a wait ends at once."""
        return (self.abort_request is not None and not self._reverting_for_abort) or (
            self._rollback_request is not None and not self._rolling_back
        )

    def _foreign(self) -> bool:
        """The template changed and the rollout did not write it (seen from the watcher)."""
        s = self._state
        return (
            s is not None
            and s.summary.generation > self._generation
            and bool(self._target_hash)
            and s.summary.observed_generation >= s.summary.generation
            and s.summary.current_hash != self._target_hash
        )

    def _versions(self) -> list[dict[str, str]]:
        return [self._original, self._targets]

    async def _roll(self) -> str:
        while True:
            outcome = await self._between_steps()
            if outcome:
                return outcome
            state = self._state
            assert state is not None
            mixed = [
                g for g in steps.mixed_gangs(state, self._versions()) if g.replica not in self._in_flight
            ]
            if mixed:
                await self._run_steps(mixed[:1], kind="repair")
                continue
            # An interrupted step is taken up first while it is still in flight; once its pods
            # settled (whatever version) it is an ordinary PodGang again, in GREP order.
            self._interrupted = {n for n in self._interrupted if not steps.settled(state.gang(n))}
            chosen = steps.next_steps(
                state, self._targets, self._policy.replica_concurrency, frozenset(self._interrupted)
            )
            if not chosen:
                if await self._verified():
                    if self._reverting_for_abort:
                        raise self.aborted(f"every PodGang back at {self._target_hash}")
                    return ROLLED_BACK if self._rolling_back else COMPLETED
                continue
            if not self._policy.allow_replica_outage:
                blocked = [(g, r) for g in chosen for r in steps.outage(state, g, self._targets)]
                if blocked:
                    g, reason = blocked[0]
                    await self._stuck(f"{g.name}: {reason}; the step waits (a replica outage is not allowed)")
                    continue
            await self._run_steps(chosen, kind="rollback" if self._rolling_back else "roll")

    async def _run_steps(self, gangs: list[GangState], *, kind: str) -> None:
        """Replace each PodGang's stale pods (at most one per replica) and wait until each is done."""
        names_ = {g.name for g in gangs}
        if kind != "repair" and self._sick(names_):
            if not await self._wait(lambda: not self._sick(names_), self._deadline()):
                await self._stuck(f"PodGang {', '.join(self._sick(names_))} not serving; the next step waits")
                return
        phase = ROLLING_BACK if self._rolling_back else ROLLING
        self.enter(phase, f"{kind}: {', '.join(sorted(names_))}")
        records = {}
        for gang in gangs:
            self._in_flight[gang.replica] = gang.name
            records[gang.name] = StepRecord(
                replica=gang.replica,
                podgangs=(gang.name,),
                role=gang.role,
                target_hash=self._target_hash,
                started_at=workflow.now(),
                kind=kind,
            )
        await self._publish()
        for gang in gangs:
            others: tuple[str, ...] = ()
            if kind != "repair" and self._state is not None:
                peers = steps.by_replica(self._state).get(gang.replica, [])
                others = tuple(sorted(g.name for g in peers if g.name != gang.name and steps.serving(g)))
            rolled = await self._kube(
                activity_api.roll_podgang,
                RollGangInput(
                    pcs=self._pcs,
                    podgang=gang.name,
                    targets=self._targets,
                    require_healthy=others,
                    generation=self._generation,
                ),
                kernel.KUBE_WRITE,
                f"{kind} {gang.name}",
            )
            records[gang.name] = records[gang.name].model_copy(update={"deleted": rolled.deleted})
            if rolled.blocked_by:
                self._in_flight.pop(gang.replica, None)
                records.pop(gang.name)
        self._interrupted -= set(records)

        def finished() -> bool:
            s = self._state
            return s is not None and all(
                steps.done(s.gang(n), self._targets) or n not in {g.name for g in s.gangs} for n in records
            )

        if kind == "repair":
            self._repairs += len(records)
        ok = await self._wait(finished, self._deadline())
        for name, record in records.items():
            if ok:
                self._in_flight.pop(record.replica, None)
                self._steps_done += 1
                self._steps.append(record.model_copy(update={"finished_at": workflow.now()}))
            else:
                self._interrupted.add(name)
        self._steps = self._steps[-RECENT_STEPS:]
        await self._publish()
        if ok:
            return
        if self._interrupt() or self._foreign():
            return  # the safe point acts on what interrupted it; the step is taken up again first
        late = [
            n for n in records if not steps.done(self._state.gang(n) if self._state else None, self._targets)
        ]
        await self._stuck(
            f"{', '.join(late)} not whole and Ready at {self._target_hash} within {self._deadline():g} s"
        )

    def _sick(self, skip: set[str]) -> list[str]:
        return steps.unhealthy(self._state, skip) if self._state else ["?"]

    def _deadline(self) -> float:
        delay = self._state.summary.termination_delay_seconds if self._state else 4 * 3600.0
        return min(self._policy.step_deadline_seconds, delay / 2)

    async def _wait(self, condition: Callable[[], bool], timeout: float) -> bool:
        """True once `condition` holds; False after `timeout`, or at once on an abort, a
        rollback request or a foreign template edit (they interrupt a stuck step)."""
        await self.wait(
            lambda: condition() or self._interrupt() or self._foreign(), timeout=timeout, abortable=False
        )
        return condition() and not self._interrupt()

    async def _stuck(self, reason: str) -> None:
        """A step or wait that cannot progress: pause, unless the rollout is already undoing an
        abort (then end, naming what is left)."""
        if self._reverting_for_abort:
            left = steps.changed_cliques(self._original, self._targets)
            raise self.aborted(
                f"taking back stopped: {reason}; cliques {', '.join(left) or '-'} may be left mixed"
            )
        await self._pause(reason)

    async def _verified(self) -> bool:
        """Every PodGang is at the target: Grove must agree (`updatedReplicas`) before the run ends."""

        def agreed() -> bool:
            s = self._state
            return s is not None and s.summary.updated_replicas >= s.summary.replicas

        if await self._wait(agreed, self._deadline()):
            return True
        if self._interrupt():
            return False
        s = self._state
        await self._stuck(
            f"every PodGang is at {self._target_hash} but Grove reports "
            f"{s.summary.updated_replicas if s else '?'} replicas updated"
        )
        return False

    async def _between_steps(self) -> str:
        """Safe point: abort, rollback, foreign edits, strategy switch, pause, supersede, scale,
        continue-as-new. Returns an outcome that ends the run ("" to go on)."""
        s = self._state
        if s is None or not s.exists:
            raise PodCliqueSetGone(f"PodCliqueSet {self._pcs} was deleted during the rollout")
        if s.summary.update_strategy != ON_DELETE:
            return HANDED
        if self.abort_request is not None and not self._reverting_for_abort:
            self._reverting_for_abort = True
            self.paused_by = None
            if not self._rolling_back:
                await self._start_rollback()
        if self._rollback_request is not None and not self._rolling_back:
            await self._start_rollback()
        if s.summary.generation > self._generation:
            # Someone wrote the spec: wait until Grove observed it, then tell a template edit
            # (foreign) from a scale (the template holds; the generation is adopted).
            await self._wait(
                lambda: self._state is not None and self._observed(self._state.summary.generation), 30
            )
        if self._foreign():
            await self._foreign_edit()
            return ""
        if self.paused_by is not None and not self._reverting_for_abort:
            request = self.paused_by
            reason = f": {request.reason}" if request.reason else ""
            await self._pause(f"paused by {request.requested_by}{reason}", by_operator=True)
            return ""
        if self._supersede is not None and not self._rolling_back:
            superseding, self._supersede = self._supersede, None
            written = await self._kube(
                activity_api.set_pcs_images,
                SetImagesInput(pcs=self._pcs, images=superseding.images),
                kernel.KUBE_WRITE,
                f"set the images of {self._pcs} (superseded by {superseding.requested_by})",
            )
            merged = {f.path: f for f in self._fields}
            for f in written.changed:
                merged[f.path] = (
                    f.model_copy(update={"before": merged[f.path].before}) if f.path in merged else f
                )
            self._fields = tuple(merged.values())
            await self._adopt(written)
        if self._scale is not None:
            scale, self._scale = self._scale, None
            generation = await self._kube(
                activity_api.scale_pcs,
                ScalePCSInput(pcs=self._pcs, replicas=scale.replicas),
                kernel.KUBE_WRITE,
                f"scale {self._pcs} to {scale.replicas} replicas",
            )
            self._generation = max(self._generation, generation)
            await self._wait(lambda: self._observed(generation), self._deadline())
        s = self._state
        if s is not None and s.summary.generation > self._generation and self._observed(s.summary.generation):
            self._generation = s.summary.generation  # a scale by someone else: the template holds
        info = workflow.info()
        if not self._in_flight and (
            info.get_current_history_length() > self._policy.history_limit
            or info.is_continue_as_new_suggested()
        ):
            return "continue-as-new"
        return ""

    async def _foreign_edit(self) -> None:
        """Someone else changed the template: pause, naming the fields and who; `resume` adopts
        the template as it is now, `rollback` puts back only the rollout's fields."""
        assert self._state is not None
        change = await self._kube(
            activity_api.describe_template_change,
            TemplateChangeInput(pcs=self._pcs, written=self._written, since=self._written_at),
            kernel.KUBE_READ,
            f"what changed in the template of {self._pcs}",
        )
        if not change.fields:
            self._generation = change.generation
            return
        who = ", ".join(change.managers) or "an unknown writer (no managedFields entry)"
        fields = ", ".join(change.fields[:5]) + (
            f" and {len(change.fields) - 5} more" if len(change.fields) > 5 else ""
        )
        await self._pause(f"the template was changed by someone else: {fields}; by {who}")
        if self._rolling_back:
            return
        await self._wait(lambda: self._observed(change.generation), self._deadline())
        self._generation = change.generation
        self._written, self._written_at = dict(change.template), workflow.now()
        self._adopt_targets()

    def _observed(self, generation: int) -> bool:
        s = self._state
        return (
            s is not None
            and s.summary.observed_generation >= generation
            and bool(s.summary.current_hash)
            and bool(s.summary.clique_hashes)
            and set(s.summary.clique_hashes) >= set(self._original)
        )

    async def _pause(self, reason: str, *, by_operator: bool = False) -> None:
        """Wait for an operator's decision (`resume`, `rollback`, `abort`) and act on it; the guard
        heals a mixed PodGang meanwhile. A rollback or abort asked for already is that decision."""
        if self._interrupt():
            return
        self._paused_reason = reason
        await self._publish(phase=PAUSED)
        self._guarding = True
        try:
            decision, _ = await self.await_decision(PAUSED, reason, DECISIONS)
        except RolloutAborted:
            decision = "abort"
        finally:
            self._guarding = False
            self._paused_reason = None
        await workflow.wait_condition(lambda: self._healing == 0)
        if by_operator:
            self.paused_by = None
        if decision == ROLLBACK_UPDATE:
            await self._start_rollback()

    async def _guard(self) -> None:
        """While paused: heal each PodGang Grove mixed (a pod it replaced at the template's
        version), replacing its other stale pods so it is whole again at the template's version
        (the only version Grove's replacements come back at); one PodGang per replica at a time.
        A heal that deletes nothing (the template moved meanwhile) waits for the next change."""
        while True:
            await workflow.wait_condition(lambda: self._guarding and bool(self._to_heal()))
            s = self._state
            assert s is not None
            gangs, template = self._to_heal(), dict(s.summary.clique_hashes)
            self._healing += 1
            try:
                self.show(f"paused; healing mixed PodGang {', '.join(g.name for g in gangs)}")
                deleted = 0
                for g in gangs:
                    rolled = await self._kube(
                        activity_api.roll_podgang,
                        RollGangInput(
                            pcs=self._pcs, podgang=g.name, targets=template, generation=s.summary.generation
                        ),
                        kernel.KUBE_WRITE,
                        f"heal {g.name}",
                    )
                    deleted += len(rolled.deleted)
                    self._repairs += bool(rolled.deleted)
                await workflow.wait_condition(
                    self._healed({g.name for g in gangs}, deleted, self._state), timeout=self._deadline()
                )
            except TimeoutError:
                pass
            finally:
                self._healing -= 1

    def _healed(self, names_: set[str], deleted: int, seen: PCSState | None) -> Callable[[], bool]:
        """Healed: none of `names_` mixed; or nothing was deleted and the state moved on."""

        def check() -> bool:
            s = self._state
            return s is not None and (
                all(not steps.mixed(x, self._guard_versions()) for x in s.gangs if x.name in names_)
                or (not deleted and s is not seen)
            )

        return check

    def _guard_versions(self) -> list[dict[str, str]]:
        current = dict(self._state.summary.clique_hashes) if self._state else {}
        return [self._original, self._targets, current]

    def _to_heal(self) -> list[GangState]:
        s = self._state
        if s is None or s.summary.observed_generation < s.summary.generation:
            return []
        seen: set[int] = set()
        out = []
        for g in steps.mixed_gangs(s, self._guard_versions()):
            if g.replica not in seen:
                seen.add(g.replica)
                out.append(g)
        return out

    async def _start_rollback(self) -> None:
        """Put back the fields the rollout set (only where they still hold its values); the
        targets become the original hashes, and the loop rolls every PodGang back."""
        self._rolling_back, self._rollback_request = True, None
        self.enter(ROLLING_BACK, f"putting back {', '.join(f.path for f in self._fields) or 'nothing'}")
        written = await self._kube(
            activity_api.revert_pcs_images,
            RevertInput(pcs=self._pcs, fields=self._fields),
            kernel.KUBE_WRITE,
            f"put back the fields the rollout set on {self._pcs}",
        )
        if written.skipped:
            self.show(f"left alone (changed by someone else): {', '.join(written.skipped)}")
        await self._adopt(written)

    async def _adopt(self, written: TemplateResult) -> None:
        """Wait until Grove observed the write; the PodCliques' hashes are the targets from then on."""
        self._generation = max(self._generation, written.generation)
        self._written, self._written_at = dict(written.template), workflow.now()
        # Grove observed the write, and the PodCliques of every clique written carry a new hash
        # (the PodCliqueSet's status and the PodCliques come on separate streams).
        moved = {f.path.partition("/")[0] for f in written.changed}
        before = dict(self._targets or self._original)

        def adopted() -> bool:
            s = self._state
            return (
                self._observed(written.generation)
                and s is not None
                and all(s.summary.clique_hashes.get(c) not in (None, before.get(c)) for c in moved)
            )

        while not await self._wait(adopted, self._deadline()):
            if self._interrupt():
                return
            await self._stuck(f"Grove has not observed generation {written.generation} of {self._pcs}")
        self._adopt_targets()

    def _adopt_targets(self) -> None:
        assert self._state is not None
        self._targets = dict(self._state.summary.clique_hashes)
        self._target_hash = self._state.summary.current_hash
        if not self._original:
            self._original = dict(self._targets)

    def _carry(self) -> RolloutCarry:
        return RolloutCarry(
            original=self._original,
            targets=self._targets,
            fields=self._fields,
            written=self._written,
            written_at=self._written_at,
            generation=self._generation,
            target_hash=self._target_hash,
            previous_hash=self._previous_hash,
            rolling_back=self._rolling_back,
            aborting=self.abort_request,
            paused_by=self.paused_by,
            steps_done=self._steps_done,
            recent_steps=tuple(self._steps),
            repairs=self._repairs,
            started_at=self._started_at,
            runs=self._runs,
        )

    # -- plumbing ------------------------------------------------------------------------------------
    async def _kube(
        self,
        call: Callable[[ArgT], Awaitable[ResultT]],
        arg: ArgT,
        preset: workflow.ActivityConfig,
        summary: str,
    ) -> ResultT:
        """One Kubernetes call. Not abortable: an abort waits for it, so a step's deletions and a
        template write are never cut halfway."""
        return await self.call(call, arg, kernel.options(preset, summary), abortable=False)

    async def _read(self) -> PCSState:
        state = await self._kube(
            activity_api.read_pcs_state, self._pcs, kernel.KUBE_READ, f"read {self._pcs}"
        )
        if self._state is None:
            self._state = state
        return state

    async def _publish(self, *, ended: bool = False, phase: str | None = None) -> None:
        now = self.status()
        await self._kube(
            activity_api.publish_rollout_progress,
            ProgressInput(
                pcs=self._pcs,
                workflow_id=workflow.info().workflow_id,
                phase=phase or self.phase,
                replicas=now.replicas,
                in_flight=now.in_flight,
                done=now.done,
                total=now.total,
                started_at=self._started_at,
                ended=ended,
            ),
            kernel.KUBE_WRITE,
            "publish progress on the PodCliqueSet",
        )
