"""`metalflow host status HOST`: the host as its entity sees it, the operation in flight, its monitor.

A read: nothing is sent, nobody is recorded. The entity's `status` query, the operation's own
`status` query (a reboot has none: its Phase and current details, and from the same describe its
pending power cycle's word of a BMC that does not answer: `operation_progress`), the monitor's status when one
runs, and for an idle host what DPF shows of DPUs an ended operation left waiting and a reboot
run still waiting for a person that no operation owns (a terminated firmware run's), with its
way out (`reboot_waiting`: one describe). While
the site watch is not beating (its worker died and another has not taken it over yet), the DPU
phases shown are said to be from its last beat (`metalflow.site_watch_health`: two describes,
only when the operation shows DPUs). An entity that
failed or was terminated is said so (exit 1), not shown as the idle host its last state describes,
with the operation it left running and, when the host may be OFF, the run the next entity marks
(`_off_while_no_entity`).

What the host waits for, and until when: a request awaiting approval and when it expires, and
each running campaign that put the host off (its entity was busy) with when it asks again and
why (`campaign_deferrals`: one visibility listing of the running campaigns, then each one's
`deferral` query for this host, at most `CAMPAIGNS_ASKED` of them, at once).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from datetime import UTC, datetime
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.service import RPCError

from contracts import names, workflow_api
from contracts.errors import cause_in_words
from contracts.models.bmc_lease import RebootRunSeen
from contracts.models.campaign import Deferred
from contracts.models.host import HostStatus
from contracts.models.host_records import EntityPredecessor, OperationRun, RunEnd
from contracts.models.monitor import HostMonitorStatus
from contracts.validation import terminal_safe
from contracts.wording import iso_z
from metalflow.cli import exits, host_monitor
from metalflow.cli.inventory_check import awaiting_words, idle_dpu_warnings
from metalflow.cli.workflow_commands import CommandError, ended_badly
from metalflow.hosts import QUERY_TIMEOUT, HostRequestError, host_status
from metalflow.monitors import running_monitor_status
from metalflow.operation_progress import (
    describe_operation,
    operation_progress,
    running_status,
    with_its_reboot,
)
from metalflow.seen import Seen
from metalflow.site_watch_health import WatchLapse, lapse_of_operation
from workflows.host.automation_hold import hold_words
from workflows.host.takeover_rules import (
    MAYBE_OFF,
    awaiting_while_no_entity,
    left_running_words,
    off_while_no_entity,
)
from workflows.parts.boot_generation import RunEnd as RebootEnd
from workflows.parts.boot_generation import waits_for_a_person
from workflows.parts.host_power import HOST_IS_OFF

EXIT_OK = exits.OK
CAMPAIGNS_ASKED = 50  # running campaigns asked whether they put the host off (there are a few)
RUNNING_CAMPAIGNS = f'{names.OPERATION.name} = "{names.CAMPAIGN_OPERATION}" AND ExecutionStatus = "Running"'


def _say(message: str) -> None:
    print(terminal_safe(message), flush=True)


async def show_status(client: Client, args: argparse.Namespace) -> int:
    # Status is the truth: an entity that failed or was terminated is said so (exit 1), not
    # shown as the idle host its last state would describe.
    try:
        ended = await ended_badly(client, names.host_workflow_id(args.host), "host entity")
    except CommandError:
        ended = None  # no entity at all: `host_status` says so, naming the host
    if ended is not None:
        left = await operations_left_running(client, args.host)  # abandoned: the next entity adopts it
        runs = (
            f"; its operation {', '.join(left)} still runs: the next request starts a new entity, "
            f"which adopts it (busy with it; `metalflow host abort {args.host}` or `retry` reach it)"
            if left
            else "; its next request starts a new entity"
        )
        off = await _off_while_no_entity(client, args.host)
        raise HostRequestError(f"{ended}{runs}{await _awaiting_while_no_entity(client, args.host)}{off}")
    status = await host_status(client, args.host)
    operation, seen = None, None
    if status.current is not None and status.current.outcome == "running":
        operation = await running_status(client, status.current.workflow_id)
        if operation is not None:  # one waiting on its reboot says what that one waits for
            operation, _ = await with_its_reboot(client, operation, args.host)
        if operation is None:  # a reboot has no status query: its Phase and details say where it is
            seen = await operation_progress(client, status.current.workflow_id, args.host)
    lapse = None  # DPU phases shown while the site watch is not beating are as old as its last beat
    if operation is not None and operation.get("dpus"):
        lapse = await lapse_of_operation(client, status.current.workflow_id)  # type: ignore[union-attr]
    monitor = await running_monitor_status(client, args.host)
    deferrals = await campaign_deferrals(client, args.host)
    # An idle entity says nothing of DPUs an ended operation left waiting (an abort before the
    # power cycle leaves DPF waiting for a reboot): DPF is asked, and what needs a person is said.
    idle = status.current is None or status.current.outcome != "running"
    held = await reboot_waiting(client, args.host, status.boot_generation) if idle else ""
    warnings = await idle_dpu_warnings(args.host, held, awaiting_words(status)) if idle else []
    if idle and status.left_off_by:  # a run's own words (workflows/parts/host_power.py): no BMC read here
        warnings.insert(
            0,
            f"the host {HOST_IS_OFF} as far as {status.left_off_by} knows (its outcome says so): power it on "
            f"(`metalflow bmc power {args.host} on`) or run an operation that does; the mark clears at "
            "the entity's next power watch reading of the host On, or a run that says the host is on",
        )
    if held:  # an abandoned reboot (a firmware run's, terminated) waits for nobody: its way out, now
        warnings.insert(1 if status.left_off_by else 0, held)
    doubt = maybe_off_warning(status) if idle else None
    if doubt is not None:  # a run's end left the host's power unread: the entity reads it again
        warnings.insert(0, doubt)
    if args.json:
        shown = {
            "host": status.model_dump(mode="json"),
            "operation": operation if seen is None else seen_json(seen, status),
            "monitor": None if monitor is None else monitor.model_dump(mode="json"),
            "warnings": warnings,
            "site_watch_lapse": None if lapse is None else lapse.as_json(),
            "deferred_by": [
                {"campaign": campaign, "retry_at": d.retry_at and iso_z(d.retry_at), "reason": d.reason}
                for campaign, d in deferrals
            ],
        }
        print(json.dumps(shown, indent=2))
        return EXIT_OK
    _say(render_status(status, operation, monitor, seen, deferrals, lapse))
    for warning in warnings:
        _say(f"  WARNING          {warning}")
    return EXIT_OK


async def reboot_waiting(client: Client, host_id: str, generation: int) -> str:
    """`boot_generation.waits_for_a_person`'s words when the run of the host's next reboot id
    (`reboot/HOST/generation-N+1`) still runs waiting for a person (e.g. a firmware run's reboot
    abandoned when the run was terminated): the entity refuses `host reboot` and `reprovision`
    behind it, so the idle DPU WARNING must not advise them. "" none, or not readable. One
    describe, read only for an idle host."""
    reboot = names.host_reboot_workflow_id(host_id, generation + 1)
    try:
        described = await client.get_workflow_handle(reboot).describe()
    except RPCError:  # none holds it (the usual answer) or no answer: nothing claimed
        return ""
    running = described.status == WorkflowExecutionStatus.RUNNING
    phase = str(described.typed_search_attributes.get(names.PHASE) or "")
    seen = RebootRunSeen(end=RebootEnd.RUNNING if running else "ended", phase=phase)
    return waits_for_a_person(reboot, seen)


CLOSED_READ = 10  # the host's operations closed since its entity's last phase, listed (a few)


async def _awaiting_while_no_entity(client: Client, host_id: str) -> str:
    """`takeover_rules.awaiting_while_no_entity`'s words for the ended entity's memo ("" none, or
    not readable): one describe."""
    try:
        described = await client.get_workflow_handle(names.host_workflow_id(host_id)).describe()
        entry = (await described.memo()).get(names.CARRIED_MEMO)
    except RPCError:
        return ""
    return awaiting_while_no_entity(entry, host_id)


async def _off_while_no_entity(client: Client, host_id: str) -> str:
    """`; the host may be OFF as RUN left it ...` when the ended entity's memo marked the host
    OFF or an operation that closed since says so (`takeover_rules.off_while_no_entity`: the
    mark the next entity takes over), else "". Read without starting anything: one describe of
    the entity, its memo, one visibility listing of the operations closed since its `PhaseSince`
    (their status and last Phase, a failed one's cause and a completed one's result: its close
    event; no reboot run read)."""
    entity = names.host_workflow_id(host_id)
    try:
        described = await client.get_workflow_handle(entity).describe()
        entry = (await described.memo()).get(names.CARRIED_MEMO)
        since = described.typed_search_attributes.get(names.PHASE_SINCE) or described.close_time
        query = (
            f"{names.HOST_ID.name} = '{host_id}' AND {names.OPERATION.name} != '{names.HOST}' "
            f"AND ExecutionStatus != 'Running'"
            + (f" AND CloseTime > '{since.astimezone(UTC).isoformat()}'" if since is not None else "")
        )
        ended = [
            OperationRun(
                workflow_id=run.id,
                run_id=run.run_id or "",
                operation=str(run.typed_search_attributes.get(names.OPERATION) or ""),
                started_at=run.start_time,
                end=RunEnd(
                    status=run.status.name if run.status else "",
                    closed_at=run.close_time,
                    last_phase=str(run.typed_search_attributes.get(names.PHASE) or ""),
                    failure=await _failure(client, run)
                    if run.status == WorkflowExecutionStatus.FAILED
                    else "",
                    **(await _completed(client, run)),
                ),
            )
            async for run in client.list_workflows(query, limit=CLOSED_READ)
            if run.parent_id == entity and run.close_time is not None
        ]
    except RPCError:  # a read that fails claims nothing of the host's power
        return ""
    before = EntityPredecessor(
        carried=entry if isinstance(entry, dict) else None,
        ended=tuple(sorted(ended, key=lambda r: iso_z(r.end.closed_at if r.end else None, none=""))),
    )
    off = off_while_no_entity(before)
    if not off:
        return ""
    return (
        f"; the host {host_id} may be OFF as {off} left it: power it on (`metalflow bmc power "
        f"{host_id} on`), or the next request's entity marks it so"
    )


async def _failure(client: Client, run: WorkflowExecution) -> str:
    """A failed run's cause in words (its close event: e.g. `HostLeftOff: ... is OFF ...`)."""
    if run.status != WorkflowExecutionStatus.FAILED:
        return ""
    try:
        await client.get_workflow_handle(run.id, run_id=run.run_id).result(follow_runs=False)
    except WorkflowFailureError as err:
        return cause_in_words(err)
    return ""


