"""The rollout's rules (`workflows/rollout/invariants.py`) checked after every step of a model, no
server: a Hypothesis state machine drives the real `RolloutState` through random orders of
events and checks every rule after each one.

The machine plays the other roles:
- **the runbook** (`Runbook`): `workflow.py`'s `_roll`, `_between_steps`, `_run_steps`,
  `_pause`, `_start_rollback`, `_adopt`, `_verified`, `_stuck` and the paused guard, step for
  step, as a generator: each `yield` is one of the runbook's waits (a condition with its
  deadline's timer) or an operator's decision. Every decision is the state's;
- **Grove** at the pin, under OnDelete (`simulators/grove/BEHAVIOUR.md`): a template write
  patches the PodCliques at the next reconcile [U1, U2]; a deleted pod comes back at its
  PodClique's hash [D1], into the same PodGang [D6], not Ready at first; an evicted pod too;
- **the activities**: the template writes through `drivers.grove`'s real patches
  (`images_patch`, `restore_patch`, `foreign_edits_patch`, `template_diff`), `roll_podgang`'s
  checks (serving peers, generation) and deletion;
- **the watcher** (full listings through `RolloutState.apply`, late or not at all) and
  **the operator** (pause, resume, rollback, abort), **someone else** (a label or an image
  edited in the template), **continue-as-new** (the state through `DATA_CONVERTER` and
  `RolloutState.resumed`) and **worker restarts** (a replay rebuilds the same state; the
  watcher starts a new attempt; the write in flight runs again, as an activity retried).

After the random steps, `teardown` drains: a cooperative world (Grove reconciles, pods turn
Ready, the watcher reports) and an operator who answers `resume` (`abort` after a few) must bring
the run to its end within a bound: the liveness rule's teeth. Then the ending rule is checked.

Not reached here: `next_move`'s first rule (settle until the targets are in force) never
decides a move in this model; `if False and not self.in_force()` passes it (found by an
independent reviewer). `in_force` is false at `next_move` only if the PodCliques' hashes differ
from the targets, or Grove has not observed the rollout's generation, while no generation past
the rollout's is seen; and here (1) every write of the rollout (images, supersede, restore) is
followed by a wait until Grove observed it and the PodCliques moved (`adopted`, or `restored`:
the originals), the targets then taken from the PodCliques' hashes (`adopt_targets`); (2) any
other change of those hashes is Grove reconciling someone else's write, whose generation the
same listing shows past the rollout's (`overtaken`), handled before `next_move` (pause, then
`adopt_edit` or a restore, each waiting as in 1); (3) `Grove.reconcile` observes the
generation and patches the PodCliques in one step, and a listing carries both. In Grove they
come on separate streams (the PodCliqueSet's status, the PodCliques), so the rule guards the
gap 3 closes: `adopt_edit` on `resume` takes the PodCliques' hashes once the generation is
observed (`spec_observed`), before they may have moved. Reaching it needs a Grove here that
observes a generation before it patches the PodCliques (two rules) and a watcher listing that
shows one without the other; left for its own change.

A PodCliqueSet of two replicas: per replica an anchor PodGang (the standalone `router` and the
workers' scaling-group replica 0) and a tail (its replica 1); one router pod, two per workers'
PodClique (minAvailable 1), so a PodGang can hold two versions of one clique.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Generator
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from contracts.converter import DATA_CONVERTER
from contracts.models.control import OperatorRequest
from contracts.models.grove import (
    ON_DELETE,
    GangState,
    GroupState,
    PCSChange,
    PCSRef,
    PCSState,
    PCSSummary,
    RollGangResult,
    RolloutInput,
    RolloutPolicy,
    RolloutResult,
    TemplateChange,
    TemplateResult,
    Wake,
)
from drivers.grove import foreign_edits_patch, images_patch, restore_patch, template_diff
from workflows.rollout import invariants, views
from workflows.rollout.state import RolloutState

PCS = PCSRef(namespace="default", name="p")
T0 = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
DEADLINE = 600.0
OPERATOR = OperatorRequest(requested_by="model", reason="")
IMAGES = {"router": {"router": "reg/router:2"}, "worker": {"worker": "reg/worker:2"}}
PODS = {"router": 1, "worker": 2}  # pods per PodClique: the workers' can hold two versions
GROUPS: dict[str, tuple[tuple[str, str, str | None, int | None], ...]] = {
    f"p-{r}-{kind}": groups
    for r in (0, 1)
    for kind, groups in (
        ("a", (("router", f"p-{r}-router", None, None), ("worker", f"p-{r}-w-0-worker", f"p-{r}-w", 0))),
        ("t", (("worker", f"p-{r}-w-1-worker", f"p-{r}-w", 1),)),
    )
}


def clique_hash(entry: dict[str, Any]) -> str:
    """Grove's pod-template hash of one clique: its labels, annotations and pod spec [H1, H2]."""
    spec = entry.get("spec") or {}
    hashed = {
        "labels": entry.get("labels"),
        "annotations": entry.get("annotations"),
        "pod": spec.get("podSpec"),
    }
    return hashlib.sha256(json.dumps(hashed, sort_keys=True).encode()).hexdigest()[:8]


