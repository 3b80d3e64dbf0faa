"""`metalflow host maintenance HOST on|off --reason ... --by ...`: a host a person works on.

While a host is in maintenance nothing disruptive starts by itself: its monitor records the
reprovision it would have asked for and does not ask; a campaign (and a scheduled run) skips it,
naming the maintenance and who set it; an operator's own disruptive request (provision,
reprovision, reboot, firmware, remove, reset) is refused, naming the maintenance, unless it says
`--in-maintenance`. Read-only commands work as ever. Turning it on does not stop an operation that
runs (the answer says so, and how to abort it); turning it off replays nothing that was skipped.

Without on/off it shows the host's maintenance (read only). `--json` prints the host's
maintenance after the command: `{"host_id", "maintenance": {"by", "reason", "since"} | null,
"message"}`. The decisions are the entity's (`workflows/host/state.py`, `maintenance_refusal`).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from temporalio.client import Client

from contracts.models.control import OperatorAnswer
from contracts.models.host import MAINTENANCE_UPDATE, MaintenanceRequest
from contracts.validation import terminal_safe
from contracts.wording import iso_z
from metalflow.cli import exits
from metalflow.cli.host_requests import reason_option
from metalflow.hosts import HostRequestError, host_status, require_worker, send_update
from metalflow.site_name import entity_input

DESCRIPTION = (
    "Put HOST in maintenance (on, with --reason: who, why and since when are recorded) or take it "
    "out (off). While a host is in maintenance nothing disruptive starts by itself: its monitor "
    "records what it would have done and does not do it; a campaign or a scheduled run skips it, "
    "naming the maintenance and who set it; an operator's own provision, reprovision, reboot, "
    "firmware, remove or reset is refused, naming the maintenance, unless it says "
    "--in-maintenance. Read-only commands work as ever. Turning maintenance on does not stop an "
    "operation that runs (stop it with `metalflow host abort HOST`); turning it off replays "
    "nothing that was skipped. Without on/off: show the host's maintenance."
)


def register(commands: Any, common: Any, runner: Any) -> None:
    """Add `host maintenance`."""
    parser = commands.add_parser(
        "maintenance",
        help="put a host in maintenance (nothing disruptive starts by itself) or take it out",
        description=DESCRIPTION,
    )
    common(parser)
    parser.add_argument(
        "state", nargs="?", choices=("on", "off"), help="on or off (none: show the host's maintenance)"
    )
    reason_option(parser, "why the host is in maintenance, required with on")
    parser.add_argument("--json", action="store_true", help="print the host's maintenance as JSON")
    parser.set_defaults(handler=runner(_maintenance), check_inventory=True)


async def _maintenance(client: Client, args: argparse.Namespace) -> int:
    message = ""
    if args.state is None:
        if args.reason:
            raise HostRequestError(
                "--reason goes with on: metalflow host maintenance HOST on --reason ...", 2
            )
    else:
        if args.state == "on" and not args.reason.strip():
            raise HostRequestError(
                f"maintenance on needs --reason (why {args.host} is in maintenance); nothing changed", 2
            )
        request = MaintenanceRequest(on=args.state == "on", requested_by=args.by, reason=args.reason)
        if args.state == "off":
            await host_status(client, args.host)  # an unknown entity: a clear error, none created
        await require_worker(client, args.task_queue)
        answer = await send_update(
            client, entity_input(args.host), MAINTENANCE_UPDATE, request, OperatorAnswer,
            args.task_queue,
        )  # fmt: skip
        message = answer.message
    try:
        held = (await host_status(client, args.host)).maintenance
    except HostRequestError as err:  # no entity yet (a known host nothing was asked of): not in it
        if args.state is not None or err.status != exits.USAGE:
            raise
        held = None
    if args.json:
        shown = held.model_dump(mode="json") if held else None
        print(json.dumps({"host_id": args.host, "maintenance": shown, "message": message}, indent=2))
        return exits.OK
    if not message:
        message = (
            f"{args.host} is in maintenance since {iso_z(held.since)}, set by {held.by}: {held.reason}"
            if held
            else f"{args.host} is not in maintenance"
        )
    print(terminal_safe(message), flush=True)
    return exits.OK
