"""RolloutWorkflow: a coherent rollout of one Grove PodCliqueSet (DOMAIN.md section 3, GREP-393).

Id `rollout/<namespace>/<pcs>` (`contracts.names.rollout_workflow_id`): the id is the lock, so a
second rollout of the same PodCliqueSet is refused while this one runs (or takes over with the
`supersede` update, after the current step). The runbook, top to bottom in `run`:

1. Read the template (kept for `rollback`) and start this rollout's watcher (`watch_pcs`), which
   signals every change of the PodCliqueSet and its PodGangs.
2. Set the new images (refused, changing nothing, for an unknown PCS or clique, a bad image, or
   a PCS not on `OnDelete`); the target is the hash Grove reports once it observed the write.
3. Steps, each planned from a fresh read (`rollout_plan`, so a scale applied between steps
   re-plans): replicas one at a time (`policy.replica_concurrency` at once when every replica
   holds two or more MPGs); within one, its MPGs one at a time, then all its TPGs together.
   A step starts only when every other PodGang is Available (or Ready, `policy.condition`); it
   deletes the step's stale PodGangs, pinned by uid, and Grove recreates them at the new hash
   (why deletion: `activities.grove.operations`). It is done when each is at the new hash and
   its condition is True, as the watcher's signals show; no polling.
4. A step that misses `policy.step_deadline_seconds`, or a PodGang that falls back meanwhile,
   pauses the rollout until an operator decides: `resume` (recreate the PodGangs that are not
   Available, one MPG per replica at a time, then go on), `rollback` (restore the template read
   in 1 and roll back under the same rules) or `abort` (stop; nothing more is deleted; fails with
   `RolloutAborted`). `pause` stops after the current step.
5. However it ends (completed, rolled back, aborted, failed, cancelled), the watcher is cancelled
   and waited for (about a second: its next heartbeat), so the ended rollout has no pending
   activity.

Operator control (`workflows.kernel`): `abort` is the kernel's update (refused once the rollout
ended or while it aborts; acted on at the next wait, never in the middle of a Kubernetes call, so
a step's deletions are never half sent); `pause` is the kernel's `paused_by`, honoured between
steps; `resume` and `rollback` are the decisions a paused rollout awaits (`rollback` asked for
while rolling is queued and acted on after the current step); `supersede` and `scale` are this
workflow's own updates. Every handler only records; the runbook acts at its next safe point, so
a handler never races a step.

Scale: Grove's coherent update refuses scaling during an update; here the `scale` update queues
the new replica count and applies it between steps (after the current step is Available), so a
request is never lost and never lands mid-step. Visible progress: the `status` query, search
attributes `Operation=rollout` and `Phase`, current details, and the PodCliqueSet annotation
`metalflow.io/rollout` (Grove owns `status`).

Cost per rollout: one watcher activity slot for its duration (two watch connections); per step
a fresh read (4 API calls), the roll, and two progress writes; about three signals per PodGang
rolled. Measured on the site's default 2-replica, 6-PodGang workload
(tests/histories/rollout_inference_completed.json): 266 history events, 30 activities, 17
signals, i.e. ~45 events per PodGang, so one run stays far below Temporal's 50k-event limit up
to ~1,000 PodGangs; larger PodCliqueSets would need continue-as-new (not implemented).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, TypeVar

from temporalio import workflow
from temporalio.exceptions import FailureError

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api, names
    from contracts.errors import PodCliqueSetGone, RolloutAborted
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
        PCSState,
        ProgressInput,
        ReplicaRollout,
        RolloutInput,
        RolloutResult,
        RolloutStatus,
        RollPodGangsInput,
        ScalePCSInput,
        ScaleRequest,
        SetImagesInput,
        StepRecord,
        SupersedeRequest,
        TemplateInput,
        WatchPCSInput,
    )
    from contracts.wording import plural
    from workflows import kernel
    from workflows import rollout_steps as steps
    from workflows.rollout_plan import plan as plan_rollout

ArgT = TypeVar("ArgT")
ResultT = TypeVar("ResultT")

PREPARING = "preparing"
ROLLING = "rolling"
ROLLING_BACK = "rolling-back"
PAUSED = "paused"
COMPLETED = "completed"
ROLLED_BACK = "rolled-back"
ABORTED = "aborted"
DECISIONS = (RESUME_UPDATE, ROLLBACK_UPDATE)
"""What a paused rollout waits for (besides `abort`)."""


@workflow.defn(name="RolloutWorkflow")
class RolloutWorkflow(kernel.Abortable):
    """Roll one PodCliqueSet coherently; see the module docstring."""

    ENDED: ClassVar = (COMPLETED, ROLLED_BACK, ABORTED)

    @workflow.init
    def __init__(self, request: RolloutInput) -> None:
        super().__init__()
        self.phase = PREPARING
        self._request = request
        self._pcs = request.pcs
        self._policy = request.policy
        self._state: PCSState | None = None
        self._target = ""
        self._previous_hash = ""
        self._previous_template: dict[str, Any] | None = None
        self._rolling_back = False
        self._repair = False
        self._paused_reason: str | None = None
        self._rollback_request: OperatorRequest | None = None  # until the runbook starts it
        self._supersede: SupersedeRequest | None = None
        self._scale: ScaleRequest | None = None
        self._steps: list[StepRecord] = []
        self._in_flight: tuple[str, ...] = ()
        self._replicas: tuple[int, ...] = ()
        self._started_at = workflow.now()
        self._members: tuple[int | None, int | None] = (None, None)

    @workflow.run
    async def run(self, request: RolloutInput) -> RolloutResult:
        """Roll the PodCliqueSet to the new images; see the module docstring."""
        workflow.upsert_search_attributes([names.OPERATION.value_set(names.ROLLOUT)])
        self.enter(PREPARING, f"reading {self._pcs}")
        template = await self._kube(
            activity_api.read_pcs_template, self._pcs, kernel.KUBE_READ, f"read the template of {self._pcs}"
        )
        self._previous_template = dict(template.template)
        first = await self._read()
        self._previous_hash = first.current_hash
        watcher = kernel.start_cancellable(
            activity_api.watch_pcs,
            WatchPCSInput(pcs=self._pcs, heartbeat_seconds=kernel.WATCHER_HEARTBEAT_SECONDS),
            kernel.options(kernel.WATCHER, f"watch {self._pcs} and its PodGangs"),
        )
        try:
            written = await self._kube(
                activity_api.set_pcs_images,
                SetImagesInput(pcs=self._pcs, images=request.images),
                kernel.KUBE_WRITE,
                f"set the images of {self._pcs}",
            )
            await self._adopt_target(written.generation)
            await self._roll()
        except (FailureError, asyncio.CancelledError) as err:
            if isinstance(err, RolloutAborted) and self.abort_request is not None:
                self.enter(ABORTED, f"aborted by {self.abort_request.requested_by}")
            await self._publish(ended=True)
            raise
        finally:
            # Its next heartbeat (about a second) ends it: the ended rollout has no pending activity.
            await kernel.cancel_and_wait(watcher)
        await self._publish(ended=True)
        outcome = ROLLED_BACK if self._rolling_back else COMPLETED
        self.enter(outcome, f"{plural(len(self._steps), 'step')}; every PodGang at {self._target}")
        await workflow.wait_condition(workflow.all_handlers_finished)
        return RolloutResult(
            pcs=self._pcs,
            outcome=outcome,
            target_hash=self._target,
            steps=tuple(self._steps),
            started_at=self._started_at,
            finished_at=workflow.now(),
        )

    # -- messages ------------------------------------------------------------------------------------
    @workflow.signal(name=PCS_STATE_CHANGED_SIGNAL)
    def pcs_state_changed(self, state: PCSState) -> None:
        """The watcher saw a change. Signals are ordered by (watcher attempt, sequence): a late
        signal of a replaced attempt is dropped, a retried attempt's fresh listing is taken."""
        if self._state is None or (state.attempt, state.sequence) >= (
            self._state.attempt,
            self._state.sequence,
        ):
            self._state = state

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> RolloutStatus:
        """Where the rollout is: replicas and PodGangs in flight, done/total, per-step timings."""
        done, total = 0, 0
        if self._state is not None and self._state.shape is not None:
            done, total = steps.progress(
                plan_rollout(self._state.shape), self._state, self._target, self._policy.condition
            )
        return RolloutStatus(
            pcs=self._pcs,
            phase=self.phase,
            target_hash=self._target,
            previous_hash=self._previous_hash,
            rolling_back=self._rolling_back,
            paused_reason=self._paused_reason,
            replicas=self._replicas,
            in_flight=self._in_flight,
            done=done,
            total=total,
            steps=tuple(self._steps),
            pending_scale=self._scale.replicas if self._scale else None,
            updated_replicas=self._state.updated_replicas if self._state else 0,
            members_updated=self._members[0],
            members_total=self._members[1],
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
        """Go on: recreate the PodGangs that are not Available, then the next steps. Before the
        pause was reached, it withdraws the pause request."""
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
        """Restore the previous template and roll back under the same rules: the decision of a
        paused rollout, or else queued until the current step is done."""
        self._rollback_request = request
        if self.awaits(ROLLBACK_UPDATE):
            self.decide(ROLLBACK_UPDATE, request)
        where = "now" if self.phase == PAUSED else "after the current step"
        return OperatorAnswer(accepted=True, message=f"rolling back to {self._previous_hash} {where}")

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
        """Queue a new replica count; applied between steps (see the module docstring)."""
        self._scale = request
        return OperatorAnswer(
            accepted=True, message=f"scaling to {request.replicas} replicas after the current step"
        )

    @scale.validator
    def _validate_scale(self, request: ScaleRequest) -> None:
        self.validate_running(SCALE_UPDATE)

    def abort_promise(self) -> str:
        return f"aborting ({self.phase}); nothing more will be rolled"

    def aborted(self, outcome: str = "", *details: Any) -> RolloutAborted:
        """The rollout's abort error (`RolloutAborted`): who, why, and what it leaves."""
        abort = self.abort_request
        assert abort is not None, "aborted() before an abort"
        why = f": {abort.reason}" if abort.reason else ""
        left = outcome or f"{plural(len(self._steps), 'step')} done, PodGangs left as they are"
        return RolloutAborted(
            f"rollout of {self._pcs} aborted by {abort.requested_by}{why}; {left}", *details
        )

    # -- the runbook's steps -------------------------------------------------------------------------
    async def _roll(self) -> None:
        while True:
            await self._between_steps()
            state = await self._read()
            if not state.exists or state.shape is None:
                raise PodCliqueSetGone(f"PodCliqueSet {self._pcs} was deleted during the rollout")
            plan = plan_rollout(state.shape)
            cond = self._policy.condition
            if self._repair:
                broken = steps.repair_steps(plan, state, cond)
                if broken:
                    await self._run_step(plan, state, tuple(broken), recreate=True)
                    continue
                self._repair = False
            chosen = steps.next_steps(plan, state, self._target, self._policy.replica_concurrency, cond)
            names_ = {g.name for _, step in chosen for g in step}
            sick = steps.unhealthy(plan, state, cond, names_)
            if sick:
                await self._wait_healthy(plan, names_)
                continue
            if not chosen:
                if await self._verified(state):
                    return
                continue
            self._replicas = tuple(r for r, _ in chosen)
            await self._run_step(plan, state, tuple(sorted(names_)), recreate=False)

    async def _run_step(
        self, plan: list[ReplicaRollout], state: PCSState, gangs: tuple[str, ...], *, recreate: bool
    ) -> None:
        planned = {g.name: g for r in plan for g in (*r.mpgs, *r.tpgs)}
        replica = min(planned[g].replica for g in gangs)
        mpg = any(planned[g].minimum_viable for g in gangs)
        record = StepRecord(
            replica=replica,
            podgangs=gangs,
            minimum_viable=mpg,
            target_hash=self._target,
            started_at=workflow.now(),
        )
        self._in_flight = gangs
        healthy_before = set(planned) - set(gangs)
        phase = ROLLING_BACK if self._rolling_back else ROLLING
        self.enter(phase, f"replica {replica}: {'recreating' if recreate else 'rolling'} {', '.join(gangs)}")
        await self._publish()
        rolled = await self._kube(
            activity_api.roll_podgangs,
            RollPodGangsInput(
                pcs=self._pcs,
                podgangs=gangs,
                target_hash=self._target,
                recreate_unavailable=recreate,
                require_healthy=() if recreate else tuple(sorted(healthy_before)),
                condition=self._policy.condition,
            ),
            kernel.KUBE_WRITE,
            f"roll {', '.join(gangs)}",
        )
        if rolled.blocked_by:  # fell back since the read: nothing deleted; the loop waits for it
            self._in_flight = ()
            return
        record = record.model_copy(update={"deleted": rolled.deleted})
        deadline = self._policy.step_deadline_seconds

        def settled() -> bool:
            # A PodGang of a replica scaled away (by hand, mid-step) is done: it will not return.
            s = self._state
            return s is not None and all(
                steps.ok(s.gang(g), self._target, self._policy.condition)
                or (s.shape is not None and planned[g].replica >= s.shape.replicas)
                for g in gangs
            )

        def fell_back() -> list[str]:
            s = self._state
            if s is None or recreate:
                return []
            return [g for g in sorted(healthy_before) if not steps.healthy(s.gang(g), self._policy.condition)]

        await self.wait(lambda: settled() or bool(fell_back()), timeout=deadline)
        down = fell_back()
        if down and not settled():
            # The step cannot be taken back: let it finish (within its deadline), then pause, so
            # a repair never recreates a PodGang while another of the replica is in flight.
            await self.wait(settled, timeout=deadline)
        if settled():
            self._steps.append(record.model_copy(update={"finished_at": workflow.now()}))
            self._in_flight = ()
            await self._publish()
            if down:
                await self._pause(f"PodGang {', '.join(down)} fell back from {self._policy.condition}")
            return
        self._steps.append(record)
        if down:
            await self._pause(
                f"PodGang {', '.join(down)} fell back from {self._policy.condition} during the step"
            )
        else:
            await self._pause(
                f"{', '.join(gangs)} not {self._policy.condition} at {self._target} within "
                f"{self._policy.step_deadline_seconds:g} s"
            )

    async def _wait_healthy(self, plan: list[ReplicaRollout], skip: set[str]) -> None:
        """Before a step every other PodGang must be healthy: wait for it, then pause."""

        def sick() -> list[str]:
            return steps.unhealthy(plan, self._state, self._policy.condition, skip) if self._state else ["?"]

        if not await self.wait(lambda: not sick(), timeout=self._policy.step_deadline_seconds):
            await self._pause(
                f"PodGang {', '.join(sick())} not {self._policy.condition}; the next step waits"
            )

    async def _verified(self, read: PCSState) -> bool:
        """Every PodGang is at the target: Grove must agree (`updatedReplicas`, which counts a
        replica once its PodGangs, PodCliques and scaling groups run the hash) before the rollout
        calls itself done; a deadline pauses it. The members' count is shown in `status`."""
        self._members = (read.members_updated, read.members_total)

        def agreed() -> bool:
            s = self._state
            return s is not None and s.shape is not None and s.updated_replicas >= s.shape.replicas

        if await self.wait(agreed, timeout=self._policy.step_deadline_seconds):
            return True
        s = self._state
        await self._pause(
            f"every PodGang is at {self._target} but Grove reports "
            f"{s.updated_replicas if s else '?'} replicas updated"
        )
        return False

    async def _between_steps(self) -> None:
        """Safe point: act on abort, a pause request, a rollback, a superseding rollout, a scale."""
        if self.aborting:
            raise self.aborted()
        if self.paused_by is not None:
            request = self.paused_by
            reason = f": {request.reason}" if request.reason else ""
            await self._pause(f"paused by {request.requested_by}{reason}", by_operator=True)
        if self._rollback_request is not None:
            await self._start_rollback()
        if self._supersede is not None:
            superseding, self._supersede = self._supersede, None
            written = await self._kube(
                activity_api.set_pcs_images,
                SetImagesInput(pcs=self._pcs, images=superseding.images),
                kernel.KUBE_WRITE,
                f"set the images of {self._pcs} (superseded by {superseding.requested_by})",
            )
            await self._adopt_target(written.generation)
        if self._scale is not None:
            scale, self._scale = self._scale, None
            generation = await self._kube(
                activity_api.scale_pcs,
                ScalePCSInput(pcs=self._pcs, replicas=scale.replicas),
                kernel.KUBE_WRITE,
                f"scale {self._pcs} to {scale.replicas} replicas",
            )
            await self._adopt_target(generation)

    async def _pause(self, reason: str, *, by_operator: bool = False) -> None:
        """Wait for an operator's decision (`resume` or `rollback`; `abort` raises) and act on it.
        A rollback asked for during the step is that decision already. An operator's `pause` ends
        with the decision; one asked for during a step that then paused on its own is honoured
        at the next safe point."""
        if self._rollback_request is not None:
            decision = ROLLBACK_UPDATE
        else:
            self._paused_reason = reason
            # The annotation first, so it never says a paused rollout still rolls.
            await self._publish(phase=PAUSED)
            decision, _ = await self.await_decision(PAUSED, reason, DECISIONS)
            self._paused_reason = None
        if by_operator:
            self.paused_by = None
        if decision == ROLLBACK_UPDATE:
            await self._start_rollback()
        else:
            self._repair = True

    async def _start_rollback(self) -> None:
        self._rolling_back, self._rollback_request = True, None
        self.enter(ROLLING_BACK, f"restoring the template of {self._previous_hash}")
        assert self._previous_template is not None
        written = await self._kube(
            activity_api.restore_pcs_template,
            TemplateInput(pcs=self._pcs, template=self._previous_template),
            kernel.KUBE_WRITE,
            f"restore the template of {self._pcs}",
        )
        await self._adopt_target(written.generation)

    async def _adopt_target(self, generation: int) -> None:
        """Wait until Grove observed `generation`; its hash is the target from then on."""

        def observed() -> bool:
            s = self._state
            return s is not None and s.observed_generation >= generation and bool(s.current_hash)

        while not await self.wait(observed, timeout=self._policy.step_deadline_seconds):
            await self._pause(f"Grove has not observed generation {generation} of {self._pcs}")
        assert self._state is not None
        self._target = self._state.current_hash

    # -- plumbing ------------------------------------------------------------------------------------
    async def _kube(
        self,
        call: Callable[[ArgT], Awaitable[ResultT]],
        arg: ArgT,
        preset: workflow.ActivityConfig,
        summary: str,
    ) -> ResultT:
        """One Kubernetes call. Not abortable: an abort waits for it and is acted on at the next
        wait, so a step's deletions and a template write are never cut halfway."""
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
                replicas=self._replicas,
                in_flight=self._in_flight,
                done=now.done,
                total=now.total,
                started_at=self._started_at,
                ended=ended,
            ),
            kernel.KUBE_WRITE,
            "publish progress on the PodCliqueSet",
        )