class Grove:
    """The PodCliqueSet, its PodCliques' hash labels and its pods, as Grove keeps them."""

    def __init__(self) -> None:
        self.cliques: list[dict[str, Any]] = [
            {
                "name": name,
                "spec": {
                    "replicas": PODS[name],
                    "minAvailable": 1,
                    "podSpec": {"containers": [{"name": name, "image": f"reg/{name}:1"}]},
                },
            }
            for name in ("router", "worker")
        ]
        self.generation = self.observed = 1
        self.annotations: dict[str, str] = {}
        self.labels = {c["name"]: clique_hash(c) for c in self.cliques}
        self.pods = {
            (g, pclq, k): [clique_hash(self.clique(c)), True]
            for g, gs in GROUPS.items()
            for c, pclq, _, _ in gs
            for k in range(PODS[c])
        }
        self.missing: set[tuple[str, str, int]] = set()  # pods deleted, not yet recreated

    def clique(self, name: str) -> dict[str, Any]:
        return next(c for c in self.cliques if c["name"] == name)

    def obj(self) -> dict[str, Any]:
        return {
            "metadata": {
                "namespace": "default",
                "name": "p",
                "generation": self.generation,
                "annotations": dict(self.annotations),
            },
            "spec": {
                "replicas": 2,
                "updateStrategy": {"type": ON_DELETE},
                "template": {"cliques": copy.deepcopy(self.cliques)},
            },
        }

    def patch(self, patch: dict[str, Any] | None) -> None:
        """A merge patch of the rollout's kind: the cliques list whole, annotations key by key."""
        if patch is None:
            return
        for key, value in (patch.get("metadata") or {}).get("annotations", {}).items():
            if value is None:
                self.annotations.pop(key, None)
            else:
                self.annotations[key] = value
        cliques = ((patch.get("spec") or {}).get("template") or {}).get("cliques")
        if cliques is not None and cliques != self.cliques:
            self.cliques = copy.deepcopy(cliques)
            self.generation += 1

    def reconcile(self) -> None:
        """The PCS reconciler: observes the generation and patches the PodCliques [U1, U2, H3]."""
        self.observed = self.generation
        self.labels = {c["name"]: clique_hash(c) for c in self.cliques}

    def recreate(self) -> None:
        """Each deleted pod comes back from its PodClique's current spec, not Ready yet [D1, D6]."""
        for g, pclq, k in sorted(self.missing):
            clique = next(c for c, p, _, _ in GROUPS[g] if p == pclq)
            self.pods[(g, pclq, k)] = [self.labels[clique], False]
        self.missing.clear()

    def ready(self) -> None:
        for pod in self.pods.values():
            pod[1] = True

    def delete(self, g: str, pclq: str, k: int) -> None:
        self.pods.pop((g, pclq, k), None)
        self.missing.add((g, pclq, k))

    def updated_replicas(self) -> int:
        """Grove's count: replicas whose every pod runs its PodClique's hash, Ready [S5]."""
        return sum(
            all(
                self.pods.get((g, p, k)) == [self.labels[c], True]
                for g, gs in GROUPS.items()
                if g.startswith(f"p-{r}-")
                for c, p, _, _ in gs
                for k in range(PODS[c])
            )
            for r in (0, 1)
        )

    def below_min_available(self) -> set[str]:
        """The model's own count, apart from `steps.outage`: each standalone PodClique with fewer
        Ready pods than its minAvailable (1), each scaling group with fewer available replicas
        (a member PodClique with a Ready pod) than its minAvailable (1)."""
        ready: dict[str, int] = {}
        for (_, pclq, _), (_, is_ready) in self.pods.items():
            ready[pclq] = ready.get(pclq, 0) + is_ready
        below = {f"PodClique p-{r}-router" for r in (0, 1) if ready.get(f"p-{r}-router", 0) < 1}
        for r in (0, 1):
            if sum(ready.get(f"p-{r}-w-{j}-worker", 0) >= 1 for j in (0, 1)) < 1:
                below.add(f"scaling group p-{r}-w")
        return below

    def state(self) -> PCSState:
        gangs = []
        for name, gs in GROUPS.items():
            groups = []
            for clique, pclq, pcsg, j in gs:
                pods: dict[str, int] = {}
                ready: dict[str, int] = {}
                for k in range(PODS[clique]):
                    if (pod := self.pods.get((name, pclq, k))) is not None:
                        pods[pod[0]] = pods.get(pod[0], 0) + 1
                        ready[pod[0]] = ready.get(pod[0], 0) + pod[1]
                groups.append(
                    GroupState(
                        pclq=pclq,
                        clique=clique,
                        expected=PODS[clique],
                        pcsg=pcsg,
                        pcsg_replica=j,
                        pods=pods,
                        ready={h: n for h, n in ready.items() if n},
                    )
                )
            role = "Anchor" if name.endswith("-a") else "Tail"
            gangs.append(
                GangState(name=name, replica=int(name[2]), role=role, epoch=name[-1], groups=tuple(groups))
            )
        images = {
            f"{c['name']}/{x['name']}": x["image"]
            for c in self.cliques
            for x in c["spec"]["podSpec"]["containers"]
        }
        summary = PCSSummary(
            namespace="default",
            name="p",
            generation=self.generation,
            observed_generation=self.observed,
            current_hash=hashlib.sha256(json.dumps(self.labels, sort_keys=True).encode()).hexdigest()[:8],
            update_strategy=ON_DELETE,
            replicas=2,
            images=images,
            clique_hashes=dict(self.labels),
            scaling_groups={"p-0-w": 1, "p-1-w": 1},
            termination_delay_seconds=4 * DEADLINE,
            updated_replicas=self.updated_replicas(),
        )
        return PCSState(summary=summary, gangs=tuple(gangs), cliques=tuple(copy.deepcopy(self.cliques)))


