"""`metalflow host monitor HOST [--status | --stop]`: the host's monitor (flow 5).

Started once per host (`monitor/host-<id>`; a second start attaches to the running one and says
so), by an operator whose name it records. It takes the host out of the pool while a Ready
DPU's critical services are down and, past its deadline, asks the host's entity (`host/<id>`) for
a reprovision: the same gates as any request (busy host, approval on an assigned host). So a
start makes sure the entity runs too, after checking that DPF knows the host's DPUs.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError

from contracts import names
from contracts.models.control import OperatorRequest
from contracts.models.host import HostWorkflowInput, OperationRecord
from contracts.models.monitor import (
    OUT_OF_POOL,
    DegradedDPU,
    HostMonitorInput,
    HostMonitorStatus,
    MonitorPolicy,
)
from contracts.validation import HoldBackAfterAbort, Reason, ReprovisionAfter, arg_type
from contracts.wording import iso_z, plural
from metalflow.cli import exits
from metalflow.hosts import HostRequestError, ensure_entity, host_status
from metalflow.monitors import (
    describe_policy,
    first_look,
    monitor_policy,
    monitor_status,
    resume_monitor,
    start_monitor,
    stop_monitor,
)

FIRST_LOOK_SECONDS = 20.0  # the watcher lists DPF before its first signal; a worker picks it up first
DEFAULT_NAMESPACE = HostMonitorInput.model_fields["namespace"].default
DESCRIPTION = (
    "Start the host's monitor (workflow monitor/host-<id>, one per host: starting it again "
    "attaches to the running one). While a Ready DPU of the host is in Node Effect (its critical "
    "services are down) the host is out of the pool: label metalflow.io/pool=out-of-pool on its "
    "DPUNode and search attribute PoolState. Past the deadline (--reprovision-after) the monitor "
    "asks the host's entity host/<id> for a reprovision of those DPUs, which the entity may refuse "
    "(busy) or hold for `metalflow approve` (assigned host); the start makes sure the entity runs. "
    "An operator's abort (or withdrawal) of the monitor's reprovision is sovereign: the monitor asks "
    "for none for --hold-back seconds (default an hour), shows why in --status, and --resume ends the "
    "hold-back sooner. --status shows it, --stop ends it (the label is left as DPF's state says)."
)
Action = Callable[[Client, argparse.Namespace], Awaitable[int]]


def register(
    commands: Any,
    common: Callable[[argparse.ArgumentParser], None],
    runner: Callable[[Action], Callable[[argparse.Namespace], int]],
) -> None:
    """Add `host monitor`, with the host commands' common options and runner."""
    parser = commands.add_parser(
        "monitor", help="start, show or stop the host's monitor (pool state, auto-reprovision)",
        description=DESCRIPTION,
    )  # fmt: skip
    common(parser)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--reprovision-after",
        type=arg_type(ReprovisionAfter, number=float),
        metavar="SECONDS",
        help="ask for a reprovision when a DPU stays in Node Effect this long "
        f"(default: {MonitorPolicy().reprovision_after_seconds:g})",
    )
    mode.add_argument(
        "--no-auto-reprovision",
        action="store_true",
        help="only take the host out of the pool, never reprovision",
    )
    mode.add_argument(
        "--status", action="store_true", help="show the running monitor (pool state, degraded DPUs)"
    )
    mode.add_argument("--stop", action="store_true", help="stop the running monitor (update abort)")
    mode.add_argument(
        "--resume",
        action="store_true",
        help="end the hold-back after an operator's abort: the monitor's (update resume) and the "
        "entity's hold on automation (as host retry of the idle host)",
    )
    parser.add_argument(
        "--hold-back",
        type=arg_type(HoldBackAfterAbort, number=float),
        metavar="SECONDS",
        help="after an operator aborts or withdraws the monitor's reprovision, ask for none this long "
        f"(default: {MonitorPolicy().hold_back_seconds:g}; 0: no hold-back)",
    )
    parser.add_argument(
        "--reason", type=arg_type(Reason), default="", help="recorded with --stop or --resume"
    )
    parser.add_argument(
        "--dpf-namespace",
        default=DEFAULT_NAMESPACE,
        help="namespace of the DPF objects (default: %(default)s)",
    )
    parser.set_defaults(handler=runner(monitor), check_inventory=True)  # no monitor of a stranger


