"""The rules an operator stakes a fleet on (README, "Rolling Grove workloads"), as code: each
function returns the violations of one rule (empty: it holds), from the rollout's state and what
Grove shows. `tests/fast/test_rollout_model.py` checks them after every step of a Hypothesis
state machine that drives `RolloutState` through random orders of steps, Grove's replacements,
foreign edits, operator answers, continue-as-new and worker restarts; each is shown there to
fail on a deliberately broken core.

1. **Liveness** (`liveness`): a run that has not ended has a step in flight, a timer with its wake
   time and reason, a move it makes at once, or an operator's pause; its status names which.
2. **Writes** (`write`): every template write of the rollout sets each clique to its target (the
   original with the rollout's images), its recorded original, or, once every pod is back, the
   edit someone else made to it (put back dormant): never a third version of its own.
3. **Rolls** (`roll`): the rollout deletes a pod only where the template's version of its clique
   is one the rollout made (so the replacement runs it), never onto an edit it did not make;
   no deletion (a step, a repair, a heal) breaks a minAvailable that holds unless an outage is
   allowed; an ordinary step (roll or rollback) only while the rest of its replica serves; a
   repair only of a PodGang Grove mixed.
4. **Endings** (`ended`): completed, every pod at the targets; rolled back or aborted (but off
   OnDelete, where an abort takes nothing back), every pod at the recorded original, the
   template's cliques at the original except those someone else edited, which hold that edit,
   dormant (no pod runs it).
5. **Announced** (`announced`): a rollback says from its start where it ends: the version before
   the rollout.

Pure: no Temporal, no clock, no I/O (a `lint-imports` contract).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from contracts.models.grove import PCSState, RolloutPolicy, RolloutResult, RolloutStatus
from workflows.rollout import steps
from workflows.rollout.state import ENDED, RolloutState

Clique = dict[str, Any]


def liveness(state: RolloutState, phase: str, status: RolloutStatus) -> list[str]:
    """Rule 1: the run is ended, paused, has a step in flight, a timer, or a move to make at
    once (not a wait on an outage: that is a pause), and its status names which."""
    doing, why, wake = state.activity(phase)
    out = []
    if (status.doing, status.activity, status.wake_at) != (doing, why, wake):
        out.append(f"the status says {status.doing} ({status.activity}), the run {doing} ({why})")
    if phase in ENDED:
        return out
    if (phase == "paused") != (state.paused_reason is not None):
        out.append(f"phase {phase} with paused reason {state.paused_reason!r}")
    if doing == "paused" and not why:
        out.append("paused with no reason")
    if doing == "in-flight" and wake is None:
        out.append(f"a step in flight ({why}) with no deadline")
    if doing == "timer" and (wake is None or not why):
        out.append(f"a timer with no wake time or reason ({wake}, {why!r})")
    return out


def _images(clique: Clique) -> dict[str, str]:
    pod_spec = (clique.get("spec") or {}).get("podSpec") or {}
    return {
        str(x.get("name")): str(x.get("image"))
        for x in [*(pod_spec.get("initContainers") or []), *(pod_spec.get("containers") or [])]
    }


def _without_images(clique: Clique) -> Clique:
    spec = dict(clique.get("spec") or {})
    pod_spec = dict(spec.get("podSpec") or {})
    for field in ("initContainers", "containers"):
        if field in pod_spec:
            pod_spec[field] = [{k: v for k, v in x.items() if k != "image"} for x in pod_spec[field]]
    return {**clique, "spec": {**spec, "podSpec": pod_spec}}


def _by_name(cliques: tuple[Clique, ...] | list[Clique]) -> dict[str, Clique]:
    return {str(c.get("name")): c for c in cliques}


def write(state: RolloutState, before: tuple[Clique, ...], after: tuple[Clique, ...]) -> list[str]:
    """Rule 2, for one template write of the rollout (`before` and `after` the write)."""
    ours: dict[str, dict[str, str]] = {}
    for f in state.fields:
        clique, _, container = f.path.partition("/")
        ours.setdefault(clique, {})[container] = f.after
    original = _by_name(state.original_cliques)
    was, now = _by_name(before), _by_name(after)
    out = []
    for name, c in now.items():
        old = was.get(name)
        if c == old:
            continue
        forward = (
            old is not None
            and _without_images(c) == _without_images(old)
            and all(ours.get(name, {}).get(k) == v for k, v in _images(c).items() if _images(old).get(k) != v)
        )
        restored = c == original.get(name)
        dormant = state.dormant.get(name) == c and old == original.get(name)
        if not (forward or restored or dormant):
            out.append(f"the rollout wrote clique {name} as a version it did not make: {c}")
    return out


def roll(
    state: RolloutState,
    world: PCSState,
    gang: str,
    targets: dict[str, str],
    *,
    kind: str,
    policy: RolloutPolicy,
    made: Callable[[str, str], bool] | None = None,
    versions: list[dict[str, str]] | None = None,
) -> list[str]:
    """Rule 3, for one `roll_podgang` call that deletes (`kind`: roll, rollback, repair, or heal
    by the paused guard), against the world as it is when the call deletes. `made`: whether a
    clique's version is one the rollout made (wrote, or its operator adopted on `resume`), as an
    observer of its writes knows it, and `versions` the whole versions it made (the original
    first); by default the state's own account (`RolloutState.made`, `versions`)."""
    made = made or state.made
    g = world.gang(gang)
    if g is None:
        return []
    out = []
    template = world.summary.clique_hashes
    for group in g.groups:
        if not steps.stale(group, targets):
            continue
        c, target = group.clique, targets[group.clique]
        if template.get(c) != target:
            out.append(f"{kind} of {gang} deletes {c} pods for {target}; they come back at {template.get(c)}")
        if not made(c, target):
            out.append(f"{kind} of {gang} rolls {c} onto {target}, an edit the rollout did not make")
    if not policy.allow_replica_outage:
        out += [f"{kind} of {gang}: {r}, no outage allowed" for r in steps.outage(world, g, targets)]
    if kind in ("roll", "rollback"):
        peers = steps.by_replica(world).get(g.replica, [])
        down = sorted(p.name for p in peers if p.name != gang and not steps.serving(p))
        if down:
            out.append(f"{kind} of {gang} deletes while {', '.join(down)} of its replica do not serve")
    if kind == "repair" and not steps.mixed(g, state.versions() if versions is None else versions):
        out.append(f"a repair of {gang}, which one of the rollout's versions explains (not mixed)")
    return out


