"""The rollout's decisions (`workflows/rollout/state.py`), with no server: the watcher's changes
and their order, a foreign template edit told from a scale, what to roll next (a mixed PodGang
first, an interrupted step first in its replica, GREP order, an outage that waits), when a step
is done, which PodGangs to heal while paused, the step bookkeeping, the status, and the state
carried across continue-as-new.

The world is a small PodCliqueSet as Grove lays it out: per replica an anchor PodGang (the
router and the workers' scaling-group replica 0) and a tail (its replica 1); the rollout changes
the workers (`w1` to `w2`), so the router's hash is the same in both versions."""

from __future__ import annotations

import json
import warnings
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from contracts.converter import DATA_CONVERTER
from contracts.errors import PodCliqueSetGone, RolloutAborted
from contracts.models.control import OperatorRequest
from contracts.models.grove import (
    ON_DELETE,
    ROLLOUT_DORMANT_ANNOTATION,
    FieldChange,
    GangState,
    GroupState,
    PCSChange,
    PCSRef,
    PCSState,
    PCSSummary,
    RollGangResult,
    RolloutInput,
    RolloutPolicy,
    ScaleRequest,
    StepRecord,
    SupersedeRequest,
    TemplateChange,
    TemplateResult,
)
from drivers.grove import anchor_hashes, foreign_edits_patch, restore_patch
from workflows.rollout import steps, views
from workflows.rollout.state import RECENT_STEPS, Move, RolloutState

T0 = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
PCS = PCSRef(namespace="default", name="p")
ORIGINAL = {"router": "r1", "worker": "w1"}
TARGETS = {"router": "r1", "worker": "w2"}
POLICY = RolloutPolicy(step_deadline_seconds=600)
OPERATOR = OperatorRequest(requested_by="pytest", reason="test")


# -- the world -------------------------------------------------------------------------------------
def group(
    clique: str,
    pclq: str,
    pods: dict[str, int],
    *,
    ready: dict[str, int] | None = None,
    pcsg: str | None = None,
    j: int | None = None,
    terminating: int = 0,
) -> GroupState:
    return GroupState(
        pclq=pclq,
        clique=clique,
        min_replicas=1,
        expected=sum(pods.values()),
        pcsg=pcsg,
        pcsg_replica=j,
        pods=pods,
        ready=dict(pods) if ready is None else ready,
        terminating=terminating,
    )


def anchor(r: int, worker: dict[str, int] | None = None, router: str = "r1", **kw: Any) -> GangState:
    return GangState(
        name=f"p-{r}-a",
        replica=r,
        role="Anchor",
        epoch="e0",
        groups=(
            group("router", f"p-{r}-router", {router: 1}),
            group("worker", f"p-{r}-w-0-worker", worker or {"w1": 1}, pcsg=f"p-{r}-w", j=0, **kw),
        ),
    )


def tail(r: int, worker: dict[str, int] | None = None, **kw: Any) -> GangState:
    return GangState(
        name=f"p-{r}-t",
        replica=r,
        role="Tail",
        epoch="e1",
        groups=(group("worker", f"p-{r}-w-1-worker", worker or {"w1": 1}, pcsg=f"p-{r}-w", j=1, **kw),),
    )


def world(
    *gangs: GangState,
    generation: int = 2,
    observed: int | None = None,
    current: str = "h2",
    hashes: dict[str, str] = TARGETS,
    strategy: str = ON_DELETE,
    updated: int = 0,
    delay: float = 4 * 3600.0,
) -> PCSState:
    replicas = len({g.replica for g in gangs}) or 2
    summary = PCSSummary(
        namespace="default",
        name="p",
        generation=generation,
        observed_generation=generation if observed is None else observed,
        current_hash=current,
        update_strategy=strategy,
        replicas=replicas,
        clique_hashes=hashes,
        scaling_groups={f"p-{r}-w": 1 for r in range(replicas)},
        updated_replicas=updated,
        termination_delay_seconds=delay,
    )
    return PCSState(summary=summary, gangs=tuple(sorted(gangs, key=lambda g: g.name)))


def old_world(**kw: Any) -> PCSState:
    """Both replicas at the original version, the template already at the target."""
    return world(anchor(0), tail(0), anchor(1), tail(1), **kw)


def rolling(watched: PCSState | None, **fields: Any) -> RolloutState:
    """A rollout past its write: targets adopted at generation 2 (template hash h2, from h1)."""
    defaults: dict[str, Any] = {
        "original": dict(ORIGINAL),
        "targets": dict(TARGETS),
        "target_hash": "h2",
        "previous_hash": "h1",
        "generation": 2,
    }
    state = RolloutState(started_at=T0, written_at=T0, **(defaults | fields))
    state.watched = watched
    return state


def names(move: Move) -> list[str]:
    return [g.name for g in move.gangs]


# -- the watcher's changes -------------------------------------------------------------------------
def change(attempt: int, sequence: int, *gangs: GangState, full: bool = False, **kw: Any) -> PCSChange:
    return PCSChange(attempt=attempt, sequence=sequence, gangs=gangs, full=full, **kw)


def test_a_full_listing_replaces_the_view_and_a_delta_merges_into_it() -> None:
    state = rolling(None)
    first = old_world()
    assert state.apply(change(1, 1, *first.gangs, full=True, summary=first.summary))
    assert state.watched == first
    # a delta: one PodGang changed, one gone, no summary (the summary did not change)
    rolled = anchor(0, {"w2": 1})
    assert state.apply(change(1, 2, rolled, removed=("p-1-t",)))
    assert state.watched is not None
    assert [g.name for g in state.watched.gangs] == ["p-0-a", "p-0-t", "p-1-a"]
    assert state.watched.gang("p-0-a") == rolled
    assert state.watched.summary == first.summary