class Aborted(Exception):
    """The rollout's abort error (`RolloutAborted`), raised once everything is back."""


class ContinuedAsNew(Exception):  # noqa: N818 (Temporal's name for it)
    """`workflow.continue_as_new`: the next run starts from the state carried."""


Wait = tuple[str, Callable[[], bool]]
Runs = Generator[Wait, Any, Any]


class Runbook:
    """`workflow.py`, step for step, over the real `RolloutState`; see the module docstring."""

    def __init__(self, model: RolloutModel, images: dict[str, str], policy: RolloutPolicy) -> None:
        self.model, self.images, self.policy = model, images, policy
        self.state = RolloutState(started_at=T0, written_at=T0)
        self.abort_request: OperatorRequest | None = None
        self.paused_by: OperatorRequest | None = None
        self.phase = "preparing"
        self.asked: tuple[str, ...] = ()  # the decisions awaited now
        self.answer: str | None = None
        self.guard = False
        self.violations: list[str] = []

    @property
    def aborting(self) -> bool:
        return self.abort_request is not None

    # -- the activities, over the model's Grove ---------------------------------------------------
    def write(self, change: Callable[[dict[str, Any]], tuple[dict[str, Any] | None, Any]]) -> Any:
        """One template write (read, patch, write); run again when a worker restart retries it."""
        grove = self.model.grove
        before = tuple(copy.deepcopy(grove.cliques))
        for _ in range(2 if self.model.retry_next else 1):
            patch, answer = change(grove.obj())
            grove.patch(patch)
        self.model.retry_next = False
        self.model.writes.append((before, tuple(copy.deepcopy(grove.cliques))))
        changed = {c["name"] for c in grove.cliques} - {c["name"] for c in before if c in grove.cliques}
        self.model.theirs -= changed
        return answer

    def made(self, version: dict[str, str] | None = None) -> None:
        """The template as the rollout's images write left it (or as its operator adopted it) is
        a version it made: the model's own account, beside the state's (a restore makes none: it
        writes the original back)."""
        version = version or {c["name"]: clique_hash(c) for c in self.model.grove.cliques}
        self.model.versions.append(version)

    def result(self, **kw: Any) -> TemplateResult:
        grove = self.model.grove
        return TemplateResult(
            generation=grove.generation, template={"cliques": copy.deepcopy(grove.cliques)}, **kw
        )

    def set_images(self) -> TemplateResult:
        def change(obj: dict[str, Any]) -> tuple[dict[str, Any] | None, Any]:
            patch, fields = images_patch(obj, self.images)
            return patch, fields

        fields = self.write(change)
        self.made()
        return self.result(changed=fields)

    def restore(self) -> TemplateResult:
        state = self.state

        def change(obj: dict[str, Any]) -> tuple[dict[str, Any] | None, Any]:
            patch, back, over, dormant = restore_patch(obj, state.fields, state.original_cliques)
            return patch, (back, over, dormant)

        back, over, dormant = self.write(change)
        return self.result(changed=tuple(back), overwritten=tuple(over), dormant=dormant)

    def put_back(self) -> TemplateResult:
        state = self.state

        def change(obj: dict[str, Any]) -> tuple[dict[str, Any] | None, Any]:
            patch, _, left = foreign_edits_patch(obj, state.dormant, state.original_cliques)
            return patch, left

        return self.result(skipped=tuple(self.write(change)))

    def describe(self) -> TemplateChange:
        grove = self.model.grove
        fields = template_diff(self.state.written, {"cliques": grove.cliques})
        return TemplateChange(
            generation=grove.generation,
            fields=tuple(fields),
            managers=("kubectl-edit",),
            template={"cliques": copy.deepcopy(grove.cliques)},
        )

    def roll(
        self, gang: str, targets: dict[str, str], kind: str, require: tuple[str, ...], generation: int
    ) -> RollGangResult:
        """`roll_podgang`: blocked unless `require` serve and the generation holds; else the
        gang's pods not at their clique's target are deleted (checked against rule 3 first)."""
        grove, world = self.model.grove, self.model.grove.state()
        serving = {
            g.name for g in world.gangs if all(sum(x.ready.values()) >= x.min_replicas for x in g.groups)
        }
        blocked = tuple(n for n in require if n not in serving)
        if generation and generation != grove.generation:
            blocked += ("generation changed",)
        if blocked:
            return RollGangResult(blocked_by=blocked)
        doomed = [
            (pclq, k)
            for clique, pclq, _, _ in GROUPS[gang]
            for k in range(PODS[clique])
            if clique in targets
            and (gang, pclq, k) in grove.pods
            and grove.pods[(gang, pclq, k)][0] != targets[clique]
        ]
        if doomed:
            self.violations += invariants.roll(
                self.state,
                world,
                gang,
                targets,
                kind=kind,
                policy=self.policy,
                made=self.model.made,
                versions=self.model.known,
            )
        below = grove.below_min_available()
        for pclq, k in doomed:
            grove.delete(gang, pclq, k)
        if not self.policy.allow_replica_outage:  # the model's own count of Ready pods
            broken = sorted(grove.below_min_available() - below)
            self.violations += [f"model: {kind} of {gang} takes {b} below its minAvailable" for b in broken]
        return RollGangResult(deleted=tuple(f"{pclq}-{k}" for pclq, k in doomed))

    # -- the runbook -------------------------------------------------------------------------------
    def wait(self, condition: Callable[[], bool], reason: str) -> Runs:
        """`_wait`: until `condition`, an interruption, or the deadline's timer (sent True)."""
        state = self.state
        state.timer = Wake(at=T0 + timedelta(seconds=DEADLINE), reason=f"waiting for {reason}")
        try:
            yield "wait", lambda: condition() or state.cut_short(self.aborting)
        finally:
            state.timer = None
        return condition() and not state.interrupting(self.aborting)

    def run(self) -> Runs:
        state = self.state
        first = self.model.grove.state()
        state.watched = first
        if (refusal := RolloutState.refusal(first, PCS, self.images, self.policy)) is not None:
            self.phase = "failed"
            return refusal
        state.prepare(first)
        written = self.set_images()
        state.fields = written.changed
        self.violations += invariants.write(state, *self.model.writes[-1])
        yield from self.adopt(written)
        return (yield from self.roll_on())

    def continued(self) -> Runs:
        self.phase = "rolling-back" if self.state.rolling_back else "rolling"
        if self.state.watched is None:
            self.state.watched = self.model.grove.state()
        return (yield from self.roll_on())

    def roll_on(self) -> Runs:
        state = self.state
        while True:
            ended = yield from self.between_steps()
            if ended is not None:
                return ended
            move = state.next_move(self.policy)
            if move.kind == "verify":
                if (yield from self.verified()):
                    if state.dormant_due():
                        written = self.put_back()
                        self.violations += invariants.write(state, *self.model.writes[-1])
                        state.wrote(written, T0)
                        state.dormant_back, state.dormant_left = True, written.skipped
                    if state.reverting_for_abort:
                        raise Aborted()
                    return state.outcome()
            elif move.kind == "wait":
                yield from self.stuck(move.reason)
            elif move.kind == "settle":
                if not (yield from self.wait(state.in_force, move.reason)):
                    if not state.cut_short(self.aborting):
                        yield from self.stuck(move.reason)
            else:
                yield from self.run_steps(move.gangs, move.kind)

    def between_steps(self) -> Runs:
        state = self.state
        if self.abort_request is not None and not state.reverting_for_abort:
            state.reverting_for_abort = True
            self.paused_by = None
            if not state.rolling_back:
                yield from self.start_rollback()
        if state.rollback_request is not None and not state.rolling_back:
            yield from self.start_rollback()
        assert state.watched is not None
        if state.written_by_someone_else(state.watched):
            yield from self.wait(state.spec_observed, "Grove to observe a write by someone else")
        if state.foreign():
            yield from (self.foreign_while_rolling_back() if state.rolling_back else self.foreign_edit())
            return None
        if self.paused_by is not None and not state.reverting_for_abort:
            yield from self.pause("paused by model", by_operator=True)
            return None
        state.adopt_scale_by_someone_else()
        if self.model.continue_as_new_due and not state.in_flight:
            raise ContinuedAsNew()
        return None

    def run_steps(self, gangs: tuple[GangState, ...], kind: str) -> Runs:
        state = self.state
        names = {g.name for g in gangs}
        if kind != "repair" and state.sick(names):
            if not (yield from self.wait(lambda: not state.sick(names), "serving peers")):
                yield from self.stuck("not serving")
                return
        self.phase = "rolling-back" if state.rolling_back else "rolling"
        records = state.begin_steps(gangs, kind, T0)  # type: ignore[arg-type]
        for gang in gangs:
            require = () if kind == "repair" else state.serving_peers(gang)
            state.rolled(records, gang, self.roll(gang.name, state.targets, kind, require, state.generation))
        state.deletions_done(records, kind)  # type: ignore[arg-type]
        ok = yield from self.wait(lambda: state.finished(records), "whole and Ready")
        state.end_steps(records, ok=ok, now=T0)
        if ok or state.cut_short(self.aborting):
            return
        yield from self.stuck("late")

    def foreign_edit(self) -> Runs:
        state = self.state
        change = self.describe()
        if not change.fields:
            state.generation = change.generation
            return False
        yield from self.pause(state.foreign_edit_reason(change))
        if state.rolling_back or self.aborting:
            return True
        yield from self.wait(lambda: state.observed(change.generation), "the edit adopted")
        state.adopt_edit(change, T0)
        self.made(state.targets)  # adopted by its operator
        self.model.adopted = True
        return True

    def foreign_while_rolling_back(self) -> Runs:
        state = self.state
        change = self.describe()
        if not change.fields:
            state.generation = change.generation
            return
        yield from self.pause(f"rolling back: {state.foreign_edit_reason(change)}")
        yield from self.start_rollback()

    def pause(self, reason: str, *, by_operator: bool = False) -> Runs:
        state = self.state
        if state.interrupting(self.aborting):
            return
        state.paused_reason, self.phase = reason, "paused"
        self.guard = True
        try:
            if self.aborting:
                decision = "abort"
            else:
                self.asked = ("resume", "rollback")
                yield "decide", lambda: self.answer is not None or self.aborting
                decision = self.answer or "abort"
        finally:
            self.guard, state.paused_reason, self.asked, self.answer = False, None, (), None
            self.phase = "rolling-back" if state.rolling_back else "rolling"
        if by_operator:
            self.paused_by = None
        if decision == "rollback":
            yield from self.start_rollback()

    def start_rollback(self) -> Runs:
        state = self.state
        state.begin_rollback()
        self.phase = "rolling-back"
        written = self.restore()
        self.violations += invariants.write(state, *self.model.writes[-1])
        state.restoring(written)
        state.wrote(written, T0)
        while not (yield from self.wait(lambda: state.restored(written), "the restore observed")):
            if state.interrupting(self.aborting) or state.foreign():
                return
            yield from self.stuck(state.not_restored())

    def adopt(self, written: TemplateResult) -> Runs:
        state = self.state
        before = state.rolled_to()
        state.wrote(written, T0)
        self.phase = "rolling"
        while True:
            ok = yield from self.wait(lambda: state.adopted(written, before) or state.overtaken(), "observed")
            if state.interrupting(self.aborting):
                if state.adopted(written, before) and not state.overtaken():
                    state.adopt_targets()
                return
            if state.overtaken():
                yield from self.wait(state.spec_observed, "a write by someone else observed")
                if (yield from self.foreign_edit()):
                    return
                continue
            if ok:
                break
            yield from self.stuck("not observed")
            if state.rolling_back:
                return
        state.adopt_targets()

    def stuck(self, reason: str) -> Runs:
        state = self.state
        if not state.reverting_for_abort:
            yield from self.pause(reason)
            return
        seen = state.watched
        yield from self.wait(lambda: state.watched is not seen, f"a change after: {reason}")

    def verified(self) -> Runs:
        state = self.state
        if (yield from self.wait(state.agreed, "Grove's count")):
            return True
        if state.interrupting(self.aborting):
            return False
        yield from self.stuck("Grove disagrees")
        return False

    # -- the paused guard ---------------------------------------------------------------------------
    def heal(self) -> None:
        """`PausedGuard`: one round of heals (its wait for the heal is the world's next steps)."""
        state = self.state
        seen = state.watched
        if not self.guard or seen is None:
            return
        for g in state.to_heal(self.policy.allow_replica_outage):
            rolled = self.roll(g.name, state.heal_targets(), "heal", (), seen.summary.generation)
            state.repairs += bool(rolled.deleted)