def ended(
    state: RolloutState,
    world: PCSState,
    outcome: str,
    *,
    made: Callable[[str, str], bool] | None = None,
    theirs: frozenset[str] = frozenset(),
    dormant: dict[str, Clique] | None = None,
) -> list[str]:
    """Rule 4, as the run ends with `outcome` (completed, rolled-back, aborted; a failure, and an
    abort off OnDelete, which takes nothing back and says so, are not checked here), against the
    world then. A pod at a
    version the rollout did not make, and a clique in `theirs` (someone else changed it after
    the rollout last wrote it), are someone else's, not the rollout's to restore. `made` as for
    `roll`; `dormant`: each clique someone else edited, as the rollback must leave it (their
    edit, with the rollout's fields at their recorded values), as an observer of the edits knows
    it; by default the state's own record."""
    if outcome not in ("completed", "rolled-back", "aborted"):
        return []
    made = made or state.made
    want = state.targets if outcome == "completed" else state.original
    out = []
    for gangs in steps.by_replica(world).values():
        for g in gangs:
            for group in g.groups:
                c = group.clique
                off = {h: n for h, n in group.pods.items() if n and h != want.get(c, h) and made(c, h)}
                if off:
                    out.append(f"{outcome}: {g.name} {c} runs {off}, not {want.get(c)}")
    if outcome == "completed" or not state.original_cliques:
        return out
    original, now = _by_name(state.original_cliques), _by_name(world.cliques)
    for name, entry in original.items():
        if name in state.dormant_left or name in theirs:
            continue  # someone else changed it again since: theirs
        if dormant is not None:
            expected = dormant.get(name, entry)
        else:
            expected = state.dormant.get(name, entry) if state.dormant_back else entry
        if now.get(name) != expected:
            what = "its original" if expected == entry else "the edit someone else made"
            out.append(f"{outcome}: clique {name} does not hold {what}: {now.get(name)}")
    return out


def announced(state: RolloutState, status: RolloutStatus, result: RolloutResult | None = None) -> list[str]:
    """Rule 5: rolling back, the status (and the result) name the version before the rollout."""
    out = []
    if state.rolling_back and status.target_hash != state.previous_hash:
        out.append(f"rolling back, the status announces {status.target_hash}, not {state.previous_hash}")
    if result is not None and result.outcome == "rolled-back" and result.target_hash != state.previous_hash:
        out.append(f"rolled back, the result says {result.target_hash}, not {state.previous_hash}")
    return out
