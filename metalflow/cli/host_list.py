"""`metalflow host list [--phase P] [--json]`: the fleet at a glance, from Temporal visibility.

Two visibility listings (and a third, of closed entity runs holding the OFF mark: below),
never a query per host: the running host entities
(`Operation="host"`, their `HostId`, `Site` and `Phase` search attributes), and the running
workflows whose parent is an entity (the operations in flight, their `Phase` and start time),
joined on the parent's id. Each listing pages 1,000 workflows a request, so 10,000 hosts cost
about 11 + (operations in flight / 1,000) requests; nothing reaches a worker, so it answers even
with every worker down. Cost: 1 request per 1,000 rows; on the client about 0.04 ms of CPU a
row (decoding five attributes, joining, sorting). Most of the time is the server's listing, per
row listed (`bench/bench_host_list.py`; figures in bench/README.md); a Temporal with advanced
visibility answers without the dev server's floor. On a terminal, the rows read so far are
counted on stderr while the pages arrive.
`--phase` keeps hosts whose entity phase (`idle`, `running reprovision`,
`awaiting-approval`, ...) or operation phase (`rebooting-host`, `finishing`: in its final phase,
its run not closed yet, as `host status` and `--wait` print it, ...) is P, filtered by the server
(see `fleet`): the cost follows the hosts that match and the operations in flight. P must be one
of `host_phases.KNOWN_PHASES`, checked while the arguments are parsed, before connecting.

The entity keeps its instance, the time it entered its phase and who put it in maintenance in
search attributes (`Instance`, `PhaseSince`, `Maintenance`, `MaintenanceSince`), so INSTANCE,
FOR and MAINTENANCE come from the same listing; an entity started
before those existed shows them once it continues-as-new (FOR falls back to its operation's
start). Rows are read from the raw listing RPC, decoding only the attributes shown.

A host whose entity was terminated while its operation runs shows PHASE `no entity` with that
operation (the operations' listing names its parent), until a request starts an entity that adopts it;
`--phase "no entity"` lists those hosts (the operations in flight, then their entities by id).
A host whose entity was terminated holding the OFF mark (a run left the host OFF) shows PHASE
`no entity (host may be OFF)` and `left_off_by` in `--json`, as `host status` says it: the
entity upserts the mark as the `LeftOffBy` search attribute when it moves (a terminated run writes
nothing at its end), so one more listing finds the closed entity runs that held it
(`MARKED_CLOSED_QUERY`), and those of entities that do not run are read by id, their newest
closed run deciding (`left_off_without_entity`). The cost follows the marked runs, not the fleet.
It is the mark alone: an operation that closed after the terminate and said the host is on is
read by `host status`, not here.

A host whose request awaits approval (PHASE `awaiting-approval`) names the operation it would run
in OPERATION (`reprovision (awaiting approval)`; `awaiting_approval` in `--json`), from the
entity's memo entry `awaiting` in the same listing.

A host whose last run left it OFF (its outcome says "is OFF": `workflows/parts/host_power.py`)
shows `idle (host OFF)` in PHASE and `left_off_by` (that run) in `--json`, from the entity's memo
entry `left_off` in the same listing: no BMC read, no query per host (`host status` says more).
A host whose last run ended without saying its power and whose read at that end was not answered
(its outcome says "may be OFF") shows `idle (host may be OFF)` and `maybe_off_after` (that run) in
`--json`, from the memo entry `maybe_off` alike, until the entity's next reading decides it
(`workflows/host/power_watch.py`: sooner than its period); stderr counts both kinds.

While operations are in flight, the site watch of their task queue is described (one describe
per task queue, usually one): when it is not beating (its worker died and another has not taken
it over yet), a WARNING on stderr says the DPU phases are from its last beat and by when the
takeover is expected (`metalflow.site_watch_health`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from temporalio.api.workflow.v1 import WorkflowExecutionInfo
from temporalio.api.workflowservice.v1 import ListWorkflowExecutionsRequest, ListWorkflowExecutionsResponse
from temporalio.client import Client

from contracts import names
from contracts.validation import terminal_safe
from contracts.wording import iso_z, plural
from metalflow.cli import exits
from metalflow.cli.host_phases import KNOWN_PHASES, NO_ENTITY, shown, shown_as, unknown_phase_message
from metalflow.cli.visibility_fields import attribute as _attribute
from metalflow.cli.visibility_fields import memo_entry as _memo
from metalflow.cli.visibility_fields import time_of as _time
from metalflow.site_watch_health import dpf_namespace, watch_lapse

Action = Callable[[Client, argparse.Namespace], Awaitable[int]]
T = TypeVar("T")
PAGE_SIZE = 1000
ID_CHUNK = 200  # workflow ids per `WorkflowId IN (...)` listing
ENTITIES_QUERY = f'{names.OPERATION.name} = "{names.HOST}" AND ExecutionStatus = "Running"'
# Operations are children of an entity; monitors and reboot grandchildren are not (the join drops them).
OPERATIONS_QUERY = f'{names.OPERATION.name} != "{names.HOST}" AND ExecutionStatus = "Running"'
# Closed entity runs that held the OFF mark (`LeftOffBy`, upserted while they ran): a host whose
# entity was terminated with it has no running workflow to show it (`_left_off_without_entity`).
CLOSED_ENTITIES_QUERY = f'{names.OPERATION.name} = "{names.HOST}" AND ExecutionStatus != "Running"'
MARKED_CLOSED_QUERY = f"{CLOSED_ENTITIES_QUERY} AND {names.LEFT_OFF_BY.name} IS NOT NULL"
NO_ENTITY_OFF = "host may be OFF"  # `host status`'s words for it: "the host HOST may be OFF as RUN left it"
MAYBE_OFF_PHASE = "host may be OFF"  # an idle host whose last run's end left its power unread


@dataclass(frozen=True)
class HostRow:
    """One host as visibility shows it."""

    host: str
    site: str
    phase: str
    instance: str | None = None
    phase_since: datetime | None = None  # when the entity entered `phase` (older entities: unknown)
    workflow_id: str | None = None
    operation: str | None = None
    operation_phase: str | None = None
    started_at: datetime | None = None
    maintenance_by: str | None = None  # who put the host in maintenance (`Maintenance`); None: not in it
    maintenance_since: datetime | None = None
    left_off: str | None = None  # the run whose outcome says it left the host OFF (memo `left_off`)
    task_queue: str | None = None  # its operation's (the site watch it hears DPU phases from)
    awaiting: str | None = None  # the operation its request awaiting approval would run (memo `awaiting`)
    maybe_off: str | None = None  # the run whose end left the host's power unread (memo `maybe_off`)

    @property
    def since(self) -> datetime | None:
        """Since when the host is in its phase: the entity says; else its operation's start."""
        return self.phase_since or self.started_at

    def as_json(self) -> dict[str, Any]:
        operation = None
        if self.workflow_id is not None:
            operation = {
                "workflow_id": self.workflow_id,
                "operation": self.operation,
                "phase": self.shown_operation_phase,
                "started_at": _iso(self.started_at),
            }
        return {
            "host": self.host,
            "site": self.site,
            "phase": self.phase,
            "phase_since": _iso(self.since),
            "instance": self.instance,
            "maintenance": (
                None
                if self.maintenance_by is None
                else {"by": self.maintenance_by, "since": _iso(self.maintenance_since)}
            ),
            "operation": operation,
            "awaiting_approval": self.awaiting,
            "left_off_by": self.left_off,
            "maybe_off_after": self.maybe_off,
        }

    @property
    def shown_operation_phase(self) -> str | None:
        """The operation's phase as `host status` and `--wait` print it (`finishing` for a run in
        its final phase that has not closed: `host_phases.shown`)."""
        return None if self.operation_phase is None else shown(self.operation_phase)

    @property
    def shown_operation(self) -> str:
        """The OPERATION cell: the run in flight, else the operation awaiting approval, else `-`."""
        if self.workflow_id:
            return self.workflow_id
        return f"{self.awaiting} (awaiting approval)" if self.awaiting else "-"

    @property
    def shown_phase(self) -> str:
        """The PHASE cell: an idle host its last run left OFF says so (the run's words, no BMC read),
        one whose last run's end left its power unread says it may be; a host with no entity whose
        last entity held the mark, as `host status` says it."""
        if not self.left_off:
            return f"{self.phase} ({MAYBE_OFF_PHASE})" if self.maybe_off else self.phase
        return f"{self.phase} ({NO_ENTITY_OFF})" if self.phase == NO_ENTITY else f"{self.phase} (host OFF)"