async def monitor(client: Client, args: argparse.Namespace) -> int:
    """Start, show or stop; failures raise `HostRequestError` (exit 1)."""
    if args.hold_back is not None and (args.status or args.stop or args.resume):
        raise HostRequestError(
            "--hold-back is a policy of a monitor being started: it does not go with --status, --stop "
            f"or --resume (stop the monitor and start it again with --hold-back {args.hold_back:g})"
        )
    if args.status:
        status = await monitor_status(client, args.host)
        if status.own_request is not None and status.own_request.awaiting_approval:
            try:  # approved meanwhile? the monitor hears of its request's end only
                status = as_the_entity_says(status, (await host_status(client, args.host)).current)
            except (HostRequestError, RPCError):
                pass  # the monitor's own view stands
        _say(render_monitor(status, await monitor_policy(client, args.host)))
        return exits.OK
    if args.resume:
        answer = await resume_monitor(
            client, args.host, OperatorRequest(requested_by=args.by, reason=args.reason), args.task_queue
        )
        _say(f"{args.host}: monitor {names.monitor_workflow_id(args.host)}: {answer.message}")
        return exits.OK
    if args.stop:
        result = await stop_monitor(
            client, args.host, OperatorRequest(requested_by=args.by, reason=args.reason)
        )
        _say(
            f"{args.host}: monitor {names.monitor_workflow_id(args.host)} stopped by {result.stopped_by}; "
            f"pool state {result.pool_state} ({result.events_seen} DPF changes seen, {_runs(result.runs)})"
        )
        return exits.OK
    return await _start(client, args)


async def _start(client: Client, args: argparse.Namespace) -> int:
    host, workflow_id = args.host, names.monitor_workflow_id(args.host)
    policy = MonitorPolicy(
        auto_reprovision=not args.no_auto_reprovision,
        **({} if args.reprovision_after is None else {"reprovision_after_seconds": args.reprovision_after}),
        **({} if args.hold_back is None else {"hold_back_seconds": args.hold_back}),
    )
    site = await _site_of(client, host)
    request = HostMonitorInput(
        host_id=host, namespace=args.dpf_namespace, site=site, requested_by=args.by, policy=policy
    )
    if not await start_monitor(client, request, args.task_queue):
        running = await monitor_status(client, host)
        _say(
            f"{host}: monitor {workflow_id} already running (since {_when(running.started_at)}); "
            "not started again"
        )
        if args.reprovision_after is not None or args.no_auto_reprovision or args.hold_back is not None:
            shown = await monitor_policy(client, host)
            _say(
                f"{host}: its policy stays {describe_policy(shown) if shown else 'as started'}: "
                f"stop it (metalflow host monitor {host} --stop) and start it again to change it"
            )
        _say(f"{host}: {pool_line(running)}")
        return exits.OK
    _say(f"{host}: started monitor {workflow_id} ({describe_policy(policy)})")
    seen = await first_look(client, host, FIRST_LOOK_SECONDS)
    if seen is None:
        _say(
            f"{host}: the monitor has not seen DPF's state within {FIRST_LOOK_SECONDS:g} s "
            f"(is a worker polling task queue {args.task_queue}?); it keeps trying"
        )
    elif not seen.dpus:
        await stop_monitor(client, host, OperatorRequest(requested_by=args.by, reason="no DPU to monitor"))
        raise HostRequestError(
            f"nothing to monitor on {host}: DPF has no DPU of this host in namespace {args.dpf_namespace} "
            "(unknown host, or not provisioned yet); the monitor was stopped"
        )
    else:
        _say(f"{host}: {pool_line(seen)}")
    if await ensure_entity(client, HostWorkflowInput(host_id=host, site=site), args.task_queue):
        _say(
            f"{host}: started its entity {names.host_workflow_id(host)}, "
            "which the monitor asks for reprovisions"
        )
    return exits.OK


