"""Which PodGang a rollout replaces next, whether it is done, and what it would cost: pure
functions over the latest `PCSState`. No I/O, no Temporal (the workflow imports this module
passed through its sandbox; the CLI's outage refusal uses it too); O(pods) per call at worst
(O(PodGangs x podgroups)).

Vocabulary (Grove at the pin, `simulators/grove/BEHAVIOUR.md`):

- `targets`: clique -> the pod-template hash the rollout rolls to (every clique of the template;
  an unchanged clique's hash is the same in every version, so its pods are never stale: true
  only because a rollout refuses to start over a template holding an edit its pods do not run,
  `dormant_refusal`).
- A pod is *stale* when its hash is not its clique's target. Rolling a PodGang deletes its stale
  pods at once; Grove recreates them from the PodCliques' current spec (OnDelete [D1]), into
  the same PodGang [D6]. Nothing else is touched, so a one-clique change replaces that clique's
  pods only.
- A PodGang is *done* when each podgroup has its PodClique's replicas, every pod at the target
  and Ready; *serving* when each podgroup has at least `minReplicas` Ready pods; *mixed* when no
  single version (the original or the target) explains every pod it holds.
- Order (GREP-393): per replica its anchor (the minimum-viable PodGang, role Anchor) before its
  tails (Tail, ScaleOut); one PodGang per replica at a time; replicas ascending, up to the
  policy's concurrency.
"""

from __future__ import annotations

from contracts.models.grove import GangState, GroupState, PCSState

Versions = list[dict[str, str]]


def stale(group: GroupState, targets: dict[str, str]) -> int:
    """Pods of the podgroup not at their clique's target."""
    target = targets.get(group.clique)
    return 0 if target is None else sum(n for h, n in group.pods.items() if h != target)


def group_done(group: GroupState, targets: dict[str, str]) -> bool:
    total = sum(group.pods.values())
    return (
        group.terminating == 0
        and total >= group.expected
        and stale(group, targets) == 0
        and sum(group.ready.values()) == total
    )


def done(gang: GangState | None, targets: dict[str, str]) -> bool:
    return gang is not None and all(group_done(g, targets) for g in gang.groups)


def settled(gang: GangState | None) -> bool:
    """Every podgroup has its PodClique's replicas, all Ready, none going (whatever version)."""
    return gang is not None and all(
        g.terminating == 0
        and sum(g.pods.values()) >= g.expected
        and sum(g.ready.values()) == sum(g.pods.values())
        for g in gang.groups
    )


def needs_roll(gang: GangState, targets: dict[str, str]) -> bool:
    return any(stale(g, targets) for g in gang.groups)


def serving(gang: GangState | None) -> bool:
    """Every podgroup has at least `minReplicas` Ready pods."""
    return gang is not None and all(sum(g.ready.values()) >= g.min_replicas for g in gang.groups)


def mixed(gang: GangState, versions: Versions) -> bool:
    """No single version explains every pod the gang holds (gated pods count: they joined)."""
    held = [(g.clique, h) for g in gang.groups for h, n in g.pods.items() if n]
    return bool(held) and not any(all(v.get(c, h) == h for c, h in held) for v in versions)


def ordered(gangs: list[GangState]) -> list[GangState]:
    """A replica's PodGangs in GREP-393 order: anchors (by epoch), then tails by name."""
    return sorted(gangs, key=lambda g: (g.role != "Anchor", g.epoch if g.role == "Anchor" else "", g.name))


def by_replica(state: PCSState) -> dict[int, list[GangState]]:
    out: dict[int, list[GangState]] = {}
    for g in state.gangs:
        if g.replica < state.summary.replicas:
            out.setdefault(g.replica, []).append(g)
    return {r: ordered(gs) for r, gs in sorted(out.items())}


def replacing(gang: GangState, targets: dict[str, str]) -> bool:
    """A step in flight as the world shows it, whoever began it (a run terminated mid-step leaves
    one the next run does not remember): the PodGang is not settled and a podgroup of it is being
    replaced, its pods going, or at the target beside stale ones, short or not Ready. Grove keeps
    its replica's other PodGangs waiting until it is whole (GREP-393: one in flight per replica).
    It over-counts a PodGang that lost a pod after its step: that one is waited for too."""
    if settled(gang):
        return False
    for g in gang.groups:
        target = targets.get(g.clique)
        total, at = sum(g.pods.values()), g.pods.get(target or "", 0)
        if target is not None and (
            g.terminating or (at and (at < total or total < g.expected or sum(g.ready.values()) < total))
        ):
            return True
    return False


