"""`metalflow events [HOST]`: what the worker told the cluster (its Kubernetes Events), next to
the host's operations and their phases (from Temporal).

The Events are read from the cluster of the kubeconfig (`KUBECONFIG`, as `kubectl` does; the
site's DPF namespace, `METALFLOW_DPF_NAMESPACE`): events.k8s.io/v1, `reportingController=metalflow`
and, with HOST, `regarding.name=node-HOST`, oldest first, the last `--limit`. The operations come
from the host's entity (`host/HOST`: the current one and the recent ones with their outcomes)
and, for the one in flight, its own phase. Temporal is found as by every command
(`metalflow.cli.connection`: `--address`/`--namespace`, TEMPORAL_* settings, the running
`metalflow dev` of the state dir, else 127.0.0.1:7233). When Temporal cannot be reached the Events
are still printed, with a line saying so, and when the cluster cannot be read the operations are;
either way the command exits 3. `--json`: one document, `{"host", "events", "operations"}`
(`events` null when the cluster could not be read; `operations` null without HOST, `{"error":
...}` when Temporal could not say), the exit status the same.
A HOST the inventory does not have is refused before anything is read (exit 2).
Without HOST, a last line says where the Events of rollouts (their PodCliqueSet's namespace) and
campaigns (namespace `default`) are: they are about no DPUNode.

Cost: one list of Events (one page of at most 500, the newest kept), and with HOST two queries
(the entity's status, the current operation's status). Needs `list` on events.k8s.io events in
the DPF namespace (a person's kubeconfig; the worker's role does not grant it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from contracts import names
from contracts.validation import HostId, arg_type
from contracts.wording import iso_z
from drivers.settings import Settings
from metalflow.cli import connection, exits, reader_gone

EXIT_OK, EXIT_USAGE, EXIT_UNREACHABLE = exits.OK, exits.USAGE, exits.UNREACHABLE
REPORTING_CONTROLLER = "metalflow"
ELSEWHERE = (
    "Rollout Events (RolloutStarted, RolloutPaused, RolloutSucceeded, ...) are about their "
    "PodCliqueSet, in its namespace; campaign Events (CampaignStarted, CampaignHalted, "
    "CampaignCompleted, ...) in namespace default, about no object: "
    "kubectl get events -n NAMESPACE --field-selector reportingController=metalflow"
)
"""Where the Events of rollouts and campaigns are (`metalflow.runtime.events`): not in the DPF
namespace this command reads, so it says where, after the list of every host's Events."""


@dataclass(frozen=True)
class Shown:
    """One Event as printed."""

    last_seen: str
    type: str
    reason: str
    count: int
    regarding: str
    note: str


def register(subparsers: Any) -> None:
    """Add `metalflow events`."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "events",
        help="a host's recent Kubernetes Events next to its operations' phases",
        description="Print metalflow's Kubernetes Events (events.k8s.io/v1, reportingController "
        "metalflow) about HOST's DPUNode, or about every host without HOST, oldest first; with HOST, "
        "then its operations and their phases from Temporal. Reads the cluster of KUBECONFIG. A "
        "rollout's Events are about its PodCliqueSet, a campaign's in namespace default (without HOST "
        "the command says so).",
    )
    parser.add_argument("host", nargs="?", type=arg_type(HostId), help="host id, e.g. host-001")
    parser.add_argument("--limit", type=int, default=20, help="the last N Events (default %(default)s)")
    parser.add_argument(
        "--json", action="store_true", help='one JSON document: {"host", "events", "operations"}'
    )
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    try:
        status = asyncio.run(_run(args))
        connection.flush_tracing()
        exits.JsonOutput.finish(status)
        sys.stdout.flush()
    except (BrokenPipeError, exits.ReaderGone):  # `metalflow events | head -1`: quietly, 141
        status = reader_gone()
    sys.stderr.flush()
    # The SDK's native runtime can abort at interpreter teardown (see metalflow/cli/host.py).
    os._exit(status)


handle.talks_to_temporal = True  # type: ignore[attr-defined]  # gets --address, --namespace


async def _run(args: argparse.Namespace) -> int:
    from metalflow.cli.inventory_check import InventoryUnavailable, UnknownToInventory, check_request

    try:
        settings = Settings.from_env()
    except ValueError as err:
        print(f"metalflow: {_first_line(err)}", file=sys.stderr)
        return EXIT_USAGE
    try:
        if args.host is not None:  # a host the inventory does not have: say so, not "none"
            await check_request(args)
    except UnknownToInventory as err:
        print(f"metalflow: {err}", file=sys.stderr)
        return EXIT_USAGE
    except InventoryUnavailable:
        pass  # no inventory to ask (a cluster away, no site file): the Events are still read
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(1) as pool:
        try:
            shown = await loop.run_in_executor(pool, read_events, settings, args.host, args.limit)
        except Exception as err:  # the cluster is not readable: say so, go on with Temporal
            print(
                f"cannot read Kubernetes Events ({type(err).__name__}: {_first_line(err)})", file=sys.stderr
            )
            shown = None
    where = (
        f"DPUNode {settings.dpf_namespace}/node-{args.host}"
        if args.host
        else f"namespace {settings.dpf_namespace}"
    )
    if args.json:
        return await _as_json(args, shown)
    if shown is not None:
        print(f"Events about {where} (oldest first):")
        print(render(shown, with_object=args.host is None) if shown else "  none")
    if args.host is None:
        print(ELSEWHERE)
        return EXIT_OK if shown is not None else EXIT_UNREACHABLE
    operations, reached = await read_operations(args)
    print(f"Operations of {args.host} (Temporal):")
    print(operations)
    return EXIT_OK if shown is not None and reached else EXIT_UNREACHABLE


async def _as_json(args: argparse.Namespace, shown: list[Shown] | None) -> int:
    """`--json`: one document, `{"host", "events", "operations"}`: `events` the Events (null: the
    cluster could not be read, said on stderr), `operations` the host's (null without a host;
    `{"error": ...}` when Temporal could not say); the exit status as without `--json`."""
    document: dict[str, Any] = {
        "host": args.host,
        "events": None if shown is None else [asdict(event) for event in shown],
        "operations": None,
    }
    reached = True
    if args.host is not None:
        found, why, reached = await operations_of(args)
        if found is None:
            print(f"metalflow: {why}", file=sys.stderr)
        document["operations"] = found if found is not None else {"error": why}
    print(json.dumps(document, indent=2))
    return EXIT_OK if shown is not None and reached else EXIT_UNREACHABLE


def read_events(settings: Settings, host: str | None, limit: int) -> list[Shown]:
    """metalflow's Events about `host` (every host: None), oldest first, the last `limit`."""
    from kubernetes import client as k8s

    from drivers.kube import load_configuration

    selector = f"reportingController={REPORTING_CONTROLLER}"
    if host:
        selector += f",regarding.name=node-{host}"
    with k8s.ApiClient(load_configuration(settings)) as api:
        response = k8s.EventsV1Api(api).list_namespaced_event(
            settings.dpf_namespace, field_selector=selector, limit=500, _request_timeout=(5, 15),
            _preload_content=False,
        )  # fmt: skip
        listed: dict[str, Any] = json.loads(response.data)  # type: ignore[attr-defined]
    items: list[dict[str, Any]] = listed["items"]
    shown = [_shown(item) for item in items]
    shown.sort(key=lambda s: s.last_seen)
    return shown[-limit:] if limit > 0 else shown