def test_an_older_change_is_dropped() -> None:
    state = rolling(None)
    first = old_world()
    state.apply(change(1, 5, *first.gangs, full=True, summary=first.summary))
    late = change(1, 4, anchor(0, {"w2": 1}))
    assert not state.apply(late)
    assert state.watched == first and state.watched_at == (1, 5)


def test_a_new_attempts_delta_waits_for_its_full_listing() -> None:
    state = rolling(None)
    first = old_world()
    state.apply(change(1, 5, *first.gangs, full=True, summary=first.summary))
    # attempt 2 retried the watcher: its delta came before its full listing
    assert not state.apply(change(2, 2, anchor(0, {"w2": 1})))
    assert state.watched == first
    listing = world(anchor(0, {"w2": 1}), tail(0))
    assert state.apply(change(2, 1, *listing.gangs, full=True, summary=listing.summary))
    assert state.watched == listing  # replaced whole: replica 1 is gone from the view
    assert state.apply(change(2, 2, tail(0, {"w2": 1})))
    assert state.watched is not None and state.watched.gang("p-0-t") == tail(0, {"w2": 1})


# -- the first read -------------------------------------------------------------------------------------
def test_the_first_read_refuses_what_the_rollout_cannot_drive() -> None:
    images = {"worker": "registry.local/w:2"}
    assert RolloutState.refusal(old_world(hashes=ORIGINAL), PCS, images, POLICY) is None
    gone = old_world().summary.model_copy(update={"exists": False})
    refused = RolloutState.refusal(PCSState(summary=gone), PCS, images, POLICY)
    assert refused == "no PodCliqueSet default/p (check the namespace and the name)"
    grove_rolls = RolloutState.refusal(old_world(strategy="RollingRecreate"), PCS, images, POLICY)
    assert grove_rolls is not None and "a coherent rollout needs OnDelete" in grove_rolls
    router = {"router": "registry.local/r:2"}  # standalone: its one pod is in the anchor
    outage = RolloutState.refusal(old_world(hashes=ORIGINAL), PCS, router, POLICY)
    assert outage is not None and "--allow-replica-outage" in outage and "p-0-a:" in outage
    allowed = POLICY.model_copy(update={"allow_replica_outage": True})
    assert RolloutState.refusal(old_world(hashes=ORIGINAL), PCS, router, allowed) is None


def test_before_the_first_write_the_template_is_the_original() -> None:
    state = RolloutState(started_at=T0, written_at=T0)
    state.prepare(old_world(hashes=ORIGINAL, current="h1"))
    assert state.original == ORIGINAL and state.previous_hash == "h1" and state.targets == {}


# -- the template ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("seen", "foreign"),
    [
        (old_world(generation=3, current="h3"), True),  # edited, observed, another hash
        (old_world(generation=2, current="h3"), False),  # the generation the rollout wrote
        (old_world(generation=3, observed=2, current="h3"), False),  # Grove has not observed it
        (old_world(generation=3, current="h2"), False),  # a scale: the template is the target
    ],
    ids=["edited", "ours", "not-observed", "scaled"],
)
def test_a_foreign_edit_is_a_newer_observed_generation_with_another_template(
    seen: PCSState, foreign: bool
) -> None:
    assert rolling(seen).foreign() is foreign


def test_before_its_first_write_nothing_is_foreign() -> None:
    state = rolling(old_world(generation=3, current="h3"), target_hash="")
    assert not state.foreign()


def test_a_scale_by_someone_else_is_adopted_once_grove_observed_it() -> None:
    seen = old_world(generation=3, observed=2)
    state = rolling(seen)
    assert state.written_by_someone_else(seen) and not state.spec_observed()
    state.adopt_scale_by_someone_else()
    assert state.generation == 2  # not observed yet: it may still be an edit
    state.watched = old_world(generation=3)
    assert state.spec_observed() and not state.foreign()
    state.adopt_scale_by_someone_else()
    assert state.generation == 3 and not state.written_by_someone_else(state.watched)


def test_a_write_is_adopted_once_grove_relabelled_every_clique_written() -> None:
    state = rolling(old_world(generation=2, hashes=ORIGINAL, current="h1"), targets={}, target_hash="")
    written = TemplateResult(
        generation=3, changed=(FieldChange(path="worker/main", before="img:1", after="img:2"),)
    )
    before = state.rolled_to()
    assert before == ORIGINAL
    state.wrote(written, T0 + timedelta(seconds=1))
    assert state.generation == 3 and state.written_at == T0 + timedelta(seconds=1)
    assert not state.adopted(written, before)  # generation 3 not observed
    state.watched = old_world(generation=3, hashes=ORIGINAL, current="h1")
    assert not state.adopted(written, before)  # observed, but the workers' PodClique keeps w1
    state.watched = old_world(generation=3, hashes=TARGETS, current="h2")
    assert state.adopted(written, before)
    state.adopt_targets()
    assert state.targets == TARGETS and state.target_hash == "h2" and state.original == ORIGINAL


