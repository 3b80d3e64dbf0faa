"""The coherent rollout plan of a PodCliqueSet (GREP-393): a pure function, no I/O.

Per PCS replica `r`:

- `k` minimum-viable PodGangs (MPGs) `<pcs>-<r>-mpg-<i>`, `k` the smallest, over every
  standalone clique (`replicas // minAvailable` pods) and every scaling group
  (`replicas // minAvailable` scaling-group replicas), of how many times the replica's
  minimum fits, at least 1. MPG `i` holds pods `[i*m, (i+1)*m)` of each standalone clique (the
  last MPG also takes the excess pods, as GREP-393 puts them in the highest-index MPG) and
  scaling-group replicas `[i*M, (i+1)*M)`, so each MPG alone satisfies minAvailable;
- one tail PodGang (TPG) `<pcs>-<r>-<group>-<j>` per scaling-group replica `j >= k*M`.

This is the layout Grove's coherent-update shape uses (and the simulated Grove realises), so the
names planned are the PodGangs the rollout finds. Cost: O(pods) in the workflow, computed once
per step from the shape just read (so a scale applied between steps re-plans).
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from contracts.models.grove import PCSShape, PodGangPlan, ReplicaRollout


def effective_min(replicas: int, min_available: int) -> int:
    """Grove's minAvailable as it counts: at least 1, at most the replicas (when there are any)."""
    return max(1, min(min_available, max(replicas, 1)))


def mpg_count(shape: PCSShape) -> int:
    """MPGs per replica: the smallest `replicas // minAvailable` over cliques and groups, >= 1."""
    grouped = {c for g in shape.groups for c in g.cliques}
    ratios = [
        c.replicas // effective_min(c.replicas, c.min_available)
        for c in shape.cliques
        if c.name not in grouped
    ]
    ratios += [g.replicas // max(1, g.min_available) for g in shape.groups]
    return max(1, min(ratios)) if ratios else 1


def plan_replica(shape: PCSShape, replica: int) -> ReplicaRollout:
    """The MPGs and TPGs of one replica; see the module docstring."""
    base = f"{shape.name}-{replica}"
    k = mpg_count(shape)
    cliques = {c.name: c for c in shape.cliques}
    grouped = {c for g in shape.groups for c in g.cliques}
    mpg_pods: list[list[str]] = [[] for _ in range(k)]
    for clique in shape.cliques:
        if clique.name in grouped:
            continue
        n, m = clique.replicas, effective_min(clique.replicas, clique.min_available)
        for i in range(k):
            end = n if i == k - 1 else (i + 1) * m
            mpg_pods[i] += [f"{clique.name}[{p}]" for p in range(i * m, min(end, n))]
    tpgs: list[PodGangPlan] = []
    for group in shape.groups:
        minimum = max(1, group.min_available)
        for j in range(group.replicas):
            pods = [
                f"{group.name}[{j}]/{c}[{p}]"
                for c in group.cliques
                if c in cliques
                for p in range(cliques[c].replicas)
            ]
            if j < k * minimum:
                mpg_pods[j // minimum] += pods
            else:
                tpgs.append(
                    PodGangPlan(
                        name=f"{base}-{group.name}-{j}",
                        replica=replica,
                        minimum_viable=False,
                        pods=tuple(pods),
                    )
                )
    mpgs = tuple(
        PodGangPlan(name=f"{base}-mpg-{i}", replica=replica, minimum_viable=True, pods=tuple(pods))
        for i, pods in enumerate(mpg_pods)
    )
    return ReplicaRollout(replica=replica, mpgs=mpgs, tpgs=tuple(tpgs))


def plan(shape: PCSShape) -> list[ReplicaRollout]:
    """Every replica's rollout, replica 0 first."""
    return [plan_replica(shape, r) for r in range(shape.replicas)]
