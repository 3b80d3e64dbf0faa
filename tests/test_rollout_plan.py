"""Property tests of the coherent rollout plan (workflows/rollout_plan.py) over random shapes."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.models.grove import CliqueShape, PCSShape, ScalingGroupShape
from workflows.rollout_plan import plan, plan_replica


@st.composite
def shapes(draw: st.DrawFn) -> PCSShape:
    def clique(name: str, most: int) -> CliqueShape:
        replicas = draw(st.integers(1, most))
        return CliqueShape(name=name, replicas=replicas, min_available=draw(st.integers(1, replicas)))

    standalone = [clique(f"s{i}", 6) for i in range(draw(st.integers(0, 3)))]
    groups, members = [], []
    for g in range(draw(st.integers(0 if standalone else 1, 2))):
        mine = [clique(f"g{g}c{i}", 3) for i in range(draw(st.integers(1, 2)))]
        members += mine
        replicas = draw(st.integers(1, 6))
        groups.append(
            ScalingGroupShape(
                name=f"g{g}",
                cliques=tuple(c.name for c in mine),
                replicas=replicas,
                min_available=draw(st.integers(1, replicas)),
            )
        )
    return PCSShape(
        name="pcs",
        replicas=draw(st.integers(1, 3)),
        cliques=tuple(standalone + members),
        groups=tuple(groups),
    )


def every_pod(shape: PCSShape) -> Counter[str]:
    grouped = {c for g in shape.groups for c in g.cliques}
    by_name = {c.name: c for c in shape.cliques}
    pods = [f"{c.name}[{p}]" for c in shape.cliques if c.name not in grouped for p in range(c.replicas)]
    for g in shape.groups:
        pods += [
            f"{g.name}[{j}]/{c}[{p}]"
            for j in range(g.replicas)
            for c in g.cliques
            for p in range(by_name[c].replicas)
        ]
    return Counter(pods)


@settings(max_examples=300, deadline=None)
@given(shapes())
def test_every_pod_is_in_exactly_one_podgang(shape: PCSShape) -> None:
    for replica in plan(shape):
        planned = Counter(p for gang in (*replica.mpgs, *replica.tpgs) for p in gang.pods)
        assert planned == every_pod(shape)
        names = [g.name for g in (*replica.mpgs, *replica.tpgs)]
        assert len(names) == len(set(names))


@settings(max_examples=300, deadline=None)
@given(shapes())
def test_mpg_count_is_the_smallest_ratio_and_the_rest_goes_to_tail_podgangs(shape: PCSShape) -> None:
    grouped = {c for g in shape.groups for c in g.cliques}
    ratios = [c.replicas // c.min_available for c in shape.cliques if c.name not in grouped]
    ratios += [g.replicas // g.min_available for g in shape.groups]
    replica = plan_replica(shape, 0)
    assert len(replica.mpgs) == min(ratios)
    expected_tails = {
        f"pcs-0-{g.name}-{j}"
        for g in shape.groups
        for j in range(len(replica.mpgs) * g.min_available, g.replicas)
    }
    assert {t.name for t in replica.tpgs} == expected_tails
    for tail in replica.tpgs:  # one scaling-group replica each
        assert len({p.split("/")[0] for p in tail.pods}) == 1
        assert not tail.minimum_viable


@settings(max_examples=300, deadline=None)
@given(shapes())
def test_each_minimum_viable_podgang_alone_satisfies_min_available(shape: PCSShape) -> None:
    grouped = {c for g in shape.groups for c in g.cliques}
    by_name = {c.name: c for c in shape.cliques}
    for mpg in plan_replica(shape, 0).mpgs:
        pods = set(mpg.pods)
        for c in shape.cliques:
            if c.name not in grouped:
                assert sum(p.startswith(f"{c.name}[") for p in pods) >= c.min_available, (mpg, c)
        for g in shape.groups:
            members = [(c, p) for c in g.cliques for p in range(by_name[c].replicas)]
            whole = [
                j for j in range(g.replicas) if all(f"{g.name}[{j}]/{c}[{p}]" in pods for c, p in members)
            ]
            assert len(whole) >= g.min_available, (mpg, g)


@settings(max_examples=200, deadline=None)
@given(shapes(), st.data())
def test_rolling_step_by_step_never_mixes_hashes_inside_a_podgang(
    shape: PCSShape, data: st.DataObject
) -> None:
    replicas = plan(shape)
    hashes = {(r.replica, p): "old" for r in replicas for g in (*r.mpgs, *r.tpgs) for p in g.pods}
    # Roll forward, then roll back from a random point, one planned step at a time.
    steps = [(r.replica, step) for r in replicas for step in r.steps()]
    stop = data.draw(st.integers(0, len(steps)))
    sequence = [(s, "new") for s in steps[:stop]] + [(s, "old") for s in steps[:stop]]
    for (replica, step), target in sequence:
        for gang in step:
            for pod in gang.pods:
                hashes[(replica, pod)] = target
        for r in replicas:
            for gang in (*r.mpgs, *r.tpgs):
                assert len({hashes[(r.replica, p)] for p in gang.pods}) == 1, gang.name
    assert set(hashes.values()) <= {"old"}


def test_the_site_default_inference_shape() -> None:
    shape = PCSShape(
        name="inference",
        replicas=2,
        cliques=(
            CliqueShape(name="router", replicas=2, min_available=1),
            CliqueShape(name="prefill", replicas=1, min_available=1),
            CliqueShape(name="decode", replicas=1, min_available=1),
        ),
        groups=(
            ScalingGroupShape(name="workers", cliques=("prefill", "decode"), replicas=3, min_available=1),
        ),
    )
    replica = plan_replica(shape, 1)
    assert [g.name for g in replica.mpgs] == ["inference-1-mpg-0", "inference-1-mpg-1"]
    assert replica.mpgs[0].pods == ("router[0]", "workers[0]/prefill[0]", "workers[0]/decode[0]")
    assert [g.name for g in replica.tpgs] == ["inference-1-workers-2"]
    assert [[g.name for g in s] for s in replica.steps()] == [
        ["inference-1-mpg-0"],
        ["inference-1-mpg-1"],
        ["inference-1-workers-2"],
    ]