def to_take(
    gangs: list[GangState], targets: dict[str, str], first: frozenset[str] = frozenset()
) -> list[GangState]:
    """A replica's PodGangs a rollout to `targets` steps, in the order it takes them: a step in
    flight first (one in `first`, which the run remembers, or `replacing` in the world: finished,
    or taken back, before anything else of its replica), then GREP order (`gangs` is `ordered`)."""
    busy = [g for g in gangs if g.name in first or replacing(g, targets)]
    return [*busy, *(g for g in gangs if g not in busy and needs_roll(g, targets))]


def next_steps(
    state: PCSState,
    targets: dict[str, str],
    concurrency: int,
    first: frozenset[str] = frozenset(),
    replicas_first: frozenset[int] = frozenset(),
) -> list[GangState]:
    """The next PodGang of each of the first `concurrency` replicas that have one to roll
    (`to_take`: a step in flight first, so a replica never has two in flight, even one a run
    before this one left; else its first PodGang in GREP order not at the target); replicas with
    a step in flight before the others, so a rollback takes back a PodGang that does not serve
    before it steps a replica whose step would wait for it to serve (`replicas_first`: the
    replica goes first, its PodGangs still in GREP order, so a tail is never taken before its
    anchor). A step in flight with no pod left to replace is taken too: its step deletes nothing
    and waits until it is whole."""
    chosen = []
    replicas = {r: to_take(gangs, targets, first) for r, gangs in by_replica(state).items()}
    busy = set(replicas_first) | {
        r
        for r, gangs in replicas.items()
        if gangs and (gangs[0].name in first or replacing(gangs[0], targets))
    }
    for r in sorted(replicas, key=lambda r: (r not in busy, r)):
        if replicas[r]:
            chosen.append(replicas[r][0])
        if len(chosen) >= concurrency:
            break
    return chosen


def outage(state: PCSState, gang: GangState, targets: dict[str, str]) -> list[str]:
    """Why replacing `gang`'s stale pods would break a minAvailable that holds now (empty: it
    would not): a standalone PodClique left with fewer Ready pods than its minAvailable, or a
    scaling group with fewer available replicas than its minAvailable. One already below is not
    made worse by the step, so it is not a reason."""
    reasons = []
    broken: set[tuple[str, int]] = set()
    for g in gang.groups:
        if not stale(g, targets) or sum(g.ready.values()) < g.min_replicas:
            continue
        target = targets.get(g.clique)
        left = g.ready.get(target, 0) if target is not None else 0
        if left >= g.min_replicas:
            continue
        if g.pcsg is None:
            reasons.append(
                f"PodClique {g.pclq} would keep {left} Ready pods of minAvailable {g.min_replicas}"
            )
        elif g.pcsg_replica is not None:
            broken.add((g.pcsg, g.pcsg_replica))
    for pcsg in sorted({p for p, _ in broken}):
        now: dict[int, bool] = {}
        for other in state.gangs:
            for g in other.groups:
                if g.pcsg == pcsg and g.pcsg_replica is not None:
                    ok = sum(g.ready.values()) >= g.min_replicas
                    now[g.pcsg_replica] = now.get(g.pcsg_replica, True) and ok
        minimum = state.summary.scaling_groups.get(pcsg, 1)
        before = sum(now.values())
        after = sum(ok and (pcsg, j) not in broken for j, ok in now.items())
        if before >= minimum > after:
            reasons.append(
                f"scaling group {pcsg} would keep {after} available replicas of minAvailable {minimum}"
            )
    return reasons


def unhealthy(state: PCSState, skip: set[str]) -> list[str]:
    """PodGangs of live replicas outside `skip` that are not serving."""
    return [g.name for gs in by_replica(state).values() for g in gs if g.name not in skip and not serving(g)]


def mixed_gangs(state: PCSState, versions: Versions) -> list[GangState]:
    return [g for gs in by_replica(state).values() for g in gs if mixed(g, versions)]


def versions_held(state: PCSState, targets: dict[str, str], others: Versions) -> tuple[int, int, int]:
    """The PodGangs of live replicas whose pods are all at `targets`, all at one of `others`
    (and not at the targets), or neither (mixed, or a step's replacements not there yet)."""
    at = before = neither = 0
    for g in (g for gs in by_replica(state).values() for g in gs):
        if not needs_roll(g, targets):
            at += 1
        elif any(not needs_roll(g, v) for v in others):
            before += 1
        else:
            neither += 1
    return at, before, neither


def progress(state: PCSState | None, targets: dict[str, str]) -> tuple[int, int]:
    """(PodGangs done at the targets, PodGangs of live replicas)."""
    if state is None or not targets:
        return 0, len(state.gangs) if state else 0
    gangs = [g for gs in by_replica(state).values() for g in gs]
    return sum(done(g, targets) for g in gangs), len(gangs)