def test_resume_after_a_foreign_edit_adopts_the_template_as_it_is() -> None:
    state = rolling(old_world(generation=3, current="h3", hashes={"router": "r1", "worker": "w3"}))
    edit = TemplateChange(generation=3, fields=("labels",), managers=("kubectl",), template={"x": 1})
    state.adopt_edit(edit, T0 + timedelta(minutes=1))
    assert state.generation == 3 and state.written == {"x": 1}
    assert state.targets == {"router": "r1", "worker": "w3"} and state.target_hash == "h3"
    assert state.original == ORIGINAL and not state.foreign()


def test_a_foreign_edit_names_the_first_fields_and_who() -> None:
    edit = TemplateChange(generation=3, fields=tuple(f"f{i}" for i in range(7)), managers=())
    reason = RolloutState.foreign_edit_reason(edit)
    assert "f0, f1, f2, f3, f4 and 2 more" in reason and "f5" not in reason
    assert "an unknown writer" in reason


def test_a_superseding_write_keeps_each_fields_first_before() -> None:
    state = rolling(old_world(), fields=(FieldChange(path="worker/main", before="img:1", after="img:2"),))
    state.supersede_fields(
        (
            FieldChange(path="worker/main", before="img:2", after="img:3"),
            FieldChange(path="router/main", before="r:1", after="r:2"),
        )
    )
    assert state.fields == (
        FieldChange(path="worker/main", before="img:1", after="img:3"),
        FieldChange(path="router/main", before="r:1", after="r:2"),
    )


# -- safe points -----------------------------------------------------------------------------------
def test_an_abort_or_rollback_interrupts_until_it_is_acted_on() -> None:
    state = rolling(old_world())
    assert not state.interrupting(aborting=False)
    assert state.interrupting(aborting=True)
    state.reverting_for_abort = True
    assert not state.interrupting(aborting=True)
    state.rollback_request = OPERATOR
    assert state.interrupting(aborting=False)
    state.begin_rollback()
    assert state.rolling_back and state.rollback_request is None and not state.interrupting(aborting=False)


def test_a_foreign_edit_cuts_a_wait_short_too() -> None:
    assert not rolling(old_world()).cut_short(aborting=False)
    assert rolling(old_world(generation=3, current="h3")).cut_short(aborting=False)


def test_gone() -> None:
    assert rolling(None).gone()
    gone = old_world()
    assert rolling(
        gone.model_copy(update={"summary": gone.summary.model_copy(update={"exists": False})})
    ).gone()
    assert not rolling(old_world()).gone()


# -- a switch away from OnDelete (BEHAVIOUR.md U6: Grove rolls none of the rest) ------------------------
SWITCHED = TemplateChange(
    generation=3,
    fields=(),
    managers=(),
    strategy="RollingRecreate",
    strategy_set_by=("kubectl-patch (Update at 2026-11-28T12:05:00Z)",),
)


def half_rolled(**kw: Any) -> PCSState:
    """Replica 0 at the target, replica 1 at the original."""
    return world(anchor(0, {"w2": 1}), tail(0, {"w2": 1}), anchor(1), tail(1), **kw)


def test_off_on_delete_with_podgangs_behind_the_rollout_stops_and_never_claims_a_hand_over() -> None:
    state = rolling(half_rolled(strategy="RollingRecreate", generation=3))
    assert state.left_on_delete() and state.stops_off_on_delete(aborting=False)
    assert not rolling(half_rolled()).stops_off_on_delete(aborting=False)  # OnDelete: it drives on
    reason = views.off_on_delete_reason(state, SWITCHED, PCS)
    assert "left OnDelete: updateStrategy RollingRecreate, set by kubectl-patch (Update at" in reason
    assert "stays on two versions: 2 of 4 PodGangs at h2, 2 at the version before" in reason
    assert "Grove does not roll the rest" in reason
    assert (
        "`metalflow rollout resume default/p`" in reason and "`metalflow rollout abort default/p`" in reason
    )
    assert """patch pcs p --type=merge -p '{"spec":{"updateStrategy":{"type":"OnDelete"}}}'""" in reason
    unknown = views.off_on_delete_reason(state, SWITCHED.model_copy(update={"strategy_set_by": ()}), PCS)
    assert "set by an unknown writer (no managedFields entry)" in unknown
    left = views.left_as_is(state, SWITCHED)
    assert "nothing was taken back" in left and "2 of 4 PodGangs at h2, 2 at the version before" in left
    state.reverting_for_abort = True
    assert "nothing more is taken back" in views.left_as_is(state, SWITCHED)


def test_off_on_delete_resume_rollback_and_supersede_are_refused_until_it_is_on_delete_again() -> None:
    state = rolling(half_rolled(strategy="RollingRecreate"))
    for kind in ("resume", "rollback", "supersede"):
        refusal = views.off_on_delete_refusal(state, kind)
        assert refusal is not None and refusal.startswith(f"`{kind}`: the PodCliqueSet is on updateStrategy")
        assert "switch it back to OnDelete first" in refusal
    assert views.off_on_delete_refusal(rolling(half_rolled()), "resume") is None


def test_off_on_delete_the_guard_heals_nothing() -> None:
    mixed = world(anchor(0, {"w1": 1, "w2": 1}), tail(0), anchor(1), tail(1), strategy="RollingRecreate")
    assert rolling(mixed).to_heal() == []
    assert rolling(mixed).stops_off_on_delete(aborting=False)  # a mixed PodGang is work left too
    on_delete = mixed.model_copy(
        update={"summary": mixed.summary.model_copy(update={"update_strategy": ON_DELETE})}
    )
    assert [g.name for g in rolling(on_delete).to_heal()] == ["p-0-a"]


