"""What a rollout shows of its state: the `status` query, the PodCliqueSet's progress
annotation, the result, and what a run that ends early leaves behind, each a pure function of
`RolloutState` (workflows/rollout/state.py), as the campaign's `views.py` is of its state.

What the run does now (`RolloutState.activity`) stays a decision of the state: the invariants
(`invariants.py`) hold the status to it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from contracts.models.grove import PCSRef, ProgressInput, RolloutResult, RolloutStatus
from contracts.wording import plural
from workflows.rollout import steps
from workflows.rollout.state import Outcome, RolloutState


def status(state: RolloutState, pcs: PCSRef, phase: str) -> RolloutStatus:
    """The status query: replicas and PodGangs in flight, done/total, the latest steps, and
    what the run does now (`RolloutState.activity`)."""
    done, total = steps.progress(state.watched, state.targets)
    doing, activity, wake_at = state.activity(phase)
    return RolloutStatus(
        pcs=pcs,
        phase=phase,
        target_hash=state.target_hash,
        previous_hash=state.previous_hash,
        rolling_back=state.rolling_back,
        paused_reason=state.paused_reason,
        replicas=tuple(sorted(state.in_flight)),
        in_flight=tuple(sorted(state.in_flight.values())),
        done=done,
        total=total,
        steps=tuple(state.steps),
        steps_done=state.steps_done,
        repairs=state.repairs,
        pending_scale=state.scale.replicas if state.scale else None,
        updated_replicas=state.watched.summary.updated_replicas if state.watched else 0,
        fields=state.fields,
        runs=state.runs,
        doing=doing,
        activity=activity,
        wake_at=wake_at,
        dormant=tuple(sorted(state.dormant)),
        overwritten=state.overwritten,
    )


def progress(state: RolloutState, pcs: PCSRef, workflow_id: str, phase: str, *, ended: bool) -> ProgressInput:
    """What the PodCliqueSet's annotation shows (`ended`: the annotation goes)."""
    now = status(state, pcs, phase)
    return ProgressInput(
        pcs=pcs,
        workflow_id=workflow_id,
        phase=phase,
        replicas=now.replicas,
        in_flight=now.in_flight,
        done=now.done,
        total=now.total,
        started_at=state.started_at,
        ended=ended,
    )


def result(
    state: RolloutState, pcs: PCSRef, outcome: Outcome | Literal["aborted"], now: datetime, aborted: str = ""
) -> RolloutResult:
    return RolloutResult(
        pcs=pcs,
        outcome=outcome,
        aborted=aborted,
        target_hash=state.target_hash,
        steps=tuple(state.steps),
        steps_done=state.steps_done,
        started_at=state.started_at,
        finished_at=now,
        dormant=tuple(sorted(state.dormant)) if state.dormant_back else (),
    )


def left_behind(state: RolloutState) -> str:
    """What a run that ends early leaves, in words (the final phase's details)."""
    if not state.fields:
        return "The template was not changed"
    done, total = steps.progress(state.watched, state.targets)
    fields = ", ".join(f.path for f in state.fields)
    verb = "put back" if state.rolling_back else "set"
    taken = plural(state.steps_done, "step")
    at = f"{done} of {total} PodGangs at {state.target_hash or '?'}"
    kept = ""
    if state.dormant and not state.dormant_back:
        kept = (
            f"; the edits of cliques {', '.join(sorted(state.dormant))} by someone else were taken out "
            "and not put back (the PodCliqueSet's annotation metalflow.io/rollout-dormant records them)"
        )
    return f"{at} after {taken}; {fields} {verb} by the rollout{kept}"
