"""`metalflow campaign plan NAME [the options of start] [--json]`: what `campaign start` would do,
starting nothing and changing nothing; and the check `campaign start` runs before it starts
anything (`build`), so the two never decide differently.

It reads what the campaign will read, through the same code (`drivers.campaign.Fleet`, which the
campaign's activities adapt, and the claims registry's client, `contracts.campaign_claims`), then
decides through the campaign's own rules: its admission (`workflows/campaign/admission.py`:
hosts left out and why, the deployment changes, the canary, or a refusal) and its state
(`CampaignState`), driven round by round as the workflow drives it, each host found at the target
as read now and every other one taken to succeed: the canary and each batch in the order it would
run them, and a canary that could prove nothing refused as the campaign would stop. The windows
(each in its zone, with the next opening) and what the campaign would change outside its hosts
(current value -> new value; what a campaign that no longer runs left pointed, to be put back)
are shown as it would see them.

Exit statuses (one table for `plan` and `start`, metalflow/cli/campaign.py): 0 the plan (a
campaign `start` would run), 1 a campaign `start` would refuse (the reason printed: the
admission's or the canary's), 2 usage, a selection that names no host (an unknown host or group,
a selector matching nothing), bad input, or a world that cannot be read.

Cost: what the campaign's first steps cost (drivers/campaign.py): the inventory, one list of
DPUNodes, the at-target reads of every selected host (one DPU list each, or each DPU's BMC), the
listings of the host entities in maintenance and of the running entities (their memos: a hold on
automation), the deployments' reads, one query of the claims registry and one describe per holder
it names; the rounds are computed in memory (O(batches x hosts): about a second at 10,000 hosts).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from contracts import names
from contracts.campaign_claims import ClaimsClient
from contracts.errors import InvalidInput, KubernetesUnavailable, MetalflowError
from contracts.host_entity import with_maintenance
from contracts.models.campaign import (
    CampaignInput,
    CampaignPolicy,
    CheckHostsInput,
    DeploymentChange,
    DeploymentsInput,
    HostFinished,
    HostGroup,
    HostRequestOutcome,
    SelectHostsInput,
    Window,
)
from contracts.validation import Requester, arg_type
from contracts.wording import iso_z, plural
from drivers.campaign import Fleet, field_of
from drivers.credentials import CredentialResolver
from drivers.inventory import Inventory
from drivers.kube import Kube
from drivers.redfish.client import RedfishClient
from drivers.settings import Settings
from metalflow.cli.campaign_options import add_options, campaign_input, duration_words
from metalflow.cli.workflow_commands import EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, CommandError
from metalflow.hosts import default_operator
from workflows.campaign import admission
from workflows.campaign import plan as decide
from workflows.campaign.state import CampaignState

SHOWN = 20  # hosts named per line of the text plan


class PlannedWindow(BaseModel):
    window: Window
    open_now: bool
    next_open: datetime | None


class CampaignPlan(BaseModel):
    """What `campaign start` would do (`--json` prints this)."""

    name: str
    target: str
    selection: str
    selected: int
    left_out: tuple[HostGroup, ...]
    # Hosts that run degraded by the kept site check, with why (each one's operation says it).
    degraded: tuple[HostGroup, ...] = ()
    at_target: tuple[str, ...]
    canary: tuple[str, ...]
    batches: tuple[tuple[str, ...], ...]
    windows: tuple[PlannedWindow, ...]
    changes: tuple[DeploymentChange, ...]
    budget: str
    soak_seconds: float = 0.0  # after the canary and after each batch, before the next batch
    whole_deployment: tuple[str, ...] = ()  # the deployments asked for whole, by name
    refused: str | None = None  # why `start` would refuse it (nothing would change)


class SiteRefused(Exception):
    """The kept `metalflow site check` blocks the campaign's kind on the site (exit 1)."""


