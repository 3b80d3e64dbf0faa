"""`metalflow campaign plan NAME [the options of start] [--json]`: what `campaign start` would do,
starting nothing and changing nothing.

It reads what the campaign will read, through the same code (`drivers.campaign.Fleet`, which the
campaign's activities adapt): the selection and the hosts left out (with why: assigned in the
inventory, unknown to DPF), the hosts another running campaign holds (the claims registry's
`held` query), the hosts already at the target, the canary and the batches in order, the windows
(each in its zone, with the next opening), and what the campaign would change outside its hosts
(a BFB or flavor campaign's DPUDeployments: current value, new value; a deployment that is not
OnDelete, or selects hosts outside the campaign, is refused with the same words as `start`).

Exit statuses: 0 the plan (a campaign that `start` would run), 1 a campaign `start` would refuse
(the reason printed), 2 usage, bad input, or a world that cannot be read.

Cost: what the campaign's first steps cost (drivers/campaign.py): the inventory, one list of
DPUNodes, the at-target reads of every selected host (one DPU list each, or each DPU's BMC), one
query of the claims registry.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from contracts import names, workflow_api
from contracts.errors import InvalidInput, MetalflowError
from contracts.models.campaign import (
    CampaignInput,
    CheckHostsInput,
    ClaimAnswer,
    ClaimRequest,
    DeploymentChange,
    DeploymentsInput,
    HostGroup,
    SelectHostsInput,
    Window,
)
from contracts.validation import Requester, arg_type
from drivers.campaign import Fleet
from drivers.credentials import CredentialResolver
from drivers.inventory import Inventory
from drivers.kube import Kube
from drivers.redfish.client import RedfishClient
from drivers.settings import Settings
from metalflow.cli.campaign_options import add_options, campaign_input
from metalflow.cli.workflow_commands import EXIT_FAILED, EXIT_OK, EXIT_USAGE, CommandError
from metalflow.hosts import default_operator
from workflows.campaign import plan as decide

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
    at_target: tuple[str, ...]
    canary: tuple[str, ...]
    batches: tuple[tuple[str, ...], ...]
    windows: tuple[PlannedWindow, ...]
    changes: tuple[DeploymentChange, ...]
    budget: str
    refused: str | None = None  # why `start` would refuse it (nothing would change)


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
        settings = Settings.from_env()
    except ValueError as err:
        raise CommandError(f"plan refused: {err}", EXIT_USAGE) from None
    kube = Kube(settings)
    redfish = None
    if request.target.spec.at_target == "bmc":  # the DPUs' BMCs tell which hosts are at the target
        redfish = RedfishClient(
            CredentialResolver(settings.kubeconfig), max_in_flight=settings.bmc_max_in_flight
        )
    fleet = Fleet(Inventory(settings, kube), kube, redfish)
    try:
        plan = await build(client, fleet, request, args.task_queue)
    except InvalidInput as err:
        raise CommandError(f"start would refuse it: {err.message}", EXIT_FAILED) from None
    except MetalflowError as err:
        raise CommandError(f"cannot read the site: {err.message}", EXIT_USAGE) from None
    if args.json:
        print(plan.model_dump_json(indent=2))
    else:
        print(render(plan))
    return EXIT_OK


async def build(
    client: Client, fleet: Fleet, request: CampaignInput, task_queue: str = names.TASK_QUEUE
) -> CampaignPlan:
    """The plan, read as the campaign reads (raises what the campaign would fail with)."""
    target = request.target
    selected = await fleet.select(
        SelectHostsInput(
            selection=request.selection, target=target, skip_assigned=request.policy.assigned == "skip"
        )
    )
    left_out = list(selected.left_out)
    out = {h for g in left_out for h in g.host_ids}
    ids = [h for h in selected.roster.ids if h not in out]
    held = await _held(client, names.campaign_workflow_id(request.name), tuple(ids), task_queue)
    for holder, hosts in held.held.items():
        left_out.append(HostGroup(reason=f"claimed by running campaign {holder}", host_ids=hosts))
        out |= set(hosts)
    ids = [h for h in ids if h not in out]
    changes: tuple[DeploymentChange, ...] = ()
    canary_hosts: list[str] = []
    if target.points_deployment:
        prepared = await fleet.prepare_deployments(DeploymentsInput(target=target, host_ids=tuple(ids)))
        changes, canary_hosts = prepared.changes, list(prepared.canary_hosts)
    at_target: set[str] = set()
    if target.spec.at_target != "never" and ids:
        checked = await fleet.check(CheckHostsInput(target=target, host_ids=tuple(ids)))
        at_target = set(checked.at_target)
    # The campaign checks hosts as it reaches them: here they are read now, in the order it runs.
    to_run = [h for h in ids if h not in at_target]
    if target.points_deployment:
        canary = [h for h in canary_hosts if h in to_run]
    else:
        canary = to_run[: request.canary]
    rest = [h for h in to_run if h not in canary]
    size = request.limits.batch_size
    batches = tuple(tuple(rest[i : i + size]) for i in range(0, len(rest), size))
    now = datetime.now(UTC)
    windows = tuple(
        PlannedWindow(
            window=w, open_now=decide.window_open([w], now), next_open=decide.next_window_open([w], now)
        )
        for w in request.windows
    )
    return CampaignPlan(
        name=request.name,
        target=target.describe(),
        selection=request.selection.describe(),
        selected=len(selected.roster),
        left_out=tuple(left_out),
        at_target=tuple(h for h in ids if h in at_target),
        canary=tuple(canary),
        batches=batches,
        windows=windows,
        changes=changes,
        budget=decide.describe_budget(request.budget, 0, len(selected.roster)),
    )


async def _held(client: Client, campaign: str, host_ids: tuple[str, ...], task_queue: str) -> ClaimAnswer:
    handle = client.get_workflow_handle(names.campaign_claims_workflow_id(task_queue))
    try:
        return await handle.query(
            workflow_api.CampaignClaimsWorkflow.held, ClaimRequest(campaign=campaign, host_ids=host_ids)
        )
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return ClaimAnswer()  # no campaign ever claimed: nothing held
        raise


def _hosts(hosts: tuple[str, ...] | list[str]) -> str:
    more = f" ... (+{len(hosts) - SHOWN})" if len(hosts) > SHOWN else ""
    return ", ".join(hosts[:SHOWN]) + more if hosts else "-"


def render(plan: CampaignPlan) -> str:
    lines = [
        f"campaign {plan.name} (plan; nothing started): {plan.target} on {plan.selection}",
        f"selected: {plan.selected} hosts",
    ]
    for group in plan.left_out:
        lines.append(f"left out ({len(group.host_ids)}): {group.reason}: {_hosts(group.host_ids)}")
    lines.append(f"already at target ({len(plan.at_target)}): {_hosts(plan.at_target)}")
    lines.append(f"canary ({len(plan.canary)}): {_hosts(plan.canary)}")
    for number, batch in enumerate(plan.batches, start=1):
        lines.append(f"batch {number} ({len(batch)}): {_hosts(batch)}")
    if not plan.windows:
        lines.append("windows: none (hosts start at any time)")
    for w in plan.windows:
        opens = (
            "open now" if w.open_now else f"next opens {w.next_open.isoformat() if w.next_open else 'never'}"
        )
        days = ",".join("mon tue wed thu fri sat sun".split()[d] for d in w.window.days)
        span = f"{w.window.start_minute // 60:02d}:{w.window.start_minute % 60:02d}-"
        span += f"{w.window.end_minute // 60:02d}:{w.window.end_minute % 60:02d}"
        lines.append(f"window {days} {span} {w.window.tz}: {opens}")
    if not plan.changes:
        lines.append("changes outside its hosts: none")
    for change in plan.changes:
        lines.append(f"would change: {change.describe()}")
    lines.append(f"failure budget: {plan.budget}")
    return "\n".join(lines)
