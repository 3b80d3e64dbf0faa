"""`metalflow host list [--phase P] [--json]`: the fleet at a glance, from Temporal visibility.

Two visibility listings, never a query per host: the running host entities
(`Operation="host"`, their `HostId`, `Site` and `Phase` search attributes), and the running
workflows whose parent is an entity (the operations in flight, their `Phase` and start time),
joined on the parent's id. Each listing pages 1,000 workflows a request, so 10,000 hosts cost
about 10 + (operations in flight / 1,000) requests; nothing reaches a worker, so it answers even
with every worker down. Measured on the dev server (SQLite visibility, a shared 2-core machine,
`bench/bench_host_list.py`): 2,000 hosts in 0.8-1.0 s (4 requests), 10,000 hosts with 1,000
operations in 9-23 s (13 requests); the time is the server's paging, so a cluster with
advanced visibility answers faster. `--phase` keeps hosts whose entity phase (`idle`, `running reprovision`,
`awaiting-approval`, ...) or operation phase (`rebooting-host`, ...) is P.

What visibility cannot say, this does not guess: the instance and the time an idle host entered
its phase are not search attributes today; "for" is the time since the operation in flight
started (the entity is in `running <op>` from then on).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from temporalio.client import Client, WorkflowExecution

from metalflow import names
from metalflow.validation import safe, terminal_safe

Action = Callable[[Client, argparse.Namespace], Awaitable[int]]
PAGE_SIZE = 1000
ENTITIES_QUERY = f'{names.OPERATION.name} = "{names.HOST}" AND ExecutionStatus = "Running"'
# Operations are children of an entity; monitors and reboot grandchildren are not (the join drops them).
OPERATIONS_QUERY = f'{names.OPERATION.name} != "{names.HOST}" AND ExecutionStatus = "Running"'
_PHASE = re.compile(r"[a-z][a-z0-9 -]{0,63}")


@dataclass(frozen=True)
class HostRow:
    """One host as visibility shows it."""

    host: str
    site: str
    phase: str
    workflow_id: str | None = None
    operation: str | None = None
    operation_phase: str | None = None
    started_at: datetime | None = None

    def as_json(self) -> dict[str, Any]:
        operation = None
        if self.workflow_id is not None:
            operation = {
                "workflow_id": self.workflow_id,
                "operation": self.operation,
                "phase": self.operation_phase,
                "started_at": _iso(self.started_at),
            }
        return {"host": self.host, "site": self.site, "phase": self.phase, "operation": operation}


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
        type=_phase,
        metavar="P",
        help="only hosts whose phase, or whose operation's phase, is P (e.g. idle, rebooting-host)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list of hosts")
    parser.set_defaults(handler=runner(_list))


def _phase(text: str) -> str:
    if not _PHASE.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"invalid phase {safe(text, 40)}: lower-case letters, digits, '-' and spaces, e.g. rebooting-host"
        )
    return text


async def _pages(client: Client, query: str) -> tuple[list[WorkflowExecution], int]:
    """Every workflow matching `query`, and the number of list requests it took."""
    listing = client.list_workflows(query, page_size=PAGE_SIZE)
    found: list[WorkflowExecution] = []
    requests = 0
    while True:
        await listing.fetch_next_page()
        requests += 1
        found.extend(listing.current_page or [])
        if listing.next_page_token is None:
            return found, requests


async def fleet(client: Client) -> tuple[list[HostRow], int]:
    """Every host with a running entity, sorted by id, and the list requests it took."""
    entities, first = await _pages(client, ENTITIES_QUERY)
    operations, second = await _pages(client, OPERATIONS_QUERY)
    by_parent = {op.parent_id: op for op in operations if op.parent_id}
    rows = []
    for entity in entities:
        attributes = entity.typed_search_attributes
        host = attributes.get(names.HOST_ID) or entity.id.removeprefix("host/")
        op = by_parent.get(entity.id)
        row = HostRow(
            host=host, site=attributes.get(names.SITE) or "-", phase=attributes.get(names.PHASE) or "-"
        )
        if op is not None:
            op_attributes = op.typed_search_attributes
            row = HostRow(
                host=row.host,
                site=row.site,
                phase=row.phase,
                workflow_id=op.id,
                operation=op_attributes.get(names.OPERATION),
                operation_phase=op_attributes.get(names.PHASE),
                started_at=op.start_time,
            )
        rows.append(row)
    return sorted(rows, key=lambda r: r.host), first + second


async def _list(client: Client, args: argparse.Namespace) -> int:
    rows, requests = await fleet(client)
    if args.phase:
        rows = [r for r in rows if args.phase in (r.phase, r.operation_phase)]
    if args.json:
        print(json.dumps([row.as_json() for row in rows], indent=2))
    else:
        print(terminal_safe(render(rows, datetime.now(UTC))))
    busy = sum(1 for row in rows if row.workflow_id)
    print(
        f"{len(rows)} hosts, {busy} with an operation in flight ({requests} visibility requests)",
        file=sys.stderr,
    )
    return 0


def render(rows: list[HostRow], now: datetime) -> str:
    """A table for a person; `for` is h:mm:ss since the operation started."""
    table = [("HOST", "SITE", "PHASE", "OPERATION", "OPERATION PHASE", "FOR")]
    for row in rows:
        since = "-" if row.started_at is None else _duration(now - row.started_at)
        table.append(
            (row.host, row.site, row.phase, row.workflow_id or "-", row.operation_phase or "-", since)
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in table
    )


def _duration(delta: Any) -> str:
    seconds = max(0, int(delta.total_seconds()))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
