"""`metalflow campaign ...`: fleet upgrade campaigns (workflow `CampaignWorkflow`, id
`campaign/<name>`).

`start` first runs every check `plan` runs, through the same reads and the same rules
(metalflow/cli/campaign_plan.py, `checked`): a refusal starts nothing, leaves no failed run
behind and keeps the status of the last campaign of that name, with `plan`'s exit status. Then
it starts the campaign (refused while one of that name runs) and waits until its hosts are
selected; `--wait` follows it and exits 0 when no host failed (each succeeded, was at the target
or was skipped by the campaign's rules or a person's word: `CampaignResult.nothing_failed`), and ends as
soon as the campaign waits for nothing but an operator (halted: its failure budget spent, or a
failed canary; or paused), saying so and what it accepts, exit 1: it still runs
(`waits_for_operator`). `plan` shows what `start` would do, starting nothing
(metalflow/cli/campaign_plan.py). `status` shows the status query (a live progress bar on a
terminal, `--json` for scripts); `hosts` every host's outcome, page by page; `pause`, `resume`,
`abort`, `retry-failed`, `skip` and `limits` are updates whose validators refuse what does not
apply now, with the reason; `list` lists campaigns. Every command takes a campaign's name, or a
scheduled run's (`NAME-2026-11-22T02:00:00Z`). Schedules: metalflow/cli/campaign_schedule.py.

Exit statuses (`metalflow.cli.exits`, README's table), the same from `start` and `plan`: 0 done
(`--wait`: no host failed; a skipped host is no failure); 1 refused by the campaign's rules (as
`plan` says), failed, stopped, or a host failed (`--wait` of a campaign halted or paused: it waits for an
operator), a name already running, an update the campaign refused, and `status` of a campaign
that failed, was cancelled or terminated (it still shows its status and changes); 4 `status`
(and `--wait`) of a campaign an operator aborted (`aborted by <who>: <reason>`); 2 usage, a
selection that names no host, no such campaign or schedule, bad input that changed nothing; 3
Temporal or the cluster unreachable.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import datetime, timedelta
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from contracts import names, workflow_api
from contracts.models.campaign import (
    HOSTS_QUERY,
    RETRY_FAILED_UPDATE,
    SET_LIMITS_UPDATE,
    SKIP_HOST_UPDATE,
    AbortRequest,
    CampaignInput,
    CampaignResult,
    CampaignStatus,
    HostsPage,
    HostsQuery,
    HostState,
    Limits,
    LimitsRequest,
    SkipRequest,
)
from contracts.models.control import (
    ABORT_UPDATE,
    PAUSE_UPDATE,
    RESUME_UPDATE,
    STATUS_QUERY,
    OperatorAnswer,
    OperatorRequest,
)
from contracts.validation import Reason, Requester, arg_type
from contracts.wording import iso_z, plural
from metalflow.cli import campaign_plan, campaign_schedule, exits, workflow_commands
from metalflow.cli.campaign_options import add_options, campaign_input, positive_int
from metalflow.cli.campaign_plan import PlanRefused, SiteRefused, checked, with_site_check
from metalflow.cli.campaign_render import (
    details,
    print_named,
    render,
    skipped_words,
    summary,
    waits_for_operator,
)
from metalflow.cli.workflow_commands import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    FOLLOW_SECONDS,
    CommandError,
    runner,
    until_past,
)
from metalflow.hosts import QUERY_TIMEOUT, default_operator, unanswered_query
from metalflow.rollouts import root_cause

HOST_OUTCOMES = HostState.WORDS.values()
ENDED_READ = timedelta(seconds=5)  # how long a refusal waits to read how an ended campaign ended
MISSING = "no campaign {id} running"  # an update's refusal when the workflow does not run
UPDATES = {
    "pause": (PAUSE_UPDATE, "start no new host; running ones finish"),
    "resume": (RESUME_UPDATE, "go on after a pause or a halt"),
    "retry-failed": (RETRY_FAILED_UPDATE, "run the failed hosts again (clears a halt)"),
}


class CampaignError(CommandError):
    """A campaign command's refusal: one line and its exit status (metalflow/cli/workflow_commands.py)."""