async def _completed(client: Client, run: WorkflowExecution) -> dict[str, Any]:
    """What a completed run's result says of the host (its close event), as the entity reads an
    own child's end (`activities/pool.py` `_end_of`): the boot generation it reached and an
    abort's words. Without it a run that completed after its entity was terminated (a reset whose
    reboot cycled the host On) could not clear the OFF mark an older run of the same workflow id
    left, and `host status` said the host "may be OFF" while the next entity cleared the mark."""
    if run.status != WorkflowExecutionStatus.COMPLETED:
        return {}
    try:
        result = await client.get_workflow_handle(run.id, run_id=run.run_id).result(follow_runs=False)
    except (WorkflowFailureError, RPCError):
        return {}
    end = result if isinstance(result, dict) else {}
    generation = end.get("boot_generation")
    return {
        "aborted": str(end.get("aborted") or ""),
        "boot_generation": generation if isinstance(generation, int) else None,
    }


def seen_json(seen: Seen, status: HostStatus) -> dict[str, Any]:
    """`host status --json`'s operation for one without a `status` query (a reboot): its phase and
    details, and the site check's words it started under (degraded), as the entity's request
    carried them: the other operations' own status has them (`site_check`)."""
    shown: dict[str, Any] = {"phase": seen.phase, "waiting_for": seen.waiting_for, "details": seen.details}
    return shown | {"site_check": list(status.site_check)}