def test_off_on_delete_with_every_podgang_at_the_target_the_run_ends_unless_it_would_write() -> None:
    done = world(
        anchor(0, {"w2": 1}),
        tail(0, {"w2": 1}),
        anchor(1, {"w2": 1}),
        tail(1, {"w2": 1}),
        strategy="RollingRecreate",
    )
    state = rolling(done)
    assert not state.stops_off_on_delete(aborting=False)  # nothing left to roll: it completes
    assert state.stops_off_on_delete(aborting=True)  # an abort's take-back would write the template
    state.rollback_request = OPERATOR
    assert state.stops_off_on_delete(aborting=False)  # so would a rollback's restore
    superseding = rolling(done)
    superseding.supersede = SupersedeRequest(requested_by="pytest", images={"worker": "w:3"})
    assert superseding.stops_off_on_delete(aborting=False)
    unpatched = rolling(
        done.model_copy(update={"summary": done.summary.model_copy(update={"clique_hashes": ORIGINAL})})
    )
    assert unpatched.stops_off_on_delete(aborting=False)  # a pod deleted would come back at w1


def test_versions_held_counts_podgangs_at_the_targets_at_a_version_before_and_neither() -> None:
    state = world(anchor(0, {"w2": 1}), tail(0, {"w1": 1, "w2": 1}), anchor(1), tail(1))
    assert steps.versions_held(state, TARGETS, [ORIGINAL]) == (1, 2, 1)


def test_continue_as_new_waits_for_the_steps_in_flight() -> None:
    state = rolling(old_world())
    limit = POLICY.history_limit
    assert not state.continue_as_new_due(limit, False, POLICY)
    assert state.continue_as_new_due(limit + 1, False, POLICY)
    assert state.continue_as_new_due(10, True, POLICY)
    state.in_flight[0] = "p-0-a"
    assert not state.continue_as_new_due(limit + 1, True, POLICY)


def test_a_steps_deadline_is_at_most_half_the_termination_delay() -> None:
    assert rolling(old_world(delay=600)).deadline(POLICY) == 300
    assert rolling(old_world(delay=3600)).deadline(POLICY) == 600
    assert rolling(None).deadline(RolloutPolicy(step_deadline_seconds=30)) == 30


# -- what to roll next -----------------------------------------------------------------------------
def test_anchors_before_tails_one_podgang_per_replica() -> None:
    state = rolling(old_world())
    assert state.next_move(POLICY) == Move("roll", (anchor(0),))
    two = POLICY.model_copy(update={"replica_concurrency": 2})
    assert names(state.next_move(two)) == ["p-0-a", "p-1-a"]
    state.watched = world(anchor(0, {"w2": 1}), tail(0), anchor(1), tail(1))
    assert names(state.next_move(two)) == ["p-0-t", "p-1-a"]


def test_a_podgang_grove_mixed_is_repaired_before_any_step() -> None:
    mixed = anchor(1, {"w1": 1, "w2": 1})  # Grove replaced one of its two workers at the template
    state = rolling(world(anchor(0), tail(0), mixed, tail(1)))
    assert state.next_move(POLICY) == Move("repair", (mixed,))
    state.in_flight[1] = "p-1-a"  # its replica's own step in flight: that step makes it whole
    assert state.next_move(POLICY) == Move("roll", (anchor(0),))


def test_an_interrupted_step_is_taken_up_first_in_its_replica_until_its_pods_settled() -> None:
    # A rollback cut replica 0's tail step short: its new pods are coming up, not Ready yet.
    coming = tail(0, {"w2": 1}, ready={})
    state = rolling(
        world(anchor(0, {"w2": 1}), coming, anchor(1), tail(1), hashes=ORIGINAL),
        rolling_back=True,
        targets=dict(ORIGINAL),
        earlier=[dict(TARGETS)],
        in_flight={0: "p-0-t"},
        interrupted={"p-0-t"},
    )
    assert state.next_move(POLICY) == Move("rollback", (coming,))  # before its replica's anchor
    state.watched = world(anchor(0, {"w2": 1}), tail(0, {"w2": 1}), anchor(1), tail(1), hashes=ORIGINAL)
    assert names(state.next_move(POLICY)) == ["p-0-a"] and state.interrupted == set()


def test_a_step_that_breaks_a_min_available_waits_unless_an_outage_is_allowed() -> None:
    changed = {"router": "r2", "worker": "w1"}  # the router: standalone, its one pod in the anchor
    state = rolling(world(anchor(0), tail(0), anchor(1), tail(1), hashes=changed), targets=dict(changed))
    move = state.next_move(POLICY)
    assert move.kind == "wait" and not move.gangs
    assert move.reason.startswith("p-0-a: PodClique p-0-router would keep 0 Ready pods of minAvailable 1")
    allowed = POLICY.model_copy(update={"allow_replica_outage": True})
    assert state.next_move(allowed) == Move("roll", (anchor(0),))


def test_a_rollback_targets_the_recorded_original_and_announces_it_at_once() -> None:
    # The template holds a foreign edit of the workers (w3): the rollback's targets are still
    # the recorded originals, never the template's hashes, and the status says so at once.
    state = rolling(old_world(hashes={"router": "r1", "worker": "w3"}, current="h3"))
    state.begin_rollback()
    assert state.targets == ORIGINAL and state.earlier == [TARGETS]
    assert views.status(state, PCS, "rolling-back").target_hash == "h1" == state.previous_hash
    state.begin_rollback()  # again (a restore made again): what it turned from stays
    assert state.earlier == [TARGETS]