def register(subparsers: Any) -> None:
    """Add `campaign` and its commands."""
    campaign = subparsers.add_parser(
        "campaign",
        help="upgrade many hosts as a paced, guarded campaign",
        description="Fleet campaigns: a canary, then batches under limits, soak times, maintenance "
        "windows and a failure budget; each host through its entity host/<id>.",
    )
    commands = campaign.add_subparsers(title="campaign commands", metavar="COMMAND")
    start = commands.add_parser("start", help="start a campaign", description="Start a campaign.")
    _name(start)
    add_options(start, required=True)
    start.add_argument(
        "--wait",
        action="store_true",
        help="follow it; exit 0 if no host failed (a skipped one is no failure); "
        "ends (exit 1) once it halts or is paused",
    )
    start.set_defaults(handler=runner(_start))

    campaign_plan.register(commands, runner)

    status = commands.add_parser("status", help="show a campaign's progress", description="Show progress.")
    _name(status)
    status.add_argument("--json", action="store_true", help="the status query as JSON")
    status.set_defaults(handler=runner(_status))

    hosts = commands.add_parser(
        "hosts", help="every host's outcome, page by page", description="List each host's outcome."
    )
    _name(hosts)
    hosts.add_argument(
        "--outcome",
        choices=sorted(set(HOST_OUTCOMES)),
        help="only hosts with this outcome",
    )
    hosts.add_argument("--json", action="store_true", help="one JSON list, an object per host")
    hosts.set_defaults(handler=runner(_hosts))

    for command, (update, text) in UPDATES.items():
        parser = commands.add_parser(command, help=text, description=f"{text[0].upper()}{text[1:]}.")
        _name(parser)
        parser.add_argument(
            "--reason", type=arg_type(Reason), default="", help="why, recorded with the request"
        )
        parser.set_defaults(handler=runner(_update), update=update, command=command)

    abort = commands.add_parser(
        "abort", help="start no new host; let running ones finish", description="Abort the campaign."
    )
    _name(abort)
    abort.add_argument("--cancel-running", action="store_true", help="abort the running host operations too")
    abort.add_argument(
        "--keep-changes",
        action="store_true",
        help="leave the DPUDeployments as the campaign pointed them (default: put them back)",
    )
    abort.add_argument("--reason", type=arg_type(Reason), default="", help="why, recorded with the request")
    abort.set_defaults(handler=runner(_abort))

    skip = commands.add_parser("skip", help="leave a waiting host out", description="Skip a host.")
    _name(skip)
    skip.add_argument("host", help="the host id")
    skip.add_argument("--reason", type=arg_type(Reason), default="", help="why, recorded with the request")
    skip.set_defaults(handler=runner(_skip))

    limits = commands.add_parser("limits", help="change the limits while it runs", description="Set limits.")
    _name(limits)
    limits.add_argument("--batch-size", type=positive_int, help="hosts per batch, from the next batch")
    limits.add_argument("--max-in-flight", type=positive_int, help="hosts at once")
    limits.add_argument("--max-per-group", type=int, help="hosts at once per group (0: no limit)")
    limits.add_argument("--max-per-bmc", type=int, help="hosts at once per BMC endpoint (0: no limit)")
    limits.set_defaults(handler=runner(_limits))

    listing = commands.add_parser("list", help="list campaigns", description="List campaigns.")
    listing.add_argument("--by", type=arg_type(Requester), default=default_operator(), help=argparse.SUPPRESS)
    listing.add_argument(
        "--json", action="store_true", help="one JSON list, an object per campaign (the columns' words)"
    )
    listing.set_defaults(handler=runner(_list))
    campaign_schedule.register(commands, runner)