def register(commands: Any, runner: Callable[[Action], Callable[[argparse.Namespace], int]]) -> None:
    """Add `host list`."""
    parser = commands.add_parser(
        "list",
        help="every host: phase, operation in flight and for how long (from Temporal visibility)",
        description="Every host with a running entity: its phase, the operation in flight with that "
        "operation's phase, and how long it has been running. Read from Temporal visibility in a "
        "few requests (about one per 1,000 hosts), not one query per host.",
    )
    parser.add_argument(
        "--phase",
        nargs="+",
        action=_PhaseWords,
        metavar="P",
        help="only hosts whose phase, or whose operation's phase, is P (e.g. idle, running reprovision "
        "(quoted or not, as the PHASE column prints it), rebooting-host; a phase no host can be in is "
        "refused with the list)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list of hosts")
    parser.set_defaults(handler=runner(_list))


class _PhaseWords(argparse.Action):
    """`--phase running reprovision` as `host list` prints it, unquoted: the words are one phase."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: Any = None
    ) -> None:
        try:
            setattr(namespace, self.dest, _phase(" ".join(values)))
        except argparse.ArgumentTypeError as err:
            raise argparse.ArgumentError(self, str(err)) from None


def _phase(text: str) -> str:
    """A phase some host or operation can be in (argparse refuses anything else: exit 2, no RPC)."""
    if text not in KNOWN_PHASES:
        raise argparse.ArgumentTypeError(unknown_phase_message(text))
    return text


@dataclass(frozen=True)
class _Operation:
    """The part of a listed operation `host list` shows, keyed by its parent entity's id."""

    parent: str
    workflow_id: str
    operation: str | None
    phase: str | None
    started_at: datetime | None
    task_queue: str | None = None