def test_a_rollback_waits_until_every_clique_carries_its_original_hash() -> None:
    state = rolling(old_world(hashes={"router": "r1", "worker": "w3"}, generation=3))
    state.begin_rollback()
    written = TemplateResult(generation=3, dormant={"worker": {"name": "worker", "labels": {"a": "b"}}})
    state.restoring(written)
    assert not state.restored(written)
    assert "worker w3 (original w1)" in state.not_restored()
    state.watched = old_world(hashes=dict(ORIGINAL), generation=3)
    assert state.restored(written)
    assert state.dormant_due()
    state.dormant_back = True
    assert not state.dormant_due()
    assert views.result(state, PCS, "rolled-back", T0).dormant == ("worker",)


def test_rolling_back_rolls_back_and_nothing_left_is_verified() -> None:
    state = rolling(old_world(hashes=dict(ORIGINAL)), rolling_back=True, targets=dict(ORIGINAL))
    state.watched = world(
        anchor(0, {"w2": 1}), tail(0, {"w2": 1}), anchor(1, {"w2": 1}), tail(1, {"w2": 1}), hashes=ORIGINAL
    )
    state.earlier = [dict(TARGETS)]
    assert state.next_move(POLICY) == Move("rollback", (anchor(0, {"w2": 1}),))
    state.watched = old_world(hashes=dict(ORIGINAL))
    assert state.next_move(POLICY) == Move("verify")
    assert state.outcome() == "rolled-back" and not state.agreed()
    state.watched = world(*state.watched.gangs, updated=2, hashes=ORIGINAL)
    assert state.agreed()


def test_a_step_waits_until_grove_patched_the_podcliques_to_the_targets() -> None:
    # The rollback's restore is written, Grove has not relabelled the PodCliques yet: a pod
    # deleted now would come back at the version being left, so nothing is deleted.
    state = rolling(world(anchor(0, {"w2": 1}), tail(0), anchor(1), tail(1)))
    state.begin_rollback()
    state.generation = 3
    assert state.next_move(POLICY).kind == "settle" and not state.in_force()
    state.watched = world(anchor(0, {"w2": 1}), tail(0), anchor(1), tail(1), hashes=ORIGINAL, generation=3)
    assert state.in_force() and state.next_move(POLICY) == Move("rollback", (anchor(0, {"w2": 1}),))


def test_rolling_back_a_podgang_at_the_abandoned_version_is_an_ordinary_step() -> None:
    # A PodGang whole at the version the rollback turned from is the rollout's own: it goes back
    # by an ordinary step (serving peers and the outage check), never as a repair, which would
    # skip both and could take a replica below minAvailable without --allow-replica-outage.
    state = rolling(world(anchor(0, {"w2": 1}), tail(0), anchor(1), tail(1), hashes=dict(ORIGINAL)))
    state.begin_rollback()
    assert state.next_move(POLICY) == Move("rollback", (anchor(0, {"w2": 1}),))
    changed = {"router": "r2", "worker": "w1"}  # the router (standalone): going back is an outage
    state = rolling(
        world(anchor(0, router="r2"), tail(0), anchor(1), tail(1), hashes=dict(ORIGINAL)), targets=changed
    )
    state.begin_rollback()
    move = state.next_move(POLICY)
    assert move.kind == "wait" and "p-0-router would keep 0 Ready pods" in move.reason


def test_a_step_waits_on_the_podgangs_that_do_not_serve_and_requires_its_peers() -> None:
    down = tail(1, ready={})
    state = rolling(world(anchor(0), tail(0), anchor(1), down))
    assert state.sick({"p-0-a"}) == ["p-1-t"]
    assert state.sick({"p-1-t"}) == []
    assert state.serving_peers(anchor(0)) == ("p-0-t",)
    assert state.serving_peers(anchor(1)) == ()  # its tail does not serve: not required


# -- a step's bookkeeping --------------------------------------------------------------------------
def test_a_step_is_done_when_its_podgangs_are_whole_at_the_target_and_ready_or_gone() -> None:
    state = rolling(world(anchor(0), tail(0)))
    records = state.begin_steps((anchor(0),), "roll", T0)
    assert not state.finished(records)
    state.watched = world(anchor(0, {"w2": 1}, ready={}), tail(0))
    assert not state.finished(records)  # not Ready
    state.watched = world(anchor(0, {"w2": 1}, terminating=1), tail(0))
    assert not state.finished(records)  # an old pod still going
    state.watched = world(anchor(0, {"w2": 1}), tail(0))
    assert state.finished(records)
    state.watched = world(tail(0))
    assert state.finished(records)  # gone (scaled in)
    assert state.late(records) == ["p-0-a"]


