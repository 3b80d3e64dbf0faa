"""`metalflow host versions [HOST...] [--json]`: what each host runs, side by side, and a fleet
summary: per DPU its identity (model, serial, part number as its BMC reports them), BFB and flavor
(DPF), DPU firmware and DPU BMC firmware (its BMC's FirmwareInventory), and the host BMC's
firmware (its FirmwareInventory, when served); each marked `*` where it differs from the site's
declared target (site file `versions.targets`). Reads through the drivers (drivers/versions.py):
no workflow, nothing changes. No HOST: every host of the inventory. MAINTENANCE: `on (who set
it)` for a host in maintenance (`metalflow host maintenance`), from Temporal visibility (one
listing, at most MAINTENANCE_READ_SECONDS, found as every command finds Temporal: the read
needs no Temporal; `?` and a line on stderr when it cannot be asked).

`--refresh` then gives what was read to each host's entity (signal `versions_read`): its memo
shows it at once, and no BMC is asked again for it. The entity reads nothing after a reboot, so
this is how a firmware someone else staged and a reboot activated reaches the memo.

Exit statuses (`metalflow.cli.exits`): 0 read (a source that could not be read is named per host,
`-` in the table; BMCs that could not be reached while others answered are named on stderr; with
`--refresh`, a host without an entity is named on stderr), 1 Temporal refused a refresh, 2 an
unknown host, or settings or a site file that cannot be read, 3 no BMC asked could be reached
(every one down, timed out or answering 5xx: named on stderr; no refresh), or neither DPF nor
any BMC answered, or the cluster (or, with `--refresh`, Temporal) cannot be reached. Bounded: one
BMC request BMC_REQUEST_SECONDS, one BMC's read BMC_READ_SECONDS, one host's DPU list from DPF
DPF_READ_SECONDS (one request, not retried); hosts DPF did not answer for are named on stderr.
`--json`: one document, `{"hosts": [...], "summary": ..., "targets": ..., "unreached_bmcs": [...]}`.

Cost: per host one DPU list; per DPU with a BMC one session and its FirmwareInventory; hosts read
PARALLEL at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter
from datetime import datetime
from typing import Any

from temporalio.service import RPCError

from contracts.errors import InvalidInput, KubernetesUnavailable, MetalflowError
from contracts.host_entity import hosts_in_maintenance
from contracts.models.inventory import (
    VERSION_FIELDS,
    HostVersions,
    HostVersionsBrief,
    VersionsRead,
    VersionTargets,
)
from contracts.validation import HostId, Requester, arg_type
from contracts.wording import iso_z, plural
from drivers.credentials import CredentialResolver
from drivers.inventory import Inventory
from drivers.kube import Kube
from drivers.redfish.client import RedfishClient
from drivers.settings import Settings
from drivers.site_file import SiteVersionTargets
from drivers.versions import VersionReader
from metalflow.cli import connection, exits
from metalflow.client import TemporalConfigError, temporal_lost
from metalflow.hosts import default_operator, tell_versions_read

PARALLEL = 20
NAMED = 10  # BMCs named on the line that says which could not be reached; more are counted
MAINTENANCE_READ_SECONDS = 5.0  # Temporal's answer on who is in maintenance, at most
# Bounds, so a site that does not answer (a frozen API server or BMC accepts the connection and
# never answers) is said within seconds, not after every client's own timeouts and retries (it
# took 238 s): one BMC request, one BMC's whole read (session and every GET), one host's DPU list
# from DPF (one request, not retried). Hosts are read PARALLEL at a time, each host's BMCs in turn.
BMC_REQUEST_SECONDS = 5.0
BMC_READ_SECONDS = 10.0
DPF_READ_SECONDS = 5.0
EXIT_OK, EXIT_USAGE, EXIT_UNREACHABLE = exits.OK, exits.USAGE, exits.UNREACHABLE


def register(commands: Any) -> None:
    versions = commands.add_parser(
        "versions",
        help="what each host runs: BFB, flavor, DPU and BMC firmware, against the site's targets",
        description="Each host's DPUs with their identity and BFB, flavor, DPU firmware, DPU BMC firmware "
        "and the host BMC firmware, read from DPF and the BMCs; `*` marks a version off the site's target. "
        "A fleet summary counts the hosts on each version. Bounded: a BMC request waits "
        f"{BMC_REQUEST_SECONDS:g} s, a BMC's whole read {BMC_READ_SECONDS:g} s, DPF's DPU list of a host "
        f"{DPF_READ_SECONDS:g} s; what did not answer is named on stderr.",
    )
    versions.add_argument(
        "hosts", nargs="*", metavar="HOST", type=arg_type(HostId), help="hosts (default: every host)"
    )
    versions.add_argument(
        "--json", action="store_true", help="one JSON object: the hosts, the summary and the targets"
    )
    versions.add_argument(
        "--refresh",
        action="store_true",
        help="also give what was read to each host's entity (host/<id>), which shows it in its memo "
        "at once instead of reading the BMCs again: e.g. a firmware someone else staged and a reboot "
        "activated (the entity reads nothing after a reboot)",
    )
    versions.add_argument(
        "--by",
        type=arg_type(Requester),
        default=default_operator(),
        help="who refreshes (default: %(default)s)",
    )
    versions.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        settings = Settings.from_env()
    except ValueError as err:
        print(f"metalflow host versions: {err}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return asyncio.run(_main(settings, args))
    except InvalidInput as err:  # an unknown host
        print(f"metalflow host versions: {err.message}", file=sys.stderr)
        return EXIT_USAGE
    except KubernetesUnavailable as err:
        print(f"metalflow host versions: {err.message}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except MetalflowError as err:  # the site file
        print(f"metalflow host versions: {err.message}", file=sys.stderr)
        return EXIT_USAGE


async def hosts_in_maintenance_or_why(
    args: argparse.Namespace, ids: list[str]
) -> tuple[dict[str, tuple[str, datetime | None]] | None, str]:
    """Which hosts are in maintenance (Temporal visibility, one listing), or None and why not:
    the versions are read from DPF and the BMCs and shown without Temporal."""
    try:
        async with asyncio.timeout(MAINTENANCE_READ_SECONDS):
            client = await connection.connect_to(connection.resolve(args))
            return await hosts_in_maintenance(client, ids), ""
    except Exception as err:  # noqa: BLE001 - the versions stand without it
        return None, f"maintenance not read: Temporal could not be asked ({type(err).__name__})"


def maintenance_cell(found: dict[str, tuple[str, datetime | None]] | None, host_id: str) -> str:
    if found is None:
        return "?"
    if host_id not in found:
        return "-"
    return f"on ({found[host_id][0]})"


run.talks_to_temporal = True  # type: ignore[attr-defined]  # `--refresh`: gets --address, --namespace


async def _main(settings: Settings, args: argparse.Namespace) -> int:
    kube = Kube(settings, request_timeout=(DPF_READ_SECONDS, DPF_READ_SECONDS), retries=0)
    inventory = Inventory(settings, kube)
    targets = SiteVersionTargets()
    if settings.inventory == "site":
        site = await asyncio.to_thread(inventory.site_file.site)
        targets = site.versions.targets
        ids = list(args.hosts) or [h.id for h in site.hosts]
    else:
        if not args.hosts:
            from drivers.campaign import Fleet

            ids = [h.host_id for h in await Fleet(inventory, kube).all_hosts()]
        else:
            ids = list(args.hosts)
    hosts = [await inventory.resolve(h) for h in ids]
    redfish = RedfishClient(
        CredentialResolver(settings.kubeconfig),
        max_in_flight=settings.bmc_max_in_flight,
        timeout_seconds=BMC_REQUEST_SECONDS,
    )
    reader = VersionReader(kube, redfish, bmc_seconds=BMC_READ_SECONDS, dpf_seconds=DPF_READ_SECONDS)
    gate = asyncio.Semaphore(PARALLEL)

    async def read(host: Any) -> HostVersions:
        async with gate:
            return await reader.host(host)

    found, (held, unread) = await asyncio.gather(
        asyncio.gather(*(read(h) for h in hosts)), hosts_in_maintenance_or_why(args, ids)
    )
    summary = fleet_summary(found)
    unreached = sorted(reader.unreached - reader.answered)
    if args.json:
        shown = [
            {**host.model_dump(mode="json"), "maintenance": _maintenance_json(held, host.host_id)}
            for host in found
        ]
        print(json.dumps({"hosts": shown, "summary": summary, "targets": targets.model_dump(mode="json"),
                          "unreached_bmcs": unreached}))  # fmt: skip
    else:
        print(render(found, targets, summary, held))
        if unread:
            print(unread, file=sys.stderr)
    kube.close()
    dpf_unreached = sorted(reader.dpf_unreached - reader.dpf_answered)
    if dpf_unreached:
        said = dpf_in_words(dpf_unreached, len(reader.dpf_answered))
        print(f"metalflow host versions: {said}", file=sys.stderr)
    if unreached:
        said = reached_in_words(unreached, len(reader.answered))
        print(f"metalflow host versions: {said}", file=sys.stderr)
        if not reader.answered:
            return EXIT_UNREACHABLE  # nothing read from any BMC: nothing to give an entity either
    if dpf_unreached and not reader.dpf_answered and not reader.answered:
        return EXIT_UNREACHABLE  # neither DPF nor any BMC answered
    if args.refresh:
        return await refresh(args, found, VersionTargets(**targets.model_dump()))
    return EXIT_OK


async def refresh(args: argparse.Namespace, found: list[HostVersions], targets: VersionTargets) -> int:
    """`--refresh`: give each host's entity what was read (`metalflow.hosts.tell_versions_read`),
    saying on stderr which had none; the exit status (a failure said why, on stderr)."""
    try:
        target = connection.resolve(args)
    except TemporalConfigError as err:  # names the file; a TOML error quotes no value
        print(f"metalflow host versions: {err}", file=sys.stderr)
        return EXIT_USAGE
    try:
        client = await connection.connect_to(target)
    except Exception as err:  # no Temporal: said as every command says it, never a traceback
        print(f"metalflow host versions: {connection.unreachable(target.address, err)}", file=sys.stderr)
        return EXIT_UNREACHABLE
    for host in found:
        read = VersionsRead(requested_by=args.by, brief=HostVersionsBrief(versions=host, targets=targets))
        try:
            told = await tell_versions_read(client, host.host_id, read)
        except RPCError as err:
            print(f"metalflow host versions: Temporal refused the refresh of {host.host_id} ({err.message})"
                  .splitlines()[0], file=sys.stderr)  # fmt: skip
            return EXIT_UNREACHABLE if temporal_lost(err) else exits.FAILED
        if not told:
            print(f"{host.host_id}: no entity yet (it reads its versions when it starts)", file=sys.stderr)
    return EXIT_OK


def _first_named(names: list[str]) -> str:
    """The first NAMED of `names`, and how many more."""
    more = f", +{len(names) - NAMED} more" if len(names) > NAMED else ""
    return ", ".join(names[:NAMED]) + more


def reached_in_words(unreached: list[str], answered: int) -> str:
    """Which BMCs could not be reached (down, timed out, answering 5xx), and whether any was."""
    named = _first_named(unreached)
    if not answered:
        asked = plural(len(unreached), "BMC")
        return f"no BMC could be reached ({asked} asked: {named}); try again once they are back"
    total = plural(len(unreached) + answered, "BMC")
    return f"{len(unreached)} of {total} could not be reached ({named}): their versions show `-`"


def dpf_in_words(unreached: list[str], answered: int) -> str:
    """For which hosts DPF could not be read (down, or no answer within DPF_READ_SECONDS)."""
    named = _first_named(unreached)
    if not answered:
        asked = plural(len(unreached), "host")
        return f"DPF could not be reached (asked for {asked}: {named}): BFB and flavor show `-`"
    total = plural(len(unreached) + answered, "host")
    which = f"{len(unreached)} of {total} ({named})"
    return f"DPF could not be read for {which}: their BFB and flavor show `-`"


def fleet_summary(hosts: list[HostVersions]) -> dict[str, dict[str, int]]:
    """Per version field, how many hosts run each value (a host with DPUs on two values counts
    under each)."""
    summary: dict[str, Counter[str]] = {f: Counter() for f in (*VERSION_FIELDS, "host_bmc_firmware")}
    for host in hosts:
        for field in VERSION_FIELDS:
            for value in {getattr(d, field) or "-" for d in host.dpus}:
                summary[field][value] += 1
        summary["host_bmc_firmware"][host.host_bmc_firmware or "-"] += 1
    return {f: dict(sorted(c.items())) for f, c in summary.items()}


def _cell(value: str | None, target: str) -> str:
    if value is None:
        return "-"
    return f"{value}*" if target and value != target else value


def _maintenance_json(found: dict[str, tuple[str, datetime | None]] | None, host_id: str) -> Any:
    """`{"by", "since"}`, None when not in maintenance, "unknown" when Temporal was not read."""
    if found is None:
        return "unknown"
    if host_id not in found:
        return None
    by, since = found[host_id]
    return {"by": by, "since": iso_z(since, none="") or None}


def render(
    hosts: list[HostVersions],
    targets: SiteVersionTargets,
    summary: dict[str, dict[str, int]],
    maintenance: dict[str, tuple[str, datetime | None]] | None = None,
) -> str:
    rows = [(
        "HOST", "DPU", "MODEL", "SERIAL", "PART", "BFB", "FLAVOR", "DPU FW", "DPU BMC FW", "HOST BMC FW",
        "MAINTENANCE",
    )]  # fmt: skip
    notes = []
    for host in hosts:
        host_bmc = _cell(host.host_bmc_firmware, targets.host_bmc_firmware)
        for dpu in host.dpus or ():
            rows.append((
                host.host_id, dpu.dpu_id, dpu.model or "-", dpu.serial or "-", dpu.part_number or "-",
                _cell(dpu.bfb, targets.bfb), _cell(dpu.flavor, targets.flavor),
                _cell(dpu.dpu_firmware, targets.dpu_firmware),
                _cell(dpu.dpu_bmc_firmware, targets.dpu_bmc_firmware),
                host_bmc, maintenance_cell(maintenance, host.host_id),
            ))  # fmt: skip
            notes += [f"{host.host_id} {dpu.dpu_id}: {e}" for e in dpu.errors]
        notes += [f"{host.host_id}: {e}" for e in host.errors]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    declared = {k: v for k, v in targets.model_dump().items() if v}
    lines.append(
        "targets: "
        + (", ".join(f"{k} {v}" for k, v in declared.items()) or "none declared")
        + " (* off target)"
    )
    for field, counts in summary.items():
        lines.append(f"{field}: " + ", ".join(f"{v} on {plural(n, 'host')}" for v, n in counts.items()))
    lines += [f"not read: {n}" for n in notes]
    return "\n".join(lines)
