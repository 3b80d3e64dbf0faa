"""Which running campaign holds which host: `ClaimsState`, the registry's one state object, and
its decisions (a claim, a release, what a campaign would find held).

Its data shape is the registry's input, `ClaimsInput` (holder -> hosts), so the registry
continues as new with this object itself. No clock, no I/O, nothing of Temporal. Bounded by the
fleet: at most one holder per host (~15 bytes a host in the payload; an index by host in memory).
"""

from __future__ import annotations

from typing import Any

from pydantic import PrivateAttr

from contracts.models.campaign import ClaimAnswer, ClaimRequest, ClaimsInput, ReleaseAnswer


class ClaimsState(ClaimsInput):
    """The hosts each running campaign holds (`holders`), indexed by host."""

    _holder_of: dict[str, str] = PrivateAttr(default_factory=dict)  # host -> its holder

    def model_post_init(self, context: Any, /) -> None:
        self._holder_of = {h: c for c, hosts in self.holders.items() for h in hosts}

    @classmethod
    def carried(cls, start: ClaimsInput) -> ClaimsState:
        return cls.model_validate(dict(start))

    def claim(self, request: ClaimRequest) -> ClaimAnswer:
        """Every host free (or held by `request.campaign` already, or by a holder in `take_from`:
        one known to have ended, which then holds nothing) becomes the campaign's; the others are
        answered by holder. Atomic: two campaigns that claim together get disjoint hosts."""
        for gone in set(request.take_from) - {request.campaign}:
            for host in self.holders.pop(gone, []):
                del self._holder_of[host]
        held = self.held(request)
        taken = {h for hosts in held.held.values() for h in hosts}
        mine = self.holders.setdefault(request.campaign, [])
        for host in request.host_ids:
            if host not in taken and self._holder_of.get(host) != request.campaign:
                self._holder_of[host] = request.campaign
                mine.append(host)
        if not mine:
            del self.holders[request.campaign]
        return held

    def release(self, campaign: str) -> ReleaseAnswer:
        """Every host the campaign holds is free again."""
        released = self.holders.pop(campaign, [])
        for host in released:
            del self._holder_of[host]
        return ReleaseAnswer(released=len(released))

    def held(self, request: ClaimRequest) -> ClaimAnswer:
        """Which of the hosts another campaign holds, by holder, changing nothing."""
        held: dict[str, list[str]] = {}
        for host in request.host_ids:
            holder = self._holder_of.get(host)
            if holder is not None and holder != request.campaign:
                held.setdefault(holder, []).append(host)
        return ClaimAnswer(held={c: tuple(hosts) for c, hosts in held.items()})

    def counts(self) -> dict[str, int]:
        """Hosts held, by holder."""
        return {c: len(hosts) for c, hosts in self.holders.items() if hosts}