def _entity(execution: WorkflowExecutionInfo) -> tuple[str, HostRow]:
    entity_id = execution.execution.workflow_id
    return entity_id, HostRow(
        host=_attribute(execution, names.HOST_ID.name) or entity_id.removeprefix("host/"),
        site=_attribute(execution, names.SITE.name) or "-",
        phase=_attribute(execution, names.PHASE.name) or "-",
        instance=_attribute(execution, names.INSTANCE.name),
        maintenance_by=_attribute(execution, names.MAINTENANCE.name),
        maintenance_since=_time(_attribute(execution, names.MAINTENANCE_SINCE.name)),
        phase_since=_time(_attribute(execution, names.PHASE_SINCE.name)),
        left_off=_memo(execution, names.LEFT_OFF_MEMO),
        awaiting=_memo(execution, names.AWAITING_MEMO),
        maybe_off=_memo(execution, names.MAYBE_OFF_MEMO),
    )


def _operation(execution: WorkflowExecutionInfo) -> _Operation:
    return _Operation(
        parent=execution.parent_execution.workflow_id,
        workflow_id=execution.execution.workflow_id,
        operation=_attribute(execution, names.OPERATION.name),
        phase=_attribute(execution, names.PHASE.name),
        started_at=execution.start_time.ToDatetime(tzinfo=UTC) if execution.HasField("start_time") else None,
        task_queue=execution.task_queue or None,
    )


@dataclass(frozen=True)
class _Closed:
    """A closed run of a host's entity as visibility lists it: when it closed, the OFF mark it
    held (`LeftOffBy`; None: none) and its site."""

    entity: str
    closed_at: datetime | None
    left_off: str | None
    site: str | None


def _closed(execution: WorkflowExecutionInfo) -> _Closed:
    return _Closed(
        entity=execution.execution.workflow_id,
        closed_at=execution.close_time.ToDatetime(tzinfo=UTC) if execution.HasField("close_time") else None,
        left_off=_attribute(execution, names.LEFT_OFF_BY.name),
        site=_attribute(execution, names.SITE.name),
    )