async def _site_of(client: Client, host: str) -> str:
    try:
        return (await host_status(client, host)).site
    except HostRequestError:  # no entity yet: the site file's name, as the entity will have
        from metalflow.site_name import site_name

        return site_name()


def pool_line(status: HostMonitorStatus) -> str:
    """One line: the pool state, and why when the host is out."""
    if status.pool_state != OUT_OF_POOL or not status.degraded:
        phases = sorted({d.phase or "-" for d in status.dpus})
        watched = plural(len(status.dpus), "DPU")
        return f"{status.pool_state} ({watched} watched: {', '.join(phases) or 'none yet'})"
    down = ", ".join(f"{d.dpu_id} since {_when(d.since)}" for d in status.degraded)
    return f"{status.pool_state}: critical DPU services down on {down}"


def holding_back(status: HostMonitorStatus, now: datetime | None = None) -> bool:
    """Whether the monitor holds back now: a hold-back past its end is over, even before the
    monitor's own clock (its next workflow task) has cleared it."""
    hold = status.hold_back
    return hold is not None and hold.until > (now or datetime.now(UTC))


def hold_back_line(status: HostMonitorStatus) -> str:
    """Why the monitor asks for no reprovision now, until when, and how to resume it."""
    hold = status.hold_back
    assert hold is not None
    return (
        f"until {_when(hold.until)}: no reprovision asked after {hold.why} "
        f"(resume: metalflow host monitor {status.host_id} --resume)"
    )


def as_the_entity_says(status: HostMonitorStatus, current: OperationRecord | None) -> HostMonitorStatus:
    """The monitor's status with its own request as the host's entity records it: the monitor is
    told its request's end, not its approval, so after `metalflow approve` it kept saying the
    request awaited approval ("... or the approval of it") while the reprovision ran (issue 40).
    A request the entity runs is shown running, approved by whom."""
    own = status.own_request
    if own is None or not own.awaiting_approval or current is None:
        return status
    if current.workflow_id != own.workflow_id or current.outcome != "running":
        return status
    down = ", ".join(sorted(d.dpu_id for d in status.degraded)) or ", ".join(own.dpu_ids)
    by = f"approved by {current.approved_by}, " if current.approved_by else "approved, "
    now = f"{by}running: {own.workflow_id}"  # each DPU's answer as of now, not "awaiting-approval"
    degraded = [
        d.model_copy(update={"reprovision_outcome": now}) if d.dpu_id in own.dpu_ids else d
        for d in status.degraded
    ]
    return status.model_copy(
        update={
            "own_request": own.model_copy(update={"awaiting_approval": False}),
            "degraded": degraded,
            "waiting_for": f"the end of {own.workflow_id} ({by}running: it reprovisions {down}); "
            "nothing more is asked meanwhile",
        }
    )