async def operations_left_running(client: Client, host_id: str) -> list[str]:
    """The host's operations still running whose entity (their parent, `host/<id>`) no longer
    runs: a terminated entity abandons its child, which the next entity adopts
    (workflows/host/takeover_rules.py). Each as `<workflow id> (<Phase>)`. One visibility
    listing, read only for an entity that ended."""
    entity = names.host_workflow_id(host_id)
    query = (
        f"{names.HOST_ID.name} = '{host_id}' AND {names.OPERATION.name} != '{names.HOST}' "
        "AND ExecutionStatus = 'Running'"
    )
    found = []
    async for run in client.list_workflows(query, limit=10):
        if run.parent_id == entity:
            phase = str(run.typed_search_attributes.get(names.PHASE) or "")
            operation = str(run.typed_search_attributes.get(names.OPERATION) or "")
            found.append(left_running_words(run.id, operation, phase, host_id))  # says if the host is OFF
    return found


def maybe_off_warning(status: HostStatus) -> str | None:
    """The WARNING of a host a run's end left with its power unread (`maybe_off_after`: the entity's
    read at that end was not answered), None when there is none: the run, why it was not read (its
    recorded outcome's words), when the entity reads it again (`power_read_at`) and how to look now.
    From the entity's status alone: no BMC read here."""
    run, host = status.maybe_off_after, status.host_id
    if not run:
        return None
    said = next((r.outcome for r in reversed(status.recent) if r.workflow_id == run), "")
    lead = f"{MAYBE_OFF} after {run} ("
    why = said.split(lead, 1)[1].split("): ", 1)[0] if lead in said else "its power not read"
    if status.power_read_at is None:
        again = (
            "metalflow does not read it again by itself (no power watch: METALFLOW_POWER_WATCH_SECONDS is 0)"
        )
    elif status.maintenance is not None:
        again = (
            "metalflow reads it again once maintenance ends (its power watch reads nothing in maintenance)"
        )
    else:
        again = f"metalflow reads it again at {iso_z(status.power_read_at)}"
    return (
        f"the host {host} {MAYBE_OFF}: {run} ended without saying its power and the read at its end was "
        f"not answered ({why}); {again}; check now with `metalflow bmc power {host} status`, and if Off "
        f"power it on (`metalflow bmc power {host} on`)"
    )


