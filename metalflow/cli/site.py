"""`metalflow site check [--json]`: read the site once, before the first operation, and say per
capability whether it is ready, degraded or blocked, with the reason and the behaviour row.

No Temporal needed; when one is reachable, the running campaigns are told what the kept check
blocks (metalflow/cli/site_campaigns.py). Reads only (metalflow/site_check.py); the findings are
kept in the state dir (`site-check.json`, or one per other site file: metalflow/site_check.py
`findings_path`) and consulted at an operation's start by `metalflow host ...`. Exit status: 0
nothing blocked, 1 something blocked, 2 bad settings or site file (README's table).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from metalflow.cli import exits


def register(subparsers: Any) -> None:
    """Add `site check`."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "site",
        help="check the site before operations (no Temporal needed)",
        description="Check what the site offers before the first operation.",
    )
    commands = parser.add_subparsers(title="site commands", metavar="COMMAND")
    check = commands.add_parser(
        "check",
        help="read every BMC, DPF and Grove (read only) and say per capability ready, degraded or "
        "blocked; exit 1 when something is blocked, 3 when the cluster cannot be reached",
        description="Read every BMC of the site file (reachable, credentials, reset types, "
        "LastResetTime, BootProgress, UpdateService), DPF's served schema (its version, "
        "security.privileged) and Grove's served kinds (PodGangMap), changing nothing; print per "
        "capability ready / degraded / blocked with the reason and the behaviour row behind it, and "
        "keep the findings in the state dir, where `metalflow host ...` consults them. Exit status: "
        "0 nothing blocked, 1 something blocked, 2 bad settings or site file, 3 the cluster cannot be "
        "reached (nothing kept: the previous findings stand). When the new findings block a host, the "
        "running campaigns are told, through the Temporal every command talks to: --address/--namespace, "
        "else TEMPORAL_ADDRESS or its config file, else the running `metalflow dev` of the state dir, else "
        "127.0.0.1:7233; none answering, the check says they were not told (its exit status unchanged).",
    )
    check.add_argument("--site", type=Path, default=None, metavar="FILE",
                       help="site file (default: METALFLOW_SITE_FILE, "
                       "else the state dir's site.yaml)")  # fmt: skip
    check.add_argument("--json", action="store_true", help="print one JSON document")
    check.add_argument("--concurrency", type=_positive_int, default=8, metavar="N",
                       help="BMCs read at once (default: %(default)s)")  # fmt: skip
    check.add_argument("--timeout", type=_positive_float, default=20.0, metavar="SECONDS",
                       help="give one BMC up after this long (default: %(default)s)")  # fmt: skip
    check.set_defaults(handler=handle_check)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 64:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 1 to 64")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= 600:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0, at most 600")
    return value


def _fail(text: str, status: int) -> int:
    print(f"metalflow site check: {text}", file=sys.stderr)
    return status


def handle_check(args: argparse.Namespace) -> int:
    """Run `metalflow site check`."""
    from contracts.errors import InvalidInput
    from drivers.kube import load_configuration
    from drivers.settings import Settings
    from drivers.site_file import SiteFileError, load_site
    from metalflow.cli.site_campaigns import as_json, tell_running_campaigns
    from metalflow.site_check import check_site, findings_path, save_findings
    from metalflow.site_verdicts import info, verdicts

    try:
        settings = Settings.from_env()
    except ValueError as err:
        return _fail(str(err), exits.USAGE)
    if args.site is not None:
        settings = settings.model_copy(update={"site_file": args.site, "inventory": "site"})
    if settings.inventory != "site":
        return _fail(
            "reads the hosts from a site file: set METALFLOW_INVENTORY=site or give --site", exits.USAGE
        )
    try:
        site = load_site(settings.site_file)
    except SiteFileError as err:
        return _fail(err.message, exits.USAGE)
    try:  # a kubeconfig that is not there is bad input, not a finding: nothing read, nothing kept
        load_configuration(settings)
    except InvalidInput as err:
        return _fail(f"{err.message}; nothing was checked, the kept findings are unchanged", exits.USAGE)
    findings = asyncio.run(check_site(settings, site, concurrency=args.concurrency, timeout=args.timeout))
    path = findings_path(settings.site_file)  # each site file's own: another's are never replaced
    if findings.dpf.unreachable:  # README's exit table: 3, cannot reach the site; no finding of it
        kept = f"the findings of {path} stand" if path.exists() else "no findings were kept"
        text = f"the cluster cannot be reached ({findings.dpf.error}): nothing was kept, {kept}"
        if args.json:
            print(json.dumps({"error": f"metalflow site check: {text}", "exit_status": exits.UNREACHABLE}))
        return _fail(text, exits.UNREACHABLE)
    save_findings(path, findings)
    told = tell_running_campaigns(args, path)  # a newer check holds running campaigns to it too
    for each in told:
        print(f"metalflow site check: {each.line}", file=sys.stderr)
    judged = verdicts(findings)
    blocked = any(v.status == "blocked" for v in judged)
    if args.json:
        document = {
            "site": findings.site,
            "site_file": findings.site_file,
            "checked_at": findings.checked_at,
            "kept_in": str(path),
            "verdicts": [v.to_json() for v in judged],
            "info": info(findings),
            "campaigns": as_json(told),  # told / not_told / unknown ("": every running campaign)
            "findings": findings.to_json(),
        }
        print(json.dumps(document, indent=2))
        return exits.FAILED if blocked else exits.OK

    print(f"site {findings.site} ({findings.site_file}), checked {findings.checked_at} (kept in {path})")
    for line in info(findings):
        print(f"  {line}")
    width = max(len(v.capability) for v in judged) + 2
    for verdict in judged:
        print(f"{verdict.capability.ljust(width)}{verdict.status}")
        for reason in verdict.reasons:
            print(f"  {reason.status}: {reason.text} [{', '.join(reason.rows)}]")
    return exits.FAILED if blocked else exits.OK


handle_check.talks_to_temporal = True  # type: ignore[attr-defined]  # tells running campaigns: --address