def _name(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", type=_campaign_name, help="the campaign's name (workflow campaign/NAME)")
    parser.add_argument(
        "--by", type=arg_type(Requester), default=default_operator(), help="who asks (default: %(default)s)"
    )
    parser.add_argument(
        "--task-queue", default=names.TASK_QUEUE, help="worker task queue (default: %(default)s)"
    )


def _campaign_name(text: str) -> str:
    """A campaign's name, its workflow id, or a scheduled run's name (`NAME-<time>`)."""
    text = text.removeprefix("campaign/")
    try:
        names.campaign_run_workflow_id(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def _handle(client: Client, name: str) -> WorkflowHandle[Any, CampaignResult]:
    return client.get_workflow_handle(names.campaign_run_workflow_id(name), result_type=CampaignResult)


async def _start(client: Client, args: argparse.Namespace) -> int:
    try:
        request = campaign_input(args.name, args)
    except ValueError as err:
        raise CampaignError(f"campaign refused, nothing started: {err}", EXIT_USAGE) from None
    # The kept `metalflow site check` (one file read): the site's own rules for this kind refuse
    # it; the hosts it blocks the kind's operation on are left out (as `plan` shows them).
    try:
        request, said = with_site_check(request)
    except SiteRefused as refused:
        raise CampaignError(f"campaign refused, nothing started: {refused}", EXIT_FAILED) from None
    for line in said:
        print(f"metalflow campaign: {line}", file=sys.stderr)
    # Everything `plan` checks, through the same reads and rules, before anything starts: a refusal
    # leaves no run behind, and the last campaign of this name keeps its status.
    try:
        await checked(client, request, args.task_queue)
    except PlanRefused as refused:
        raise CampaignError(f"campaign refused, nothing started: {refused.reason}", EXIT_FAILED) from None
    except CommandError as err:
        raise CampaignError(f"campaign refused, nothing started: {err}", err.status) from None
    workflow_id = names.campaign_workflow_id(args.name)
    try:
        handle = await client.start_workflow(
            workflow_api.CampaignWorkflow.run,
            request,
            id=workflow_id,
            task_queue=args.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            static_summary=f"campaign {args.name}: {request.target.describe()} on "
            f"{request.selection.describe()}, for {args.by}",
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(names.OPERATION, names.CAMPAIGN_OPERATION),
                    SearchAttributePair(names.CAMPAIGN, args.name),
                ]
            ),
        )
    except WorkflowAlreadyStartedError as err:
        raise CampaignError(
            f"campaign {args.name} is already running (workflow {workflow_id}, run {err.run_id}); "
            "pick another name, or `metalflow campaign abort` it first"
        ) from None
    # The hosts are selected (phase past `selecting`), or the run refused them.
    try:
        status = await until_past(handle, "selecting", query, "campaign refused, no host touched")
    except CommandError as err:  # the run refused what the check let by (the world moved)
        raise CampaignError(
            str(err), await _refusal_status(client, request, args.task_queue, err.status)
        ) from None
    target = request.target.describe()
    # the hosts that run: those the admission left out (skipped at the start) do not
    runs = plural(status.total - status.skipped, "host")
    if status.skipped:
        named = f"`metalflow campaign status {args.name}` names them"
        runs += f" of {status.total} ({status.skipped} left out: {named})"
    print(f"campaign {workflow_id} started: {target} on {runs} ({status.phase})")
    return await follow(handle) if args.wait else EXIT_OK


async def _refusal_status(client: Client, request: CampaignInput, task_queue: str, status: int) -> int:
    """The exit status of a refusal by the run itself: what `plan` decides now (1 the rules
    refuse it, 2 bad input or a selection of no host, 3 the cluster unreachable), so `plan` and
    `start` exit alike for the same refusal; `status` when `plan` finds nothing to refuse."""
    try:
        await checked(client, request, task_queue)
    except PlanRefused:
        return EXIT_FAILED
    except CommandError as err:
        return err.status
    return status


async def query(handle: WorkflowHandle[Any, Any]) -> CampaignStatus:
    return await workflow_commands.query(handle, STATUS_QUERY, CampaignStatus, "campaign")


