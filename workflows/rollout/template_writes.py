"""The template's writes and the pauses of a rollout: the base of `RolloutWorkflow`
(`workflow.py`), split from its runbook by role, and the tools both use (the waits, the pause,
a step's deadline, the progress annotation).

The runbook rolls PodGangs step after step; what it does with the template between its steps is
here:

1. Someone else's edit (`_foreign_edit`; while rolling back, `_foreign_edit_while_rolling_back`):
   `describe_template_change` names the fields and who made them; a template edit pauses the
   rollout until an operator decides (`_pause`: `resume` adopts the template as it is now,
   `rollback` restores the original), a scale is adopted.
2. The rollback's restore (`_start_rollback`): every clique written back as it was before the
   rollout, someone else's edits taken out and recorded; the targets are the original hashes
   from then on. Once every pod runs the original, those edits go back, dormant
   (`_put_back_foreign_edits`).
3. A write of the rollout's own (`_adopt`): wait until Grove observed it; the PodCliques' hashes
   are the targets from then on, never those of someone else's write that overtook it.

Why a base class: the runbook (`workflow.py`) stays a few hundred lines that read top to bottom,
and the template's writes, with the pause they lead to, read on their own; both share one state
object and one set of tools, as the host operation's reboot round (`host_operation/reboot_round.py`).
Every Kubernetes call is `self.call(..., abortable=False)`, as in the runbook.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api
    from contracts.errors import RolloutAborted
    from contracts.models.control import RESUME_UPDATE
    from contracts.models.grove import (
        ROLLBACK_UPDATE,
        ForeignEditsInput,
        PCSRef,
        RestoreInput,
        RolloutPolicy,
        TemplateChange,
        TemplateChangeInput,
        TemplateResult,
        Wake,
    )
    from workflows import kernel
    from workflows.rollout import views
    from workflows.rollout.guard import PausedGuard
    from workflows.rollout.state import PAUSED, ROLLING_BACK, RolloutState

DECISIONS = (RESUME_UPDATE, ROLLBACK_UPDATE)
"""What a paused rollout waits for (besides `abort`)."""


class TemplateWrites(kernel.Abortable):
    """A rollout's template writes, someone else's edits, the pause, and the tools its runbook
    shares (module docstring).

    The workflow sets `state`, `pcs`, `policy` and `_guard` in its `__init__`.
    """

    state: RolloutState
    pcs: PCSRef
    policy: RolloutPolicy
    _guard: PausedGuard

    # -- the template: someone else's edits, the rollback's restore, the rollout's own writes --------
    async def _template_change(self) -> TemplateChange | None:
        """What someone else changed in the template since our last write; None (its generation
        adopted) when the write was not a template edit (a scale)."""
        state = self.state
        change = await self.call(
            activity_api.describe_template_change,
            TemplateChangeInput(pcs=self.pcs, written=state.written, since=state.written_at),
            kernel.options(kernel.KUBE_READ, f"what changed in the template of {self.pcs}"),
            abortable=False,
        )
        if not change.fields:
            state.generation = change.generation
            return None
        return change

    async def _foreign_edit(self) -> bool:
        """Someone else changed the template: pause, naming the fields and who; `resume` adopts
        the template as it is now, `rollback` restores the original. False: the write was not a
        template edit (a scale), its generation is adopted."""
        state = self.state
        change = await self._template_change()
        if change is None:
            return False
        await self._pause(state.foreign_edit_reason(change))
        if state.rolling_back or self.aborting:
            return True  # the rollback (or the abort's take-back) restores the original over the edit
        await self._wait(
            lambda: state.observed(change.generation), self._deadline(), "Grove to observe the edit adopted"
        )
        state.adopt_edit(change, workflow.now())
        return True

    async def _foreign_edit_while_rolling_back(self) -> None:
        """Someone else changed the template while the rollout rolls back: pause, naming the
        fields and who (an abort's take-back does not wait: the abort is the answer); then the
        restore is made again, the new edit taken out with the others and put back, dormant, at
        the end. The rollback never rolls a pod onto it."""
        state = self.state
        change = await self._template_change()
        if change is None:
            return
        await self._pause(
            f"rolling back: {state.foreign_edit_reason(change)}; `resume` restores the original again"
        )
        await self._start_rollback()

    async def _pause(self, reason: str, *, by_operator: bool = False) -> None:
        """Wait for an operator's decision (`resume`, `rollback`, `abort`) and act on it; the guard
        heals a mixed PodGang meanwhile. A rollback or abort asked for already is that decision."""
        state = self.state
        if state.interrupting(self.aborting):
            return
        state.paused_reason = reason
        await self._publish(phase=PAUSED)
        self._guard.on = True
        try:
            decision, _ = await self.await_decision(PAUSED, reason, DECISIONS)
        except RolloutAborted:
            decision = "abort"  # the next safe point acts on it
        finally:
            self._guard.on, state.paused_reason = False, None
        await self._guard.quiet()
        if by_operator:
            self.paused_by = None
        if decision == ROLLBACK_UPDATE:
            await self._start_rollback()

    async def _start_rollback(self) -> None:
        """Restore the template as it was before the rollout (every clique; someone else's edits
        taken out and recorded); the targets are the original hashes from now on, and the loop
        rolls every PodGang back. The edits taken out go back, dormant, once every pod runs the
        original (`_put_back_foreign_edits`)."""
        state = self.state
        state.begin_rollback()
        self.enter(ROLLING_BACK, f"restoring {', '.join(f.path for f in state.fields) or 'the template'}")
        written = await self.call(
            activity_api.restore_pcs_template,
            RestoreInput(pcs=self.pcs, fields=state.fields, original=state.original_cliques),
            kernel.options(kernel.KUBE_WRITE, f"restore the template of {self.pcs} as it was before"),
            abortable=False,
        )
        state.restoring(written)
        if written.overwritten or written.dormant:
            kept = ", ".join(sorted(written.dormant))
            self.show(
                f"restored; put back over someone else's value: {', '.join(written.overwritten) or '-'}; "
                f"edits of cliques {kept or '-'} by someone else go back, dormant, once every pod is back"
            )
        state.wrote(written, workflow.now())
        while not await self._wait(
            lambda: state.restored(written),
            self._deadline(),
            f"Grove to observe the restore ({written.generation})",
        ):
            if state.interrupting(self.aborting) or state.foreign():
                return  # the safe point acts on it (an edit since: paused on, then restored again)
            await self._stuck(state.not_restored())

    async def _put_back_foreign_edits(self) -> None:
        """Every pod runs the original: the edits someone else made go back into the template,
        each where its clique still holds the original. No pod is deleted for them: under
        OnDelete they stay dormant, as they would have without the rollout."""
        state = self.state
        written = await self.call(
            activity_api.put_back_foreign_edits,
            ForeignEditsInput(pcs=self.pcs, dormant=state.dormant, original=state.original_cliques),
            kernel.options(kernel.KUBE_WRITE, f"put back the edits of {', '.join(sorted(state.dormant))}"),
            abortable=False,
        )
        state.wrote(written, workflow.now())
        state.dormant_back, state.dormant_left = True, written.skipped
        left = f"; left alone (changed again since): {', '.join(written.skipped)}" if written.skipped else ""
        self.show(f"put back, dormant: the edits of {', '.join(sorted(state.dormant))} by someone else{left}")

    async def _adopt(self, written: TemplateResult) -> None:
        """Wait until Grove observed the write; the PodCliques' hashes are the targets from then on.
        Someone else's write after the rollout's, before Grove showed it, is told first: a
        template edit pauses (as at a safe point), so its hashes are never taken for the targets."""
        state = self.state
        before = state.rolled_to()
        state.wrote(written, workflow.now())
        while True:
            ok = await self._wait(
                lambda: state.adopted(written, before) or state.overtaken(),
                self._deadline(),
                f"Grove to observe generation {written.generation}",
            )
            if state.interrupting(self.aborting):
                if state.adopted(written, before) and not state.overtaken():
                    state.adopt_targets()  # shown already: a PodGang at it is the rollout's own
                return
            if state.overtaken():
                await self._wait(state.spec_observed, 30, "Grove to observe a write by someone else")
                if await self._foreign_edit():
                    return  # decided: adopted as it is, restored, or aborted
                continue
            if ok:
                break
            await self._stuck(f"Grove has not observed generation {written.generation} of {self.pcs}")
            if state.rolling_back:
                return  # the operator answered the pause with `rollback`: restored since
        state.adopt_targets()

    # -- the tools the runbook shares -----------------------------------------------------------------
    async def _wait(self, condition: Callable[[], bool], timeout: float, reason: str) -> bool:
        """True once `condition` holds; False after `timeout`, or at once on an abort, a rollback
        request or a foreign template edit (they interrupt a stuck step; the rollout's abort
        takes everything back, so it ends a wait instead of raising: `abortable=False`). While
        it waits, the status shows its wake time and `reason`."""
        wake = workflow.now() + timedelta(seconds=timeout)
        self.state.timer = Wake(at=wake, reason=f"waiting for {reason}")
        try:
            await self.wait(
                lambda: condition() or self.state.cut_short(self.aborting), timeout=timeout, abortable=False
            )
        finally:
            self.state.timer = None
        return condition() and not self.state.interrupting(self.aborting)

    async def _stuck(self, reason: str) -> None:
        """A step or wait that cannot progress: pause for an operator; while an abort takes
        everything back there is no one to ask (the abort was the answer), so the take-back waits
        until the PodCliqueSet changes (at most a step's deadline) and tries again: an abort ends
        only once everything is back (a terminate is the way to leave it as it is)."""
        state = self.state
        if not state.reverting_for_abort:
            await self._pause(reason)
            return
        self.show(f"aborting, taking back: {reason}; trying again once the PodCliqueSet changes")
        seen = state.watched
        await self._wait(lambda: state.watched is not seen, self._deadline(), f"a change after: {reason}")

    def _deadline(self) -> float:
        return self.state.deadline(self.policy)

    async def _publish(self, *, ended: bool = False, phase: str | None = None) -> None:
        """Where the rollout is, as the PodCliqueSet's annotation (`ended`: removed)."""
        progress = views.progress(
            self.state, self.pcs, workflow.info().workflow_id, phase or self.phase, ended=ended
        )
        await self.call(
            activity_api.publish_rollout_progress,
            progress,
            kernel.options(kernel.KUBE_WRITE, "publish progress on the PodCliqueSet"),
            abortable=False,
        )