def maintenance_line(status: HostStatus) -> str:
    """`off`, or who put the host in maintenance, why, since when (the words every refusal uses)."""
    held = status.maintenance
    if held is None:
        return "off"
    return f"on since {iso_z(held.since)}, set by {held.by}: {held.reason}"


def render_status(
    status: HostStatus,
    operation: dict[str, Any] | None,
    monitor: HostMonitorStatus | None = None,
    seen: Seen | None = None,
    deferrals: list[tuple[str, Deferred]] | None = None,
    lapse: WatchLapse | None = None,
) -> str:
    """The host, its operation in flight and its monitor's pool state, for a person."""
    lines = [
        f"host {status.host_id} (site {status.site}): {status.phase}",
        f"  instance         {status.instance or 'none'}",
        f"  boot generation  {status.boot_generation}",
        f"  maintenance      {maintenance_line(status)}",
    ]
    if status.unplanned_power:  # the entity's power watch saw a change nobody here made
        lines.append(f"  unplanned power  {status.unplanned_power.removeprefix('unplanned power: ')}")
    if status.automation_held_back is not None:  # an operator's no to the monitor, kept by the entity
        lines.append(f"  automation       {hold_words(status.host_id, status.automation_held_back)}")
    if status.taking_over:
        lines.append("  taking over      reading what the host's last entity run left; requests wait for it")
    if status.taken_over:
        lines.append(f"  taken over       {status.taken_over}")
    if status.auto_approved_until is not None:
        lines.append(f"  auto-approved until {iso_z(status.auto_approved_until)}")
    if monitor is not None:
        lines.append(f"  monitor          {host_monitor.pool_line(monitor)}")
        if host_monitor.holding_back(monitor):
            lines.append(f"  monitor holds back {host_monitor.hold_back_line(monitor)}")
    current = status.current
    if current is not None:
        lines.append(f"  operation        {current.operation} ({current.workflow_id}): {current.outcome}")
        lines.append(
            f"    requested by   {current.requested_by}" + (f" ({current.reason})" if current.reason else "")
        )
        if current.approved_by:
            lines.append(f"    approved by    {current.approved_by}")
        if current.in_maintenance:
            lines.append(f"    --in-maintenance asked while {current.in_maintenance}")
        if current.outcome == "awaiting-approval" and status.approval_expires_at is not None:
            lines.append(
                f"    waiting for    `metalflow approve {status.host_id}` until "
                f"{iso_z(status.approval_expires_at)}, then the request expires"
            )
        if current.outcome == "awaiting-approval":
            lines.append(
                f"    answer with    metalflow approve {status.host_id}, or metalflow host abort "
                f"{status.host_id} to withdraw it"
            )
    if seen is not None:
        lines.append(f"    now            {seen.text}")
        if seen.waiting_for:
            lines.append(f"    waiting for    {seen.waiting_for}")
        if status.site_check and "site check: " not in seen.text:  # its details may say them already
            lines.append(f"    site check     {'; '.join(status.site_check)}")
    if operation is not None:
        lines.append(f"    now            {describe_operation(operation)}")
        for dpu in operation.get("dpus") or []:
            phase = dpu.get("phase") or "-"
            since = _parsed(dpu.get("since"))
            lines.append(f"    {dpu.get('dpu_id', '?'):<22} {phase:<24} since {iso_z(since, none='?')}")
        if lapse is not None:
            lines.append(f"    site watch     {lapse.words()}")
        due = _parsed(operation.get("reboot_deadline_at"))  # None: no reboot asked for (or unknown)
        if due is not None:  # DPF asked for a reboot: until when it waits for it
            lines.append(f"    reboot due by  {iso_z(due)} (DPF's deadline for the reboot it asked for)")
        if operation.get("resets"):  # a reset: what it did so far
            lines.append(f"    done           {'; '.join(str(r) for r in operation['resets'])}")
        for key in ("reboots_requested", "power_cycles_issued", "reboot_attempts"):
            if key in operation:
                lines.append(f"    {key.replace('_', ' '):<22} {operation[key]}")
    for campaign, deferred in deferrals or []:
        lines.append(f"  deferred by      {campaign} {deferred.when()}: {deferred.reason}")
    if status.recent:
        lines.append("  recent")
        for record in status.recent[-5:]:
            when = iso_z(record.finished_at, none="")
            lines.append(f"    {when}  {record.operation:<12} {record.outcome}  by {record.requested_by}")
    return "\n".join(lines)