def left_off_without_entity(closed: list[_Closed], running: set[str]) -> list[tuple[str, HostRow]]:
    """The hosts whose entity does not run (`running`: the entity ids that do) and whose last
    closed entity run (`closed`: the runs of those entities, marked or not) held the OFF mark: a
    `no entity` row naming the run that left the host OFF (`left_off`), since that run closed.
    A later closed run without the mark (a new entity that cleared it, then ended) wins. Pure."""
    newest: dict[str, _Closed] = {}
    for run in closed:
        best = newest.get(run.entity)
        if best is None or _closed_key(run) > _closed_key(best):
            newest[run.entity] = run
    return [
        (
            entity,
            HostRow(
                host=entity.removeprefix(f"{names.HOST}/"),
                site=run.site or "-",
                phase=NO_ENTITY,
                phase_since=run.closed_at,
                left_off=run.left_off,
            ),
        )
        for entity, run in sorted(newest.items())
        if run.left_off and entity not in running and entity.startswith(f"{names.HOST}/")
    ]


def _closed_key(run: _Closed) -> str:
    return iso_z(run.closed_at, none="")


class _Listing:
    """Paged visibility listings, their request count and the rows read so far (for `progress`)."""

    def __init__(self, client: Client, page_size: int, progress: Callable[[int], None] | None) -> None:
        self._client, self._page_size, self._progress = client, page_size, progress
        self.requests = self.rows = 0

    async def pages(self, query: str, convert: Callable[[WorkflowExecutionInfo], T]) -> list[T]:
        """Every workflow matching `query`, converted as its page arrives.

        The raw RPC, not `Client.list_workflows`: that decodes every search attribute and the memo
        of every row through the data converter; `host list` reads five attributes (`_attribute`).
        The next page is asked for as soon as a page's token arrives, before that page is
        converted, so the client's work on a page overlaps the server's on the next (the server's
        is most of it, see bench/README.md)."""
        found: list[T] = []
        pending = asyncio.ensure_future(self._page(query, b""))
        try:
            while True:
                page = await pending
                self.requests += 1
                token = page.next_page_token
                if token:
                    pending = asyncio.ensure_future(self._page(query, token))
                found.extend(convert(execution) for execution in page.executions)
                self.rows += len(page.executions)
                if self._progress is not None:
                    self._progress(self.rows)
                if not token:
                    return found
        finally:
            pending.cancel()  # a failed conversion or a cancelled command asks for no more pages

    async def _page(self, query: str, token: bytes) -> ListWorkflowExecutionsResponse:
        return await self._client.workflow_service.list_workflow_executions(
            ListWorkflowExecutionsRequest(
                namespace=self._client.namespace,
                page_size=self._page_size,
                next_page_token=token,
                query=query,
            )
        )


async def fleet(
    client: Client,
    phase: str | None = None,
    *,
    page_size: int = PAGE_SIZE,
    progress: Callable[[int], None] | None = None,
) -> tuple[list[HostRow], int]:
    """Every host with a running entity (with `phase`: only those whose entity or operation is in
    it), sorted by id, and the list requests it took. `progress` is told the rows read so far
    after each page.

    The listings run at once (they share nothing until the join). With `phase` the server filters:
    the entities in that phase, the operations in that phase, and every running operation (to show
    the matched entities' operations; as many as are in flight), then the entities of the matched
    operations by id, 200 ids a request. `--phase rebooting-host` over 10,000 hosts reads the
    hosts that match, not 10,000 rows."""
    listing = _Listing(client, page_size, progress)
    if phase == NO_ENTITY:  # no workflow shows it: the operations whose entity does not run
        return await _without_entity(listing), listing.requests
    if phase is None:
        entities, operations, marked = await asyncio.gather(
            listing.pages(ENTITIES_QUERY, _entity),
            listing.pages(OPERATIONS_QUERY, _operation),
            listing.pages(MARKED_CLOSED_QUERY, _closed),
        )
        rows = _join(entities, operations)
        off = await _marked_without_entity(listing, marked, {entity_id for entity_id, _ in entities})
        return _with_off(rows, off), listing.requests
    raw = ", ".join(f'"{word}"' for word in sorted(shown_as(phase)))  # KNOWN_PHASES (`_phase`): no quotes
    wanted = f"{names.PHASE.name} IN ({raw})"
    entities, matched, operations = await asyncio.gather(
        listing.pages(f"{ENTITIES_QUERY} AND {wanted}", _entity),
        listing.pages(f"{OPERATIONS_QUERY} AND {wanted}", _operation),
        listing.pages(OPERATIONS_QUERY, _operation),
    )
    known = {entity_id for entity_id, _ in entities}
    entities.extend(await _entities_of(listing, sorted({op.parent for op in matched} - known - {""})))
    rows = _join(entities, operations)
    return [row for row in rows if phase in (row.phase, row.operation_phase, row.shown_operation_phase)], (
        listing.requests
    )


