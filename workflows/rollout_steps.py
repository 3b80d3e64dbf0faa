"""Which PodGangs a rollout rolls next, and whether they are done: pure functions over the plan
(`rollout_plan`) and the latest `PCSState`. No I/O; O(PodGangs) per call.

A PodGang is *stale* when it is missing (Grove is recreating it) or not at the target hash; it
is *ok* when it is at the target hash, not being deleted, and its condition (`Available` or
`Ready`, the rollout's policy) is True. A PodGang outside the step is *healthy* when its
condition is True at whatever hash (the later steps' gangs are still at the old one).
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from contracts.models.grove import PCSState, PodGangPlan, PodGangState, ReplicaRollout


def healthy(gang: PodGangState | None, condition: str) -> bool:
    if gang is None or gang.deleting:
        return False
    return gang.ready if condition == "Ready" else gang.available


def ok(gang: PodGangState | None, target: str, condition: str) -> bool:
    return gang is not None and gang.hash == target and healthy(gang, condition)


def stale(gang: PodGangState | None, target: str) -> bool:
    return gang is None or gang.hash != target


def next_steps(
    plan: list[ReplicaRollout], state: PCSState, target: str, concurrency: int, condition: str
) -> list[tuple[int, tuple[PodGangPlan, ...]]]:
    """For each of the first `concurrency` replicas with a stale PodGang (those with a stale
    PodGang that is down first), its next step: the first step holding a stale PodGang that is
    down (rolling it costs no availability, and a rollback must take the stuck step back first),
    else the first step holding a stale one. A replica of a single MPG goes down while it is
    rolled, so concurrency is 1 then."""
    if any(len(r.mpgs) < 2 for r in plan):
        concurrency = 1
    candidates = []
    for replica in plan:
        pending = [s for s in replica.steps() if any(stale(state.gang(g.name), target) for g in s)]
        down = [s for s in pending if any(not healthy(state.gang(g.name), condition) for g in s)]
        if pending:
            candidates.append((not down, replica.replica, (down or pending)[0]))
    # A replica whose stale step is down goes first: every other step would wait for it.
    candidates.sort(key=lambda c: c[0])
    return [(replica, step) for _, replica, step in candidates[:concurrency]]


def unhealthy(plan: list[ReplicaRollout], state: PCSState, condition: str, skip: set[str]) -> list[str]:
    """Planned PodGangs outside `skip` whose condition is not True (or that are missing)."""
    return [
        g.name
        for r in plan
        for g in (*r.mpgs, *r.tpgs)
        if g.name not in skip and not healthy(state.gang(g.name), condition)
    ]


def repair_steps(plan: list[ReplicaRollout], state: PCSState, condition: str) -> list[str]:
    """After `resume`: the PodGangs to recreate because they are present but not healthy, per
    replica the first such MPG, or else its unhealthy TPGs (never two MPGs of a replica)."""
    chosen: list[str] = []
    for r in plan:
        broken = [
            g
            for g in (*r.mpgs, *r.tpgs)
            if (s := state.gang(g.name)) is not None and not healthy(s, condition)
        ]
        mpgs = [g.name for g in broken if g.minimum_viable]
        chosen += mpgs[:1] or [g.name for g in broken]
    return chosen


def progress(
    plan: list[ReplicaRollout], state: PCSState | None, target: str, condition: str
) -> tuple[int, int]:
    """(PodGangs at the target hash and ok, planned PodGangs)."""
    gangs = [g for r in plan for g in (*r.mpgs, *r.tpgs)]
    if state is None or not target:
        return 0, len(gangs)
    return sum(ok(state.gang(g.name), target, condition) for g in gangs), len(gangs)
