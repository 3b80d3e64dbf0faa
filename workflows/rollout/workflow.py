"""RolloutWorkflow: a coherent rollout of one Grove PodCliqueSet under OnDelete (DOMAIN.md
section 3; Grove pinned at ai-dynamo/grove 6eaa77f0, v0.1.0-alpha.12's PodGangMap change; the
behaviour it relies on: `simulators/grove/BEHAVIOUR.md`).

Id `rollout/<namespace>/<pcs>` (`contracts.names.rollout_workflow_id`): the id is the lock. What
the run knows and decides is `state.py` (`RolloutState`); what it writes of the template between
steps, someone else's edits and the pause they lead to are its base, `template_writes.py`; this
module is the runbook, top to bottom in `run`:

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
   and while paused (a repair: its stale pods replaced, to the template's version where the
   rollout made it and where every minAvailable holds; paused, by the guard, `guard.py`), and
   (c) never ends with two versions: it completes (all new), rolls back, or, on `abort`, takes
   everything back to the previous version (the stuck step first, interrupted at once) and
   completes `aborted` (an abort is asked for: no Failed run; the result says who and why).
   Paused, the world is guarded, not frozen. It deletes a pod only once Grove patched the
   PodCliques to a version the rollout made (`settle`), never onto an edit it did not make.
   The rules, as code: `invariants.py`.
5. A step that misses its deadline, a PodGang that stops serving, or a template edit by
   someone else (named field by field, with who made it, from managedFields) pauses the
   rollout until an operator decides: `resume` (go on; after a foreign edit the template as it
   now is becomes the target), `rollback` (restore: every clique written back as it was before
   the rollout, every PodGang rolled back to the recorded original under the same rules, then
   the edits someone else made put back into the template, dormant) or `abort` (the same, then
   the run completes `aborted`). An edit during a rollback pauses it too; `resume` restores again.
   A PodCliqueSet switched off OnDelete mid-rollout is rolled by nobody: Grove's update ended
   under OnDelete and the strategy is no part of the template hash, so Grove rolls none of it
   (BEHAVIOUR.md U6). The rollout stops driving (no step, no heal, no write) and pauses, saying
   how many PodGangs are at each version, who switched it (managedFields) and what to do:
   switch it back to OnDelete and `resume` (refused until then, as `rollback` is), or `abort`,
   which then ends the run taking nothing back. With every PodGang at the target already, it
   completes.
6. However it ends (`to_the_end`), the watcher is cancelled and waited for, so the run has no
   pending activity, and the progress annotation is removed.

Every Kubernetes call is `self.call(..., abortable=False)`: an abort waits for it, so a step's
deletions and a template write are never cut halfway; the abort acts at the next safe point.

Bounded history: between steps the run continues as new once its history passes
`policy.history_limit` events (or the server suggests it), with its state as the next run's
input; the watcher starts afresh in the new run. Each PodGang rolled costs a few dozen events
(one `roll_podgang`, and the watcher's signals that changed it; figures in bench/README.md,
"workflows/rollout"), so a run rolls a few hundred PodGangs and any PodCliqueSet fits, run
after run.
"""

from __future__ import annotations

from typing import Any, ClassVar, NoReturn

from temporalio import workflow
from temporalio.exceptions import ApplicationError

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
        PCS_STATE_CHANGED_SIGNAL,
        ROLLBACK_UPDATE,
        SCALE_UPDATE,
        SUPERSEDE_UPDATE,
        GangState,
        PCSChange,
        PCSState,
        RollGangInput,
        RolloutInput,
        RolloutResult,
        RolloutStatus,
        ScalePCSInput,
        ScaleRequest,
        SetImagesInput,
        SupersedeRequest,
        TemplateChangeInput,
        WatchPCSInput,
    )
    from contracts.wording import plural
    from workflows import kernel
    from workflows.rollout import views
    from workflows.rollout.guard import PausedGuard
    from workflows.rollout.state import (
        ENDED,
        PAUSED,
        PREPARING,
        ROLLING,
        ROLLING_BACK,
        Outcome,
        RolloutState,
        StepKind,
    )
    from workflows.rollout.template_writes import DECISIONS, TemplateWrites


