"""The properties of the rollout's pure step logic (`workflows/rollout/steps.py`), over any
implementation and any Hypothesis settings: `tests/fast/test_rollout_steps.py` runs them quickly
and on deliberately broken implementations, `tests/test_rollout_properties.py` deeper.

They run over random PodCliqueSet shapes laid out as Grove at the pin lays them out: per replica
one anchor (all standalone pods and scaling-group replicas below minAvailable), and one tail
PodGang per scaling-group replica above. They also use random changed cliques and random pod
failures. Invariants, each checked against an oracle written separately from the code under test:

- **never below minAvailable unless allowed**: `outage` is empty exactly when replacing the
  gang's stale pods keeps every minAvailable that held before;
- **one gang of a replica in flight at a time**: `next_steps` returns at most `concurrency`
  gangs, from distinct replicas;
- **GREP order**: a tail only once its replica's anchor is at the target. This must hold rolling
  forward and rolling back from any partial progress;
- **no mixed versions**: rolling a gang leaves it unmixed; `mixed` and `mixed_gangs` flag a gang
  exactly when it holds a changed clique's pods of two versions;
- **the loop ends**: every PodGang ends done.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.models.grove import GangState, GroupState, PCSState, PCSSummary
from workflows.rollout import steps


# -- random PodCliqueSets, laid out as Grove lays them out ---------------------------------------------
@st.composite
def cases(draw: Any) -> dict[str, Any]:
    replicas = draw(st.integers(1, 3))
    standalone = draw(
        st.lists(st.integers(1, 3).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, n))), max_size=2)
    )
    groups = draw(
        st.lists(
            st.tuples(st.integers(1, 2), st.integers(1, 4)).flatmap(
                lambda t: st.tuples(st.just(t[0]), st.just(t[1]), st.integers(1, t[1]))
            ),
            max_size=2,
        )
    )
    if not standalone and not groups:
        standalone = [(2, 1)]
    cliques = [f"s{i}" for i in range(len(standalone))] + [
        f"g{gi}c{ci}" for gi, (members, _, _) in enumerate(groups) for ci in range(members)
    ]
    changed = draw(st.sets(st.sampled_from(cliques), min_size=1))
    down = draw(st.sets(st.integers(0, 30), max_size=3))  # indices of gangs with a failed pod
    done = draw(st.sets(st.integers(0, 30), max_size=30))  # gangs already rolled (partial progress)
    concurrency = draw(st.integers(1, 3))
    return {
        "replicas": replicas,
        "standalone": standalone,
        "groups": groups,
        "changed": changed,
        "down": down,
        "done": done,
        "concurrency": concurrency,
    }


def build(
    case: dict[str, Any], *, rolled: set[int] = frozenset(), down: set[int] = frozenset()
) -> tuple[PCSState, dict[str, str], dict[str, str]]:  # type: ignore[assignment]  # noqa: E501
    original = {}
    for i in range(len(case["standalone"])):
        original[f"s{i}"] = f"o-s{i}"
    for gi, (members, _, _) in enumerate(case["groups"]):
        for ci in range(members):
            original[f"g{gi}c{ci}"] = f"o-g{gi}c{ci}"
    targets = {c: (f"t-{c}" if c in case["changed"] else h) for c, h in original.items()}
    gangs: list[GangState] = []
    pcsgs: dict[str, int] = {}

    def group(
        pclq: str, clique: str, n: int, m: int, index: int, pcsg: str | None = None, j: int | None = None
    ) -> GroupState:
        h = targets[clique] if index in rolled else original[clique]
        ready = n - (1 if index in down else 0)
        return GroupState(
            pclq=pclq, clique=clique, min_replicas=m, expected=n, pcsg=pcsg, pcsg_replica=j,
            pods={h: n}, ready={h: ready} if ready else {},
        )  # fmt: skip

    for r in range(case["replicas"]):
        index = len(gangs)
        anchor = [group(f"p-{r}-s{i}", f"s{i}", n, m, index) for i, (n, m) in enumerate(case["standalone"])]
        tails = []
        for gi, (members, reps, gmin) in enumerate(case["groups"]):
            pcsg = f"p-{r}-g{gi}"
            pcsgs[pcsg] = gmin
            for j in range(reps):
                if j < gmin:
                    anchor += [
                        group(f"{pcsg}-{j}-c{ci}", f"g{gi}c{ci}", 1, 1, index, pcsg, j)
                        for ci in range(members)
                    ]
                else:
                    tails.append((pcsg, gi, j, members))
        gangs.append(GangState(name=f"p-{r}-e0", replica=r, role="Anchor", epoch="e0", groups=tuple(anchor)))
        for pcsg, gi, j, members in tails:
            index = len(gangs)
            gangs.append(
                GangState(
                    name=f"p-{r}-e1-g{gi}-{j}",
                    replica=r,
                    role="Tail",
                    epoch="e1",
                    groups=tuple(
                        group(f"{pcsg}-{j}-c{ci}", f"g{gi}c{ci}", 1, 1, index, pcsg, j)
                        for ci in range(members)
                    ),
                )
            )
    summary = PCSSummary(namespace="d", name="p", replicas=case["replicas"], scaling_groups=pcsgs)
    return PCSState(summary=summary, gangs=tuple(gangs)), original, targets


def roll(state: PCSState, gang: GangState, targets: dict[str, str]) -> PCSState:
    """Grove's answer to a step: the stale pods replaced at the target, all Ready."""
    groups = tuple(
        g.model_copy(
            update={"pods": {targets[g.clique]: g.expected}, "ready": {targets[g.clique]: g.expected}}
        )
        if steps.stale(g, targets)
        else g
        for g in gang.groups
    )
    new = gang.model_copy(update={"groups": groups})
    return state.model_copy(update={"gangs": tuple(new if g.name == gang.name else g for g in state.gangs)})