class RolloutModel(RuleBasedStateMachine):
    """See the module docstring."""

    def __init__(self) -> None:
        super().__init__()
        self.grove = Grove()
        self.writes: list[tuple[tuple[dict[str, Any], ...], tuple[dict[str, Any], ...]]] = []
        self.retry_next = False
        self.continue_as_new_due = False
        self.attempt, self.sequence = 1, 0
        self.runbook: Runbook | None = None
        self.steps: Runs | None = None
        self.waiting: Wait | None = None
        self.outcome: str | None = None
        self.result: RolloutResult | None = None
        self.foreign_edits = 0
        self.dormant: dict[str, str] = {}  # clique -> the hash of an edit left dormant before the start
        self.adopted = False  # its operator adopted the template as it was (`resume`)
        self.theirs: set[str] = set()  # cliques someone else changed after the rollout last wrote them
        self.foreign_labels: dict[str, str] = {}  # clique -> the last label someone else set
        self.foreign_images: dict[str, str] = {}  # clique -> the last image someone else set
        self.versions = [{c["name"]: clique_hash(c) for c in self.grove.cliques}]  # the original first
        # The versions the rollout knows: the original, and every target it took (watched after
        # each step, apart from how the state keeps them: `RolloutState.versions`).
        self.known = list(self.versions)

    # -- the start ---------------------------------------------------------------------------------
    @initialize(
        start=st.sampled_from(
            (
                (("worker",), False),
                (("worker",), True),
                (("router", "worker"), True),
                (("router",), True),
                (("router",), False),  # refused: a standalone clique without an outage allowed
            )
        ),
        dormant=st.sampled_from((None, None, "router", "worker")),
    )
    def start(self, start: tuple[tuple[str, ...], bool], dormant: str | None = None) -> None:
        """`dormant`: someone else's edit of that clique's template, which Grove left dormant
        (OnDelete: no pod runs it) before the rollout starts; the rollout refuses to start."""
        cliques, outage = start
        if dormant is not None:
            entry = copy.deepcopy(self.grove.clique(dormant))
            entry["labels"] = {"edit": "dormant"}
            self.grove.patch({"spec": {"template": {"cliques": [
                entry if c["name"] == dormant else c for c in self.grove.cliques
            ]}}})  # fmt: skip
            self.grove.reconcile()
            self.dormant = {dormant: self.grove.labels[dormant]}
        images = {f"{c}/{c}": IMAGES[c][c] for c in cliques}
        policy = RolloutPolicy(step_deadline_seconds=DEADLINE, allow_replica_outage=outage)
        self.runbook = Runbook(self, images, policy)
        self.go(self.runbook.run())

    def go(self, steps: Runs, send: Any = None) -> None:
        """Run the runbook until its next wait (or its end)."""
        runbook = self.runbook
        assert runbook is not None
        self.steps = steps
        try:
            self.waiting = steps.send(send) if send is not None else next(steps)
        except StopIteration as end:
            self.end(end.value if runbook.phase != "failed" else "failed")
        except Aborted:
            self.end("aborted")
        except ContinuedAsNew:
            self.continue_as_new()

    def end(self, outcome: str) -> None:
        runbook = self.runbook
        assert runbook is not None
        runbook.phase, self.outcome, self.waiting = outcome, outcome, None
        state = runbook.state
        runbook.violations += invariants.ended(
            state,
            self.grove.state(),
            outcome,
            made=self.made,
            theirs=frozenset(self.theirs),
            dormant=self.edits_kept(runbook),
        )
        if outcome in ("completed", "rolled-back"):
            self.result = views.result(state, PCS, outcome, T0)  # type: ignore[arg-type]

    def made(self, clique: str, version: str) -> bool:
        """The model's account: `version` of `clique` is one the rollout made (a dormant edit
        found at the start never is, unless its operator adopted it on `resume`)."""
        if self.dormant.get(clique) == version and not self.adopted:
            return False
        return any(v.get(clique) == version for v in self.versions)

    def edits_kept(self, runbook: Runbook) -> dict[str, dict[str, Any]]:
        """What a restore leaves of someone else's edits, from the edits themselves: each clique
        at its original with their last label, and their last image where the rollout did not
        set that clique's image (where it did, its recorded value wins)."""
        ours = {path.partition("/")[0] for path in runbook.images}
        kept = {}
        for original in Grove().cliques:
            name, entry = original["name"], copy.deepcopy(original)
            if name in self.foreign_labels:
                entry["labels"] = {"edit": self.foreign_labels[name]}
            if name in self.foreign_images and name not in ours:
                entry["spec"]["podSpec"]["containers"][0]["image"] = self.foreign_images[name]
            if entry != original:
                kept[name] = entry
        return kept

    def continue_as_new(self) -> None:
        """The state as the next run's input, through the data converter (with the kernel's
        requests)."""
        runbook = self.runbook
        assert runbook is not None
        state = runbook.state
        state.aborting, state.paused_by = runbook.abort_request, runbook.paused_by
        carried = RolloutInput(pcs=PCS, images=runbook.images, requested_by="model", state=state)
        (payload,) = DATA_CONVERTER.payload_converter.to_payloads([carried])
        (back,) = DATA_CONVERTER.payload_converter.from_payloads([payload], [RolloutInput])
        assert back.state is not None
        nxt = Runbook(self, runbook.images, runbook.policy)
        nxt.state = RolloutState.resumed(back.state)
        nxt.abort_request, nxt.paused_by = nxt.state.aborting, nxt.state.paused_by
        self.runbook, self.continue_as_new_due = nxt, False
        self.attempt, self.sequence = self.attempt + 1, 0
        self.go(nxt.continued())

    def running(self) -> bool:
        return self.runbook is not None and self.outcome is None

    # -- the runbook's waits ------------------------------------------------------------------------
    @precondition(lambda self: self.running())
    @rule()
    def advance(self) -> None:
        """A wait whose condition holds ends (Temporal wakes the workflow)."""
        if self.waiting is not None and self.waiting[1]() and self.steps is not None:
            self.go(self.steps, False if self.waiting[0] == "wait" else "answered")

    @precondition(lambda self: self.running())
    @rule()
    def timer_fires(self) -> None:
        """A wait's deadline passes."""
        if self.waiting is not None and self.waiting[0] == "wait" and self.steps is not None:
            self.go(self.steps, True)

    @precondition(lambda self: self.running())
    @rule(ticks=st.integers(1, 6))
    def the_world_moves_on(self, ticks: int) -> None:
        """Cooperative ticks: Grove reconciles and recreates, pods turn Ready, the watcher
        reports, the runbook goes on (so random runs get far, as well as wide)."""
        for _ in range(ticks):
            if not self.running():
                return
            self.grove.reconcile()
            self.grove.recreate()
            self.grove.ready()
            self.watcher_reports()
            self.advance()

    # -- Grove and the watcher ------------------------------------------------------------------
    @rule()
    def grove_reconciles(self) -> None:
        self.grove.reconcile()

    @rule()
    def grove_recreates(self) -> None:
        self.grove.recreate()

    @rule()
    def pods_turn_ready(self) -> None:
        self.grove.ready()

    @rule(gang=st.sampled_from(sorted(GROUPS)), i=st.integers(0, 1), k=st.integers(0, 1))
    def a_pod_is_evicted(self, gang: str, i: int, k: int) -> None:
        """The pod-replacement fault: Grove replaces a pod at its PodClique's hash [D1]."""
        groups = GROUPS[gang]
        clique, pclq, _, _ = groups[i % len(groups)]
        self.grove.delete(gang, pclq, k % PODS[clique])
        self.grove.recreate()

    @rule(clique=st.sampled_from(("router", "worker")), image=st.booleans())
    def someone_else_edits(self, clique: str, image: bool) -> None:
        """A template edit by someone else: a label (a field the rollout never sets), or the image."""
        self.foreign_edits += 1
        entry = copy.deepcopy(self.grove.clique(clique))
        if image:
            entry["spec"]["podSpec"]["containers"][0]["image"] = f"reg/{clique}:x{self.foreign_edits}"
            self.foreign_images[clique] = f"reg/{clique}:x{self.foreign_edits}"
        else:
            entry["labels"] = {"edit": str(self.foreign_edits)}
            self.foreign_labels[clique] = str(self.foreign_edits)
        cliques = [entry if c["name"] == clique else c for c in self.grove.cliques]
        self.theirs.add(clique)
        self.grove.patch({"spec": {"template": {"cliques": cliques}}})

    @precondition(lambda self: self.running())
    @rule()
    def watcher_reports(self) -> None:
        assert self.runbook is not None
        self.sequence += 1
        change = PCSChange(full=True, attempt=self.attempt, sequence=self.sequence, **self.listing())
        assert self.runbook.state.apply(change)

        self.runbook.heal()

    def listing(self) -> dict[str, Any]:
        world = self.grove.state()
        return {"summary": world.summary, "gangs": world.gangs}

    # -- the operator --------------------------------------------------------------------------
    @precondition(lambda self: self.running())
    @rule()
    def operator_pauses(self) -> None:
        runbook = self.runbook
        assert runbook is not None
        if runbook.paused_by is None and runbook.phase != "paused" and not runbook.aborting:
            runbook.paused_by = OPERATOR

    @precondition(lambda self: self.running())
    @rule()
    def operator_resumes(self) -> None:
        runbook = self.runbook
        assert runbook is not None
        if "resume" in runbook.asked and runbook.answer is None:
            runbook.answer = "resume"
        elif runbook.paused_by is not None and runbook.phase != "paused":
            runbook.paused_by = None  # the pause request withdrawn

    @precondition(lambda self: self.running())
    @rule()
    def operator_rolls_back(self) -> None:
        runbook = self.runbook
        assert runbook is not None
        state = runbook.state
        if state.rolling_back or state.rollback_request is not None:
            return  # the validator refuses
        state.rollback_request = OPERATOR
        if "rollback" in runbook.asked and runbook.answer is None:
            runbook.answer = "rollback"

    @precondition(lambda self: self.running())
    @rule()
    def operator_aborts(self) -> None:
        runbook = self.runbook
        assert runbook is not None
        if runbook.abort_request is None:
            runbook.abort_request = OPERATOR

    # -- the worker -----------------------------------------------------------------------------
    @precondition(lambda self: self.running())
    @rule()
    def worker_restarts(self) -> None:
        """A replay rebuilds the same state (its decisions are pure); the watcher starts a new
        attempt, whose first listing is full; the write in flight runs again when retried."""
        assert self.runbook is not None
        self.attempt, self.sequence, self.retry_next = self.attempt + 1, 0, True

    @precondition(lambda self: self.running())
    @rule()
    def history_grows(self) -> None:
        self.continue_as_new_due = True

    # -- the rules, after every step -------------------------------------------------------------------
    @invariant()
    def rules_hold(self) -> None:
        runbook = self.runbook
        if runbook is None:
            return
        state = runbook.state
        if state.targets and state.targets not in self.known:
            self.known.append(dict(state.targets))
        status = views.status(state, PCS, runbook.phase)
        found = list(runbook.violations)
        found += invariants.liveness(state, runbook.phase, status)
        found += invariants.announced(state, status, self.result)
        assert not found, "\n".join(found)

    def teardown(self) -> None:
        """Drain: a cooperative world and an operator who resumes (aborts after a few pauses)
        bring every run to its end, unless it waits on a replica outage it is not allowed to
        take (and says so); then its ending holds (rules 1 and 4)."""
        runbook = self.runbook
        if runbook is None or self.outcome is not None:
            return
        pauses = 0
        for _ in range(200):
            runbook = self.runbook
            assert runbook is not None
            if self.outcome is not None:
                break
            self.grove.reconcile()
            self.grove.recreate()
            self.grove.ready()
            self.watcher_reports()
            if runbook.asked and runbook.answer is None:
                pauses += 1
                runbook.answer = "resume" if pauses <= 3 else None
                if pauses > 3:
                    runbook.abort_request = runbook.abort_request or OPERATOR
            waiting = self.waiting
            if waiting is not None and not waiting[1]() and waiting[0] == "wait":
                self.timer_fires()
            else:
                self.advance()
        if self.outcome is None:  # only an outage it may not take holds it (README), named
            runbook = self.runbook
            assert runbook is not None
            doing, why, _ = runbook.state.activity(runbook.phase)
            assert "a replica outage is not allowed" in why, (
                f"the run does not end: {runbook.phase}, {doing}: {why}"
            )
        self.rules_hold()


TestRolloutModel = RolloutModel.TestCase
TestRolloutModel.settings = settings(
    max_examples=300, stateful_step_count=60, deadline=None, database=None, derandomize=True
)


def test_the_model_reaches_every_ending() -> None:
    """The model is no stub: random runs end completed, rolled back and aborted (and the checks
    above run on each), so the rules are checked where they matter."""
    seen: set[str] = set()
    for cliques, answer in ((("worker",), None), (("worker",), "rollback"), (("worker",), "abort")):
        model = RolloutModel()
        model.start((cliques, False))
        for _ in range(60):
            if model.outcome is not None:
                break
            if answer == "rollback":
                model.operator_rolls_back()
            elif answer == "abort":
                model.operator_aborts()
            model.grove_reconciles()
            model.grove_recreates()
            model.pods_turn_ready()
            model.watcher_reports()
            model.advance()
            model.rules_hold()
        assert model.outcome is not None
        seen.add(model.outcome)
    assert seen == {"completed", "rolled-back", "aborted"}
