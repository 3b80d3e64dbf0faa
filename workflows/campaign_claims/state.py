"""Which running campaign holds which host and which DPUDeployment: `ClaimsState`, the registry's
one state object, and its decisions (a claim, a record of the changes a campaign makes, a
release, what a campaign would find held).

Its data shape is the registry's input, `ClaimsInput` (holder -> hosts, deployment -> record), so
the registry continues as new with this object itself. No clock, no I/O, nothing of Temporal.
Bounded by the fleet: at most one holder per host (~15 bytes a host in the payload; an index by
host in memory) and one record per DPUDeployment.

A campaign's records outlive it when it ends without its release (terminated): a later claim
that names it in `take_from` (a holder found to have ended) frees its hosts and takes over its
recorded changes, answered as `inherited`, which that campaign puts back before anything else. A
later campaign of the same name (the same workflow id) inherits them at its claim too: a run
claims once, before it records anything, so records under its id at that point are an earlier
run's.
"""

from __future__ import annotations

from typing import Any

from pydantic import PrivateAttr

from contracts.models.campaign import (
    ClaimAnswer,
    ClaimRequest,
    ClaimsInput,
    DeploymentRecord,
    RecordRequest,
    ReleaseAnswer,
)


class ClaimsState(ClaimsInput):
    """The hosts and deployments each running campaign holds, indexed by host."""

    _holder_of: dict[str, str] = PrivateAttr(default_factory=dict)  # host -> its holder

    def model_post_init(self, context: Any, /) -> None:
        self._holder_of = {h: c for c, hosts in self.holders.items() for h in hosts}

    @classmethod
    def carried(cls, start: ClaimsInput) -> ClaimsState:
        return cls.model_validate(dict(start))

    def claim(self, request: ClaimRequest) -> ClaimAnswer:
        """Every host and deployment free (or held by `request.campaign` already, or by a holder
        in `take_from`: one known to have ended, which then holds nothing and whose recorded
        changes pass to `request.campaign`) becomes the campaign's; the others are answered by
        holder. Atomic: two campaigns that claim together get disjoint hosts and deployments."""
        inherited = self._take_over(set(request.take_from) - {request.campaign}, request.campaign)
        # Changes already recorded under this campaign's id: an earlier run of the same name that
        # ended without its release (a run claims once, before it records anything).
        inherited += tuple(
            r
            for r in self.deployments.values()
            if r.holder == request.campaign and r.changed and r not in inherited
        )
        held = self.held(request)
        taken = {h for hosts in held.held.values() for h in hosts}
        mine = self.holders.setdefault(request.campaign, [])
        for host in request.host_ids:
            if host not in taken and self._holder_of.get(host) != request.campaign:
                self._holder_of[host] = request.campaign
                mine.append(host)
        if not mine:
            del self.holders[request.campaign]
        busy = {d for names in held.held_deployments.values() for d in names}
        for name in request.deployments:
            if name not in busy and name not in self.deployments:
                self.deployments[name] = DeploymentRecord(deployment=name, holder=request.campaign)
        return held.model_copy(update={"inherited": inherited})

    def _take_over(self, gone: set[str], campaign: str) -> tuple[DeploymentRecord, ...]:
        """Free the hosts of holders that ended; their recorded changes become `campaign`'s."""
        inherited = []
        for holder in sorted(gone):
            for host in self.holders.pop(holder, []):
                del self._holder_of[host]
            for name, record in list(self.deployments.items()):
                if record.holder != holder:
                    continue
                if record.changed:
                    maker = record.taken_from or holder  # who made it, named to whoever takes it over
                    self.deployments[name] = record.model_copy(
                        update={"holder": campaign, "taken_from": maker}
                    )
                    inherited.append(self.deployments[name])
                else:
                    del self.deployments[name]
        return tuple(inherited)

    def record(self, request: RecordRequest) -> int:
        """The changes a campaign is about to make, on the deployments it holds (before the first
        is made, so they outlive a campaign terminated mid-way). Returns how many were recorded."""
        recorded = 0
        for change in request.changes:
            held = self.deployments.get(change.deployment)
            if held is None or held.holder == request.campaign:
                self.deployments[change.deployment] = change.model_copy(update={"holder": request.campaign})
                recorded += 1
        return recorded

    def release(self, campaign: str, host_ids: tuple[str, ...] | None = None) -> ReleaseAnswer:
        """Every host and deployment the campaign holds is free again (its changes were put back,
        or are kept: either way no longer a campaign's to undo). With `host_ids`: only those of
        them the campaign holds (hosts that ended in it, while it runs on); its deployments and
        other hosts stay held, and a host another campaign holds is left alone."""
        if host_ids is not None:
            mine = self.holders.get(campaign, [])
            freed = {h for h in host_ids if self._holder_of.get(h) == campaign}
            for host in freed:
                del self._holder_of[host]
            kept = [h for h in mine if h not in freed]
            if kept:
                self.holders[campaign] = kept
            else:
                self.holders.pop(campaign, None)
            return ReleaseAnswer(released=len(freed))
        released = self.holders.pop(campaign, [])
        for host in released:
            del self._holder_of[host]
        for name in [n for n, r in self.deployments.items() if r.holder == campaign]:
            del self.deployments[name]
        return ReleaseAnswer(released=len(released))

    def held(self, request: ClaimRequest) -> ClaimAnswer:
        """Which of the hosts and deployments another campaign holds, by holder, with those
        holders' recorded changes; changes nothing."""
        held: dict[str, list[str]] = {}
        for host in request.host_ids:
            holder = self._holder_of.get(host)
            if holder is not None and holder != request.campaign:
                held.setdefault(holder, []).append(host)
        held_deployments: dict[str, list[str]] = {}
        for name in request.deployments:
            record = self.deployments.get(name)
            if record is not None and record.holder != request.campaign:
                held_deployments.setdefault(record.holder, []).append(name)
        holders = set(held) | set(held_deployments) | {request.campaign}
        records = tuple(r for r in self.deployments.values() if r.holder in holders and r.changed)
        return ClaimAnswer(
            held={c: tuple(hosts) for c, hosts in held.items()},
            held_deployments={c: tuple(names) for c, names in held_deployments.items()},
            records=records,
        )

    def counts(self) -> dict[str, int]:
        """Hosts held, by holder."""
        return {c: len(hosts) for c, hosts in self.holders.items() if hosts}

    def deployment_holders(self) -> dict[str, str]:
        """Deployment -> the campaign that holds it."""
        return {name: record.holder for name, record in self.deployments.items()}