# -- the oracle of availability (independent of rollout_steps) -------------------------------------------
def minimums_held(state: PCSState) -> set[str]:
    """The PodCliques and scaling groups whose minAvailable holds (Ready pods / available replicas)."""
    held = set()
    replicas: dict[str, dict[int, bool]] = {}
    for gang in state.gangs:
        for g in gang.groups:
            ok = sum(g.ready.values()) >= g.min_replicas
            if g.pcsg is None:
                if ok:
                    held.add(g.pclq)
            else:
                assert g.pcsg_replica is not None
                replicas.setdefault(g.pcsg, {})
                replicas[g.pcsg][g.pcsg_replica] = replicas[g.pcsg].get(g.pcsg_replica, True) and ok
    for pcsg, by_j in replicas.items():
        if sum(by_j.values()) >= state.summary.scaling_groups[pcsg]:
            held.add(pcsg)
    return held


def without_stale(state: PCSState, gang: GangState, targets: dict[str, str]) -> PCSState:
    """The moment after the step's deletion: the gang's stale pods gone, replacements not Ready."""
    groups = []
    for g in gang.groups:
        t = targets[g.clique]
        if steps.stale(g, targets):
            groups.append(
                g.model_copy(update={"pods": {t: g.pods.get(t, 0)}, "ready": {t: g.ready.get(t, 0)}})
            )
        else:
            groups.append(g)
    new = gang.model_copy(update={"groups": tuple(groups)})
    return state.model_copy(update={"gangs": tuple(new if g.name == gang.name else g for g in state.gangs)})


# -- the properties, over an implementation --------------------------------------------------------------
NextSteps = Callable[..., list[GangState]]


