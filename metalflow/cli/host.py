"""`metalflow host ...`, `metalflow host-rebooted`, `metalflow approve`: operations on one host.

The `host` group, and what its commands share: the host argument and who asks (`_common`), and
the runner (`_runner`) that checks a request against the inventory before anything is sent (an
unknown host or a DPU not the host's is refused and no entity is created), connects to Temporal
and turns every refusal and error into one line and an exit status. The commands are in their
modules: the requests to the host's entity (`host_requests`: one command per operation request
of `contracts.host_requests`, `assign`, `release`, `approve`), `host status` (`host_status`),
the operator's answers (`host_decide`), the monitor (`host_monitor`), `host list` and
`host versions`.

Exit statuses (`metalflow.cli.exits`): 0 done (or accepted, without --wait), 1 refused or
failed, 2 bad input or an unknown host or DPU, 3 Temporal or the cluster unreachable.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError

from contracts import names
from contracts.validation import REQUESTER_MAX, HostId, Requester, arg_type, terminal_safe
from metalflow.cli import (
    connection,
    exits,
    host_decide,
    host_list,
    host_maintenance,
    host_monitor,
    host_requests,
    host_versions,
    reader_gone,
)
from metalflow.cli.connection import connect_to, unreachable
from metalflow.cli.host_status import show_status
from metalflow.cli.inventory_check import (
    DPUsNotInDPF,
    InventoryRefusal,
    InventoryUnavailable,
    InventoryUnreachable,
    UnknownToInventory,
    check_request,
)
from metalflow.client import NO_WORKER, TemporalConfigError, no_worker_polls, temporal_lost
from metalflow.hosts import HostRequestError, default_operator, host_status

EXIT_OK, EXIT_FAILED, EXIT_USAGE = exits.OK, exits.FAILED, exits.USAGE
EXIT_UNREACHABLE, EXIT_INTERRUPTED = exits.UNREACHABLE, exits.INTERRUPTED


def register(subparsers: Any) -> None:
    """Add `host`, `host-rebooted` and `approve`."""
    host = subparsers.add_parser(
        "host",
        help="provision, reprovision or reboot a host; show its status",
        description="Ask a host's entity workflow (host/<id>, created on first use) to run an "
        "operation. One operation per host at a time: a request for a busy host is refused, naming "
        "the operation in flight. A host with an instance assigned waits for `metalflow approve`.",
    )
    commands = host.add_subparsers(title="host commands", metavar="COMMAND")
    host_requests.register_operations(commands, _common, _runner)
    host_monitor.register(commands, _common, _runner)
    host_maintenance.register(commands, _common, _runner)
    host_decide.register(commands, _common, _runner)
    host_list.register(commands, _runner)
    host_versions.register(commands)

    status = commands.add_parser(
        "status",
        help="the host's entity, the operation in flight, its monitor",
        description="The host as its entity sees it (instance, boot generation, recent operations), "
        "the operation in flight with each DPU's phase, and the pool state of its monitor when one runs.",
    )
    _common(status, asks=False)
    status.add_argument("--json", action="store_true", help="print the statuses as JSON")
    status.set_defaults(handler=_runner(show_status))
    host_requests.register_instance(commands, _common, _runner)

    def usage(_args: argparse.Namespace) -> int:
        host.print_help(sys.stderr)
        return EXIT_USAGE

    host.set_defaults(handler=usage)

    rebooted = subparsers.add_parser(
        "host-rebooted",
        help="report that a host was rebooted by hand (update host_rebooted)",
        description="Tell the operation in flight on HOST that the host was rebooted outside "
        "metalflow (reboot method manual, or a BMC that could not reboot it). Refused (exit 1), "
        "naming what the operation waits for, when it awaits no reboot.",
    )
    _common(rebooted)
    host_requests.reason_option(rebooted, "recorded with the confirmation")
    rebooted.add_argument(
        "--json",
        action="store_true",
        help="the answer as JSON: host_id, workflow_id (who answered), accepted, message",
    )
    rebooted.set_defaults(handler=_runner(host_decide.host_rebooted))

    host_requests.register_approve(subparsers, _common, _runner)


def _common(parser: argparse.ArgumentParser, *, asks: bool = True) -> None:
    parser.add_argument("host", metavar="HOST", type=arg_type(HostId), help="host id, e.g. host-001")
    if not asks:  # a read (`host status`): nobody is recorded, no worker task queue is asked
        return
    parser.add_argument(
        "--by",
        type=arg_type(Requester),
        default=default_operator(),
        help=f"who asks, at most {REQUESTER_MAX} printable characters (default: %(default)s)",
    )
    parser.add_argument(
        "--task-queue", default=names.TASK_QUEUE, help="worker task queue (default: %(default)s)"
    )


def _runner(
    action: Callable[[Client, argparse.Namespace], Awaitable[int]],
) -> Callable[[argparse.Namespace], int]:
    def handle(args: argparse.Namespace) -> int:
        try:
            status = asyncio.run(_connected(action, args))
        except KeyboardInterrupt:  # Ctrl-C while waiting: the operation goes on in Temporal
            status = _fail("interrupted; the workflows go on (metalflow host status HOST)", EXIT_INTERRUPTED)
        except exits.ReaderGone:  # `metalflow host list | head -1`: quietly, 141 (`metalflow.cli.main`)
            status = reader_gone()
        connection.flush_tracing()
        try:
            exits.JsonOutput.finish(status)
            sys.stdout.flush()
        except exits.ReaderGone:
            status = reader_gone()
        sys.stderr.flush()
        # The SDK's native runtime can abort during interpreter teardown (PyGILState_Release), as
        # the worker notes; the command is done here, so skip the teardown and keep its status.
        os._exit(status)

    handle.talks_to_temporal = True  # type: ignore[attr-defined]  # gets --address, --namespace
    return handle


def _site_check_says(args: argparse.Namespace) -> int | None:
    """The kept `metalflow site check` findings for this operation (one small file, never the
    site): a blocked capability refuses it (exit 1), a degraded one is said and it runs."""
    from metalflow.site_check import consult_words
    from metalflow.site_verdicts import capability_of

    capability = capability_of(
        getattr(args, "operation", None),
        host_only=bool(getattr(args, "host_only", False)),
        both=bool(getattr(args, "both", False)),
        full=bool(getattr(args, "full", False)),
    )
    # only the components it touches: its DPUs; the host BMC unless a person reboots
    refuse, lines = consult_words(
        args.host,
        capability,
        dpus=getattr(args, "dpus", None),
        manual_reboot=bool(getattr(args, "manual_reboot", False)),
    )
    if refuse:
        return _fail(f"{args.host}: refused: " + "; ".join(lines), EXIT_FAILED)
    for line in lines:
        print(f"metalflow host: {line}", file=sys.stderr)
    args.site_check = tuple(lines)  # the request carries them: its status and start Event say them
    return None


async def _connected(
    action: Callable[[Client, argparse.Namespace], Awaitable[int]], args: argparse.Namespace
) -> int:
    try:
        if getattr(args, "host", None) is not None:  # `host list` names no host
            names.host_workflow_id(args.host)
    except ValueError as err:
        return _fail(str(err), EXIT_USAGE)
    not_in_dpf: DPUsNotInDPF | None = None
    if getattr(args, "check_inventory", False):  # before anything is sent: no entity for a stranger
        try:
            await check_request(args)
        except DPUsNotInDPF as err:  # decided once connected: a provision in flight is not refused so
            not_in_dpf = err
        except UnknownToInventory as err:  # an unknown host, a DPU not the host's
            return _fail(str(err), EXIT_USAGE)
        except InventoryRefusal as err:
            return _fail(str(err), EXIT_FAILED)
        except InventoryUnreachable as err:
            return _fail(str(err), EXIT_UNREACHABLE)
        except InventoryUnavailable as err:
            return _fail(str(err), EXIT_USAGE)
        refused = _site_check_says(args)
        if refused is not None:
            return refused
    try:
        target = connection.resolve(args)
    except TemporalConfigError as err:  # names the file; a TOML error quotes no value
        return _fail(str(err), EXIT_USAGE)
    except Exception as err:  # a broken config file: say which setting, never its secrets
        return _fail(f"cannot read the Temporal client configuration: {type(err).__name__}", EXIT_USAGE)
    address = target.address
    try:
        client = await connect_to(target)
    except TemporalConfigError as err:  # the tracing settings
        return _fail(str(err), EXIT_USAGE)
    except Exception as err:
        if not_in_dpf is not None:  # the refusal needs no Temporal
            return _fail(str(not_in_dpf), EXIT_FAILED)
        return _fail(unreachable(address, err), EXIT_UNREACHABLE)
    if not_in_dpf is not None and not await _operation_in_flight(client, args.host):
        return _fail(str(not_in_dpf), EXIT_FAILED)
    try:
        return await action(client, args)
    except HostRequestError as err:
        if err.status == EXIT_USAGE and getattr(args, "host", None) is not None:
            unknown = await _unknown_host(args)  # no entity: say whether the inventory knows it
            if unknown is not None:
                return _fail(unknown, EXIT_USAGE)
        return _fail(str(err), err.status)
    except RPCError as err:
        reason = f"{err.status.name if err.status else '?'}: {err.message}".splitlines()[0]
        if temporal_lost(err):  # Temporal went away: like "cannot reach Temporal", the environment's
            return _fail(f"lost Temporal at {address} ({reason})", EXIT_UNREACHABLE)
        if no_worker_polls(err):  # nobody can answer: as a host workflow that does not answer
            return _fail(NO_WORKER, EXIT_UNREACHABLE)
        return _fail(f"Temporal refused the request ({reason})", EXIT_FAILED)
    except Exception as err:  # one line, never a traceback: the command's user cannot act on one
        return _fail(f"failed: {type(err).__name__}: {err}".splitlines()[0], EXIT_FAILED)


async def _unknown_host(args: argparse.Namespace) -> str | None:
    """Why the inventory does not know `args.host`, or None (it does, or it cannot be read): asked
    only on the way to a refusal, so a read of a known host costs no inventory read."""
    try:
        await check_request(argparse.Namespace(host=args.host))
    except UnknownToInventory as err:
        return str(err)
    except Exception:  # noqa: BLE001 - an inventory that cannot be read: the refusal stands
        return None
    return None


async def _operation_in_flight(client: Client, host_id: str) -> bool:
    """Whether the host's entity runs an operation (a provision that has not created DPF's DPUs
    yet): the request then goes to the entity, which refuses it naming that operation. One query,
    only on the way to a refusal; an entity that cannot answer leaves the refusal as it was."""
    try:
        return (await host_status(client, host_id)).current is not None
    except Exception:  # noqa: BLE001 - no entity, no worker: the inventory's refusal stands
        return False


def _fail(message: str, status: int) -> int:
    print(f"metalflow: {terminal_safe(message)}", file=sys.stderr)
    return status