def test_steps_are_counted_when_done_and_interrupted_when_late() -> None:
    state = rolling(world(anchor(0), tail(0), anchor(1), tail(1)), interrupted={"p-1-a"})
    records = state.begin_steps((anchor(0), anchor(1)), "roll", T0)
    assert state.in_flight == {0: "p-0-a", 1: "p-1-a"}
    assert records["p-0-a"] == StepRecord(
        replica=0, podgangs=("p-0-a",), role="Anchor", target_hash="h2", started_at=T0
    )
    state.rolled(records, anchor(0), RollGangResult(deleted=("pod-a",)))
    state.rolled(records, anchor(1), RollGangResult(blocked_by=("p-1-t",)))  # a peer stopped serving
    assert list(records) == ["p-0-a"] and records["p-0-a"].deleted == ("pod-a",)
    assert state.in_flight == {0: "p-0-a"}
    state.deletions_done(records, "roll")
    assert state.interrupted == {"p-1-a"} and state.repairs == 0
    state.end_steps(records, ok=False, now=T0 + timedelta(minutes=10))
    assert state.interrupted == {"p-1-a", "p-0-a"} and state.in_flight == {0: "p-0-a"}
    assert state.steps_done == 0 and state.steps == []
    records = state.begin_steps((anchor(0),), "roll", T0 + timedelta(minutes=11))
    state.deletions_done(records, "roll")
    assert state.interrupted == {"p-1-a"}
    state.end_steps(records, ok=True, now=T0 + timedelta(minutes=12))
    assert state.in_flight == {} and state.steps_done == 1
    assert state.steps[0].finished_at == T0 + timedelta(minutes=12) and state.steps[0].seconds == 60


def test_a_repair_counts_as_one_and_only_the_latest_steps_are_kept() -> None:
    state = rolling(old_world())
    for i in range(RECENT_STEPS + 5):
        records = state.begin_steps((anchor(0),), "repair", T0 + timedelta(seconds=i))
        state.deletions_done(records, "repair")
        state.end_steps(records, ok=True, now=T0 + timedelta(seconds=i + 1))
    assert state.repairs == state.steps_done == RECENT_STEPS + 5
    assert len(state.steps) == RECENT_STEPS
    assert state.steps[-1].started_at == T0 + timedelta(seconds=RECENT_STEPS + 4)
    assert {s.kind for s in state.steps} == {"repair"}


# -- healing while paused --------------------------------------------------------------------------
def test_the_guard_heals_the_first_mixed_podgang_of_each_replica() -> None:
    state = rolling(world(anchor(0, {"w1": 1, "w2": 1}), tail(0, {"w1": 1, "w2": 1}), anchor(1), tail(1)))
    assert [g.name for g in state.to_heal()] == ["p-0-a"]
    state.watched = world(anchor(0, {"w1": 1, "w2": 1}), tail(0), anchor(1), tail(1, {"w1": 1, "w2": 1}))
    assert [g.name for g in state.to_heal()] == ["p-0-a", "p-1-t"]


def test_the_guard_waits_until_grove_observed_the_spec() -> None:
    state = rolling(world(anchor(0, {"w1": 1, "w2": 1}), tail(0), generation=3, observed=2))
    assert state.to_heal() == []


def test_the_guard_never_heals_onto_an_edit_the_rollout_did_not_make() -> None:
    # A foreign edit moved the workers' template to w3 (paused on it): a pod Grove replaced
    # comes back at w3. Healing would roll w3 onto the PodGang's other pods, so the guard
    # leaves it as Grove made it, until the operator decides; the router is still healed.
    edited = {"router": "r1", "worker": "w3"}
    state = rolling(world(anchor(0, {"w3": 1}), tail(0, {"w3": 1, "w1": 1}), hashes=edited, current="h3"))
    assert state.heal_targets() == {"router": "r1"}
    assert state.to_heal() == []
    assert not steps.mixed(anchor(0, {"w3": 1}), state.guard_versions())  # whole at the template's
    ours = rolling(world(anchor(0, {"w1": 1, "w2": 1}), tail(0)))  # the template at the target: ours
    assert ours.heal_targets() == TARGETS and [g.name for g in ours.to_heal()] == ["p-0-a"]


def test_a_heal_is_over_once_unmixed_or_when_it_deleted_nothing_and_the_view_moved() -> None:
    mixed = world(anchor(0, {"w1": 1, "w2": 1}), tail(0))
    state = rolling(mixed)
    assert not state.healed({"p-0-a"}, 1, mixed)
    assert not state.healed({"p-0-a"}, 0, mixed)  # nothing deleted, nothing seen since
    state.watched = world(anchor(0, {"w1": 1, "w2": 1}), tail(0, {"w2": 1}))
    assert not state.healed({"p-0-a"}, 1, mixed)  # it deleted: wait until it is whole
    assert state.healed({"p-0-a"}, 0, mixed)
    state.watched = world(anchor(0, {"w2": 2}), tail(0))
    assert state.healed({"p-0-a"}, 1, mixed)


# -- what it shows ---------------------------------------------------------------------------------
def test_the_status_shows_the_steps_in_flight_progress_and_requests() -> None:
    state = rolling(
        world(anchor(0, {"w2": 1}), tail(0), anchor(1), tail(1), updated=1),
        paused_reason="lunch",
        scale=ScaleRequest(requested_by="pytest", replicas=3),
        in_flight={1: "p-1-a", 0: "p-0-t"},
        runs=2,
    )
    status = views.status(state, PCS, "paused")
    assert (status.pcs, status.phase, status.paused_reason) == (PCS, "paused", "lunch")
    assert status.replicas == (0, 1) and status.in_flight == ("p-0-t", "p-1-a")
    assert (status.done, status.total) == (1, 4)
    assert status.pending_scale == 3 and status.updated_replicas == 1 and status.runs == 2
    assert (status.target_hash, status.previous_hash) == ("h2", "h1")