def _shown(event: dict[str, Any]) -> Shown:
    series = event.get("series") or {}
    last = (
        series.get("lastObservedTime") or event.get("eventTime") or event.get("deprecatedLastTimestamp") or ""
    )
    regarding = event.get("regarding") or {}
    target = f"{str(regarding.get('kind', '')).lower()}/{regarding.get('name', '')}" if regarding else "-"
    return Shown(
        last_seen=str(last)[:19] + ("Z" if last else ""),  # ISO 8601 Z, as every time printed
        type=str(event.get("type", "")),
        reason=str(event.get("reason", "")),
        count=int(series.get("count") or event.get("deprecatedCount") or 1),
        regarding=target,
        note=str(event.get("note", "")),
    )


def render(shown: list[Shown], *, with_object: bool) -> str:
    """The Events as a table (one line each; the note last, whole)."""
    header = ["LAST SEEN", "TYPE", "REASON", "COUNT"] + (["OBJECT"] if with_object else []) + ["MESSAGE"]
    rows = [
        [s.last_seen, s.type, s.reason, str(s.count)] + ([s.regarding] if with_object else []) + [s.note]
        for s in shown
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    lines = []
    for row in [header, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)]
        lines.append("  " + "  ".join([*cells, row[-1]]))
    return "\n".join(lines)


async def read_operations(args: argparse.Namespace) -> tuple[str, bool]:
    """The host's current and recent operations with their phases, in lines, or why not; and
    whether Temporal was reached (found as every command finds it: `connection.resolve`)."""
    found, why, reached = await operations_of(args)
    if found is None:
        return f"  {why}", reached
    lines = [f"  entity {found['entity']}: {found['phase']}"]
    for record in found["recent"]:
        finished = f" at {record['finished_at']}" if record["finished_at"] else ""
        by = record["requested_by"]
        lines.append(f"  {record['workflow_id']}: {record['outcome']}{finished} (requested by {by})")
    current = found["current"]
    if current is not None:
        lines.append(
            f"  {current['workflow_id']}: {current['now']} (now; requested by {current['requested_by']})"
        )
    return "\n".join(lines), True


async def operations_of(args: argparse.Namespace) -> tuple[dict[str, Any] | None, str, bool]:
    """The host's entity, its recent operations and the one now (`--json`'s `operations`), or
    None and why not; and whether Temporal was reached."""
    from metalflow.client import TemporalConfigError
    from metalflow.hosts import HostRequestError, host_status
    from metalflow.operation_progress import describe_operation, running_status

    host = args.host
    address = "?"
    try:
        target = connection.resolve(args)
        address = target.address
        client = await asyncio.wait_for(connection.connect_to(target), 10)
        status = await host_status(client, host)
    except HostRequestError as err:
        return None, str(err), True
    except TemporalConfigError as err:
        return None, f"cannot reach Temporal: {_first_line(err)}", False
    except Exception as err:  # Temporal away: the Events above still stand
        return (
            None,
            f"{connection.unreachable(address, err)}; see `metalflow host status {host}` later",
            False,
        )
    recent = [
        {
            "workflow_id": record.workflow_id,
            "outcome": record.outcome,
            "finished_at": iso_z(record.finished_at) if record.finished_at else None,
            "requested_by": record.requested_by,
        }
        for record in status.recent
    ]
    current, now = status.current, None
    if current is not None:
        live = await running_status(client, current.workflow_id) if current.outcome == "running" else None
        phase = describe_operation(live) if live else current.outcome
        now = {"workflow_id": current.workflow_id, "now": phase, "requested_by": current.requested_by}
    found = {"entity": names.host_workflow_id(host), "phase": status.phase, "recent": recent, "current": now}
    return found, "", True


def _first_line(err: BaseException) -> str:
    return (str(err).splitlines() or [""])[0][:200]