def with_site_check(request: CampaignInput) -> tuple[CampaignInput, list[str]]:
    """The campaign as the kept `metalflow site check` has it (one small file read, never the
    site), for `plan` and `start` alike: the site's own rules for its kind refuse it
    (`SiteRefused`); the hosts its per-host operation is blocked on (what `metalflow host` would
    refuse there) go into `site_blocked`, which the admission leaves out naming the finding; those
    it degrades it on into `site_degraded` (they run; each one's request says why).
    Returns it and the lines to say (a degraded site, an old check)."""
    from contracts.models.operation_policy import RebootMethod
    from metalflow.site_check import FindingsUnreadable, consult_words
    from metalflow.site_groups import campaign_blocks, campaign_degraded
    from metalflow.site_verdicts import CAMPAIGN_CAPABILITY

    refuse, said = consult_words(None, CAMPAIGN_CAPABILITY.get(str(request.target.kind)))
    if refuse:
        raise SiteRefused("; ".join(said))
    manual = request.host_policy is not None and request.host_policy.reboot_method == RebootMethod.MANUAL
    try:
        blocked = campaign_blocks(request.target.spec.request, manual_reboot=manual)
        degraded = campaign_degraded(request.target.spec.request, manual_reboot=manual)
    except FindingsUnreadable as err:  # consult_words refused it first; the file changed since
        raise SiteRefused(f"the kept site check cannot be read ({err})") from None
    return request.model_copy(update={"site_blocked": blocked, "site_degraded": degraded}), said


class PlanRefused(Exception):
    """The campaign's rules refuse it (exit 1): `plan` says so, `start` starts nothing."""

    def __init__(self, reason: str, plan: CampaignPlan) -> None:
        super().__init__(reason)
        self.reason = reason
        self.plan = plan


def register(commands: Any, runner: Callable[[Any], Callable[[argparse.Namespace], int]]) -> None:
    plan = commands.add_parser(
        "plan",
        help="show what `campaign start` would do, starting nothing",
        description="Print the selection, the hosts at target, the canary and the batches, the windows "
        "and what the campaign would change outside its hosts, without starting anything.",
    )
    plan.add_argument("name", help="the campaign's name")
    plan.add_argument(
        "--by", type=arg_type(Requester), default=default_operator(), help="who asks (default: %(default)s)"
    )
    plan.add_argument(
        "--task-queue", default=names.TASK_QUEUE, help="worker task queue (default: %(default)s)"
    )
    add_options(plan, required=True)
    plan.add_argument("--json", action="store_true", help="the plan as JSON")
    plan.set_defaults(handler=runner(_plan))


async def _plan(client: Client, args: argparse.Namespace) -> int:
    try:
        request = campaign_input(args.name, args)
    except ValueError as err:
        raise CommandError(f"plan refused: {err}", EXIT_USAGE) from None
    try:
        request, said = with_site_check(request)
    except SiteRefused as refused:
        raise CommandError(f"start would refuse it: {refused}", EXIT_FAILED) from None
    for line in said:
        print(f"metalflow campaign: {line}", file=sys.stderr)
    try:
        plan = await checked(client, request, args.task_queue)
    except PlanRefused as refused:
        if args.json:
            print(refused.plan.model_dump_json(indent=2))
        raise CommandError(f"start would refuse it: {refused.reason}", EXIT_FAILED) from None
    except CommandError as err:
        raise CommandError(f"plan refused: {err}", err.status) from None
    if args.json:
        print(plan.model_dump_json(indent=2))
    else:
        print(render(plan))
    return EXIT_OK


async def checked(client: Client, request: CampaignInput, task_queue: str) -> CampaignPlan:
    """The plan, read and decided as the campaign would (`plan`'s, and `start`'s check).

    Raises:
        PlanRefused: The campaign's rules refuse it (exit 1).
        CommandError: The selection names no host or bad input (exit 2), or the cluster cannot be
            reached (exit 3).
    """
    try:
        settings = Settings.from_env()
    except ValueError as err:
        raise CommandError(str(err), EXIT_USAGE) from None
    kube = Kube(settings)
    redfish = None
    if request.target.spec.at_target == "bmc" or request.target.spec.site_rules:  # the DPUs' BMCs
        redfish = RedfishClient(
            CredentialResolver(settings.kubeconfig), max_in_flight=settings.bmc_max_in_flight
        )
    fleet = Fleet(Inventory(settings, kube), kube, redfish)
    try:
        return await build(client, fleet, request, task_queue)
    except InvalidInput as err:
        raise CommandError(err.message, EXIT_USAGE) from None
    except KubernetesUnavailable as err:
        raise CommandError(f"cannot read the site: {err.message}", EXIT_UNREACHABLE) from None
    except MetalflowError as err:
        raise CommandError(f"cannot read the site: {err.message}", EXIT_USAGE) from None
    finally:
        kube.close()