def test_the_annotation_shows_where_the_rollout_is() -> None:
    state = rolling(world(anchor(0, {"w2": 1}), tail(0), anchor(1), tail(1)), in_flight={0: "p-0-t"})
    shown = views.progress(state, PCS, "rollout/default/p", "rolling", ended=False)
    assert (shown.pcs, shown.workflow_id, shown.phase, shown.ended) == (
        PCS,
        "rollout/default/p",
        "rolling",
        False,
    )
    assert (shown.replicas, shown.in_flight, shown.done, shown.total) == ((0,), ("p-0-t",), 1, 4)
    assert shown.started_at == T0
    assert views.progress(state, PCS, "rollout/default/p", "aborted", ended=True).ended


def test_what_an_early_end_leaves_behind() -> None:
    assert views.left_behind(rolling(None, fields=())) == "The template was not changed"
    state = rolling(
        world(anchor(0, {"w2": 1}), tail(0), anchor(1), tail(1)),
        fields=(FieldChange(path="worker/main", before="img:1", after="img:2"),),
        steps_done=1,
    )
    assert views.left_behind(state) == "1 of 4 PodGangs at h2 after 1 step; worker/main set by the rollout"
    state.dormant = {"router": {"name": "router", "labels": {"team": "kv"}}}
    assert views.left_behind(state).endswith(
        "; the edits of cliques router by someone else were taken out and not put back "
        "(the PodCliqueSet's annotation metalflow.io/rollout-dormant records them)"
    )


# -- carried across continue-as-new ----------------------------------------------------------------------
def test_the_state_is_the_continue_as_new_input_and_what_is_one_runs_stays_behind() -> None:
    state = rolling(
        old_world(),
        fields=(FieldChange(path="worker/main", before="img:1", after="img:2"),),
        interrupted={f"p-{r}-t" for r in range(6)},  # a set: six names, so its order is rarely sorted
        steps_done=3,
        reverting_for_abort=True,
        aborting=OPERATOR,
        scale=ScaleRequest(requested_by="pytest", replicas=3),
    )
    state.watched_at = (3, 40)
    request = RolloutInput(pcs=PCS, images={"worker": "registry.local/w:2"}, requested_by="pytest")
    carried = request.model_copy(update={"state": state})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a subclass serialized as its data model warns nothing
        (payload,) = DATA_CONVERTER.payload_converter.to_payloads([carried])
        (back,) = DATA_CONVERTER.payload_converter.from_payloads([payload], [RolloutInput])
    for one_runs in (b'"watched"', b'"watched_at"'):
        assert one_runs not in payload.data
    assert b'"interrupted":["p-0-t","p-1-t","p-2-t","p-3-t","p-4-t","p-5-t"]' in payload.data
    assert isinstance(back, RolloutInput) and back.state is not None
    resumed = RolloutState.resumed(back.state)
    assert resumed.runs == 2 and resumed.watched is None and resumed.watched_at == (-1, -1)
    expected = state.model_dump(exclude={"runs"})
    assert resumed.model_dump(exclude={"runs"}) == expected


def test_a_newer_workers_state_loads() -> None:
    data = rolling(old_world()).model_dump(mode="json") | {"a_field_of_a_newer_build": 1}
    request = RolloutInput.model_validate(
        {
            "pcs": PCS.model_dump(),
            "images": {"worker": "registry.local/w:2"},
            "requested_by": "x",
            "state": data,
        }
    )
    assert request.state is not None and request.state.targets == TARGETS


# -- how an early end is named -------------------------------------------------------------------------
def test_the_rollouts_own_abort_ends_aborted_and_anything_else_failed() -> None:
    from workflows import kernel
    from workflows.rollout.workflow import RolloutWorkflow

    own = RolloutWorkflow.ABORTED_ERROR.__name__
    aborted = RolloutAborted("rollout of default/p aborted by pytest; every PodGang back at h1")
    assert kernel.ending(aborted, own) == ("aborted", aborted.message)
    assert kernel.ending(PodCliqueSetGone("PodCliqueSet default/p was deleted"), own)[0] == "failed"


# -- the restore's template writes (drivers.grove, pure) ------------------------------------------------
def _pcs(cliques: list[dict[str, Any]], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "default", "name": "p", "generation": 3, "annotations": annotations or {}},
        "spec": {"updateStrategy": {"type": ON_DELETE}, "template": {"cliques": cliques}},
    }


def _clique(name: str, image: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, **extra, "spec": {"podSpec": {"containers": [{"name": "main", "image": image}]}}}


def test_the_restore_writes_the_original_and_keeps_someone_elses_edits_for_later() -> None:
    original = (_clique("router", "r:1"), _clique("worker", "w:1"))
    ours = (FieldChange(path="worker/main", before="w:1", after="w:2"),)
    # someone labelled the router and set the worker's image over ours
    now = _pcs([_clique("router", "r:1", labels={"team": "kv"}), _clique("worker", "w:3")])
    patch, back, overwritten, dormant = restore_patch(now, ours, original)
    assert patch is not None and patch["spec"]["template"]["cliques"] == list(original)
    assert back == list(ours) and overwritten == [
        "worker/main ('w:3', set by someone else, put back to 'w:1')"
    ]
    assert dormant == {"router": _clique("router", "r:1", labels={"team": "kv"})}  # ours wins on worker
    recorded = json.loads(patch["metadata"]["annotations"][ROLLOUT_DORMANT_ANNOTATION])
    assert recorded == dormant
    # retried after it was written: the annotation still tells what was taken out
    written = _pcs(list(original), {ROLLOUT_DORMANT_ANNOTATION: json.dumps(recorded)})
    assert restore_patch(written, ours, original)[0] is None
    assert restore_patch(written, ours, original)[3] == dormant
    # edited again after the restore (an image of the router): both edits are kept
    again = _pcs([_clique("router", "r:5"), original[1]], {ROLLOUT_DORMANT_ANNOTATION: json.dumps(recorded)})
    assert restore_patch(again, ours, original)[3] == {
        "router": _clique("router", "r:5", labels={"team": "kv"})
    }


