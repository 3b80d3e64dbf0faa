"""The Grove invariant checks: what a rollout client must never do, recorded as violations.

- `podgang-mixed-template-hashes`: a PodGang whose pieces are not all of one generation hash.
  The pieces are the gang's own `grove.io/podcliqueset-generation-hash` label, the hash each
  referenced pod was created at (in its name), and the same label on every scaling-group
  PodClique the gang holds (each belongs to exactly one gang; standalone PodCliques are shared
  by the MPGs of a replica and their label is not counted). A client commits it by rolling a
  piece of a gang instead of the gang (deleting a PodClique or a PodCliqueScalingGroup while
  the template is newer than the gang) or by editing one of those hash labels.
- `multiple-minimum-viable-podgangs-in-flight`: more than one MPG of one PodCliqueSet replica is
  in flight at once. In flight: (re)created to replace an earlier incarnation (a deletion, a
  roll, or a member PodClique recreated) and not Available since. First creation (a new
  PodCliqueSet or scale-out) is not in flight.
- `replica-below-min-available`: a client's removal (of a PodGang, PodClique or scaling group)
  leaves a PodCliqueSet replica unavailable in the CRD's sense (a standalone PodClique below
  its minAvailable ready pods, or a scaling group below its minAvailable available replicas),
  when that could have been avoided: the replica holds two or more MPGs (rolling one at a time
  while the others are Available keeps it serving), or another replica of the PodCliqueSet is
  unavailable too. A replica with a single MPG cannot be rolled without taking it down; that is
  accepted while every other replica is available (it is what Grove's own rolling update does).
  Evaluated when the removal is seen, so a replica that falls back on its own is not a
  violation, but removing a unit while the replica's other MPGs are not Available is.
- `step-started-before-previous-available`: a client removes a PodGang of a replica while
  another PodGang of that replica it rolled is still in flight (recreated, not Available since):
  the next step started before the previous one was Available. The TPGs of a replica form one
  step, so removing a TPG while only TPGs are in flight is not one; replicas are independent
  (rolling several at once is the rollout's concurrency).
"""

from __future__ import annotations

from simulators.grove.model import (
    GENERATION_HASH,
    MINIMUM_VIABLE_UNIT,
    REPLICA_INDEX,
    Object,
    ReplicaPlan,
    pod_hash,
)
from simulators.grove.status import clique_minimums, pods_of, replica_available
from simulators.violations import (
    MULTIPLE_MINIMUM_VIABLE_PODGANGS_IN_FLIGHT,
    PODGANG_MIXED_TEMPLATE_HASHES,
    REPLICA_BELOW_MIN_AVAILABLE,
    STEP_STARTED_BEFORE_PREVIOUS_AVAILABLE,
    Violations,
)

Key = tuple[str, str]


def gang_hashes(gang: Object, pclqs: dict[str, Object]) -> dict[str, set[str]]:
    """Generation hash -> the pieces of the gang at that hash."""
    found: dict[str, set[str]] = {}
    name = gang["metadata"]["name"]
    own = (gang["metadata"].get("labels") or {}).get(GENERATION_HASH, "")
    found.setdefault(own, set()).add(f"PodGang {name} label")
    for group in gang["spec"].get("podgroups", []):
        for ref in group.get("podReferences", []):
            found.setdefault(pod_hash(group["name"], ref["name"]), set()).add(f"pod {ref['name']}")
        pclq = pclqs.get(group["name"])
        if (
            pclq is not None
            and pclq["metadata"]["labels"].get("app.kubernetes.io/component") == "pcsg-podclique"
        ):
            found.setdefault(pclq["metadata"]["labels"].get(GENERATION_HASH, ""), set()).add(
                f"PodClique {group['name']} label"
            )
    return found


class Checks:
    def __init__(self, violations: Violations) -> None:
        self._violations = violations
        self._reported: set[tuple[object, ...]] = set()

    def _record(self, dedup: tuple[object, ...], kind: str, subject: str, detail: str) -> None:
        if dedup not in self._reported:
            self._reported.add(dedup)
            self._violations.record(kind, subject, detail)

    def run(
        self,
        pcs: Object,
        hash_: str,
        plans: list[ReplicaPlan],
        gangs: dict[str, Object],
        pclqs: dict[str, Object],
        in_flight: set[Key],
        removed: set[int],
    ) -> None:
        ns, name = pcs["metadata"]["namespace"], pcs["metadata"]["name"]
        for gang in gangs.values():
            hashes = gang_hashes(gang, pclqs)
            if len(hashes) > 1:
                detail = "; ".join(
                    f"{h or '(none)'}: {', '.join(sorted(p))}" for h, p in sorted(hashes.items())
                )
                self._record(
                    ("mixed", gang["metadata"]["uid"], frozenset(hashes)),
                    PODGANG_MIXED_TEMPLATE_HASHES,
                    f"{ns}/{gang['metadata']['name']}",
                    f"pieces of one PodGang at different generation hashes (current {hash_}): {detail}",
                )
        for plan in plans:
            flying = sorted(
                g["metadata"]["name"]
                for g in gangs.values()
                if (ns, g["metadata"]["name"]) in in_flight
                and g["metadata"]["labels"].get(MINIMUM_VIABLE_UNIT) == "true"
                and g["metadata"]["labels"].get(REPLICA_INDEX) == str(plan.replica)
            )
            if len(flying) > 1:
                self._record(
                    (
                        "flight",
                        ns,
                        name,
                        plan.replica,
                        frozenset(gangs[g]["metadata"]["uid"] for g in flying),
                    ),
                    MULTIPLE_MINIMUM_VIABLE_PODGANGS_IN_FLIGHT,
                    f"{ns}/{name}-{plan.replica}",
                    f"{len(flying)} minimum-viable PodGangs of replica {plan.replica} in flight at once "
                    f"({', '.join(flying)}); roll one and wait for Available=True before the next",
                )
        if not removed:
            return
        pods, mins = pods_of(gangs), clique_minimums(pclqs)
        down = {p.replica for p in plans if not replica_available(p, pods, mins)}
        for plan in plans:
            if plan.replica not in removed or plan.replica not in down:
                continue
            others = sorted(down - {plan.replica})
            if plan.mpg_count < 2 and not others:
                continue
            why = (
                f"it holds {plan.mpg_count} minimum-viable PodGangs and none is Available"
                if plan.mpg_count >= 2
                else f"replicas {others} are unavailable too"
            )
            self._violations.record(
                REPLICA_BELOW_MIN_AVAILABLE,
                f"{ns}/{name}-{plan.replica}",
                f"a client removal left replica {plan.replica} below its minAvailable: {why}",
            )

    def step_started(self, namespace: str, plan: ReplicaPlan, gang: str, in_flight: set[Key]) -> None:
        """A client removed `gang` of `plan`'s replica; see the module docstring."""
        mpg = {g.name: g.mpg for g in plan.gangs}
        flying = sorted(g for g in mpg if g != gang and (namespace, g) in in_flight)
        if not flying or (not mpg.get(gang, False) and not any(mpg[g] for g in flying)):
            return
        self._violations.record(
            STEP_STARTED_BEFORE_PREVIOUS_AVAILABLE,
            f"{namespace}/{gang}",
            f"PodGang {gang} was removed while {', '.join(flying)} of replica {plan.replica} "
            "was still in flight (not Available since it was recreated)",
        )