async def follow(handle: WorkflowHandle[Any, CampaignResult]) -> int:
    """Print progress until the campaign ends, or waits for an operator (`waits_for_operator`:
    said, EXIT_FAILED); EXIT_OK when no host failed (`CampaignResult.nothing_failed`)."""
    last = ""
    while (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
        try:
            status = await query(handle)
        except RPCError:  # between runs (continue-as-new) or a worker restarting: ask again
            status = None
        line = last if status is None else render(status)
        if line != last:
            print(line, flush=True)
            last = line
        stuck = None if status is None else waits_for_operator(status)
        if status is not None and stuck is not None:
            for detail in details(status, handle.id):
                print(detail)
            print(stuck, flush=True)
            return EXIT_FAILED
        await asyncio.sleep(FOLLOW_SECONDS)
    try:
        result = await handle.result()
    except WorkflowFailureError as err:
        try:  # what it changed and whether it was put back, before the failure
            for line in details(await query(handle), handle.id):
                print(line)
        except (RPCError, CommandError):
            pass
        raise CampaignError(f"{handle.id} failed: {root_cause(err)}") from None  # campaign/NAME
    print(summary(result))
    if result.stopped_reason:
        print(f"  stopped: {result.stopped_reason}")
    for word, count, named in (
        ("failed", result.failed, result.failures),
        ("aborted", result.aborted, result.aborted_hosts),
        ("skipped", result.skipped, result.skipped_hosts),
    ):
        print_named(word, count, named, handle.id)
    if (skipped := skipped_words(result)) is not None:
        print(skipped)
    for change in result.changes:
        print(f"  changed {change.describe()}")
    if result.outcome == "aborted" and not result.failed:  # asked for by an operator: no failure
        return exits.ABORTED
    return EXIT_OK if result.nothing_failed else EXIT_FAILED


async def _status(client: Client, args: argparse.Namespace) -> int:
    """The status query; a campaign that failed, was cancelled or terminated still shows its
    status (counts, hosts, every change and whether it was put back) and says how it ended, exit 1
    (4 for an operator's abort)."""
    handle = _handle(client, args.name)
    status, ended = await workflow_commands.last_status(client, handle, query, "campaign")
    ended = ended or workflow_commands.aborted_as(handle.id, status)
    if ended is not None:
        status = status.as_ended(ended)
    elif (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED:  # said, never ""
        status = status.model_copy(update={"ended": workflow_commands.campaign_ended(status)})
    if args.json:
        print(status.model_dump_json(indent=2))
        return EXIT_OK if ended is None else ended.status
    if ended is not None or not sys.stdout.isatty():
        print(render(status))
        for line in details(status, handle.id):
            print(line)
        if ended is not None:
            raise CampaignError(str(ended), ended.status)  # it names campaign/NAME
        return EXIT_OK
    while True:  # a live bar until the campaign ends (Ctrl-C leaves it running)
        print("\r\033[K" + render(status), end="", flush=True)
        if (await handle.describe()).status != WorkflowExecutionStatus.RUNNING:
            print()
            await _raise_if_ended_badly(client, handle.id)
            if (aborted := workflow_commands.aborted_as(handle.id, await query(handle))) is not None:
                raise CampaignError(str(aborted), aborted.status)  # it names campaign/NAME
            return EXIT_OK
        await asyncio.sleep(FOLLOW_SECONDS)
        status = await query(handle)


async def _raise_if_ended_badly(client: Client, workflow_id: str) -> None:
    """A campaign that failed, was terminated or timed out is said so, exit 1."""
    why = await workflow_commands.ended_badly(client, workflow_id, "campaign")
    if why is not None:
        raise CampaignError(str(why), why.status)  # it names campaign/NAME


async def _ended(handle: WorkflowHandle[Any, Any]) -> str | None:
    """How a completed campaign ended (`aborted by <who>: <why>`), for a command it refused; None
    when its status cannot be read within ENDED_READ (no worker to answer): Temporal's
    `completed` stays. Cost: one query, on this refusal only."""
    try:
        status = await handle.query(STATUS_QUERY, result_type=CampaignStatus, rpc_timeout=ENDED_READ)
    except (RPCError, WorkflowQueryFailedError, WorkflowQueryRejectedError):
        return None
    return workflow_commands.campaign_ended(status)


async def _answer(handle: WorkflowHandle[Any, Any], update: str, request: Any, command: str) -> int:
    """Send the update; `command`: the CLI's words for it, in a refusal (`retry-failed`)."""
    return await workflow_commands.answer(
        handle, update, request, OperatorAnswer, MISSING, command=command, ended=_ended
    )


async def _update(client: Client, args: argparse.Namespace) -> int:
    request = OperatorRequest(requested_by=args.by, reason=args.reason)
    return await _answer(_handle(client, args.name), args.update, request, args.command)


async def _hosts(client: Client, args: argparse.Namespace) -> int:
    """Every host's outcome, one page (HOSTS_PAGE_MAX hosts) per query; `--json`: one JSON list,
    printed as the pages arrive (10,000 hosts are never held at once), closed even when a later
    page fails, so stdout stays one document."""
    handle = _handle(client, args.name)
    offset: int | None = 0
    opened = False
    try:
        while offset is not None:
            try:
                page = await handle.query(
                    HOSTS_QUERY, HostsQuery(offset=offset, outcome=args.outcome), result_type=HostsPage,
                    rpc_timeout=QUERY_TIMEOUT,
                )  # fmt: skip
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:
                    raise CampaignError(f"no campaign {handle.id}", EXIT_USAGE) from None
                unanswered = await unanswered_query(handle, err)
                if unanswered is not None:  # no worker answers: exit 3, one wording
                    raise CampaignError(str(unanswered), exits.UNREACHABLE) from None
                raise
            for host in page.hosts:
                if args.json:
                    print(("[" if not opened else ",") + "\n  " + host.model_dump_json(), end="")
                    opened = True
                else:
                    print(f"{host.host_id}\t{host.outcome}\t{host.workflow_id or '-'}\t{host.reason}")
            offset = page.next_offset
    finally:
        if args.json and opened:
            print("\n]")
    if args.json and not opened:
        print("[]")
    return EXIT_OK


async def _abort(client: Client, args: argparse.Namespace) -> int:
    request = AbortRequest(
        requested_by=args.by,
        reason=args.reason,
        cancel_running=args.cancel_running,
        keep_changes=args.keep_changes,
    )
    return await _answer(_handle(client, args.name), ABORT_UPDATE, request, "abort")


async def _skip(client: Client, args: argparse.Namespace) -> int:
    request = SkipRequest(requested_by=args.by, reason=args.reason, host_id=args.host)
    return await _answer(_handle(client, args.name), SKIP_HOST_UPDATE, request, "skip")


async def _limits(client: Client, args: argparse.Namespace) -> int:
    handle = _handle(client, args.name)
    current = (await query(handle)).limits
    changes = {
        k: v
        for k, v in (
            ("batch_size", args.batch_size),
            ("max_in_flight", args.max_in_flight),
            ("max_per_group", args.max_per_group),
            ("max_per_bmc", args.max_per_bmc),
        )
        if v is not None
    }
    if not changes:
        raise CampaignError(
            "give at least one of --batch-size, --max-in-flight, --max-per-group, --max-per-bmc", EXIT_USAGE
        )
    try:
        limits = Limits.model_validate({**current.model_dump(), **changes})
    except ValueError as err:
        raise CampaignError(f"limits refused, nothing changed: {err}", EXIT_USAGE) from None
    request = LimitsRequest(requested_by=args.by, limits=limits)
    return await _answer(handle, SET_LIMITS_UPDATE, request, "limits")


async def _list(client: Client, args: argparse.Namespace) -> int:
    query_text = f'{names.OPERATION.name} = "{names.CAMPAIGN_OPERATION}"'
    rows = [execution async for execution in client.list_workflows(query_text)]
    listed = []
    for row in sorted(rows, key=lambda r: r.start_time, reverse=True):
        phase = (row.typed_search_attributes.get(names.PHASE) or "") if row.typed_search_attributes else ""
        listed.append((row.id, row.status.name.lower() if row.status else "?", phase, row.start_time))
    if args.json:  # the table's rows, its words: `[]` when there is none
        print(json.dumps(list_json(listed), indent=2))
        return EXIT_OK
    if not rows:
        print("no campaigns")
        return EXIT_OK
    for line in list_lines(listed):
        print(line)
    return EXIT_OK


def list_json(rows: list[tuple[str, str, str, datetime]]) -> list[dict[str, str | None]]:
    """`campaign list --json`: an object per campaign, the table's columns (`list_lines`) by name,
    `phase` null while the campaign has none yet."""
    return [
        {"campaign": workflow_id, "run": _run_word(status), "phase": phase or None, "started": iso_z(started)}
        for workflow_id, status, phase, started in rows
    ]


def _run_word(status: str) -> str:
    return "closed" if status == "completed" else status.replace("_", " ")


def list_lines(rows: list[tuple[str, str, str, datetime]]) -> list[str]:
    """`campaign list`: a header, then one tab-separated line per campaign (its workflow id, its
    run in Temporal, its own Phase, its start in ISO 8601 Z). One meaning per column: RUN says
    whether the run is `running` or `closed` (or how Temporal ended it otherwise: `failed`,
    `terminated`, `timed out`, `cancelled`, `continued as new`), PHASE how far the campaign got
    (`completed`, `aborted`, `halted`, ...; `-` only while it has none yet): a campaign that
    completed read `completed completed`."""
    lines = ["CAMPAIGN\tRUN\tPHASE\tSTARTED"]
    for workflow_id, status, phase, started in rows:
        lines.append(f"{workflow_id}\t{_run_word(status)}\t{phase or '-'}\t{iso_z(started)}")
    return lines