def test_someone_elses_edits_go_back_only_where_the_original_still_is() -> None:
    original = (_clique("router", "r:1"), _clique("worker", "w:1"))
    dormant = {"router": _clique("router", "r:1", labels={"team": "kv"}), "worker": _clique("worker", "w:9")}
    now = _pcs([original[0], _clique("worker", "w:4")], {ROLLOUT_DORMANT_ANNOTATION: "{}"})
    patch, put, left = foreign_edits_patch(now, dormant, original)
    assert patch is not None and patch["spec"]["template"]["cliques"] == [
        dormant["router"],
        _clique("worker", "w:4"),
    ]
    assert patch["metadata"]["annotations"] == {ROLLOUT_DORMANT_ANNOTATION: None}
    assert (put, left) == (["router"], ["worker"])
    assert (
        foreign_edits_patch(_pcs([dormant["router"], original[1]]), {"router": dormant["router"]}, original)[
            0
        ]
        is None
    )


# -- a gated scale-out (BEHAVIOUR.md G5) ----------------------------------------------------------------
def test_a_template_off_the_podgangmaps_anchor_hash_warns_that_a_scale_out_stays_gated() -> None:
    state = rolling(old_world(), anchor_hashes={0: "h1", 1: "h1"})
    (warning,) = views.gated_scale_out(state, PCS, "h2")
    assert "a scale-out of the scaling groups of default/p stays gated in replica(s) 0, 1" in warning
    assert 'dependsOn [""]' in warning and "`kubectl -n default edit podgangmap p-0 p-1`" in warning
    assert views.gated_scale_out(state, PCS, "h1") == ()  # back at the anchor's hash: not gated
    out = GangState(
        name="p-0-so-w-2",
        replica=0,
        role="ScaleOut",
        groups=(
            group("worker", "p-0-w-2-worker", {"w2": 2}, pcsg="p-0-w", j=2).model_copy(update={"gated": 2}),
        ),
    )
    scaled = rolling(world(*old_world().gangs, out), anchor_hashes={0: "h1", 1: "h1"})
    (now,) = views.gated_scale_out(scaled, PCS, "h2")
    assert "stays gated in replica(s) 0, 1 (2 pods of ScaleOut PodGangs are gated by it now):" in now
    assert views.status(state, PCS, "rolling").warnings == (warning,)  # the template is at h2
    assert views.result(state, PCS, "completed", T0).warnings == (warning,)
    no_groups = old_world()
    no_groups = no_groups.model_copy(
        update={"summary": no_groups.summary.model_copy(update={"scaling_groups": {}})}
    )
    assert views.gated_scale_out(rolling(no_groups, anchor_hashes={0: "h1"}), PCS, "h2") == ()


def test_the_first_read_keeps_each_replicas_anchor_hash() -> None:
    maps = [
        {
            "spec": {
                "podCliqueSetReplicaIndex": r,
                "entries": [
                    {"epoch": "1", "role": "Anchor", "anchorIndex": 0, "podCliqueSetGenerationHash": "h1"},
                    {"epoch": "3", "role": "ScaleOut", "podCliqueSetGenerationHash": "h2", "dependsOn": [""]},
                ],
            }
        }
        for r in (1, 0)
    ]
    assert anchor_hashes(maps) == {0: "h1", 1: "h1"}
    first = old_world(hashes=ORIGINAL)
    first = first.model_copy(
        update={"summary": first.summary.model_copy(update={"anchor_hashes": {0: "h1"}})}
    )
    state = RolloutState(started_at=T0, written_at=T0)
    state.prepare(first)
    assert state.anchor_hashes == {0: "h1"}


def test_the_plan_warns_before_a_rollout_leaves_a_gated_scale_out() -> None:
    from metalflow.rollouts import _gated_after

    first = old_world(hashes=ORIGINAL)
    first = first.model_copy(
        update={"summary": first.summary.model_copy(update={"anchor_hashes": {0: "h1", 1: "h1"}})}
    )
    (warning,) = _gated_after(first, PCS, {"worker"})
    assert warning.startswith(
        "after this rollout, a scale-out of the scaling groups of default/p stays gated"
    )
    assert _gated_after(first, PCS, set()) == ()  # nothing changes: nothing to warn of


def test_the_site_checks_degraded_words_lead_the_warnings_of_the_status_and_the_result() -> None:
    """Issue 36 deliver 4: a rollout the kept site check marks degraded runs and says so in its
    status (and so `rollout status` and the UI), across continue-as-new."""
    said = (
        "rollout is degraded on default/p by the site check of 2026-11-29T07:00:00Z",
        "no gang [grove K2]",
    )
    state = rolling(old_world(), site_check=said)
    assert views.status(state, PCS, "rolling").warnings[:2] == said
    assert views.result(state, PCS, "completed", T0).warnings[:2] == said
    assert RolloutState.resumed(state).site_check == said
    assert views.status(rolling(old_world()), PCS, "rolling").warnings == ()  # no check: nothing said
