"""Whether a campaign may start, and with what: the one decision over what was read before the
first host (`admit`). `metalflow campaign plan` and `campaign start` (metalflow/cli/campaign_plan.py)
and the campaign workflow (workflow.py) read the world through `drivers.campaign.Fleet` and the
claims registry's client (`contracts.campaign_claims`), then call `admit` on the same facts, so
they cannot disagree; the workflow decides again on its own reads (the world may change between).

From the selection's read (the roster; hosts DPF does not know; hosts the inventory shows an
instance on; the site's rules a DPU breaks), the claims (hosts and deployments running campaigns
hold; changes left by campaigns that no longer run) and, for a BFB or flavor campaign, its
DPUDeployments as read, it decides:

- **Left out, with why**: hosts in maintenance (who set it, since when: `in_maintenance`), hosts an
  operator held automation back on (who, why, since when: `held_back`), hosts the kept
  `metalflow site check` blocks the kind's operation on (`CampaignInput.site_blocked`, read by the
  CLI: what `metalflow host` would refuse there), hosts
  DPF does not know (a kind that reprovisions: their operation would
  wait an hour for a hold that never comes; `metalflow host provision` first), hosts DPF lacks
  a DPU of (removed by `host remove --dpus`, or never provisioned: `contracts/dpf_presence.py`,
  the decision `host firmware` and `host reprovision` refuse by), hosts with an
  instance when the campaign skips them, hosts another running campaign holds. The rest run.
- **Refused** (nothing starts): DPF knows none of the hosts of a kind that reprovisions; a DPU
  breaks the site's compatibility rule for the BFB; the BFB or flavor, or a deployment, does not
  exist; a deployment is not `OnDelete` or another running campaign holds it; a deployment
  selects a host the campaign does not run (outside its roster, or left out: it would turn
  Outdated, and any reprovision of it would install the new value) unless `whole_deployment`
  names it, and never when another running campaign holds a host it selects; a
  host the campaign runs is selected by both deployments, or by neither; the canary's deployment
  selects no host the campaign runs.
- **Its changes**: the deployments to point (each with the value found, which it puts back), the
  changes a campaign that no longer runs left behind (`leftover`: put back before any host
  starts; a deployment this campaign points again keeps the value that campaign found), and the
  canary: the hosts of the canary deployment the campaign runs.

A refusal is the campaign's (exit 1 in the CLI); a selection that names no host is refused earlier,
by the read itself (`InvalidInput`, exit 2). Pure: no clock (`now` is an argument), no I/O.
Cost: O(roster) per call.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from contracts import dpf_presence
from contracts.models.campaign import (
    CampaignInput,
    ClaimResult,
    DeploymentChange,
    DeploymentFacts,
    DeploymentRecord,
    DeploymentsRead,
    HostGroup,
    Roster,
    SelectHostsResult,
)
from contracts.models.campaign_facts import SHOWN, strategy_refusal
from contracts.wording import iso_z, plural

ASSIGNED: Final = "instance assigned in the inventory; the campaign skips assigned hosts"
PROVISION_HINT: Final = "provision it first (`metalflow host provision {host}`)"


def in_maintenance(by: str, since: datetime | None) -> str:
    """Why a host in maintenance is left out (`SelectHostsResult.maintenance`): a campaign never
    takes one. The entity refuses a campaign's request too (`InMaintenance`), in case visibility
    had not yet shown it: `CampaignState.answered` skips it then, naming it as well."""
    when = f" since {iso_z(since)}" if since else ""
    return f"in maintenance{when}, set by {by}; a campaign never takes a host in maintenance"


def held_back(by: str, reason: str, since: datetime | None) -> str:
    """Why a host an operator held automation back on is left out (`SelectHostsResult.held_back`:
    an abort of the monitor's request; `workflows/host/automation_hold.py`). The entity refuses a
    campaign's request too (`AutomationHeldBack`), in case the read had not yet seen it."""
    when = f" since {iso_z(since)}" if since else ""
    why = f": {reason}" if reason else ""
    return (
        f"automation held back by {by}{when}{why}; a campaign never asks such a host "
        "(`metalflow host retry HOST` ends the hold)"
    )


def no_dpf_objects(host_id: str) -> str:
    """Why a host without a DPUNode is left out of a campaign that reprovisions."""
    return (
        f"no DPF objects (no DPUNode node-{host_id}): DPF does not know the host; "
        + PROVISION_HINT.format(host=host_id)
    )


def named(hosts: Iterable[str], count: int | None = None) -> str:
    """The first SHOWN hosts, and how many more (`count`: all of them, when more than listed)."""
    listed = list(hosts)
    total = len(listed) if count is None else count
    more = f" and {total - SHOWN} more" if total > SHOWN else ""
    return ", ".join(listed[:SHOWN]) + more


@dataclass(frozen=True)
class Admission:
    """What `admit` decided: the roster, who is left out and why, the changes, the canary, or
    why the campaign is refused (`refusal`: nothing may start)."""

    roster: Roster
    left_out: tuple[HostGroup, ...] = ()
    changes: tuple[DeploymentChange, ...] = ()
    canary_pool: tuple[str, ...] = ()
    refusal: str | None = None
    why_out: dict[str, str] = field(default_factory=dict)  # host -> why it is left out

    @property
    def runs(self) -> tuple[str, ...]:
        """The hosts the campaign runs (may be found at the target when reached)."""
        return tuple(h for h in self.roster.ids if h not in self.why_out)

    def records(self) -> tuple[DeploymentRecord, ...]:
        """This campaign's own changes, for the claims registry before the first is made."""
        return tuple(
            DeploymentRecord(deployment=c.deployment, field=c.field, previous=c.previous, value=c.value)
            for c in self.changes
            if c.role != "leftover"
        )


def to_claim(start: CampaignInput, selected: SelectHostsResult) -> tuple[str, ...]:
    """The hosts to claim: the roster but those the selection leaves out (`admit`'s first rule)."""
    out = set(selected.no_dpf) if start.target.spec.needs_dpf else set()
    if start.policy.assigned == "skip":
        out |= set(selected.assigned)
    out |= set(selected.maintenance) | set(selected.not_in_dpf) | set(selected.held_back)
    out |= {h for group in start.site_blocked for h in group.host_ids}
    return tuple(h for h in selected.roster.ids if h not in out)


def deployments(start: CampaignInput) -> tuple[str, ...]:
    """The DPUDeployments to claim: those a BFB or flavor campaign points."""
    target = start.target
    return tuple(n for n in (target.canary_deployment, target.deployment) if n and target.points_deployment)


def admit(
    start: CampaignInput,
    selected: SelectHostsResult,
    claims: ClaimResult,
    deployments: DeploymentsRead | None,
    now: datetime,
) -> Admission:
    """The campaign's admission (see the module docstring); `deployments` is read for a kind
    that points one (None otherwise)."""
    target, roster = start.target, selected.roster
    why: dict[str, str] = {}
    refusal = _selection_refusal(start, selected)
    # First: as `metalflow host` refuses the kind's operation there, a finding on the hardware that
    # the other reasons' advice (provision it first) would meet too.
    for group in start.site_blocked:
        for host_id in group.host_ids:
            why.setdefault(host_id, group.reason)
    if target.spec.needs_dpf:
        for host_id in selected.no_dpf:
            why.setdefault(host_id, no_dpf_objects(host_id))
    for host_id, missing in selected.not_in_dpf.items():  # what `host firmware`/`reprovision` refuse
        why.setdefault(host_id, dpf_presence.left_out_words(host_id, missing))
    for host_id, (by, since) in selected.maintenance.items():
        why.setdefault(host_id, in_maintenance(by, since))
    for host_id, (by, reason, since) in selected.held_back.items():
        why.setdefault(host_id, held_back(by, reason, since))
    if start.policy.assigned == "skip":
        for host_id in selected.assigned:
            why.setdefault(host_id, ASSIGNED)
    for group in claims.held:
        for host_id in group.host_ids:
            why.setdefault(host_id, group.reason)
    if refusal is None:
        refusal = _all_held_refusal(roster, claims)
    changes = [_leftover(r, now) for r in claims.inherited]
    pool: tuple[str, ...] = ()
    if refusal is None and target.points_deployment:
        assert deployments is not None, "a kind that points a deployment reads its deployments"
        runs = [h for h in roster.ids if h not in why]
        refusal = _deployment_refusal(start, deployments, claims, runs, why)
        if refusal is None:
            changes += _changes(start, deployments, claims.inherited)
            pool = _canary_pool(start, deployments, runs)
            if start.canary > 0 and target.canary_deployment and not pool:
                refusal = _no_canary(start, deployments, why)
    return Admission(
        roster=roster,
        left_out=_grouped(roster, why),
        changes=tuple(changes),
        canary_pool=pool,
        refusal=refusal,
        why_out=why,
    )


def _all_held_refusal(roster: Roster, claims: ClaimResult) -> str | None:
    """Every selected host claimed by another running campaign: nothing would start and nothing
    was left out by a rule of this one, so the world refused it (exit 1), not a campaign that
    completes having done nothing."""
    held = {h for group in claims.held for h in group.host_ids}
    if not roster.ids or any(h not in held for h in roster.ids):
        return None
    by = "; ".join(
        f"{named(group.host_ids)} {group.reason.removesuffix(': not touched')}" for group in claims.held
    )
    return (
        f"every selected host is claimed by another running campaign, so nothing would run: {by}; "
        "a host is free once it ends there (done or skipped) or that campaign ends: start again then"
    )


def _selection_refusal(start: CampaignInput, selected: SelectHostsResult) -> str | None:
    target, roster = start.target, selected.roster
    if target.spec.needs_dpf and selected.no_dpf and len(set(selected.no_dpf)) >= len(roster):
        return (
            f"DPF knows none of the {len(roster)} selected hosts (no DPUNode for "
            f"{named(selected.no_dpf)}): a {target.kind} campaign needs provisioned hosts; "
            "provision them first (`metalflow host provision HOST`)"
        )
    if selected.rule_breaks:
        return (
            f"{target.kind} {target.value} breaks the site's compatibility rule on "
            f"{plural(len(selected.rule_breaks), 'DPU')}: {named(selected.rule_breaks)}; "
            "upgrade their BMC firmware first, or leave those hosts out"
        )
    return None


def _deployment_refusal(
    start: CampaignInput,
    read: DeploymentsRead,
    claims: ClaimResult,
    runs: list[str],
    why: dict[str, str],
) -> str | None:
    target = start.target
    field_name = target.spec.deployment_field
    if not read.target_found:
        return f"no {target.spec.dpf_object} {target.value} in namespace {read.namespace}: create it first"
    holders = {h.deployment: h.holder for h in claims.held_deployments}
    held = {h: g.reason.split(" (")[0] for g in claims.held for h in g.host_ids}
    running = set(runs)
    for facts in read.deployments:
        if not facts.found:
            return f"no DPUDeployment {facts.name} in namespace {read.namespace}"
        if (refused := strategy_refusal(facts.name, facts.strategy)) is not None:
            return refused
        if facts.name in holders:
            return (
                f"DPUDeployment {facts.name} is held by running campaign {holders[facts.name]} (one "
                "campaign per deployment): wait for it to end, or abort it"
            )
        left = [h for h in facts.covered if h not in running]
        if (facts.outside or left) and facts.name not in target.whole_deployment:
            return _selects_others(facts, left, why, field_name, [h for h in left if h in held])
        if busy := [f"{h} ({held[h]})" for h in left if h in held]:
            return (
                f"DPUDeployment {facts.name} selects {named(busy)}: pointing it would turn them Outdated "
                f"under that campaign, whose reprovision of one would "
                f"install the new {field_name}, --whole-deployment or not; wait for it to end, or abort it"
            )
    covered = {f.role: set(f.covered) & running for f in read.deployments}
    both = [h for h in runs if h in covered.get("canary", set()) and h in covered.get("fleet", set())]
    if both:
        return f"hosts {named(both)} are selected by both {target.canary_deployment} and {target.deployment}"
    reached = covered.get("canary", set()) | covered.get("fleet", set())
    missed = [h for h in runs if h not in reached]
    if missed:
        which = " or ".join(f.name for f in read.deployments)
        return (
            f"hosts {named(missed)} are not selected by DPUDeployment {which}: pointing it never "
            f"reaches them; leave them out of this {field_name} campaign"
        )
    return None


def _selects_others(
    facts: DeploymentFacts, left: list[str], why: dict[str, str], field_name: str, held: list[str]
) -> str:
    """A deployment that selects hosts the campaign does not run, named with why; the advice is
    only what would be accepted (a host another running campaign holds is never pointed over,
    --whole-deployment or not)."""
    others = [f"{h} (left out: {why[h].split(';')[0]})" for h in left[:SHOWN]]
    others += list(facts.outside_named[: max(SHOWN - len(others), 0)])
    count = facts.outside + len(left)
    return (
        f"DPUDeployment {facts.name} also selects {plural(count, 'host')} the campaign does not run "
        f"({named(others, count)}): pointing it would turn them Outdated, and any reprovision of one "
        f"would install the new {field_name}; "
        + (
            f"{named(held)} held by another running campaign: wait for it to end, or abort it"
            if held
            else f"run them too, or give --whole-deployment {facts.name}"
        )
    )


def _changes(
    start: CampaignInput, read: DeploymentsRead, inherited: Iterable[DeploymentRecord]
) -> list[DeploymentChange]:
    """Each deployment to point, with the value it holds when none of ours is pointed: a
    campaign that no longer runs may have left it pointed (its record has the value it found)."""
    field_name = start.target.spec.deployment_field
    # the value that campaign found, while the deployment still holds the one it set (else it
    # is not put back: what it holds now is the value to put back)
    found = {(r.deployment, r.field): r for r in inherited}

    def previous(facts: DeploymentFacts) -> str:
        record = found.get((facts.name, field_name))
        return record.previous if record is not None and record.value == facts.value else facts.value

    return [
        DeploymentChange(
            deployment=facts.name,
            field=field_name,
            previous=previous(facts),
            value=start.target.value,
            role=facts.role,
        )
        for facts in read.deployments
    ]


def _leftover(record: DeploymentRecord, now: datetime) -> DeploymentChange:
    return DeploymentChange(
        deployment=record.deployment,
        field=record.field,
        previous=record.previous,
        value=record.value,
        role="leftover",
        pointed_at=now,
        note=f"taken over from {record.taken_from or record.holder or 'a campaign'}, which no longer runs",
    )


def _canary_pool(start: CampaignInput, read: DeploymentsRead, runs: list[str]) -> tuple[str, ...]:
    if start.canary <= 0:
        return ()
    canary = {h for f in read.deployments if f.role == "canary" for h in f.covered}
    return tuple(h for h in runs if h in canary)


def _no_canary(start: CampaignInput, read: DeploymentsRead, why: dict[str, str]) -> str:
    canary = next((f for f in read.deployments if f.role == "canary"), None)
    hosts = [f"{h} ({why.get(h, 'not selected').split(';')[0]})" for h in (canary.covered if canary else ())]
    selects = f"selects only hosts it does not run: {named(hosts)}" if hosts else "selects none of its hosts"
    return (
        f"the canary cannot run: DPUDeployment {start.target.canary_deployment} {selects}; "
        f"nothing would prove {start.target.kind} {start.target.value} before "
        f"{start.target.deployment} is pointed: select a canary host the campaign runs, or give --canary 0"
    )


def _grouped(roster: Roster, why: dict[str, str]) -> tuple[HostGroup, ...]:
    groups: dict[str, list[str]] = {}
    for host_id in roster.ids:
        if host_id in why:
            groups.setdefault(why[host_id], []).append(host_id)
    return tuple(HostGroup(reason=r, host_ids=tuple(ids)) for r, ids in groups.items())