async def build(
    client: Client, fleet: Fleet, request: CampaignInput, task_queue: str = names.TASK_QUEUE
) -> CampaignPlan:
    """The plan: the campaign's reads, its admission, then its rounds as its state runs them.

    Raises:
        InvalidInput: The selection names no host (an unknown host, nothing matches).
        PlanRefused: The admission refuses it, or its canary could prove nothing.
    """
    target = request.target
    now = datetime.now(UTC)
    running = await _running_run(client, request.name)
    if running is not None:  # `start` would fail to start it: refused before anything is read
        workflow_id = names.campaign_workflow_id(request.name)
        reason = (
            f"campaign {request.name} is already running (workflow {workflow_id}, run {running}); "
            "pick another name, or `metalflow campaign abort` it first"
        )
        raise PlanRefused(reason, _nothing_planned(request, reason))
    selected = await with_maintenance(
        client,
        await fleet.select(
            SelectHostsInput(
                selection=request.selection, target=target, skip_assigned=request.policy.assigned == "skip"
            )
        ),
    )
    registry = ClaimsClient(client, task_queue)
    claims = await registry.preview(
        names.campaign_workflow_id(request.name),
        admission.to_claim(request, selected),
        admission.deployments(request),
    )
    read = None
    if target.points_deployment:
        read = await fleet.read_deployments(DeploymentsInput(target=target, host_ids=selected.roster.ids))
    decided = admission.admit(request, selected, claims, read, now)
    decided = replace(decided, changes=tuple([await _as_restored(fleet, c, now) for c in decided.changes]))
    plan = CampaignPlan(
        name=request.name,
        target=target.describe(),
        selection=request.selection.describe(),
        selected=len(selected.roster),
        left_out=decided.left_out,
        degraded=_running(request.site_degraded, decided.runs),
        at_target=(),
        canary=(),
        batches=(),
        windows=tuple(
            PlannedWindow(
                window=w, open_now=decide.window_open([w], now), next_open=decide.next_window_open([w], now)
            )
            for w in request.windows
        ),
        changes=decided.changes,
        budget=decide.describe_budget(request.budget, 0, len(selected.roster)),
        soak_seconds=request.soak_seconds,
        whole_deployment=target.whole_deployment,
    )
    if decided.refusal is not None:
        raise PlanRefused(decided.refusal, plan.model_copy(update={"refused": decided.refusal}))
    at_target: set[str] = set()
    if target.spec.at_target != "never" and decided.runs:
        # as the workflow reads them: after it points their deployment (the canary's, then the fleet's)
        reads = CheckHostsInput(target=target, host_ids=decided.runs, as_pointed=target.points_deployment)
        checked_hosts = await fleet.check(reads)
        at_target = set(checked_hosts.at_target)
    state, rounds = rounds_of(request, decided, at_target, now)
    plan = plan.model_copy(
        update={
            "at_target": tuple(h for h in decided.runs if h in at_target),
            "canary": rounds[0] if rounds and not request.canary == 0 else (),
            "batches": tuple(rounds[1:] if request.canary else rounds),
        }
    )
    if state.stopped_reason is not None:
        raise PlanRefused(state.stopped_reason, plan.model_copy(update={"refused": state.stopped_reason}))
    return plan


async def _running_run(client: Client, name: str) -> str | None:
    """The run id of the campaign of this name while it runs, else None (1 describe)."""
    try:
        described = await client.get_workflow_handle(names.campaign_workflow_id(name)).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    return described.run_id if described.status == WorkflowExecutionStatus.RUNNING else None


def _nothing_planned(request: CampaignInput, reason: str) -> CampaignPlan:
    """The plan of a campaign refused before its reads: no host, `reason` as its refusal."""
    return CampaignPlan(
        name=request.name,
        target=request.target.describe(),
        selection=request.selection.describe(),
        selected=0,
        left_out=(),
        at_target=(),
        canary=(),
        batches=(),
        windows=(),
        changes=(),
        budget=decide.describe_budget(request.budget, 0, 0),
        whole_deployment=request.target.whole_deployment,
        refused=reason,
    )


async def _as_restored(fleet: Fleet, change: DeploymentChange, now: datetime) -> DeploymentChange:
    """A leftover as its restore would find it now (compare and set: `restore_write`): one the
    deployment no longer holds is left as it is, and says why."""
    if change.role != "leftover":
        return change
    try:
        current = field_of(await fleet.deployment(change.deployment), change.field)
    except InvalidInput:
        current = ""  # deleted since
    return change if change.restore_write(current) is not None else change.restored(current, now)


