"""Findings of an independent reviewer's attack on the simulated site, each as the decision it
broke (`workflows/rollout/`): a dormant edit rolled by a rollout of another clique (B1, and the
rollback that stalled behind one, B2), a rollback that could not take back a broken PodGang in a
later replica (B3), a plan that listed other PodGangs than the run replaces (P1), and a run
after a terminate that stepped past the step the terminated run left in flight (T1).

The world is `test_rollout_state`'s: per replica an anchor (router, worker 0) and a tail
(worker 1); the template's router is `r1`, its worker `w1`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from contracts.models.grove import (
    ON_DELETE,
    GangState,
    GroupState,
    PCSRef,
    PCSState,
    PCSSummary,
    RolloutPolicy,
)
from workflows.rollout import steps
from workflows.rollout.state import RolloutState

ORIGINAL = {"router": "r1", "worker": "w1"}
IMAGES = {"router/router": "registry.local/r:1", "worker/worker": "registry.local/w:1"}
T0, PCS = datetime(2026, 11, 28, 12, 0, tzinfo=UTC), PCSRef(namespace="default", name="p")
POLICY = RolloutPolicy(step_deadline_seconds=600)


def group(
    clique: str, pclq: str, pods: dict[str, int], ready: dict[str, int] | None = None, **kw: Any
) -> GroupState:
    ready = dict(pods) if ready is None else ready
    return GroupState(pclq=pclq, clique=clique, expected=sum(pods.values()), pods=pods, ready=ready, **kw)


def anchor(r: int, worker: str = "w1", router: str = "r1", ready: bool = True) -> GangState:
    workers = group(
        "worker", f"p-{r}-w-0", {worker: 1}, None if ready else {}, pcsg=f"p-{r}-w", pcsg_replica=0
    )
    return GangState(
        name=f"p-{r}-a",
        replica=r,
        role="Anchor",
        epoch="e0",
        groups=(group("router", f"p-{r}-router", {router: 1}), workers),
    )


def tail(r: int, worker: str = "w1", ready: bool = True) -> GangState:
    workers = group(
        "worker", f"p-{r}-w-1", {worker: 1}, None if ready else {}, pcsg=f"p-{r}-w", pcsg_replica=1
    )
    return GangState(name=f"p-{r}-t", replica=r, role="Tail", epoch="e1", groups=(workers,))


def site(*gangs: GangState, hashes: dict[str, str] = ORIGINAL, **images: str) -> PCSState:
    """Two replicas (at the original unless given), the template's hashes and images known."""
    gangs = gangs or (anchor(0), tail(0), anchor(1), tail(1))
    summary = PCSSummary(
        namespace="default",
        name="p",
        generation=2,
        observed_generation=2,
        current_hash="h",
        update_strategy=ON_DELETE,
        replicas=2,
        images={**IMAGES, **{f"{c}/{c}": i for c, i in images.items()}},
        clique_hashes=hashes,
        scaling_groups={"p-0-w": 1, "p-1-w": 1},
    )
    return PCSState(summary=summary, gangs=tuple(sorted(gangs, key=lambda g: g.name)))


HALF = {"hashes": {"router": "r1", "worker": "w2"}, "worker": "registry.local/w:2"}
"""A terminated rollout left replica 0's workers at w2, the template at w2."""


def half() -> PCSState:
    return site(anchor(0, "w2"), tail(0, "w2"), anchor(1), tail(1), **HALF)  # type: ignore[arg-type]


# -- B1: a dormant edit is never rolled by a rollout of another clique ------------------------------
def test_a_dormant_edit_on_a_clique_the_rollout_does_not_change_refuses_it() -> None:
    # Someone added an env to the router's template: Grove relabels its PodCliques (r9), no pod
    # runs it (OnDelete). A rollout of the worker would have had r9 as the router's target.
    dormant = site(hashes={"router": "r9", "worker": "w1"})
    refused = RolloutState.refusal(dormant, PCS, {"worker": "registry.local/w:5"}, POLICY)
    assert refused is not None and "clique router: its template is at r9, its pods run 2 at r1" in refused
    allowed = POLICY.model_copy(update={"allow_replica_outage": True})
    assert RolloutState.refusal(dormant, PCS, {"worker": "registry.local/w:5"}, allowed) == refused
    # Naming the edited clique does not take the edit along either: no pod runs its template.
    assert RolloutState.refusal(dormant, PCS, {"router": "registry.local/r:5"}, allowed) is not None
    # A rollout in flight holds the template: a superseding start is not refused for it.
    assert RolloutState.refusal(dormant, PCS, {"worker": "w:5"}, allowed, superseding=True) is None


