"""What a rollout knows (`RolloutState`) and what it decides from it: pure, tested without a
server (`tests/fast/test_rollout_state.py`).

The runbook (`workflow.py`) asks, then acts: which change of the watcher to apply and how, whether
someone else edited the template, what to roll next, whether a step is done, which PodGang to
heal, what the run does now (what the status, the progress annotation and the result show of the
state is `views.py`'s). The rules over one `PCSState` (stale, done, serving, mixed, GREP order,
outages) are `steps.py`'s; this module adds what the run remembers between them: the targets, the
steps in flight and interrupted, the operator's requests.

No Temporal, no clock (`now` is an argument), no I/O, no randomness: the same calls give the same
answers on every replay. The data is `contracts.models.grove.RolloutStateData`, so the run
continues as new with the state itself as its input (what is one run's only is not carried).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal

from contracts.models.grove import (
    ON_DELETE,
    FieldChange,
    GangState,
    PCSChange,
    PCSRef,
    PCSState,
    RollGangResult,
    RolloutPolicy,
    RolloutStateData,
    StepRecord,
    TemplateChange,
    TemplateResult,
)
from workflows.rollout import steps

PREPARING: Final = "preparing"
ROLLING: Final = "rolling"
ROLLING_BACK: Final = "rolling-back"
PAUSED: Final = "paused"
COMPLETED: Final = "completed"
ROLLED_BACK: Final = "rolled-back"
ABORTED: Final = "aborted"
Outcome = Literal["completed", "rolled-back"]
"""How a run that ends as planned ends (its final phase, `RolloutResult.outcome`)."""

RECENT_STEPS: Final = 20
"""Steps kept in the status and carried across continue-as-new (`steps_done` counts them all)."""
FOREIGN_FIELDS_SHOWN: Final = 5
NO_DELAY: Final = 4 * 3600.0
"""Grove's default terminationDelay, while the PodCliqueSet is not known yet."""

StepKind = Literal["roll", "repair", "rollback"]
Doing = Literal["in-flight", "timer", "next", "paused", "ended"]
ENDED: Final = (COMPLETED, ROLLED_BACK, ABORTED, "failed", "cancelled")
"""The phases a run ends in."""


@dataclass(frozen=True)
class Move:
    """What the runbook does after a safe point: `repair` a PodGang Grove mixed, `roll` (or
    `rollback`) the next PodGangs, `wait` for an operator (`reason`: the step would break a
    minAvailable), `settle` (wait until Grove patched the PodCliques to the targets), or
    `verify` that Grove agrees every PodGang is at the target."""

    kind: Literal["repair", "roll", "rollback", "wait", "verify", "settle"]
    gangs: tuple[GangState, ...] = ()
    reason: str = ""


