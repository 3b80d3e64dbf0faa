"""Rollout helpers shared by the CLI and the demo: one status line, the message that matters in
a failure chain, and the plan (what `rollout start` would do). No Temporal calls here."""

from __future__ import annotations

import builtins

from temporalio.exceptions import ApplicationError

from contracts.errors import InvalidInput
from contracts.models.grove import PCSRef, PCSState, PlannedStep, RolloutPlan, RolloutPolicy, RolloutStatus
from drivers.grove import images_patch, read_state
from drivers.grove import kinds as grove_kinds
from drivers.kube import Kube
from workflows.rollout import steps, views
from workflows.rollout.state import RolloutState


def render(status: RolloutStatus, width: int = 30) -> str:
    """One line: phase, a bar of PodGangs done, what is in flight or why it is paused, and how a
    run that did not end by itself ended (`ended`: terminated, aborted, ...)."""
    filled = int(width * status.done / status.total) if status.total else 0
    bar = "#" * filled + "-" * (width - filled)
    what = f"paused: {status.paused_reason}" if status.paused_reason else ""
    if not what and status.in_flight:
        what = f"replica {','.join(map(str, status.replicas))}: {', '.join(status.in_flight)}"
    back = " (rolling back)" if status.rolling_back else ""
    healed = f" healed {status.repairs}" if status.repairs else ""
    line = f"{status.pcs} {status.phase}{back} [{bar}] {status.done}/{status.total}{healed} {what}".rstrip()
    return f"{line}; {status.ended}" if status.ended else line


def root_cause(err: BaseException) -> str:
    """The innermost message of a failure chain (what an activity or validator said). A Python
    built-in error's name is left out: a validator refuses with a ValueError, and a person read
    `pause refused: ValueError: already paused by alice` as code; the product's own error types
    (`CampaignFailed: ...`) stay, they name the cause."""
    while getattr(err, "cause", None) is not None:
        err = err.cause  # type: ignore[attr-defined]
    if isinstance(err, ApplicationError) and isinstance(getattr(builtins, err.type or "", None), type):
        return err.message
    return str(err)


async def plan(
    kube: Kube,
    pcs: PCSRef,
    images: dict[str, str],
    policy: RolloutPolicy,
    in_flight: str | None = None,
    superseding: bool = False,
) -> RolloutPlan:
    """What `rollout start` would do, read and decided with the rollout's own code: a rollout in
    flight (`in_flight`: the refusal, from Temporal, that `start` without `--supersede` gives),
    its write's refusal (`images_patch`, as `set_pcs_images`: an unknown clique or container, a
    bad image), its first read (`read_state`) and that read's refusal (`RolloutState.refusal`:
    no such PodCliqueSet, not OnDelete, a dormant edit, an outage not allowed), and the
    PodGangs it would replace in order with their outages (`steps.planned`, judged from the
    pods' versions as the run judges them: an image already running is no step). A refused plan
    lists no step, but for an outage not allowed (the steps show it). `superseding`: a start with
    `--supersede` over the rollout in flight, which holds the template (no dormant-edit refusal).
    The order at run time is this one; which replicas go together also depends on what serves
    then.

    Raises:
        Exception: The cluster cannot be read (the caller says so).
    """
    first = await read_state(kube, f"pcs:{pcs}", pcs.namespace, pcs.name)
    refusal = in_flight
    if refusal is None and first.summary.exists:
        obj = await kube.get(f"pcs:{pcs}", grove_kinds()[0], pcs.namespace, pcs.name, missing_ok=True)
        try:
            if obj is not None:  # else deleted since the read: the first read's refusal says so
                images_patch(obj, images)
        except InvalidInput as err:
            refusal = err.message
    outage_allowed = policy.model_copy(update={"allow_replica_outage": True})
    refusal = refusal or RolloutState.refusal(first, pcs, images, outage_allowed, superseding)
    changed = steps.rewritten(first, images)
    planned = [] if refusal else steps.planned(first, steps.plan_targets(first, images))
    if refusal is None and not policy.allow_replica_outage:  # shown with the steps it is about
        refusal = steps.outage_refusal(first, str(pcs), images)
    return RolloutPlan(
        pcs=pcs,
        images=images,
        changed=tuple(sorted(changed)),
        concurrency=policy.replica_concurrency,
        steps=tuple(
            PlannedStep(replica=g.replica, podgang=g.name, role=g.role, pods=pods, outage=tuple(why))
            for g, pods, why in planned
        ),
        refusal=refusal,
        warnings=_gated_after(first, pcs, changed),
    )


def _gated_after(first: PCSState, pcs: PCSRef, changed: set[str]) -> tuple[str, ...]:
    """After the write the template is at a new hash, which no replica's PodGangMap anchor
    carries (BEHAVIOUR.md G5; but for a change back to the version a map was built at, which
    the plan cannot tell before Grove hashes it): a scale-out stays gated in each."""
    if not changed or not first.summary.scaling_groups:
        return ()
    return tuple(
        f"after this rollout, {w}" for w in views.scale_out_warning(pcs, list(first.summary.anchor_hashes))
    )


def render_plan(plan: RolloutPlan) -> str:
    """The plan in lines: why `start` would refuse it first, if it would; then what changes and each
    step in order (none after a refusal but an outage's, which the steps show)."""
    if plan.refusal and not plan.steps:
        return f"start would refuse it: {plan.refusal}"
    lines = [f"start would refuse it: {plan.refusal}"] if plan.refusal else []
    lines += [
        f"rollout of {plan.pcs}: {', '.join(f'{k}={v}' for k, v in plan.images.items())}",
        f"changes cliques {', '.join(plan.changed) or '-'}; {len(plan.steps)} PodGangs, "
        f"{plan.concurrency} replica(s) at a time, each replica's anchor before its tails",
    ]
    for s in plan.steps:
        outage = f"  OUTAGE: {'; '.join(s.outage)}" if s.outage else ""
        lines.append(f"  replica {s.replica} {s.role:<8} {s.podgang}: replaces {s.pods} pods{outage}")
    lines += [f"warning: {w}" for w in plan.warnings]
    return "\n".join(lines)