async def campaign_deferrals(client: Client, host_id: str) -> list[tuple[str, Deferred]]:
    """Each running campaign that put `host_id` off (its entity was busy when asked): the
    campaign's workflow id, and when it asks again and why. A campaign that cannot answer (no
    worker now, a run from before the `deferral` query), or a listing that fails, is passed over:
    this is a read, and the host's own status is the news."""
    try:
        campaigns = [c.id async for c in client.list_workflows(RUNNING_CAMPAIGNS, limit=CAMPAIGNS_ASKED)]
    except RPCError:  # visibility cannot list now: the host's own status still shows
        return []

    async def ask(workflow_id: str) -> list[tuple[str, Deferred]]:
        try:
            found = await client.get_workflow_handle(workflow_id).query(
                workflow_api.CampaignWorkflow.deferral, host_id, rpc_timeout=QUERY_TIMEOUT
            )
        except (RPCError, WorkflowQueryFailedError, WorkflowQueryRejectedError):
            return []
        return [(workflow_id, deferred) for deferred in found]

    asked = await asyncio.gather(*(ask(workflow_id) for workflow_id in campaigns))
    return sorted((found for each in asked for found in each), key=lambda f: iso_z(f[1].retry_at))


def _parsed(value: Any) -> datetime | None:
    """A timestamp from a query answered as plain JSON (an ISO string), or None."""
    if isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return None