async def _entities_of(listing: _Listing, parents: list[str]) -> list[tuple[str, HostRow]]:
    """The running entities among `parents` (workflow ids), `ID_CHUNK` ids a request."""
    entities: list[tuple[str, HostRow]] = []
    for chunk in range(0, len(parents), ID_CHUNK):
        ids = ", ".join(f'"{parent}"' for parent in parents[chunk : chunk + ID_CHUNK])
        entities.extend(await listing.pages(f"{ENTITIES_QUERY} AND WorkflowId IN ({ids})", _entity))
    return entities


async def _without_entity(listing: _Listing) -> list[HostRow]:
    """`--phase "no entity"`: the running operations, then their entities by id; the rows of the
    operations whose entity does not run (the hosts in flight cost it, not the fleet)."""
    operations, marked = await asyncio.gather(
        listing.pages(OPERATIONS_QUERY, _operation), listing.pages(MARKED_CLOSED_QUERY, _closed)
    )
    parents = {op.parent for op in operations if op.parent.startswith(f"{names.HOST}/")}
    entities = await _entities_of(listing, sorted(parents | {run.entity for run in marked}))
    rows = _join(entities, operations)
    off = await _marked_without_entity(listing, marked, {entity_id for entity_id, _ in entities})
    return [row for row in _with_off(rows, off) if row.phase == NO_ENTITY]


async def _marked_without_entity(
    listing: _Listing, marked: list[_Closed], running: set[str]
) -> list[tuple[str, HostRow]]:
    """The `no entity` rows of hosts left marked OFF (`left_off_without_entity`): of the closed
    entity runs that held the mark (`marked`), those whose entity does not run, read with all
    their closed runs by id (`ID_CHUNK` a request) so a later unmarked one wins. The cost follows
    the marked runs, not the fleet: nothing more is read when none is marked."""
    ids = sorted({run.entity for run in marked} - running)
    closed: list[_Closed] = []
    for chunk in range(0, len(ids), ID_CHUNK):
        quoted = ", ".join(f'"{entity}"' for entity in ids[chunk : chunk + ID_CHUNK])
        closed.extend(await listing.pages(f"{CLOSED_ENTITIES_QUERY} AND WorkflowId IN ({quoted})", _closed))
    return left_off_without_entity(closed, running)


def _with_off(rows: list[HostRow], off: list[tuple[str, HostRow]]) -> list[HostRow]:
    """`rows` with the hosts left marked OFF with no entity: a host already listed (`no entity`,
    its operation still runs) takes the mark; the others are added, sorted by host id."""
    marks = {row.host: row for _, row in off}
    merged = [
        replace(row, left_off=marks.pop(row.host).left_off) if row.host in marks else row for row in rows
    ]
    return sorted(merged + list(marks.values()), key=lambda r: r.host)