def rewritten(state: PCSState, images: dict[str, str]) -> set[str]:
    """The cliques whose template the write of `images` (`clique[/container]` -> image) changes:
    a container whose image already holds is no change ("clique" alone: its only container).
    A key the summary cannot resolve counts as a change (the write itself refuses an unknown one)."""
    known = state.summary.images
    out = set()
    for key, image in images.items():
        clique, _, container = key.partition("/")
        if clique not in state.summary.clique_hashes:
            continue
        mine = {k: v for k, v in known.items() if k.partition("/")[0] == clique}
        at = f"{clique}/{container}" if container else (next(iter(mine)) if len(mine) == 1 else "")
        if known.get(at) != image:
            out.add(clique)
    return out


def plan_targets(state: PCSState, images: dict[str, str]) -> dict[str, str]:
    """Before the write: clique -> the hash the rollout will roll to, as far as it is known: the
    template's for a clique the write leaves as it is, a placeholder for one it rewrites (Grove
    names the hash once it sees the write). The same judgement the run makes from the pods'
    versions: an image already running is no step, a rollout cut short is finished where it
    stopped."""
    targets = dict(state.summary.clique_hashes)
    targets.update({c: f"new:{c}" for c in rewritten(state, images)})
    return targets


def dormant_edits(state: PCSState, images: dict[str, str]) -> list[str]:
    """The cliques whose template holds an edit their pods do not run (Grove leaves an edit
    dormant under OnDelete, a rollback puts someone else's edits back dormant), each with what
    differs; the rollout refuses to start over them, as it never rolls an edit it did not make.
    A clique the rollout does not name must have every pod at its template's hash (else its
    targets would roll them); one it names must have a pod at it (its own write then replaces
    the container's image only: a rollout cut short is finished, an edit no pod runs is not
    taken along)."""
    named = {key.partition("/")[0] for key in images}
    pods: dict[str, dict[str, int]] = {}
    for gangs in by_replica(state).values():
        for gang in gangs:
            for g in gang.groups:
                held = pods.setdefault(g.clique, {})
                for h, n in g.pods.items():
                    held[h] = held.get(h, 0) + n
    out = []
    for clique, at in sorted(state.summary.clique_hashes.items()):
        held = {h: n for h, n in pods.get(clique, {}).items() if n}
        if not held or (held.get(at, 0) if clique in named else set(held) == {at}):
            continue
        runs = ", ".join(f"{n} at {h}" for h, n in sorted(held.items()))
        out.append(f"clique {clique}: its template is at {at}, its pods run {runs}")
    return out


def dormant_refusal(state: PCSState, pcs: str, images: dict[str, str]) -> str | None:
    """Why the rollout refuses a template that holds an edit no rollout of it made (None: none)."""
    found = dormant_edits(state, images)
    if not found:
        return None
    return (
        f"the template of {pcs} holds an edit its pods do not run ({'; '.join(found)}): rolling would put "
        "it on every pod it replaces, and a rollout never rolls an edit it did not make. Review it "
        f"(`kubectl -n {state.summary.namespace} get pcs {state.summary.name} -o yaml --show-managed-fields`"
        "), then put it back as the pods run it, or roll that clique yourself"
    )


def planned(state: PCSState, targets: dict[str, str]) -> list[tuple[GangState, int, list[str]]]:
    """Before the template is written: the PodGangs a rollout to `targets` (`plan_targets`)
    replaces, in its order (replicas ascending; in each its anchor, then its tails), each with
    the pods it replaces and why replacing them would break a minAvailable (the
    `--allow-replica-outage` question). What `rollout plan` shows and `outage_refusal` refuses."""
    out = []
    for gangs in by_replica(state).values():
        for g in to_take(gangs, targets):
            out.append((g, sum(stale(x, targets) for x in g.groups), outage(state, g, targets)))
    return out


def outage_refusal(state: PCSState, pcs: str, images: dict[str, str]) -> str | None:
    """Why rolling `images` (`clique[/container]` -> image) coherently would take replicas below
    minAvailable, or None: the refusal the workflow's first step and `metalflow rollout start`'s
    pre-check both give when `--allow-replica-outage` is not set."""
    changed = {key.partition("/")[0] for key in images} & set(state.summary.clique_hashes)
    reasons = [f"{g.name}: {r}" for g, _, why in planned(state, plan_targets(state, images)) for r in why]
    if not reasons:
        return None
    shown = "; ".join(reasons[:3]) + (f"; and {len(reasons) - 3} more" if len(reasons) > 3 else "")
    return (
        f"rolling {', '.join(sorted(changed))} of {pcs} coherently takes replicas below minAvailable: "
        f"{shown}. Grove (v0.1.0-alpha.12) holds all of a replica's standalone pods and its first "
        "minAvailable scaling-group replicas in one anchor PodGang, which is replaced whole. Allow it "
        "with --allow-replica-outage (one replica down at a time)"
    )
