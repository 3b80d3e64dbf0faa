"""`metalflow campaign schedule NAME --cron EXPR|--every DURATION [campaign options]`, `campaign
schedules`, and `campaign schedule pause|unpause|trigger|delete NAME`: Temporal Schedules that
start campaigns.

The Schedule `campaign-<NAME>` starts `CampaignWorkflow` with id `campaign/<NAME>`, to which
Temporal appends the scheduled time (`campaign/<NAME>-2026-11-22T02:00:00Z`), so runs never
collide and each is a normal campaign (`campaign status NAME-2026-11-22T02:00:00Z`, and every
other campaign command). Overlap policy SKIP: a run due while the previous one still runs is
skipped, never stacked. `--cron` is read in `--tz` (an IANA zone, default UTC; Temporal applies
its DST rules). The catch-up window (how late a run missed while the server was down may still
start) is `--catch-up`, by default the longest maintenance window of the campaign, else one hour,
never Temporal's default of a year: a Saturday 02:00 run missed is not started on Tuesday.
`--jitter` spreads each start by up to that much. One campaign per host holds between runs and
manual campaigns (workflows/campaign_claims/workflow.py). The Schedule's note says who made it. Cost: one
Schedule per name on the server; nothing in the worker until a run starts.

Temporal lists schedules from its visibility store, which is eventually consistent: a schedule
just created may be missing from the list for a moment, and one just deleted may still be in it.
So `schedule NAME` returns once the list shows the new schedule, and `schedule delete NAME` once
it no longer does (each at most `LISTED_WITHIN` seconds; past that the command says so), and a
script that creates then lists sees what it made; `schedules` passes over a listed schedule that
is gone. Cost: a few list calls per create or delete.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError, RPCStatusCode

from contracts import names, workflow_api
from contracts.models.campaign import CampaignInput
from contracts.validation import Requester, arg_type
from contracts.wording import iso_z
from metalflow.cli import exits
from metalflow.cli.campaign_options import add_options, campaign_input, duration, duration_words
from metalflow.cli.workflow_commands import CommandError, ended_badly
from metalflow.hosts import default_operator

EXIT_OK, EXIT_FAILED, EXIT_USAGE = exits.OK, exits.FAILED, exits.USAGE
LISTED_WITHIN = 15.0  # seconds a create or delete waits for the schedule list to agree
LISTED_POLL = 0.2
ACTIONS = ("pause", "unpause", "trigger", "delete")
PREFIX = "campaign-"


class ScheduleError(Exception):
    def __init__(self, message: str, status: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.status = status


DEFAULT_CATCH_UP = timedelta(hours=1)


def catch_up_window(request: CampaignInput) -> timedelta:
    """The longest maintenance window of the campaign, else one hour."""
    longest = max((w.length_minutes() for w in request.windows), default=0)
    return timedelta(minutes=longest) if longest else DEFAULT_CATCH_UP


def schedule_id(name: str) -> str:
    """The Schedule of campaign NAME: `campaign-NAME`."""
    names.campaign_workflow_id(name)  # the same alphabet as the campaign's
    return f"{PREFIX}{name}"


def register(commands: Any, runner: Callable[[Any], Callable[[argparse.Namespace], int]]) -> None:
    """Add `schedule` and `schedules` under `campaign`."""
    schedule = commands.add_parser(
        "schedule",
        help="start a campaign on a schedule; or pause|unpause|trigger|delete NAME",
        description="Create a Temporal Schedule that starts the campaign (overlap: skip), or act on one: "
        "`campaign schedule pause|unpause|trigger|delete NAME`.",
    )
    schedule.add_argument(
        "name", metavar="NAME|ACTION", help="the schedule's name, or pause|unpause|trigger|delete"
    )
    schedule.add_argument("target", nargs="?", metavar="NAME", help="with an action: the schedule's name")
    when = schedule.add_mutually_exclusive_group()
    when.add_argument("--cron", metavar="EXPR", help="a cron expression (in --tz), e.g. '0 2 * * sat'")
    when.add_argument("--every", type=duration, metavar="DURATION", help="an interval, e.g. 12h")
    schedule.add_argument(
        "--catch-up", type=duration, metavar="DURATION",
        help="how late a missed run may still start (default: the longest --window, else 1h)",
    )  # fmt: skip
    schedule.add_argument(
        "--jitter", type=duration, metavar="DURATION", default=0.0,
        help="start each run up to this much later, at random (default: none)",
    )  # fmt: skip
    schedule.add_argument(
        "--by", type=arg_type(Requester), default=default_operator(), help="who asks (default: %(default)s)"
    )
    schedule.add_argument(
        "--task-queue", default=names.TASK_QUEUE, help="worker task queue (default: %(default)s)"
    )
    add_options(schedule, required=False)
    schedule.set_defaults(handler=runner(_schedule))

    listing = commands.add_parser("schedules", help="list campaign schedules", description="List schedules.")
    listing.set_defaults(handler=runner(_schedules))


async def _schedule(client: Client, args: argparse.Namespace) -> int:
    from metalflow.cli.campaign import CampaignError

    try:
        if args.name in ACTIONS and args.target:
            return await _act(client, args.name, args.target, args.by)
        return await _create(client, args)
    except ScheduleError as err:
        raise CampaignError(str(err), err.status) from None


async def _create(client: Client, args: argparse.Namespace) -> int:
    if args.target:
        raise ScheduleError(
            f"unknown schedule action {args.name!r}: give one of {', '.join(ACTIONS)}", EXIT_USAGE
        )
    if not args.cron and not args.every:
        raise ScheduleError("give --cron EXPR or --every DURATION", EXIT_USAGE)
    try:
        sid = schedule_id(args.name)
        request = campaign_input(args.name, args)
    except ValueError as err:
        raise ScheduleError(f"schedule refused, nothing created: {err}", EXIT_USAGE) from None
    jitter = timedelta(seconds=args.jitter) if args.jitter else None
    spec = (
        ScheduleSpec(cron_expressions=[args.cron], time_zone_name=args.tz, jitter=jitter)
        if args.cron
        else ScheduleSpec(
            intervals=[ScheduleIntervalSpec(every=timedelta(seconds=args.every))], jitter=jitter
        )
    )
    action = ScheduleActionStartWorkflow(
        workflow_api.CampaignWorkflow.run,
        request,
        id=names.campaign_workflow_id(args.name),
        task_queue=args.task_queue,
        typed_search_attributes=TypedSearchAttributes(
            [SearchAttributePair(names.OPERATION, names.CAMPAIGN_OPERATION)]
        ),
    )
    catch_up = timedelta(seconds=args.catch_up) if args.catch_up else catch_up_window(request)
    note = f"created by {args.by} with `metalflow campaign schedule`: {request.target.describe()} on " + (
        request.selection.describe()
    )
    try:
        await client.create_schedule(
            sid,
            Schedule(
                action=action,
                spec=spec,
                policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP, catchup_window=catch_up),
                state=ScheduleState(note=note),
            ),
        )
    except ScheduleAlreadyRunningError:
        raise ScheduleError(f"schedule {sid} already exists; delete it first") from None
    except RPCError as err:
        if err.status == RPCStatusCode.INVALID_ARGUMENT:
            raise ScheduleError(f"schedule refused, nothing created: {err.message}", EXIT_USAGE) from None
        raise
    when = f"cron {args.cron!r} in {args.tz}" if args.cron else f"every {duration_words(args.every)}"
    print(
        f"schedule {sid} created ({when}, catch-up {duration_words(catch_up.total_seconds())}); "
        f"its runs are campaign/{args.name}-<time>"
    )
    if not await _listed_as(client, sid, present=True):
        print(f"(`campaign schedules` may take a few more seconds to list {sid})")
    return EXIT_OK


async def _listed_as(client: Client, sid: str, *, present: bool) -> bool:
    """Wait until the schedule list shows `sid` (`present`) or no longer shows it; False when it
    did not within LISTED_WITHIN seconds (see the module docstring)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LISTED_WITHIN
    while True:
        listed = [s.id async for s in await client.list_schedules() if s.id == sid]
        if bool(listed) == present:
            return True
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(LISTED_POLL)