def test_a_rollout_cut_short_is_no_dormant_edit_of_the_clique_it_names() -> None:
    assert RolloutState.refusal(half(), PCS, {"worker": "registry.local/w:2"}, POLICY) is None
    # ... but the worker, which a router rollout does not name, must run its template whole.
    allowed = POLICY.model_copy(update={"allow_replica_outage": True})
    assert RolloutState.refusal(half(), PCS, {"router": "registry.local/r:2"}, allowed) is not None


# -- P1: the plan judges from the pods' versions, as the run does -----------------------------------
def test_the_plan_lists_what_the_run_replaces() -> None:
    same = {"worker": "registry.local/w:1"}  # already running: the write changes nothing
    assert steps.planned(site(), steps.plan_targets(site(), same)) == []
    again = steps.planned(half(), steps.plan_targets(half(), {"worker": "registry.local/w:2"}))
    assert [g.name for g, _, _ in again] == ["p-1-a", "p-1-t"]
    new = steps.planned(site(), steps.plan_targets(site(), {"worker/worker": "registry.local/w:9"}))
    assert [g.name for g, _, _ in new] == ["p-0-a", "p-0-t", "p-1-a", "p-1-t"]


# -- B3: a rollback takes back a PodGang whose peers wait for it ------------------------------------
def taking_back(interrupted: set[str]) -> RolloutState:
    """Rolling back to w1: replica 0 whole at w2; replica 1's tail at w2 and not serving (a
    fault), its step interrupted or not; the PodCliques already back at the original."""
    seen = site(anchor(0, "w2"), tail(0, "w2"), anchor(1, "w2"), tail(1, "w2", ready=False))
    state = RolloutState(
        started_at=T0,
        written_at=T0,
        original=dict(ORIGINAL),
        targets=dict(ORIGINAL),
        earlier=[{"router": "r1", "worker": "w2"}],
        generation=2,
        rolling_back=True,
        watched=seen,
        interrupted=interrupted,
        in_flight={1: "p-1-t"} if interrupted else {},
    )
    return state


def test_a_rollback_takes_back_the_podgang_that_does_not_serve_first() -> None:
    # Its step interrupted: that PodGang first.
    move = taking_back({"p-1-t"}).next_move(POLICY)
    assert (move.kind, [g.name for g in move.gangs]) == ("rollback", ["p-1-t"])
    # Not interrupted: its replica first, in GREP order, so its anchor (at w2 too) before it: a
    # tail is never taken back before its anchor (GREP-393; a full run's simulated Grove caught
    # a tail that did not serve, while its anchor was replaced, taken first). Here the anchor's
    # step would break the scaling group's minAvailable: the run says so and waits.
    move = taking_back(set()).next_move(POLICY)
    assert (move.kind, move.reason.split(":")[0]) == ("wait", "p-1-a"), move
    allowed = POLICY.model_copy(update={"allow_replica_outage": True})
    move = taking_back(set()).next_move(allowed)
    assert (move.kind, [g.name for g in move.gangs]) == ("rollback", ["p-1-a"])


# -- T1: a step a terminated run left in flight is finished before anything else of its replica -----
def new_run_after_terminate(seen: PCSState) -> RolloutState:
    """The next rollout of the same images: the template already at w2, so its originals and
    targets are w2, and it knows nothing of the terminated run's steps."""
    state = RolloutState(started_at=T0, written_at=T0, generation=2, watched=seen)
    state.prepare(seen)
    state.adopt_targets()
    return state


def test_a_step_a_terminated_run_left_in_flight_is_finished_first() -> None:
    # Replica 0's anchor was being replaced (its worker at w2, not Ready yet; or its old pod
    # still going) when the run was terminated: its tail must wait (GREP-393: one in flight).
    replaced = anchor(0, "w2", ready=False)
    going = replaced.model_copy(
        update={"groups": (replaced.groups[0], group("worker", "p-0-w-0", {}, terminating=1, pcsg="p-0-w"))}
    )
    for in_flight in (replaced, going):
        seen = site(in_flight, tail(0), anchor(1), tail(1), **HALF)  # type: ignore[arg-type]
        move = new_run_after_terminate(seen).next_move(POLICY)
        assert (move.kind, [g.name for g in move.gangs]) == ("roll", ["p-0-a"]), in_flight
        two = POLICY.model_copy(update={"replica_concurrency": 2})
        assert [g.name for g in new_run_after_terminate(seen).next_move(two).gangs] == ["p-0-a", "p-1-a"]
        # `rollout plan` says the same: the step in flight first (nothing left to replace in it).
        planned = steps.planned(seen, steps.plan_targets(seen, {"worker": "registry.local/w:2"}))
        assert [(g.name, pods) for g, pods, _ in planned] == [
            ("p-0-a", 0),
            ("p-0-t", 1),
            ("p-1-a", 1),
            ("p-1-t", 1),
        ]