def _join(entities: list[tuple[str, HostRow]], operations: list[_Operation]) -> list[HostRow]:
    """One row per entity, with the operation whose parent it is, sorted by host id; and one per
    operation whose entity no longer runs (`NO_ENTITY`: a host is never left out while metalflow
    runs an operation on it)."""
    by_parent = {op.parent: op for op in operations if op.parent}
    listed = {entity_id for entity_id, _ in entities}
    entities = entities + [
        (op.parent, HostRow(host=op.parent.removeprefix("host/"), site="-", phase=NO_ENTITY))
        for op in by_parent.values()
        if op.parent.startswith("host/") and op.parent not in listed
    ]
    rows = []
    for entity_id, row in entities:
        op = by_parent.get(entity_id)
        if op is not None:
            row = replace(
                row,
                workflow_id=op.workflow_id,
                operation=op.operation,
                operation_phase=op.phase,
                started_at=op.started_at,
                task_queue=op.task_queue,
            )
        rows.append(row)
    return sorted(rows, key=lambda r: r.host)


async def _list(client: Client, args: argparse.Namespace) -> int:
    live = sys.stderr.isatty()  # a person waits: say how far the listing is (10,000 hosts take seconds)

    def progress(read: int) -> None:
        print(f"\rreading Temporal visibility: {read:,} workflows", end="", file=sys.stderr, flush=True)

    try:
        rows, requests = await fleet(client, args.phase or None, progress=progress if live else None)
    finally:
        if live:
            print("\r\x1b[K", end="", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps([row.as_json() for row in rows], indent=2))
    else:
        print(terminal_safe(render(rows, datetime.now(UTC))))
    busy = sum(1 for row in rows if row.workflow_id)
    left_off = sum(1 for row in rows if row.left_off and row.phase != NO_ENTITY)
    no_entity_off = sum(1 for row in rows if row.left_off and row.phase == NO_ENTITY)
    maybe_off = sum(1 for row in rows if row.maybe_off and not row.left_off)
    print(
        f"{plural(len(rows), 'host')}, {busy} with an operation in flight "
        f"({plural(requests, 'visibility request')})",
        file=sys.stderr,
    )
    if left_off:
        print(
            f"{plural(left_off, 'host')} (host OFF) left OFF by the last run, as far as its outcome "
            "says (no BMC read): `metalflow host status HOST` names the run and how to power it on",
            file=sys.stderr,
        )
    if maybe_off:
        print(
            f"{plural(maybe_off, 'host')} ({MAYBE_OFF_PHASE}) whose last run ended without saying its power, "
            "the read at its end not answered: the entity reads it again soon (`metalflow host status HOST` "
            "says when); `metalflow bmc power HOST status` says now",
            file=sys.stderr,
        )
    if no_entity_off:
        print(
            f"{plural(no_entity_off, 'host')} ({NO_ENTITY_OFF}) with no entity running: the last one was "
            "terminated holding the host OFF as a run left it (no BMC read): `metalflow host status "
            "HOST` names the run; power it on (`metalflow bmc power HOST on`), or the next request's "
            "entity marks it so",
            file=sys.stderr,
        )
    queues = sorted({row.task_queue or names.TASK_QUEUE for row in rows if row.workflow_id})
    namespace = dpf_namespace() if queues else ""
    for lapse in await asyncio.gather(*(watch_lapse(client, namespace, queue) for queue in queues)):
        if lapse is not None:  # the phases of operations waiting on DPUs may be that old
            print(f"WARNING: {lapse.words()}", file=sys.stderr)
    return exits.OK


def render(rows: list[HostRow], now: datetime) -> str:
    """A table for a person; `for` is how long the host has been in its phase (h:mm:ss)."""
    table = [("HOST", "SITE", "PHASE", "FOR", "INSTANCE", "MAINTENANCE", "OPERATION", "OPERATION PHASE")]
    for row in rows:
        since = "-" if row.since is None else _duration(now - row.since)
        table.append(
            (
                row.host,
                row.site,
                row.shown_phase,
                since,
                row.instance or "-",
                f"on ({row.maintenance_by})" if row.maintenance_by else "-",
                row.shown_operation,
                row.shown_operation_phase or "-",
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in table
    )


def _duration(delta: Any) -> str:
    seconds = max(0, int(delta.total_seconds()))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _iso(when: datetime | None) -> str | None:
    return None if when is None else iso_z(when)