def check_rollout(next_steps: NextSteps, depth: settings, *, back: bool = False) -> None:
    """Run the rollout loop over random cases; assert concurrency, GREP order, no mix, the end."""

    @depth
    @given(cases())
    def prop(case: dict[str, Any]) -> None:
        state, original, targets = build(case, rolled=case["done"] if back else set())
        if back:
            targets = original  # rolling back from partial progress
        for _ in range(200):
            chosen = next_steps(state, targets, case["concurrency"])
            if not chosen:
                break
            assert len({g.replica for g in chosen}) == len(chosen), "two gangs of one replica in flight"
            assert len(chosen) <= case["concurrency"], "more replicas in flight than the concurrency"
            for g in chosen:
                if g.role != "Anchor":
                    anchors = [a for a in state.gangs if a.replica == g.replica and a.role == "Anchor"]
                    assert all(not steps.needs_roll(a, targets) for a in anchors), (
                        f"tail {g.name} before its anchor"
                    )
                state = roll(state, g, targets)
                assert not steps.mixed(state.gang(g.name), [original, targets])  # type: ignore[arg-type]
        assert all(steps.done(g, targets) for g in state.gangs), "the loop ended with gangs not done"

    prop()


def check_outage(outage: Callable[..., list[str]], depth: settings) -> None:
    """`outage` is empty exactly when the step keeps every minAvailable that held before it."""

    @depth
    @given(cases())
    def prop(case: dict[str, Any]) -> None:
        state, _, targets = build(case, down=case["down"])
        for gang in state.gangs:
            if not steps.needs_roll(gang, targets):
                continue
            before = minimums_held(state)
            after = minimums_held(without_stale(state, gang, targets))
            breaks = bool(before - after)
            assert bool(outage(state, gang, targets)) == breaks, (gang.name, before - after)

    prop()


def check_mixed(mixed: Callable[..., bool], depth: settings) -> None:
    """`mixed` flags a gang exactly when a changed clique has pods of both versions in it."""

    @depth
    @given(cases(), st.data())
    def prop(case: dict[str, Any], data: Any) -> None:
        state, original, targets = build(case)
        for gang in state.gangs:
            groups = []
            for g in gang.groups:
                new = data.draw(st.integers(0, g.expected))
                pods = {
                    k: v
                    for k, v in {original[g.clique]: g.expected - new, targets[g.clique]: new}.items()
                    if v
                }
                if original[g.clique] == targets[g.clique]:
                    pods = {original[g.clique]: g.expected}
                groups.append(g.model_copy(update={"pods": pods}))
            shaped = gang.model_copy(update={"groups": tuple(groups)})
            held = {h for g in groups for h in g.pods if original[g.clique] != targets[g.clique]}
            olds = {original[g.clique] for g in groups} & held
            news = {targets[g.clique] for g in groups} & held
            assert mixed(shaped, [original, targets]) == bool(olds and news), shaped

    prop()


def check_mixed_gangs(depth: settings) -> None:
    """`mixed_gangs` finds exactly the mixed PodGangs (Grove replaced one pod at the target in
    every gang of the first replica), and a repair (a roll to the targets) unmixes each."""

    @depth
    @given(cases())
    def prop(case: dict[str, Any]) -> None:
        state, original, targets = build(case, rolled=case["done"])
        # Grove replaced one pod at the target in every gang of the first replica.
        gangs = []
        for g in state.gangs:
            if g.replica == 0 and g.groups:
                first = g.groups[0]
                t = targets[first.clique]
                pods = dict(first.pods)
                if first.expected > 1 or t not in pods:
                    old = next(iter(pods))
                    pods[old] -= 1
                    pods = {k: v for k, v in pods.items() if v}
                    pods[t] = pods.get(t, 0) + 1
                g = g.model_copy(update={"groups": (first.model_copy(update={"pods": pods}), *g.groups[1:])})
            gangs.append(g)
        state = state.model_copy(update={"gangs": tuple(gangs)})
        found = {g.name for g in steps.mixed_gangs(state, [original, targets])}
        assert found == {g.name for g in state.gangs if steps.mixed(g, [original, targets])}
        for name in found:  # a repair (roll to the targets) unmixes it
            gang = state.gang(name)
            assert gang is not None
            assert not steps.mixed(roll(state, gang, targets).gang(name), [original, targets])  # type: ignore[arg-type]

    prop()
