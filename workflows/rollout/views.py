"""What a rollout shows of its state: the `status` query, the PodCliqueSet's progress
annotation, the result, and what a run that ends early leaves behind, each a pure function of
`RolloutState` (workflows/rollout/state.py), as the campaign's `views.py` is of its state.

What the run does now (`RolloutState.activity`) stays a decision of the state: the invariants
(`invariants.py`) hold the status to it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from contracts.models.grove import PCSRef, ProgressInput, RolloutResult, RolloutStatus, TemplateChange
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
        warnings=state.site_check
        + gated_scale_out(state, pcs, state.watched.summary.current_hash if state.watched else ""),
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
        warnings=state.site_check + gated_scale_out(state, pcs, state.target_hash),
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


# -- a switch away from OnDelete (BEHAVIOUR.md U6), in words -------------------------------------------
def strategy_now(state: RolloutState) -> str:
    return state.watched.summary.update_strategy if state.watched else "?"


def versions_now(state: RolloutState) -> str:
    """Where the PodGangs are: how many at the targets, how many at a version before, how many
    neither (mixed, or being replaced)."""
    if state.watched is None:
        return "no PodGang seen"
    at, before, neither = steps.versions_held(state.watched, state.targets, state.versions())
    other = "the version rolled back from" if state.rolling_back else "the version before"
    words = f"{at} of {at + before + neither} PodGangs at {state.target_hash or '?'}, {before} at {other}"
    return words + (f", {neither} mixed or being replaced" if neither else "")


def off_on_delete_reason(state: RolloutState, change: TemplateChange, pcs: PCSRef) -> str:
    """Why the rollout pauses off OnDelete: the strategy, who set it (managedFields), where the
    PodGangs are, and what to do."""
    who = ", ".join(change.strategy_set_by) or "an unknown writer (no managedFields entry)"
    back = (
        f"kubectl -n {pcs.namespace} patch pcs {pcs.name} --type=merge "
        """-p '{"spec":{"updateStrategy":{"type":"OnDelete"}}}'"""
    )
    return (
        f"the PodCliqueSet left OnDelete: updateStrategy {change.strategy or strategy_now(state)}, "
        f"set by {who}. "
        "Grove does not roll the rest (its update ended under OnDelete and the strategy is no part of "
        f"the template hash), so the PodCliqueSet stays on two versions: {versions_now(state)}. "
        f"The rollout drives nothing until it is OnDelete again: switch it back (`{back}`), then "
        f"`metalflow rollout resume {pcs}`; or `metalflow rollout abort {pcs}` (while it is not "
        "OnDelete, the abort takes nothing back)"
    )


def off_on_delete_refusal(state: RolloutState, kind: str) -> str | None:
    """Why `kind` (`resume`, `rollback`, `supersede`) is refused now: the PodCliqueSet is off
    OnDelete (None: it is not)."""
    if not state.left_on_delete():
        return None
    return (
        f"`{kind}`: the PodCliqueSet is on updateStrategy {strategy_now(state)}, not OnDelete, so the "
        "rollout drives nothing (Grove would roll a template write itself, replica by replica): switch "
        "it back to OnDelete first; `abort` ends the rollout leaving it as it is"
    )


def left_as_is(state: RolloutState, change: TemplateChange) -> str:
    """What an abort off OnDelete leaves: nothing taken back, and how to finish it."""
    who = ", ".join(change.strategy_set_by) or "an unknown writer"
    return (
        f"the PodCliqueSet is on updateStrategy {change.strategy or strategy_now(state)} (set by {who}), "
        f"so {'nothing more is' if state.reverting_for_abort else 'nothing was'} taken back (a restore "
        "would make Grove roll every replica itself): "
        f"{versions_now(state)}; Grove rolls none of them. To put one version on every pod, switch "
        "it back to OnDelete and `metalflow rollout start` it with the images you want (a rollout "
        "cut short is finished where it stopped)"
    )


def gated_scale_out(state: RolloutState, pcs: PCSRef, template_hash: str) -> tuple[str, ...]:
    """The warning a PodCliqueSet whose scaling-group scale-out stays gated with the template at
    `template_hash` gets, with what to do (BEHAVIOUR.md G5: a replica whose PodGangMap's anchor
    carries another hash, as read at the rollout's first read); none where it is not."""
    groups = state.watched is not None and bool(state.watched.summary.scaling_groups)
    replicas = [r for r, h in state.anchor_hashes.items() if groups and template_hash and h != template_hash]
    gangs = state.watched.gangs if state.watched else ()
    held = sum(g.gated for x in gangs if x.role == "ScaleOut" and x.replica in replicas for g in x.groups)
    return scale_out_warning(pcs, replicas, held)


def scale_out_warning(pcs: PCSRef, replicas: list[int], held: int = 0) -> tuple[str, ...]:
    """The words of a gated scale-out in `replicas` (none: no warning); `held`: the pods of
    ScaleOut PodGangs gated now."""
    if not replicas:
        return ()
    maps = " ".join(f"{pcs.name}-{r}" for r in replicas)
    now = f" ({held} pods of ScaleOut PodGangs are gated by it now)" if held else ""
    return (
        f"a scale-out of the scaling groups of {pcs} stays gated in replica(s) "
        f"{', '.join(map(str, replicas))}{now}: "
        "at Grove 6eaa77f0, after a template change under OnDelete, the ScaleOut entry of each replica's "
        'PodGangMap depends on no anchor (dependsOn [""]), so new scaling-group replicas are never '
        "scheduled. Do not scale its scaling groups out; or first set that entry's dependsOn to the epoch "
        f"of the map's Anchor entry (`kubectl -n {pcs.namespace} edit podgangmap {maps}`; Grove keeps an "
        "entry's dependsOn once written)",
    )