@workflow.defn(name="RolloutWorkflow")
class RolloutWorkflow(TemplateWrites):
    """Roll one PodCliqueSet coherently; see the module docstring."""

    ENDED: ClassVar = ENDED
    ABORTED_ERROR: ClassVar = RolloutAborted

    @workflow.init
    def __init__(self, request: RolloutInput) -> None:
        super().__init__()
        self.phase = PREPARING
        self.pcs, self.policy = request.pcs, request.policy
        now = workflow.now()
        carried = request.state
        self.state = (
            RolloutState.resumed(carried)
            if carried
            else RolloutState(started_at=now, written_at=now, site_check=request.site_check)
        )
        # The operator's abort and pause are the kernel's; a continued run takes them over.
        self.abort_request, self.paused_by = self.state.aborting, self.state.paused_by
        self._request = request
        self._watcher: workflow.ActivityHandle[None] | None = None
        self._guard = PausedGuard(  # heals while paused
            self, self.state, self.pcs, self._deadline, allow_outage=self.policy.allow_replica_outage
        )

    @workflow.run
    async def run(self, request: RolloutInput) -> RolloutResult:
        """Roll the PodCliqueSet to the new images; see the module docstring."""
        workflow.upsert_search_attributes([names.OPERATION.value_set(names.ROLLOUT)])
        return await self.to_the_end(self._runbook, self._clean_up)

    async def _runbook(self) -> RolloutResult:
        """Steps 1 to 3 of the module docstring, then the planned end (`finish`)."""
        request, state = self._request, self.state
        if request.state is None:
            self.enter(PREPARING, f"reading {self.pcs}")
            first = await self._read()
            if refusal := state.refusal(first, self.pcs, request.images, self.policy):
                raise InvalidInput(refusal)  # nothing was written
            state.prepare(first)
        else:
            self.enter(ROLLING_BACK if state.rolling_back else ROLLING, f"run {state.runs} of this rollout")
            await self._read()
        self._watcher = kernel.start_cancellable(
            activity_api.watch_pcs,
            WatchPCSInput(pcs=self.pcs, heartbeat_seconds=kernel.WATCHER_HEARTBEAT_SECONDS),
            kernel.options(kernel.WATCHER, f"watch {self.pcs}, its PodGangs and pods"),
        )
        self._guard.start()
        if request.state is None:
            written = await self.call(
                activity_api.set_pcs_images,
                SetImagesInput(pcs=self.pcs, images=request.images),
                kernel.options(kernel.KUBE_WRITE, f"set the images of {self.pcs}"),
                abortable=False,
            )
            state.fields = written.changed
            await self._adopt(written)
        outcome = await self._roll()
        await self._stop_watching()
        await self._publish(ended=True)
        await self.finish(outcome, f"{plural(state.steps_done, 'step')}; target {state.target_hash}")
        return views.result(state, self.pcs, outcome, workflow.now())

    async def _clean_up(self, err: BaseException) -> str:
        """An early end (a failure, the end of an abort, a cancel): the progress annotation goes,
        the guard and the watcher stop. Nothing is put back here: an abort took every PodGang
        back before it ended, and a failure leaves each PodGang to Grove, which recreates a
        step's deleted pods into it at the template's version."""
        if self._watcher is not None:
            await self._publish(ended=True)
            await self._stop_watching()
        return views.left_behind(self.state)

    # -- messages ------------------------------------------------------------------------------------
    @workflow.signal(name=PCS_STATE_CHANGED_SIGNAL)
    def pcs_state_changed(self, change: PCSChange) -> None:
        """The watcher saw a change (`RolloutState.apply`: in order, a retried attempt's full
        listing replaces what is held)."""
        self.state.apply(change)

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> RolloutStatus:
        """Where the rollout is: replicas and PodGangs in flight, done/total, the latest steps."""
        return views.status(self.state, self.pcs, self.phase)

    @workflow.update(name=PAUSE_UPDATE)
    def pause(self, request: OperatorRequest) -> OperatorAnswer:
        """Stop after the current step and wait for `resume`, `rollback` or `abort`."""
        self.paused_by = request
        return OperatorAnswer(accepted=True, message=f"pausing after the current step ({self.phase})")

    @pause.validator
    def _validate_pause(self, request: OperatorRequest) -> None:
        self.validate_pause()
        if self.phase == PAUSED:
            raise ValueError(f"already paused: {self.state.paused_reason}")

    @workflow.update(name=RESUME_UPDATE)
    def resume(self, request: OperatorRequest) -> OperatorAnswer:
        """Go on; before the pause was reached, it withdraws the pause request."""
        if not self.awaits(RESUME_UPDATE):
            self.paused_by = None
            return OperatorAnswer(accepted=True, message="pause request withdrawn; the rollout goes on")
        self.decide(RESUME_UPDATE, request)
        return OperatorAnswer(accepted=True, message=f"resuming ({self.state.paused_reason})")

    @resume.validator
    def _validate_resume(self, request: OperatorRequest) -> None:
        self.validate_resume(also=self.awaits(RESUME_UPDATE))
        if self.awaits(RESUME_UPDATE) and (refusal := views.off_on_delete_refusal(self.state, "resume")):
            raise ValueError(refusal)

    @workflow.update(name=ROLLBACK_UPDATE)
    def rollback(self, request: OperatorRequest) -> OperatorAnswer:
        """Put back the fields the rollout set and roll every PodGang back: the decision of a
        paused rollout, or else at once (a step in flight is interrupted and taken back first)."""
        self.state.rollback_request = request
        if self.awaits(ROLLBACK_UPDATE):
            self.decide(ROLLBACK_UPDATE, request)
        return OperatorAnswer(accepted=True, message=f"rolling back to {self.state.previous_hash} now")

    @rollback.validator
    def _validate_rollback(self, request: OperatorRequest) -> None:
        self.validate_running(ROLLBACK_UPDATE)
        if self.state.rolling_back or self.state.rollback_request is not None:
            raise ValueError("the rollout is already rolling back")
        if refusal := views.off_on_delete_refusal(self.state, "rollback"):
            raise ValueError(refusal)

    @workflow.update(name=SUPERSEDE_UPDATE)
    def supersede(self, request: SupersedeRequest) -> OperatorAnswer:
        """A newer rollout of this PodCliqueSet takes over after the current step."""
        self.state.supersede = request
        return OperatorAnswer(accepted=True, message="the new images take over after the current step")

    @supersede.validator
    def _validate_supersede(self, request: SupersedeRequest) -> None:
        self.validate_running(SUPERSEDE_UPDATE)
        if self.state.rolling_back:
            raise ValueError("the rollout is rolling back; start the new rollout once it finished")
        if refusal := views.off_on_delete_refusal(self.state, "supersede"):
            raise ValueError(refusal)

    @workflow.update(name=SCALE_UPDATE)
    def scale(self, request: ScaleRequest) -> OperatorAnswer:
        """Queue a new replica count; applied between steps."""
        self.state.scale = request
        return OperatorAnswer(
            accepted=True, message=f"scaling to {request.replicas} replicas after the current step"
        )

    @scale.validator
    def _validate_scale(self, request: ScaleRequest) -> None:
        self.validate_running(SCALE_UPDATE)

    def abort_promise(self) -> str:
        if self.state.left_on_delete():
            return (
                f"aborting ({self.phase}): the PodCliqueSet is on updateStrategy "
                f"{views.strategy_now(self.state)}, not OnDelete, so the rollout ends taking nothing back"
            )
        return (
            f"aborting ({self.phase}): the step in flight is interrupted and every PodGang is taken back to "
            f"{self.state.previous_hash or 'the previous template'}"
        )

    def aborted_result(self, err: BaseException) -> RolloutResult:
        """An abort completes the run (`kernel.Runbook.to_the_end`): every PodGang was taken back;
        the result says who aborted, why and what is left."""
        said = err.message if isinstance(err, ApplicationError) else str(err)
        return views.result(self.state, self.pcs, "aborted", workflow.now(), aborted=said)

    def aborted(self, outcome: str = "", *details: Any) -> RolloutAborted:
        """The rollout's abort error (`RolloutAborted`): who, why, and what it leaves."""
        abort = self.abort_request
        assert abort is not None, "aborted() before an abort"
        why = f": {abort.reason}" if abort.reason else ""
        left = outcome or f"{plural(self.state.steps_done, 'step')} taken"
        return RolloutAborted(f"rollout of {self.pcs} aborted by {abort.requested_by}{why}; {left}", *details)

    # -- the runbook's steps -------------------------------------------------------------------------
    async def _roll(self) -> Outcome:
        """Step after step, each after a safe point, until every PodGang is at the target."""
        while True:
            ended = await self._between_steps()
            if ended is not None:
                return ended
            move = self.state.next_move(self.policy)
            if move.kind == "verify":
                if await self._verified():
                    if self.state.dormant_due():
                        await self._put_back_foreign_edits()
                    if self.state.reverting_for_abort:
                        raise self.aborted(f"every PodGang back at {self.state.target_hash}")
                    return self.state.outcome()
            elif move.kind == "wait":
                await self._stuck(move.reason)
            elif move.kind == "settle":
                state = self.state
                if not await self._wait(  # off OnDelete, the safe point pauses instead
                    lambda: self.state.in_force() or self.state.left_on_delete(),
                    self._deadline(),
                    move.reason,
                ):
                    if not state.cut_short(self.aborting):
                        await self._stuck(f"waiting for {move.reason}: not done in {self._deadline():g} s")
            else:
                await self._run_steps(move.gangs, kind=move.kind)

    async def _between_steps(self) -> Outcome | None:
        """Safe point: abort, rollback, foreign edits, strategy switch, pause, supersede, scale,
        continue-as-new. Returns an outcome that ends the run (None: go on)."""
        state, seen = self.state, self.state.watched
        if seen is None or state.gone():
            raise PodCliqueSetGone(f"PodCliqueSet {self.pcs} was deleted during the rollout")
        if state.stops_off_on_delete(self.aborting):
            await self._off_on_delete()
            return None
        if self.abort_request is not None and not state.reverting_for_abort:
            state.reverting_for_abort = True
            self.paused_by = None
            if not state.rolling_back:
                await self._start_rollback()
        if state.rollback_request is not None and not state.rolling_back:
            await self._start_rollback()
        if state.written_by_someone_else(seen):
            # Wait until Grove observed it, then tell a template edit (foreign) from a scale (the
            # template holds; the generation is adopted below).
            await self._wait(state.spec_observed, 30, "Grove to observe a write by someone else")
        if state.foreign():
            await (self._foreign_edit_while_rolling_back() if state.rolling_back else self._foreign_edit())
            return None
        if self.paused_by is not None and not state.reverting_for_abort:
            request = self.paused_by
            reason = f": {request.reason}" if request.reason else ""
            await self._pause(f"paused by {request.requested_by}{reason}", by_operator=True)
            return None
        if state.supersede is not None and not state.rolling_back:
            superseding, state.supersede = state.supersede, None
            written = await self.call(
                activity_api.set_pcs_images,
                SetImagesInput(pcs=self.pcs, images=superseding.images),
                kernel.options(
                    kernel.KUBE_WRITE,
                    f"set the images of {self.pcs} (superseded by {superseding.requested_by})",
                ),
                abortable=False,
            )
            state.supersede_fields(written.changed)
            await self._adopt(written)
        if state.scale is not None:
            scale, state.scale = state.scale, None
            generation = await self.call(
                activity_api.scale_pcs,
                ScalePCSInput(pcs=self.pcs, replicas=scale.replicas),
                kernel.options(kernel.KUBE_WRITE, f"scale {self.pcs} to {scale.replicas} replicas"),
                abortable=False,
            )
            state.generation = max(state.generation, generation)
            await self._wait(
                lambda: state.observed(generation),
                self._deadline(),
                f"Grove to observe the scale to {scale.replicas}",
            )
        state.adopt_scale_by_someone_else()
        info = workflow.info()
        if state.continue_as_new_due(
            info.get_current_history_length(), info.is_continue_as_new_suggested(), self.policy
        ):
            await self._continue_as_new()
        return None

    async def _off_on_delete(self) -> None:
        """Someone switched the PodCliqueSet off OnDelete with work left (`stops_off_on_delete`): nobody
        rolls the rest [U6]. An abort ends the run here, taking nothing back (a restore would be
        rolled by Grove itself). Else pause, naming the strategy, who set it, where the PodGangs
        are and what to do, with the guard idle (`to_heal`: nothing off OnDelete); `resume` and
        `rollback` are refused until it is OnDelete again. The next safe point acts on the answer."""
        state = self.state
        change = await self.call(
            activity_api.describe_template_change,
            TemplateChangeInput(pcs=self.pcs, written=state.written, since=state.written_at),
            kernel.options(kernel.KUBE_READ, f"who switched the strategy of {self.pcs}"),
            abortable=False,
        )
        if self.aborting:
            raise self.aborted(views.left_as_is(state, change))
        state.paused_reason = views.off_on_delete_reason(state, change, self.pcs)
        self.enter(PAUSED, state.paused_reason)  # the status and the Phase say it at once
        await self._publish()
        try:
            decision, _ = await self.await_decision(PAUSED, state.paused_reason, DECISIONS)
        except RolloutAborted:
            decision = "abort"  # the next safe point acts on it
        finally:
            state.paused_reason = None
        if decision == ROLLBACK_UPDATE:
            await self._start_rollback()

    async def _continue_as_new(self) -> NoReturn:
        """The next run starts from this run's state; the watcher starts afresh there."""
        await self._stop_watching()
        await workflow.wait_condition(workflow.all_handlers_finished)
        # The kernel's operator requests travel with the state.
        self.state.aborting, self.state.paused_by = self.abort_request, self.paused_by
        self.settle_upserts()  # the phase entered in this activation goes with the run
        workflow.continue_as_new(self._request.model_copy(update={"state": self.state}))

    async def _run_steps(self, gangs: tuple[GangState, ...], *, kind: StepKind) -> None:
        """Replace each PodGang's stale pods (at most one per replica) and wait until each is done."""
        state = self.state
        names_ = {g.name for g in gangs}
        if kind != "repair" and state.sick(names_):
            sick = ", ".join(state.sick(names_))
            if not await self._wait(
                lambda: not state.sick(names_), self._deadline(), f"{sick} to serve again"
            ):
                await self._stuck(f"PodGang {', '.join(state.sick(names_))} not serving; the next step waits")
                return
        self.enter(ROLLING_BACK if state.rolling_back else ROLLING, step_details(kind, names_))
        records = state.begin_steps(gangs, kind, workflow.now())
        await self._publish()
        for gang in gangs:
            rolled = await self.call(
                activity_api.roll_podgang,
                RollGangInput(
                    pcs=self.pcs,
                    podgang=gang.name,
                    targets=state.targets,
                    require_healthy=() if kind == "repair" else state.serving_peers(gang),
                    generation=state.generation,
                ),
                kernel.options(kernel.KUBE_WRITE, f"{kind} {gang.name}"),
                abortable=False,
            )
            state.rolled(records, gang, rolled)
        state.deletions_done(records, kind)
        ok = await self._wait(
            lambda: state.finished(records), self._deadline(), f"whole and Ready at {state.target_hash}"
        )
        state.end_steps(records, ok=ok, now=workflow.now())
        await self._publish()
        if ok or state.cut_short(self.aborting):
            return  # the safe point acts on what cut it short; the step is taken up again first
        await self._stuck(
            f"{', '.join(state.late(records))} not whole and Ready at {state.target_hash} "
            f"within {self._deadline():g} s"
        )

    async def _verified(self) -> bool:
        """Every PodGang is at the target: Grove must agree (`updatedReplicas`) before the run ends."""
        state = self.state
        if await self._wait(state.agreed, self._deadline(), "Grove to count every replica updated"):
            return True
        if state.interrupting(self.aborting):
            return False
        s = state.watched
        await self._stuck(
            f"every PodGang is at {state.target_hash} but Grove reports "
            f"{s.summary.updated_replicas if s else '?'} replicas updated"
        )
        return False

    # -- plumbing ------------------------------------------------------------------------------------
    async def _read(self) -> PCSState:
        """Read the PodCliqueSet whole; the first view until the watcher's first listing."""
        read = await self.call(
            activity_api.read_pcs_state,
            self.pcs,
            kernel.options(kernel.KUBE_READ, f"read {self.pcs}"),
            abortable=False,
        )
        if self.state.watched is None:
            self.state.watched = read
        return read

    async def _stop_watching(self) -> None:
        """The guard stops, and the watcher is cancelled and waited for: the run ends, or
        continues as new, with no activity pending."""
        self._guard.stop()
        if self._watcher is not None:
            await kernel.cancel_and_wait(self._watcher)
            self._watcher = None


def step_details(kind: StepKind, gangs: set[str] | frozenset[str]) -> str:
    """The details of a step's phase, read after it (`**rolling**: ...` in the UI): what the step
    does to which PodGangs, its kind not said again (it read `rolling: roll: ...`, issue 38)."""
    doing = {
        "roll": "replacing the stale pods of",
        "rollback": "putting back the pods of",
        "repair": "repairing",
    }
    return f"{doing[kind]} {', '.join(sorted(gangs))}"