def noted(description: str, action: str, by: str) -> str:
    """The Schedule's note after `pause` or `unpause`: Temporal replaces the note with the one
    given, so the description the schedule was made with (who made it, what it runs) is kept and
    the action added; an earlier pause or unpause note is replaced, not piled up."""
    base = description
    for earlier in ("; paused by ", "; unpaused by "):
        base = base.split(earlier, 1)[0]
    if base.startswith(("paused by ", "unpaused by ")):
        base = ""
    said = f"{action}d by {by}"
    return f"{base}; {said}" if base else said


async def _act(client: Client, action: str, name: str, by: str) -> int:
    sid = schedule_id(name)
    handle = client.get_schedule_handle(sid)
    try:
        if action in ("pause", "unpause"):
            described = await handle.describe()
            note = noted(described.schedule.state.note or "", action, by)
            await (handle.pause(note=note) if action == "pause" else handle.unpause(note=note))
        elif action == "trigger":
            await handle.trigger(overlap=ScheduleOverlapPolicy.SKIP)
        else:
            await handle.delete()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise ScheduleError(f"no schedule {sid}", EXIT_USAGE) from None
        raise
    print(f"schedule {sid}: {action}{'d' if action.endswith('e') else 'ed'}")
    if action == "delete" and not await _listed_as(client, sid, present=False):
        print(f"(`campaign schedules` may list {sid} a few more seconds)")
    return EXIT_OK