def rounds_of(
    request: CampaignInput, decided: admission.Admission, at_target: set[str], now: datetime
) -> tuple[CampaignState, list[tuple[str, ...]]]:
    """The campaign's state driven as its runbook drives it, every window open and no soak: each
    host found at the target as read, every other one started and done. The hosts asked, by
    batch (batch 0: the canary), and the state at the end (its changes, a stop)."""
    quick = request.model_copy(
        update={
            "windows": (),
            "soak_seconds": 0.0,
            "policy": CampaignPolicy(assigned=request.policy.assigned),
        }
    )
    state = CampaignState.first(asker="plan", limits=request.limits, now=now)
    state.admitted(decided, request.canary)
    for index in state.leftovers():
        state.changes[index] = state.changes[index].model_copy(update={"restored_at": now})
    batches: dict[int, list[str]] = {}
    for _ in range(len(decided.roster) + 10):  # each round starts or ends at least one host
        step = state.next_step(now, quick)
        for index in step.point:
            state.changes[index] = state.changes[index].model_copy(
                update={"pointed_at": now, "restored_at": None}
            )
        if step.over or not step.start:
            break
        batch = state.batch
        asked = [h for h in step.start if h.host_id not in at_target]
        for host in step.start:
            if host.host_id in at_target:
                state.found_at_target(host.host_id)
        outcomes = [
            HostRequestOutcome(host_id=h.host_id, outcome="started", workflow_id=h.host_id) for h in asked
        ]
        state.answered(outcomes, asked, now=now, start=quick)
        state.heard.extend(
            HostFinished(host_id=h.host_id, workflow_id=h.host_id, outcome="completed") for h in asked
        )
        state.absorb_heard(verify=False, budget=quick.budget)
        batches.setdefault(batch, []).extend(h.host_id for h in asked)
    ordered = [tuple(batches[b]) for b in sorted(batches)]
    if request.canary and 0 not in batches:
        ordered.insert(0, ())
    return state, ordered


def _running(groups: tuple[HostGroup, ...], runs: tuple[str, ...]) -> tuple[HostGroup, ...]:
    """Of these groups, the hosts that run (the admission left the others out)."""
    running = set(runs)
    kept = ((g.reason, tuple(h for h in g.host_ids if h in running)) for g in groups)
    return tuple(HostGroup(reason=reason, host_ids=hosts) for reason, hosts in kept if hosts)


def _hosts(hosts: tuple[str, ...] | list[str]) -> str:
    more = f" ... (+{len(hosts) - SHOWN})" if len(hosts) > SHOWN else ""
    return ", ".join(hosts[:SHOWN]) + more if hosts else "-"


def soak_line(seconds: float, canary: bool) -> str:
    """The plan's soak: after the canary (when there is one) and after each batch, before the next."""
    if seconds <= 0:
        return "soak: none (each batch starts once the one before it ended)"
    after = "the canary and each batch" if canary else "each batch"
    return f"soak: {duration_words(seconds)} after {after}, before the next batch starts"


def render(plan: CampaignPlan) -> str:
    lines = [
        f"campaign {plan.name} (plan; nothing started): {plan.target} on {plan.selection}",
        f"selected: {plural(plan.selected, 'host')}",
    ]
    for group in plan.left_out:
        lines.append(f"left out ({len(group.host_ids)}): {group.reason}: {_hosts(group.host_ids)}")
    for group in plan.degraded:
        lines.append(f"degraded ({len(group.host_ids)}): {group.reason}: {_hosts(group.host_ids)}")
    lines.append(f"already at target ({len(plan.at_target)}): {_hosts(plan.at_target)}")
    lines.append(f"canary ({len(plan.canary)}): {_hosts(plan.canary)}")
    for number, batch in enumerate(plan.batches, start=1):
        lines.append(f"batch {number} ({len(batch)}): {_hosts(batch)}")
    lines.append(soak_line(plan.soak_seconds, bool(plan.canary)))
    if not plan.windows:
        lines.append("windows: none (hosts start at any time)")
    for w in plan.windows:
        opens = "open now" if w.open_now else f"next opens {iso_z(w.next_open, none='never')}"
        days = ",".join("mon tue wed thu fri sat sun".split()[d] for d in w.window.days)
        span = f"{w.window.start_minute // 60:02d}:{w.window.start_minute % 60:02d}-"
        span += f"{w.window.end_minute // 60:02d}:{w.window.end_minute % 60:02d}"
        lines.append(f"window {days} {span} {w.window.tz}: {opens}")
    if not plan.changes:
        lines.append("changes outside its hosts: none")
    for change in plan.changes:
        verb = "would restore" if change.role == "leftover" else "would change"
        verb = "would leave as it is" if change.left_as_found else verb
        whole = change.role != "leftover" and change.deployment in plan.whole_deployment
        lines.append(
            f"{verb}: {change.describe()}"
            + (" (whole: hosts outside the campaign turn Outdated)" if whole else "")
        )
    lines.append(f"failure budget: {plan.budget}")
    return "\n".join(lines)