def degraded_words(
    dpu: DegradedDPU, status: HostMonitorStatus, policy: MonitorPolicy | None, now: datetime | None = None
) -> str:
    """A degraded DPU in words, in the order things happen: since when it is in its phase now (its
    phase named when no longer Node Effect: a reprovision recreated it) and what was asked with
    the answer as of now (`as_the_entity_says`), earlier first; then what the monitor does next,
    as it will (`MonitorState.next_deadline`): nothing more while its own request for the DPU
    awaits approval or runs; else it asks (again) at the DPU's deadline, not before a hold-back
    in force ends. Automatic reprovision off: no next. Issue 40: during an approved run it read
    `since 00:37:26Z; asked 00:37:05Z: awaiting-approval` (the since, the deadline's restart at
    the DPU's recreation, after the asking; the answer long past)."""
    shown = next((d for d in status.dpus if d.dpu_id == dpu.dpu_id), None)
    entered = shown.since if shown is not None else dpu.since  # into its phase now
    phase = shown.phase if shown is not None and shown.phase != "Node Effect" else ""
    steps = [(entered, f"{phase + ' ' if phase else ''}since {_when(entered)}")]
    asked = dpu.reprovision_asked_at
    if asked is not None:
        steps.append((asked, f"asked {_when(asked)}: {dpu.reprovision_outcome}"))
    words = "; ".join(said for _, said in sorted(steps, key=lambda step: step[0]))
    if policy is None or not policy.auto_reprovision:
        return words
    own = status.own_request
    if own is not None and dpu.dpu_id in own.dpu_ids:
        standing = "awaits approval" if own.awaiting_approval else "runs"
        return words + f"; nothing more asked while {own.workflow_id} {standing}"
    due = max(dpu.since, asked or dpu.since) + timedelta(seconds=policy.reprovision_after_seconds)
    if holding_back(status, now) and status.hold_back is not None:
        due = max(due, status.hold_back.until)
    return words + f"; {'asks again' if asked else 'reprovision due'} {_when(due)}"


def render_monitor(
    status: HostMonitorStatus, policy: MonitorPolicy | None, now: datetime | None = None
) -> str:
    """The monitor's status for a person: pool state, DPUs, degraded DPUs and their deadlines, its
    request pending now and the hold-back in force now (what is true now); then what it did."""
    lines = [
        f"monitor of {status.host_id} ({names.monitor_workflow_id(status.host_id)}): {status.pool_state}",
        f"  policy           {describe_policy(policy) if policy else 'unknown'}",
        f"  phase            {status.phase}",
        f"  waiting for      {status.waiting_for}",
        f"  started          {_when(status.started_at)}; {status.events_seen} DPF changes seen, "
        f"{_runs(status.runs)}",
    ]
    if status.dpus:
        lines.append("  DPUs")
        lines += [f"    {d.dpu_id:<22} {d.phase or '-':<16} since {_when(d.since)}" for d in status.dpus]
    if status.degraded:
        lines.append("  degraded (Node Effect)")
    lines += [f"    {dpu.dpu_id:<22} {degraded_words(dpu, status, policy, now)}" for dpu in status.degraded]
    own = status.own_request
    if own is not None:
        standing = "awaits approval" if own.awaiting_approval else "runs"
        asked = f" (asked {_when(own.asked_at)})" if own.asked_at else ""
        lines.append(f"  its request      {own.workflow_id} of {', '.join(own.dpu_ids)} {standing}{asked}")
    if holding_back(status, now):
        lines.append(f"  holding back     {hold_back_line(status)}")
    lines.append(f"  reprovisions requested {status.reprovisions_requested}")
    if status.requests:
        lines.append("  what it asked and was told (newest last)")
    for answer in status.requests[-5:]:
        lines.append(f"    {answer}")
    if status.history:
        lines.append("  pool changes")
        lines += [f"    {_when(c.at)}  {c.state:<12} {c.reason}" for c in status.history[-5:]]
    if status.unplanned_resets:
        lines.append(f"  unplanned resets ({status.unplanned_total} seen at rest, not by metalflow)")
        lines += [f"    {_when(r.at)}  {r.dpu_id:<22} {r.change}" for r in status.unplanned_resets[-5:]]
    return "\n".join(lines)


def _runs(runs: int) -> str:
    # Each run is one history; the monitor continues-as-new to keep them small.
    return "1 run" if runs == 1 else f"{runs} runs (continued as new)"


def _when(moment: datetime) -> str:
    return iso_z(moment)


def _say(message: str) -> None:
    print(message, flush=True)
