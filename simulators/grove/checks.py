"""The Grove invariant checks: what a client of Grove must never cause, recorded as violations.

Each reads the pods (Grove's own truth of what runs), never a label a client could reason from:

- `podgang-mixed-template-hashes`: a PodGang holds pods of two template versions. A version is a
  template the PodCliqueSet has had (clique -> `grove.io/pod-template-hash`, remembered from
  every template the controller reconciled); a gang is coherent when one version explains every
  pod it holds (gated ones included: they joined). Caused by replacing part of a gang, or by a
  pod Grove replaced at the PodCliqueSet's template while the gang is at another.
- `podclique-below-min-available`: a client's removal (a pod, or a PodClique) leaves a
  standalone PodClique with fewer Ready pods than its minAvailable, or a scaling group with
  fewer available replicas than its minAvailable. Counted when the removal is seen. A
  single-gang replica (Grove's default shape, `minAvailable = replicas`) cannot be rolled
  without it; a client that means to pays it knowingly, and it is still recorded.
- `pod-without-podgang`: a client deleted a PodGang while pods labelled for it exist: they are
  without their gang until Grove's next reconcile recreates it [D5].
- `gang-termination-triggered`: Grove deleted a replica's (or a scaling-group replica's)
  PodCliques because one stayed below minAvailable past terminationDelay [T3].
- `grep-393-order`: a step order GREP-393 forbids, judged when a client removes a pod: (a) the
  first removal in a tail PodGang (role Tail or ScaleOut) while its replica's anchor still holds
  pods not at the PodCliqueSet's current template (every minimum-viable gang before its tails;
  removals in a PodGang already in flight continue or take back that step), or (b) a removal in
  a second PodGang of a replica while another of the same replica is still in flight (its
  replaced pods not all Ready since a client removed some): one step at a time per replica.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulators.grove.model import (
    ANCHOR,
    COMPONENT,
    PART_OF,
    PCSG,
    POD_TEMPLATE_HASH,
    PODCLIQUE,
    PODGANG,
    PODGANG_ROLE,
    REPLICA_INDEX,
    Object,
    pod_ready,
    terminating,
)
from simulators.violations import (
    GANG_TERMINATION_TRIGGERED,
    GREP_393_ORDER,
    POD_WITHOUT_PODGANG,
    PODCLIQUE_BELOW_MIN_AVAILABLE,
    PODGANG_MIXED_TEMPLATE_HASHES,
    Violations,
)

if TYPE_CHECKING:
    from simulators.grove.controller import GroveController

Key = tuple[str, str]


def coherent(pods: list[tuple[str, str]], versions: list[dict[str, str]]) -> bool:
    """One version explains every (clique, pod-template-hash) pair."""
    return any(all(v.get(c) == h for c, h in pods) for v in versions)


class Checks:
    def __init__(self, violations: Violations) -> None:
        self._violations = violations
        self._reported: set[tuple[object, ...]] = set()
        self.versions: dict[Key, dict[str, dict[str, str]]] = {}  # pcs -> hash -> clique -> pod hash
        self.in_flight: dict[Key, str] = {}  # PodGang -> replica index, since a client removed pods of it
        self.current: dict[Key, str] = {}  # pcs -> the generation hash last reconciled
        self.timeline: dict[Key, list[tuple[int, str]]] = {}  # pcs -> (resourceVersion, hash)

    def _record(self, dedup: tuple[object, ...], kind: str, subject: str, detail: str) -> None:
        if dedup not in self._reported:
            self._reported.add(dedup)
            self._violations.record(kind, subject, detail)

    def saw_version(self, pcs: Key, hash_: str, cliques: dict[str, str]) -> None:
        self.versions.setdefault(pcs, {})[hash_] = cliques

    def template_at(self, pcs: Key, rv: int, hash_: str, cliques: dict[str, str]) -> None:
        """The PodCliqueSet's template as of resourceVersion `rv` (from its watch events), so a
        removal is judged against the template current when it happened, not when seen."""
        self.saw_version(pcs, hash_, cliques)
        timeline = self.timeline.setdefault(pcs, [])
        if not timeline or timeline[-1][1] != hash_:
            timeline.append((rv, hash_))

    def _current_at(self, pcs: Key, rv: int) -> str:
        found = [h for at, h in self.timeline.get(pcs, []) if at <= rv]
        return found[-1] if found else self.current.get(pcs, "")

    # -- at each reconcile ---------------------------------------------------------------------
    def run(self, pcs: Object, hash_: str, gangs: dict[str, Object], pods: list[Object]) -> None:
        ns, name = pcs["metadata"]["namespace"], pcs["metadata"]["name"]
        versions = list(self.versions.get((ns, name), {}).values())
        by_gang: dict[str, list[Object]] = {}
        for p in pods:
            by_gang.setdefault(p["metadata"]["labels"].get(PODGANG, ""), []).append(p)

        def pairs(gang: str) -> list[tuple[str, str]]:
            out = []
            for p in by_gang.get(gang, []):
                clique = _clique_name(p, name)
                out.append((clique, p["metadata"]["labels"].get(POD_TEMPLATE_HASH, "")))
            return out

        self.current[(ns, name)] = hash_
        for gname, gang in gangs.items():
            mine = pairs(gname)
            if mine and not coherent(mine, versions):
                found = sorted({f"{c}@{h}" for c, h in mine})
                self._record(
                    ("mixed", gang["metadata"]["uid"], frozenset(found)),
                    PODGANG_MIXED_TEMPLATE_HASHES,
                    f"{ns}/{gname}",
                    "pods of two template versions in one PodGang (clique@pod-template-hash): "
                    + ", ".join(found),
                )
        for gkey in [k for k in self.in_flight if k[0] == ns and k[1] in gangs]:
            held = by_gang.get(gkey[1], [])
            want = sum(len(pg["podReferences"]) for pg in gangs[gkey[1]]["spec"]["podgroups"])
            if held and len(held) >= want and all(pod_ready(p) for p in held):
                del self.in_flight[gkey]

    # -- on a client's removal ------------------------------------------------------------------
    def client_removed_pod(self, c: GroveController, p: Object, rv: int = 0) -> None:
        labels = p["metadata"].get("labels") or {}
        ns, gang, replica = p["metadata"]["namespace"], labels.get(PODGANG, ""), labels.get(REPLICA_INDEX, "")
        others = sorted(
            g for (gns, g), r in self.in_flight.items() if gns == ns and r == replica and g != gang
        )
        if gang and (ns, gang) not in self.in_flight and not others:
            self._order(c, ns, p, labels, rv)
        if gang and others:
            self._violations.record(
                GREP_393_ORDER,
                f"{ns}/{gang}",
                f"pod {p['metadata']['name']} of PodGang {gang} removed while {', '.join(others)} of the "
                "same "
                "replica is still in flight: one step at a time per replica (GREP-393)",
            )
        if gang:
            self.in_flight[(ns, gang)] = replica
        self._below_min(c, ns, labels, f"pod {p['metadata']['name']}")

    def _order(self, c: GroveController, ns: str, p: Object, labels: dict[str, str], rv: int) -> None:
        """(a): starting a tail's step while the replica's anchor does not run the current template."""
        pcs = labels.get(PART_OF, "")
        gang = c._store.list(c.pg_rt, ns, field_selector=f"metadata.name={labels.get(PODGANG, '')}")[0]
        if not gang or gang[0]["metadata"]["labels"].get(PODGANG_ROLE) == ANCHOR:
            return
        version = self.versions.get((ns, pcs), {}).get(self._current_at((ns, pcs), rv), {})
        anchors = [
            g
            for g in c._store.list(c.pg_rt, ns, label_selector=f"{PART_OF}={pcs},{PODGANG_ROLE}={ANCHOR}")[0]
            if g["metadata"]["labels"].get(REPLICA_INDEX) == labels.get(REPLICA_INDEX)
        ]
        for anchor in anchors:
            aname = anchor["metadata"]["name"]
            behind = [
                q["metadata"]["name"]
                for q in c._store.list(c.pod_rt, ns, label_selector=f"{PODGANG}={aname}")[0]
                if not terminating(q)
                and version.get(_clique_name(q, pcs), "")
                not in ("", q["metadata"]["labels"].get(POD_TEMPLATE_HASH))
            ]
            if behind:
                self._violations.record(
                    GREP_393_ORDER,
                    f"{ns}/{labels.get(PODGANG)}",
                    f"pod {p['metadata']['name']} of tail PodGang {labels.get(PODGANG)} removed while its "
                    "replica's "
                    f"anchor {aname} still runs pods of another template ({', '.join(sorted(behind)[:3])}): "
                    "every minimum-viable gang of a replica goes before its tails (GREP-393)",
                )

    def client_removed_podclique(self, c: GroveController, pclq: Object) -> None:
        labels = pclq["metadata"].get("labels") or {}
        ns = pclq["metadata"]["namespace"]
        if labels.get(PODGANG):
            self.in_flight[(ns, labels[PODGANG])] = labels.get(REPLICA_INDEX, "")
        self._below_min(
            c, ns, {**labels, PODCLIQUE: pclq["metadata"]["name"]}, f"PodClique {pclq['metadata']['name']}"
        )

    def _below_min(self, c: GroveController, ns: str, labels: dict[str, str], what: str) -> None:
        pclq = labels.get(PODCLIQUE, "")
        store = c._store
        if labels.get(COMPONENT) == "pcs-podclique" or labels.get(PCSG) is None:
            try:
                obj = store.get(c.pclq_rt, ns, pclq)
            except Exception:
                return
            ready = _ready(store.list(c.pod_rt, ns, label_selector=f"{PODCLIQUE}={pclq}")[0])
            minimum = int(obj["spec"].get("minAvailable", 1))
            if ready < minimum:
                self._violations.record(
                    PODCLIQUE_BELOW_MIN_AVAILABLE,
                    f"{ns}/{pclq}",
                    f"removing {what} left PodClique {pclq} with {ready} Ready pods, minAvailable {minimum}",
                )
            return
        fqn = labels[PCSG]
        try:
            group = store.get(c.pcsg_rt, ns, fqn)
        except Exception:
            return
        members: dict[str, list[Object]] = {}
        for o in store.list(c.pclq_rt, ns, label_selector=f"{PCSG}={fqn}")[0]:
            if terminating(o):
                continue
            j = o["metadata"]["labels"].get("grove.io/podcliquescalinggroup-replica-index", "")
            members.setdefault(j, []).append(o)
        available = 0
        for objs in members.values():
            if all(
                _ready(store.list(c.pod_rt, ns, label_selector=f"{PODCLIQUE}={o['metadata']['name']}")[0])
                >= int(o["spec"].get("minAvailable", 1))
                for o in objs
            ):
                available += 1
        minimum = int(group["spec"].get("minAvailable", 1))
        if available < minimum:
            self._violations.record(
                PODCLIQUE_BELOW_MIN_AVAILABLE,
                f"{ns}/{fqn}",
                f"removing {what} left scaling group {fqn} with {available} available replicas, "
                f"minAvailable {minimum}",
            )

    def client_removed_podgang(self, gang: Object) -> None:
        held = [
            r["name"] for pg in gang["spec"].get("podgroups") or [] for r in pg.get("podReferences") or []
        ]
        if not held:
            return
        ns, name = gang["metadata"]["namespace"], gang["metadata"]["name"]
        self._violations.record(
            POD_WITHOUT_PODGANG,
            f"{ns}/{name}",
            f"PodGang {name} deleted by a client: {len(held)} pods labelled for it are without their gang "
            "until Grove's next reconcile recreates it (deleting a PodGang rolls nothing)",
        )

    def gang_terminated(self, ns: str, subject: str, what: str, delay: float) -> None:
        self._violations.record(
            GANG_TERMINATION_TRIGGERED,
            f"{ns}/{subject}",
            f"Grove gang-terminated {what}: below minAvailable for longer than terminationDelay "
            f"({delay:g} s)",
        )


def _ready(pods: list[Object]) -> int:
    return sum(1 for p in pods if pod_ready(p) and not terminating(p))


def _clique_name(p: Object, pcs: str) -> str:
    """The template clique of a pod: the last segment of its PodClique's name after the
    replica (and scaling-group replica) prefix; template clique names hold no '-' ambiguity
    because the PodClique name ends with `-<clique>` and the pod carries `app.kubernetes.io/name`."""
    pclq = p["metadata"]["labels"].get(PODCLIQUE, "")
    return pclq_clique(pclq, p["metadata"]["labels"], pcs)


def pclq_clique(pclq: str, labels: dict[str, str], pcs: str) -> str:
    replica = labels.get(REPLICA_INDEX, "")
    prefix = labels.get(PCSG)
    if prefix:
        rest = pclq[len(prefix) + 1 :]
        return rest.split("-", 1)[1] if "-" in rest else rest
    return pclq[len(f"{pcs}-{replica}-") :]