SCHEDULES_HEADER = "SCHEDULE\tSTATE\tWHEN\tNEXT\tLAST\tNOTE"
"""`campaign schedules`' header row: LAST is the last run, or how it ended when not completed."""


def schedule_when(spec: Any) -> str:
    """A schedule's times in words, as `campaign schedule` took them: `every 30d`, `cron '0 2 * *
    *' in Europe/Paris` (a Temporal `ScheduleSpec`)."""
    words = [f"every {duration_words(i.every.total_seconds())}" for i in spec.intervals]
    zone = f" in {spec.time_zone_name}" if spec.time_zone_name else ""
    words += [f"cron {cron!r}{zone}" for cron in spec.cron_expressions]
    if not words and spec.calendars:  # a server that kept the cron as its calendar only
        words.append(f"calendar{zone}")
    return "; ".join(words) or "-"


async def _schedules(client: Client, args: argparse.Namespace) -> int:
    """One line per campaign schedule; a schedule whose last run failed, was terminated or timed
    out says so with the reason, and the command exits 1 (status is the truth)."""
    found, bad = 0, 0
    async for listed in await client.list_schedules():
        if not listed.id.startswith(PREFIX):
            continue
        try:
            described = await client.get_schedule_handle(listed.id).describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                continue  # deleted; the list has not caught up yet
            raise
        found += 1
        state = described.schedule.state
        upcoming = described.info.next_action_times[:1]
        recent = [
            a.action.workflow_id
            for a in described.info.recent_actions[-1:]
            if hasattr(a.action, "workflow_id")
        ]
        last = recent[0] if recent else "-"
        if recent:
            try:
                ended = await ended_badly(client, recent[0], "campaign")
            except CommandError:
                ended = None  # its run's history is gone (retention): nothing to say
            if ended is not None:
                bad += 1
                last = ended
        if found == 1:
            print(SCHEDULES_HEADER)
        next_at = iso_z(upcoming[0]) if upcoming else "-"
        when = schedule_when(described.schedule.spec)
        shown = "paused" if state.paused else "active"
        print(f"{listed.id}\t{shown}\t{when}\t{next_at}\t{last}\t{state.note or ''}")
    if not found:
        print("no campaign schedules")
    return EXIT_FAILED if bad else EXIT_OK
