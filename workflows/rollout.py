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
   activity (patch `rollout-watcher-awaited`).

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
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError, FailureError

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api, names
    from contracts.models.control import STATUS_QUERY
    from contracts.models.grove import (
        PCS_STATE_CHANGED_SIGNAL,
        PCSState,
        ProgressInput,
        RolloutInput,
        RolloutResult,
        RolloutStatus,
        RollPodGangsInput,
        ScalePCSInput,
        SetImagesInput,
        StepRecord,
        TemplateInput,
        TemplateResult,
        WatchPCSInput,
    )
    from contracts.wording import plural
    from workflows import common
    from workflows import rollout_steps as steps
    from workflows.rollout_control import (
        COMPLETED,
        PAUSED,
        PREPARING,
        ROLLED_BACK,
        ROLLING,
        ROLLING_BACK,
        RolloutControl,
    )
    from workflows.rollout_plan import plan as plan_rollout

# The watcher is cancelled and waited for when the rollout ends (`_stop_watcher`); runs recorded
# before this cancelled it without waiting and ended with it still pending (CANCEL_REQUESTED).
WATCHER_AWAITED_PATCH = "rollout-watcher-awaited"


@workflow.defn(name="RolloutWorkflow")
class RolloutWorkflow(RolloutControl):
    """Roll one PodCliqueSet coherently; see the module docstring."""

    @workflow.init
    def __init__(self, request: RolloutInput) -> None:
        super().__init__()
        self._request = request
        self._pcs = request.pcs
        self._policy = request.policy
        self._state: PCSState | None = None
        self._target = ""
        self._previous_template: dict[str, Any] | None = None
        self._repair = False
        self._steps: list[StepRecord] = []
        self._in_flight: tuple[str, ...] = ()
        self._replicas: tuple[int, ...] = ()
        self._started_at = workflow.now()
        self._watcher: asyncio.Future[None] | None = None
        self._watcher_awaited = False
        self._members: tuple[int | None, int | None] = (None, None)

    @workflow.run
    async def run(self, request: RolloutInput) -> RolloutResult:
        """Roll the PodCliqueSet to the new images; see the module docstring."""
        workflow.upsert_search_attributes([names.OPERATION.value_set(names.ROLLOUT)])
        self._enter(PREPARING, f"reading {self._pcs}")
        template = await self._read_template()
        self._previous_template = dict(template.template)
        first = await self._read()
        self._previous_hash = first.current_hash
        self._start_watcher()
        try:
            written = await self._activity(
                activity_api.set_pcs_images,
                SetImagesInput(pcs=self._pcs, images=request.images),
                f"set the images of {self._pcs}",
                common.KUBE_WRITE,
            )
            await self._adopt_target(written.generation)
            await self._roll()
        except (FailureError, asyncio.CancelledError):
            await self._publish(ended=True)
            raise
        finally:
            await self._stop_watcher()
        await self._publish(ended=True)
        outcome = ROLLED_BACK if self._rolling_back else COMPLETED
        self._enter(outcome, f"{plural(len(self._steps), 'step')}; every PodGang at {self._target}")
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
            phase=self._phase,
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

    # -- the runbook's steps -------------------------------------------------------------------------
    async def _roll(self) -> None:
        while True:
            await self._between_steps()
            state = await self._read()
            if not state.exists or state.shape is None:
                raise ApplicationError(
                    f"PodCliqueSet {self._pcs} was deleted during the rollout",
                    type="PodCliqueSetGone",
                    non_retryable=True,
                )
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
        self, plan: list[Any], state: PCSState, gangs: tuple[str, ...], *, recreate: bool
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
        self._enter(phase, f"replica {replica}: {'recreating' if recreate else 'rolling'} {', '.join(gangs)}")
        await self._publish()
        rolled = await self._activity(
            activity_api.roll_podgangs,
            RollPodGangsInput(
                pcs=self._pcs,
                podgangs=gangs,
                target_hash=self._target,
                recreate_unavailable=recreate,
                require_healthy=() if recreate else tuple(sorted(healthy_before)),
                condition=self._policy.condition,
            ),
            f"roll {', '.join(gangs)}",
            common.KUBE_WRITE,
        )
        if rolled.blocked_by:  # fell back since the read: nothing deleted; the loop waits for it
            self._in_flight = ()
            return
        record = record.model_copy(update={"deleted": rolled.deleted})
        deadline = timedelta(seconds=self._policy.step_deadline_seconds)

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

        try:
            await workflow.wait_condition(
                lambda: settled() or bool(fell_back()) or self._abort is not None, timeout=deadline
            )
        except TimeoutError:
            pass
        self._check_abort()
        down = fell_back()
        if down and not settled():
            # The step cannot be taken back: let it finish (within its deadline), then pause, so
            # a repair never recreates a PodGang while another of the replica is in flight.
            try:
                await workflow.wait_condition(lambda: settled() or self._abort is not None, timeout=deadline)
            except TimeoutError:
                pass
            self._check_abort()
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

    async def _wait_healthy(self, plan: list[Any], skip: set[str]) -> None:
        """Before a step every other PodGang must be healthy: wait for it, then pause."""

        def sick() -> list[str]:
            return steps.unhealthy(plan, self._state, self._policy.condition, skip) if self._state else ["?"]

        try:
            await workflow.wait_condition(
                lambda: not sick() or self._abort is not None,
                timeout=timedelta(seconds=self._policy.step_deadline_seconds),
            )
        except TimeoutError:
            self._check_abort()
            await self._pause(
                f"PodGang {', '.join(sick())} not {self._policy.condition}; the next step waits"
            )
        self._check_abort()

    async def _verified(self, read: PCSState) -> bool:
        """Every PodGang is at the target: Grove must agree (`updatedReplicas`, which counts a
        replica once its PodGangs, PodCliques and scaling groups run the hash) before the rollout
        calls itself done; a deadline pauses it. The members' count is shown in `status`."""
        self._members = (read.members_updated, read.members_total)

        def agreed() -> bool:
            s = self._state
            return s is not None and s.shape is not None and s.updated_replicas >= s.shape.replicas

        try:
            await workflow.wait_condition(
                lambda: agreed() or self._abort is not None,
                timeout=timedelta(seconds=self._policy.step_deadline_seconds),
            )
        except TimeoutError:
            s = self._state
            await self._pause(
                f"every PodGang is at {self._target} but Grove reports "
                f"{s.updated_replicas if s else '?'} replicas updated"
            )
            return False
        self._check_abort()
        return True

    async def _between_steps(self) -> None:
        """Safe point: act on abort, a pause request, a rollback, a superseding rollout, a scale."""
        self._check_abort()
        if self._pause_request is not None:
            request, self._pause_request = self._pause_request, None
            await self._pause(
                f"paused by {request.requested_by}" + (f": {request.reason}" if request.reason else "")
            )
        if self._decision is not None and self._decision[0] == "rollback":
            self._decision = None
            await self._start_rollback()
        if self._supersede is not None:
            request_, self._supersede = self._supersede, None
            written = await self._activity(
                activity_api.set_pcs_images,
                SetImagesInput(pcs=self._pcs, images=request_.images),
                f"set the images of {self._pcs} (superseded by {request_.requested_by})",
                common.KUBE_WRITE,
            )
            await self._adopt_target(written.generation)
        if self._scale is not None:
            scale, self._scale = self._scale, None
            generation = await self._activity(
                activity_api.scale_pcs,
                ScalePCSInput(pcs=self._pcs, replicas=scale.replicas),
                f"scale {self._pcs} to {scale.replicas} replicas",
                common.KUBE_WRITE,
            )
            await self._adopt_target(generation)

    async def _pause(self, reason: str) -> None:
        self._paused_reason = reason
        self._enter(PAUSED, f"{reason}; waiting for resume, rollback or abort")
        await self._publish()
        await workflow.wait_condition(lambda: self._decision is not None or self._abort is not None)
        self._check_abort()
        assert self._decision is not None
        (kind, request), self._decision = self._decision, None
        self._paused_reason = None
        workflow.logger.info("rollout of %s: %s by %s", self._pcs, kind, request.requested_by)
        if kind == "rollback":
            await self._start_rollback()
        else:
            self._repair = True

    async def _start_rollback(self) -> None:
        self._rolling_back = True
        self._enter(ROLLING_BACK, f"restoring the template of {self._previous_hash}")
        assert self._previous_template is not None
        written = await self._activity(
            activity_api.restore_pcs_template,
            TemplateInput(pcs=self._pcs, template=self._previous_template),
            f"restore the template of {self._pcs}",
            common.KUBE_WRITE,
        )
        await self._adopt_target(written.generation)

    async def _adopt_target(self, generation: int) -> None:
        """Wait until Grove observed `generation`; its hash is the target from then on."""

        def observed() -> bool:
            s = self._state
            return s is not None and s.observed_generation >= generation and bool(s.current_hash)

        while True:
            try:
                await workflow.wait_condition(
                    lambda: observed() or self._abort is not None,
                    timeout=timedelta(seconds=self._policy.step_deadline_seconds),
                )
            except TimeoutError:
                self._check_abort()
                await self._pause(f"Grove has not observed generation {generation} of {self._pcs}")
                continue
            self._check_abort()
            assert self._state is not None
            self._target = self._state.current_hash
            return

    # -- plumbing ------------------------------------------------------------------------------------
    async def _activity(self, fn: Any, arg: Any, summary: str, options: workflow.ActivityConfig) -> Any:
        return await workflow.execute_activity(fn, arg, **common.options(options, summary))

    async def _read_template(self) -> TemplateResult:
        result: TemplateResult = await workflow.execute_activity(
            activity_api.read_pcs_template,
            self._pcs,
            **common.options(common.KUBE_READ, f"read the template of {self._pcs}"),
        )
        return result

    async def _read(self) -> PCSState:
        state: PCSState = await workflow.execute_activity(
            activity_api.read_pcs_state, self._pcs, **common.options(common.KUBE_READ, f"read {self._pcs}")
        )
        if self._state is None:
            self._state = state
        return state

    async def _publish(self, *, ended: bool = False) -> None:
        now = self.status()
        done, total = now.done, now.total
        await workflow.execute_activity(
            activity_api.publish_rollout_progress,
            ProgressInput(
                pcs=self._pcs,
                workflow_id=workflow.info().workflow_id,
                phase=self._phase,
                replicas=self._replicas,
                in_flight=self._in_flight,
                done=done,
                total=total,
                started_at=self._started_at,
                ended=ended,
            ),
            **common.options(common.KUBE_WRITE, "publish progress on the PodCliqueSet"),
        )

    def _start_watcher(self) -> None:
        self._watcher_awaited = workflow.patched(WATCHER_AWAITED_PATCH)
        self._watcher = workflow.start_activity(
            activity_api.watch_pcs,
            WatchPCSInput(pcs=self._pcs, heartbeat_seconds=common.WATCHER_HEARTBEAT_SECONDS),
            **common.options(
                common.WATCHER,
                f"watch {self._pcs} and its PodGangs",
                cancellation_type=(
                    workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
                    if self._watcher_awaited
                    else None
                ),
            ),
        )

    async def _stop_watcher(self) -> None:
        """Cancel the watcher and wait until it has ended (its next heartbeat, about a second),
        so the ended rollout shows no pending activity."""
        watcher = self._watcher
        if watcher is None or watcher.done():
            return
        watcher.cancel()
        if not self._watcher_awaited:
            watcher.add_done_callback(_retrieve)
            return
        await common.cancelled_call_ended(watcher)


def _retrieve(watcher: asyncio.Future[None]) -> None:
    # A cancelled watcher ends with an ActivityError nobody awaits: take it, so it is not logged.
    if not watcher.cancelled():
        watcher.exception()