class RolloutState(RolloutStateData):
    """One rollout's state and its decisions; see the module docstring."""

    @classmethod
    def resumed(cls, carried: RolloutStateData) -> RolloutState:
        """The state a continued run starts from: the carried one, as the next run."""
        state = cls.model_validate(carried.model_dump())
        state.runs += 1
        return state

    # -- the watcher's changes -------------------------------------------------------------------
    def apply(self, change: PCSChange) -> bool:
        """Apply a change of the watcher, in (attempt, sequence) order; False when dropped.

        A change older than the last applied is dropped. A retried watcher attempt starts with a
        full listing, which replaces what is held; a delta of a new attempt that comes before
        that listing is dropped (it would apply to a view it was not computed from)."""
        at = (change.attempt, change.sequence)
        if at < self.watched_at:
            return False
        if change.attempt != self.watched_at[0] and not change.full:
            return False
        self.watched_at = at
        if change.full or self.watched is None:
            if change.summary is not None:
                self.watched = PCSState(summary=change.summary, gangs=change.gangs)
            return True
        gangs = {g.name: g for g in self.watched.gangs}
        for name in change.removed:
            gangs.pop(name, None)
        for g in change.gangs:
            gangs[g.name] = g
        self.watched = PCSState(
            summary=change.summary or self.watched.summary,
            gangs=tuple(sorted(gangs.values(), key=lambda g: g.name)),
        )
        return True

    # -- the first read --------------------------------------------------------------------------
    @staticmethod
    def refusal(
        first: PCSState, pcs: PCSRef, images: dict[str, str], policy: RolloutPolicy, superseding: bool = False
    ) -> str | None:
        """Why the first read refuses the rollout (None: it goes on): no such PodCliqueSet; a
        strategy other than OnDelete (Grove rolls it itself); a template holding an edit its pods
        do not run (`steps.dormant_refusal`: a rollout never rolls an edit it did not make; not
        asked of a superseding start, whose rollout in flight holds the template); a change that
        must take a replica below a minAvailable when the policy does not allow an outage."""
        s = first.summary
        if not s.exists:
            return f"no PodCliqueSet {pcs} (check the namespace and the name)"
        if s.update_strategy != ON_DELETE:
            return (
                f"PodCliqueSet {pcs} has updateStrategy {s.update_strategy}: Grove rolls it itself, so "
                "metalflow does not drive it (`metalflow rollout status` shows Grove's own progress); "
                "a coherent rollout needs OnDelete"
            )
        if not superseding and (dormant := steps.dormant_refusal(first, str(pcs), dict(images))):
            return dormant
        if not policy.allow_replica_outage:
            return steps.outage_refusal(first, str(pcs), dict(images))
        return None

    def prepare(self, first: PCSState) -> None:
        """Before the first write: the template's hashes and cliques are the originals (what a
        rollback and an abort restore); the version the pods of a rollout cut short still run is
        one of the rollout's own (a PodGang all at it is not mixed: it is rolled in GREP order)."""
        self.original = dict(first.summary.clique_hashes)
        self.previous_hash = first.summary.current_hash
        self.anchor_hashes = dict(first.summary.anchor_hashes)
        self.original_cliques = first.cliques
        behind = dict(self.original)  # a rollout cut short: its pods' version is no mix
        for g in (g for gang in first.gangs for g in gang.groups if g.clique in self.original):
            behind.update((g.clique, h) for h, n in g.pods.items() if n and h != self.original[g.clique])
        if behind != self.original:
            self.earlier.append(behind)

    # -- the template ----------------------------------------------------------------------------
    def observed(self, generation: int) -> bool:
        """Grove observed `generation` and the PodCliques carry every clique's hash."""
        s = self.watched
        return (
            s is not None
            and s.summary.observed_generation >= generation
            and bool(s.summary.current_hash)
            and bool(s.summary.clique_hashes)
            and set(s.summary.clique_hashes) >= set(self.original)
        )

    def foreign(self) -> bool:
        """The template changed and the rollout did not write it: a generation past the one it
        wrote or adopted, observed by Grove, with a template hash other than the target."""
        s = self.watched
        return (
            s is not None
            and s.summary.generation > self.generation
            and bool(self.target_hash)
            and s.summary.observed_generation >= s.summary.generation
            and s.summary.current_hash != self.target_hash
        )

    def overtaken(self) -> bool:
        """The watcher shows a spec generation past the rollout's last write or adoption:
        someone else wrote since (a template edit or a scale: `describe_template_change` tells)."""
        return self.watched is not None and self.watched.summary.generation > self.generation

    def written_by_someone_else(self, seen: PCSState) -> bool:
        """`seen` holds a spec generation the rollout neither wrote nor adopted (a template edit
        or a scale: which one is known once Grove observed it)."""
        return seen.summary.generation > self.generation

    def spec_observed(self) -> bool:
        """Grove observed the spec generation the watcher shows."""
        return self.watched is not None and self.observed(self.watched.summary.generation)

    def adopt_scale_by_someone_else(self) -> None:
        """A generation Grove observed whose template is the target (`foreign` is False): a scale
        by someone else; the rollout adopts it, so it is not taken for an edit later."""
        s = self.watched
        if s is not None and s.summary.generation > self.generation and self.observed(s.summary.generation):
            self.generation = s.summary.generation

    def rolled_to(self) -> dict[str, str]:
        """The hashes the rollout rolls to now (the originals before its first write)."""
        return dict(self.targets or self.original)

    def wrote(self, written: TemplateResult, now: datetime) -> None:
        """The rollout wrote the template (images set, superseded or put back)."""
        self.generation = max(self.generation, written.generation)
        self.written, self.written_at = dict(written.template), now

    def adopted(self, written: TemplateResult, before: dict[str, str]) -> bool:
        """Grove observed the write, and the PodCliques of every clique written carry a hash
        other than `before` (the PodCliqueSet's status and the PodCliques come on separate
        streams, so one is not proof of the other)."""
        s = self.watched
        moved = {f.path.partition("/")[0] for f in written.changed}
        return (
            self.observed(written.generation)
            and s is not None
            and all(s.summary.clique_hashes.get(c) not in (None, before.get(c)) for c in moved)
        )

    def adopt_targets(self) -> None:
        """The PodCliques' hashes, as Grove labels them now, are the targets (the ones before
        stay the rollout's own: `earlier`)."""
        assert self.watched is not None
        self._retarget(self.watched.summary.clique_hashes)
        self.target_hash = self.watched.summary.current_hash
        if not self.original:
            self.original = dict(self.targets)

    def adopt_edit(self, change: TemplateChange, now: datetime) -> None:
        """`resume` after a foreign edit: the template as it now is becomes the target."""
        self.generation = change.generation
        self.written, self.written_at = dict(change.template), now
        self.adopt_targets()

    def supersede_fields(self, changed: tuple[FieldChange, ...]) -> None:
        """The fields a superseding write changed join the rollout's; a field set twice keeps
        its first `before` (a rollback puts back what was there before the rollout)."""
        merged = {f.path: f for f in self.fields}
        for f in changed:
            merged[f.path] = f.model_copy(update={"before": merged[f.path].before}) if f.path in merged else f
        self.fields = tuple(merged.values())

    def begin_rollback(self) -> None:
        """The rollback (or an abort's take-back) begins: its targets are the recorded originals
        at once, never the template's hashes (which may hold an edit the rollout did not make),
        so the status announces where it ends; a PodGang at the targets it turns from is the
        rollout's own version, rolled back by ordinary steps (never a repair)."""
        self._retarget(self.original)
        self.rolling_back, self.rollback_request = True, None
        self.target_hash = self.previous_hash

    def _retarget(self, targets: dict[str, str]) -> None:
        """The targets change: the ones before join the rollout's earlier versions."""
        if self.targets and self.targets != targets and self.targets not in self.earlier:
            self.earlier.append(dict(self.targets))
        self.targets = dict(targets)

    def restoring(self, written: TemplateResult) -> None:
        """The restore write answered: the fields it put back over someone else's value, and the
        cliques someone else edited (put back, dormant, before the run ends)."""
        self.overwritten = tuple(dict.fromkeys((*self.overwritten, *written.overwritten)))
        self.dormant = dict(written.dormant)

    def restored(self, written: TemplateResult) -> bool:
        """Grove observed the restore, and every clique's PodCliques carry its original hash:
        a pod deleted now comes back at the original."""
        s = self.watched
        return (
            self.observed(written.generation)
            and s is not None
            and all(s.summary.clique_hashes.get(c) == h for c, h in self.original.items())
        )

    def not_restored(self) -> str:
        """Why the template's hashes are not the originals after the restore (for the pause)."""
        s = self.watched
        now = s.summary.clique_hashes if s else {}
        off = [
            f"{c} {now.get(c, '?')} (original {h})"
            for c, h in sorted(self.original.items())
            if now.get(c) != h
        ]
        return (
            f"after the restore the PodCliques carry {', '.join(off) or 'no hash yet'}: the template differs "
            "from the original outside its cliques, or Grove has not relabelled them; a pod deleted would "
            "not come back at the original, so the rollback waits"
        )

    def dormant_due(self) -> bool:
        """Every pod is back at the original and Grove agrees: the edits someone else made go back
        into the template now (dormant: no pod is deleted for them)."""
        return self.rolling_back and bool(self.dormant) and not self.dormant_back

    @staticmethod
    def foreign_edit_reason(change: TemplateChange) -> str:
        """Why a foreign edit pauses the rollout: the fields (the first few) and who wrote them."""
        who = ", ".join(change.managers) or "an unknown writer (no managedFields entry)"
        shown = change.fields[:FOREIGN_FIELDS_SHOWN]
        more = len(change.fields) - len(shown)
        fields = ", ".join(shown) + (f" and {more} more" if more > 0 else "")
        return f"the template was changed by someone else: {fields}; by {who}"

    # -- safe points -----------------------------------------------------------------------------
    def gone(self) -> bool:
        return self.watched is None or not self.watched.exists

    # -- a switch away from OnDelete (BEHAVIOUR.md U6) ---------------------------------------------
    def left_on_delete(self) -> bool:
        """Someone switched the PodCliqueSet off OnDelete. Grove then rolls nothing of it [U6]
        (its update ended under OnDelete; the strategy is not in the hash, so none starts)."""
        return self.watched is not None and self.watched.summary.update_strategy != ON_DELETE

    def stops_off_on_delete(self, aborting: bool) -> bool:
        """Off OnDelete, the rollout stops where it would drive: a PodGang (or a PodClique) not at
        the targets, or a template write it would make (someone else's edits put back, a restore,
        a superseding write), which Grove would roll itself. With nothing of that left, the run
        ends as it is (it completes, or ends its rollback)."""
        if not self.left_on_delete() or self.watched is None:
            return False
        at, before, neither = steps.versions_held(self.watched, self.targets, self.versions())
        return (
            bool(before or neither)
            or not self.in_force()
            or self.dormant_due()
            or self.interrupting(aborting)
            or self.supersede is not None
        )

    def interrupting(self, aborting: bool) -> bool:
        """An abort (`aborting`: the kernel's request) or a rollback asked for and not yet acted
        on: a wait ends at once, and the next safe point acts on it."""
        return (aborting and not self.reverting_for_abort) or (
            self.rollback_request is not None and not self.rolling_back
        )

    def cut_short(self, aborting: bool) -> bool:
        """What ends a step's wait early: an abort or rollback to act on, or a foreign edit."""
        return self.interrupting(aborting) or self.foreign()

    def continue_as_new_due(self, history_length: int, suggested: bool, policy: RolloutPolicy) -> bool:
        """No step in flight, and the history passed its limit (or the server suggests it)."""
        return not self.in_flight and (history_length > policy.history_limit or suggested)

    def deadline(self, policy: RolloutPolicy) -> float:
        """A step's deadline: the policy's, at most half the terminationDelay, so a step that
        holds a replica below minAvailable is stopped well before Grove gang-terminates it."""
        delay = self.watched.summary.termination_delay_seconds if self.watched else NO_DELAY
        return min(policy.step_deadline_seconds, delay / 2)

    # -- what to roll next -----------------------------------------------------------------------
    def versions(self) -> list[dict[str, str]]:
        """The versions a PodGang may hold without being mixed: the rollout's own (the original,
        the targets, and every target it rolled to before)."""
        return [self.original, self.targets, *self.earlier]

    def in_force(self) -> bool:
        """Grove observed the rollout's last write and its PodCliques carry every target: a pod
        deleted now comes back at its clique's target (else at what the PodClique still says)."""
        s = self.watched
        return (
            s is not None
            and s.summary.observed_generation >= self.generation
            and all(s.summary.clique_hashes.get(c) == h for c, h in self.targets.items())
        )

    def made(self, clique: str, version: str) -> bool:
        """`version` of `clique` is one the rollout made (or its operator adopted on `resume`):
        the only versions it ever deletes pods for."""
        return any(v.get(clique) == version for v in self.versions())

    def next_move(self, policy: RolloutPolicy) -> Move:
        """What to do after a safe point, in this order:

        0. the targets not in force yet (Grove has not patched the PodCliques to them): settle,
           a wait, so no pod is deleted to come back at another version;
        1. a PodGang Grove mixed (a pod it replaced at the template's version) whose replica has
           no step in flight: repaired first, one at a time, where that keeps every minAvailable
           (or an outage is allowed; else it is an ordinary step, which waits for the operator);
        2. the next PodGang of each of the first `replica_concurrency` replicas with one to roll
           (`steps.next_steps`, GREP order), an interrupted step first in its replica, as long
           as it is still in flight (once its pods settled it is an ordinary PodGang again);
        3. none left: verify; one whose step would break a minAvailable that holds, unless the
           policy allows an outage: wait for an operator."""
        state = self.watched
        assert state is not None
        if not self.in_force():
            return Move("settle", reason="Grove to patch the PodCliques to the targets")
        allowed = policy.allow_replica_outage
        busy = {*self.in_flight, *(g.replica for g in state.gangs if steps.replacing(g, self.targets))}
        mixed = [
            g
            for g in steps.mixed_gangs(state, self.versions())
            if g.replica not in busy and (allowed or not steps.outage(state, g, self.targets))
        ]
        if mixed:
            return Move("repair", (mixed[0],))
        self.interrupted = {n for n in self.interrupted if not steps.settled(state.gang(n))}
        # Rolling back, a replica with a PodGang that does not serve goes first (no step waits for
        # it), its PodGangs in GREP order: a tail that does not serve because its anchor is being
        # replaced is never taken before that anchor (GREP-393).
        urgent = {g.replica for g in state.gangs if not steps.serving(g)} if self.rolling_back else set()
        chosen = steps.next_steps(
            state,
            self.targets,
            policy.replica_concurrency,
            frozenset(self.interrupted),
            replicas_first=frozenset(urgent),
        )
        if not chosen:
            return Move("verify")
        if not policy.allow_replica_outage:
            blocked = [(g, r) for g in chosen for r in steps.outage(state, g, self.targets)]
            if blocked:
                g, reason = blocked[0]
                return Move(
                    "wait", reason=f"{g.name}: {reason}; the step waits (a replica outage is not allowed)"
                )
        return Move("rollback" if self.rolling_back else "roll", tuple(chosen))

    def sick(self, skip: set[str]) -> list[str]:
        """PodGangs of live replicas outside `skip` that are not serving (before a step)."""
        return steps.unhealthy(self.watched, skip) if self.watched else ["?"]

    def serving_peers(self, gang: GangState) -> tuple[str, ...]:
        """The other PodGangs of `gang`'s replica that serve now: each must still serve when
        the step deletes (`roll_podgang` checks it just before)."""
        peers = steps.by_replica(self.watched).get(gang.replica, []) if self.watched else []
        return tuple(sorted(g.name for g in peers if g.name != gang.name and steps.serving(g)))

    def agreed(self) -> bool:
        """Grove counts every replica updated (`updatedReplicas`): the run may end."""
        s = self.watched
        return s is not None and s.summary.updated_replicas >= s.summary.replicas

    def outcome(self) -> Outcome:
        return ROLLED_BACK if self.rolling_back else COMPLETED

    # -- step bookkeeping ------------------------------------------------------------------------
    def begin_steps(
        self, gangs: tuple[GangState, ...], kind: StepKind, now: datetime
    ) -> dict[str, StepRecord]:
        """Each PodGang's step starts: its replica has it in flight; its record, by PodGang."""
        records = {}
        for gang in gangs:
            self.in_flight[gang.replica] = gang.name
            records[gang.name] = StepRecord(
                replica=gang.replica,
                podgangs=(gang.name,),
                role=gang.role,
                target_hash=self.target_hash,
                started_at=now,
                kind=kind,
            )
        return records

    def rolled(self, records: dict[str, StepRecord], gang: GangState, result: RollGangResult) -> None:
        """`roll_podgang` answered: the pods it deleted; a step it refused (a peer stopped serving,
        or the template moved) is no step: not in flight, no record."""
        records[gang.name] = records[gang.name].model_copy(update={"deleted": result.deleted})
        if result.blocked_by:
            self.in_flight.pop(gang.replica, None)
            records.pop(gang.name)

    def deletions_done(self, records: dict[str, StepRecord], kind: StepKind) -> None:
        """Every deletion of the step is made: an interrupted PodGang is taken up again."""
        self.interrupted -= set(records)
        if kind == "repair":
            self.repairs += len(records)

    def finished(self, records: dict[str, StepRecord]) -> bool:
        """Each PodGang of the step is done at the targets (whole, at the target, Ready), or gone
        (a scale-in removed it)."""
        s = self.watched
        if s is None:
            return False
        present = {g.name for g in s.gangs}
        return all(steps.done(s.gang(n), self.targets) or n not in present for n in records)

    def end_steps(self, records: dict[str, StepRecord], *, ok: bool, now: datetime) -> None:
        """The step's wait ended: done (counted, recorded, no longer in flight), or not (each
        PodGang stays in flight and is interrupted: taken up first at the next move)."""
        for name, record in records.items():
            if ok:
                self.in_flight.pop(record.replica, None)
                self.steps_done += 1
                self.steps.append(record.model_copy(update={"finished_at": now}))
            else:
                self.interrupted.add(name)
        self.steps = self.steps[-RECENT_STEPS:]

    def late(self, records: dict[str, StepRecord]) -> list[str]:
        """The PodGangs of a step not done at the targets."""
        return [
            n for n in records if not steps.done(self.watched.gang(n) if self.watched else None, self.targets)
        ]

    # -- healing while paused --------------------------------------------------------------------
    def guard_versions(self) -> list[dict[str, str]]:
        """While paused, the template's own version is one a PodGang may hold too."""
        current = dict(self.watched.summary.clique_hashes) if self.watched else {}
        return [*self.versions(), current]

    def heal_targets(self) -> dict[str, str]:
        """What the guard heals to: the template's hash of each clique where it is a version the
        rollout made. A clique whose template holds someone else's edit is not healed: deleting
        its pods would roll that edit onto them (its pod Grove replaced stays as Grove made it,
        as it would without the rollout, until the operator decides)."""
        current = self.watched.summary.clique_hashes if self.watched else {}
        return {c: h for c, h in current.items() if self.made(c, h)}

    def to_heal(self, allow_outage: bool = False) -> list[GangState]:
        """The mixed PodGangs to heal now, the first of each replica; none while Grove has not
        observed the spec (the template's version is not known yet), none whose healing would
        delete no pod (`heal_targets`), and none whose healing would break a minAvailable that
        holds unless an outage is allowed (it stays mixed until the operator decides); none off
        OnDelete (the rollout drives nothing then)."""
        s = self.watched
        if s is None or s.summary.observed_generation < s.summary.generation or self.left_on_delete():
            return []
        seen: set[int] = set()
        out = []
        heal = self.heal_targets()
        for g in steps.mixed_gangs(s, self.guard_versions()):
            if g.replica in seen or not steps.needs_roll(g, heal):
                continue
            if allow_outage or not steps.outage(s, g, heal):
                seen.add(g.replica)
                out.append(g)
        return out

    def healed(self, names: set[str], deleted: int, seen: PCSState | None) -> bool:
        """None of `names` is mixed; or the heal deleted nothing and the view moved on since
        `seen` (the template moved meanwhile: the next change decides)."""
        s = self.watched
        return s is not None and (
            all(not steps.mixed(x, self.guard_versions()) for x in s.gangs if x.name in names)
            or (not deleted and s is not seen)
        )

    # -- what it does now (shown by views.py) ------------------------------------------------------
    def activity(self, phase: str) -> tuple[Doing, str, datetime | None]:
        """What the run does now (liveness), in this order: `ended`, `paused` (the reason),
        `in-flight` (a step, until its deadline), `timer` (a wait: until when and why), else
        `next`: a move the runbook makes at once (a safe point between two waits)."""
        if phase in ENDED:
            return "ended", phase, None
        if self.paused_reason is not None:
            return "paused", self.paused_reason, None
        wake = self.timer
        if self.in_flight:
            gangs = ", ".join(sorted(self.in_flight.values()))
            return "in-flight", f"{gangs}: {wake.reason if wake else 'deleting'}", wake.at if wake else None
        if wake is not None:
            return "timer", wake.reason, wake.at
        return "next", "at a safe point: acting on requests, then the next step", None
