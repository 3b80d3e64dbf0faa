"""`metalflow host ...`, `metalflow host-rebooted`, `metalflow approve`: operations on one host.

Every request (provision, reprovision, reboot, firmware, remove) goes to the host's entity
workflow (`host/<id>`), created by the first request for that host; the entity runs the
operation as a child workflow and refuses a second one while the first runs. `--wait` follows
the operation to its end and exits 0 only when it succeeded. `host monitor` (in `host_monitor`)
starts, shows and stops the host's monitor, which runs beside the operations.

Before anything is sent, a request is checked against the inventory (`inventory_check`): an
unknown host or a DPU not the host's is refused and no entity is created.

Exit statuses: 0 done (or accepted, without --wait), 1 refused or failed, 2 usage or Temporal
unreachable.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from temporalio.client import Client
from temporalio.service import RPCError

from contracts import names
from contracts.models.control import OperatorAnswer, OperatorRequest
from contracts.models.host import (
    APPROVE_UPDATE,
    ASSIGN_INSTANCE_UPDATE,
    RELEASE_INSTANCE_UPDATE,
    REQUEST_FIRMWARE_UPDATE,
    REQUEST_PROVISION_UPDATE,
    REQUEST_REBOOT_UPDATE,
    REQUEST_REMOVAL_UPDATE,
    REQUEST_REPROVISION_UPDATE,
    REQUEST_RESET_UPDATE,
    RESET_OPERATION,
    AssignInstanceRequest,
    FirmwareRequest,
    HostRemovalInput,
    HostStatus,
    HostWorkflowInput,
    OperationAccepted,
    OperationPolicy,
    OperationRequest,
    RebootMethod,
    ResetRequest,
    ResetTarget,
)
from contracts.models.monitor import HostMonitorStatus
from contracts.validation import (
    REASON_MAX,
    REQUESTER_MAX,
    DPUId,
    HostId,
    InstanceId,
    PowerDownWait,
    Reason,
    Requester,
    arg_type,
    check,
    safe,
    terminal_safe,
)
from contracts.wording import iso_z
from metalflow.cli import connection, host_decide, host_list, host_monitor, host_versions
from metalflow.cli.connection import connect_to
from metalflow.cli.inventory_check import (
    DPUsNotInDPF,
    InventoryRefusal,
    InventoryUnavailable,
    check_request,
    idle_dpu_warnings,
)
from metalflow.cli.workflow_commands import CommandError, ended_badly
from metalflow.client import TemporalConfigError, temporal_lost
from metalflow.hosts import (
    FOLLOW_POLL_SECONDS,
    HostRequestError,
    Seen,
    default_operator,
    describe_operation,
    follow_operation,
    host_status,
    operation_progress,
    operation_status,
    recorded_status,
    require_worker,
    send_update,
)
from metalflow.monitors import running_monitor_status
from metalflow.progress import Progress

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
REQUESTS = {
    names.PROVISION: (REQUEST_PROVISION_UPDATE, "register the host's DPUs with DPF and provision them"),
    names.REPROVISION: (REQUEST_REPROVISION_UPDATE, "reprovision the host's DPUs (delete, DPF recreates)"),
    names.REBOOT: (REQUEST_REBOOT_UPDATE, "reboot the host once (its next boot generation)"),
}
FORCE_AFTER_SECONDS = HostRemovalInput.model_fields["force_after_seconds"].default
IMAGE_SCHEMES = ("http", "https", "scp")  # what a DPU BMC's SimpleUpdate fetches from
_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z._+-]{0,63}")
MAX_DPUS = 16
WAIT_HELP = "follow the operation; exit 0 only on success"
FIRMWARE_TEXT = (
    "Stage DPU firmware VERSION (the image at URI) on the host's DPUs through their BMCs, then "
    "activate it with one host power cycle and verify every DPU runs it (workflow "
    "firmware/<id>). DPUs that already run or hold VERSION are not staged again; when every "
    "DPU runs it nothing is rebooted. A host with an instance waits for `metalflow approve`."
)
RESET_TEXT = (
    "Reset the host's DPUs, the host, or both, in the order the hardware needs (workflow "
    "reset/<id>). --dpu/--all-dpus: each DPU's Arm cores (ForceRestart through its own BMC; the "
    "host keeps running; a Paused DPU is recovered so), or with --full its Arm and NIC: the host "
    "is powered off, each DPU PowerCycled (a BlueField takes it only with the host off), brought "
    "back to its OS, then the host powered on. --host: one host power cycle. --both: --all-dpus "
    "--full. Refused while a DPU installs or another operation runs; a host with an instance "
    "waits for `metalflow approve`."
)
REMOVE_TEXT = (
    "Remove the host's DPUs from DPF (workflow remove/<id>). Without --dpus: the whole DPU "
    "node (DPUNode node-<host>; DPF deletes every DPU of it; the DPUDevices stay, the hardware is "
    "still in the host). With --dpus: only those DPUs (their DPUDevice and DPU objects); the "
    "others keep running. A delete cannot be taken back. A host with an instance waits for "
    "`metalflow approve`."
)


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
    for operation, (update, text) in REQUESTS.items():
        parser = commands.add_parser(operation, help=text, description=f"{text[0].upper()}{text[1:]}.")
        _common(parser)
        if operation != names.REBOOT:
            _dpus_option(parser, "every DPU of the host")
        _reason_option(parser, "why, recorded with the request")
        parser.add_argument("--wait", action="store_true", help=WAIT_HELP)
        parser.add_argument(
            "--power-down-wait",
            type=arg_type(PowerDownWait, number=float),
            metavar="SECONDS",
            help="seconds between power Off and On, 0 to 3600 (default: the host's policy, 120)",
        )
        parser.add_argument(
            "--manual-reboot",
            action="store_true",
            help="do not power-cycle: wait for `metalflow host-rebooted HOST` after each reboot request",
        )
        parser.set_defaults(
            handler=_runner(_request), update=update, operation=operation, check_inventory=True
        )

    firmware = commands.add_parser(
        "firmware", help="stage and activate DPU firmware (one power cycle)", description=FIRMWARE_TEXT
    )
    _common(firmware)
    firmware.add_argument(
        "--version", required=True, type=_firmware_version, help="the firmware version, e.g. 32.45.1020"
    )
    firmware.add_argument(
        "--image",
        required=True,
        type=_image_uri,
        metavar="URI",
        help=f"the image the DPU BMCs fetch ({', '.join(IMAGE_SCHEMES)}; no credentials in it)",
    )
    _dpus_option(firmware, "every DPU of the host")
    firmware.add_argument("--wait", action="store_true", help=WAIT_HELP)
    firmware.set_defaults(
        handler=_runner(_request),
        update=REQUEST_FIRMWARE_UPDATE,
        operation=names.FIRMWARE,
        check_inventory=True,
    )

    remove = commands.add_parser(
        "remove", help="remove DPUs, or the whole DPU node, from DPF", description=REMOVE_TEXT
    )
    _common(remove)
    _dpus_option(remove, "the whole DPU node")
    remove.add_argument(
        "--force",
        action="store_true",
        help=f"when DPF has not finished deleting within {FORCE_AFTER_SECONDS:g} s (a finalizer nobody "
        "releases), delete again removing the finalizers",
    )
    _reason_option(remove, "why, recorded with the request")
    remove.add_argument("--wait", action="store_true", help=WAIT_HELP)
    remove.set_defaults(
        handler=_runner(_request), update=REQUEST_REMOVAL_UPDATE, operation=names.REMOVE, check_inventory=True
    )

    reset = commands.add_parser(
        "reset", help="reset DPUs, the host, or both (a controlled reset sequence)", description=RESET_TEXT
    )
    _common(reset)
    which = reset.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--dpu", dest="dpus", type=_dpu_ids, metavar="A,B", help="these DPUs (comma-separated ids)"
    )
    which.add_argument("--all-dpus", action="store_true", help="every DPU of the host")
    which.add_argument(
        "--host", dest="host_only", action="store_true", help="the host only (its next boot generation)"
    )
    which.add_argument("--both", action="store_true", help="the host and every DPU (Arm and NIC)")
    reset.add_argument(
        "--full",
        action="store_true",
        help="with --dpu/--all-dpus: reset Arm and NIC (PowerCycle, the host off around it), "
        "not the Arm only",
    )
    _reason_option(reset, "why, recorded with the request")
    reset.add_argument("--wait", action="store_true", help=WAIT_HELP)
    reset.set_defaults(handler=_runner(_request), update=REQUEST_RESET_UPDATE, operation=RESET_OPERATION,
                       check_inventory=True)  # fmt: skip

    host_monitor.register(commands, _common, _runner)
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
    status.set_defaults(handler=_runner(_status))

    for name, text in (("assign", "assign an instance to the host"), ("release", "release its instance")):
        parser = commands.add_parser(name, help=text, description=f"{text[0].upper()}{text[1:]}.")
        _common(parser)
        parser.add_argument("instance", type=arg_type(InstanceId), help="the instance id")
        update = ASSIGN_INSTANCE_UPDATE if name == "assign" else RELEASE_INSTANCE_UPDATE
        parser.set_defaults(handler=_runner(_instance), update=update, check_inventory=True)

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
    _reason_option(rebooted, "recorded with the confirmation")
    rebooted.set_defaults(handler=_runner(host_decide.host_rebooted))

    approve = subparsers.add_parser(
        "approve",
        help="approve the disruptive operation awaiting approval on a host",
        description="Approve the request awaiting approval on HOST (a host with an instance "
        "assigned); the operation starts at once.",
    )
    _common(approve)
    _reason_option(approve, "recorded with the approval")
    approve.add_argument("--wait", action="store_true", help=WAIT_HELP)
    approve.set_defaults(handler=_runner(_approve))


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


def _dpus_option(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument(
        "--dpus",
        type=_dpu_ids,
        metavar="A,B",
        help=f"comma-separated DPU ids, e.g. host-001-dpu-0,host-001-dpu-1 (default: {default})",
    )


def _reason_option(parser: argparse.ArgumentParser, text: str) -> None:
    parser.add_argument(
        "--reason", type=arg_type(Reason), default="", help=f"{text} (at most {REASON_MAX} characters)"
    )


def _dpu_ids(text: str) -> tuple[str, ...]:
    ids = [part.strip() for part in text.split(",")]
    bad = [part for part in ids if not _valid(DPUId, part)]
    if bad or len(ids) > MAX_DPUS:
        raise argparse.ArgumentTypeError(
            f"invalid DPU list {safe(text, 40)}: give at most {MAX_DPUS} DPU ids separated by commas, "
            "e.g. host-001-dpu-0,host-001-dpu-1"
        )
    return tuple(dict.fromkeys(ids))


def _valid(kind: Any, value: str) -> bool:
    try:
        check(kind, value)
    except ValueError:
        return False
    return True


def _firmware_version(text: str) -> str:
    if not _VERSION.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"invalid firmware version {safe(text, 40)}: use letters, digits, '.', '_', '+' or '-' "
            "(at most 64), e.g. 32.45.1020"
        )
    return text


def _image_uri(text: str) -> str:
    example = "e.g. https://firmware.example.com/bf-fw-32.45.1020.bfb"
    try:
        parts = urlsplit(text)
        credentials = parts.username is not None or parts.password is not None
        usable = (
            parts.scheme.lower() in IMAGE_SCHEMES
            and bool(parts.hostname)
            and parts.path.strip("/") != ""
            and not any(c.isspace() for c in text)
        )
        _ = parts.port  # raises ValueError on a malformed port
    except ValueError:
        credentials, usable = False, False
    if credentials:
        # Never echo it: the URI holds a secret, and a workflow input would record it for good.
        raise argparse.ArgumentTypeError(
            "the image URI carries credentials; they would be recorded in the workflow history: "
            "serve the image without them (the BMC's own transfer settings hold any secret)"
        )
    if not usable:
        raise argparse.ArgumentTypeError(
            f"invalid image URI {safe(text, 60)}: give the URL of the image file (http, https or scp), "
            f"{example}"
        )
    return text


def _runner(
    action: Callable[[Client, argparse.Namespace], Awaitable[int]],
) -> Callable[[argparse.Namespace], int]:
    def handle(args: argparse.Namespace) -> int:
        try:
            status = asyncio.run(_connected(action, args))
        except KeyboardInterrupt:  # Ctrl-C while waiting: the operation goes on in Temporal
            status = _fail("interrupted; the workflows go on (metalflow host status HOST)", EXIT_INTERRUPTED)
        connection.flush_tracing()
        sys.stdout.flush()
        sys.stderr.flush()
        # The SDK's native runtime can abort during interpreter teardown (PyGILState_Release), as
        # the worker notes; the command is done here, so skip the teardown and keep its status.
        os._exit(status)

    handle.talks_to_temporal = True  # type: ignore[attr-defined]  # gets --address, --namespace
    return handle


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
        except InventoryRefusal as err:
            return _fail(str(err), EXIT_FAILED)
        except InventoryUnavailable as err:
            return _fail(str(err), EXIT_USAGE)
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
        return _fail(
            f"cannot reach Temporal at {address} ({type(err).__name__}); start it with `metalflow dev`, "
            "or give --address (or set TEMPORAL_ADDRESS or TEMPORAL_CONFIG_FILE) for your cluster",
            EXIT_USAGE,
        )
    if not_in_dpf is not None and not await _operation_in_flight(client, args.host):
        return _fail(str(not_in_dpf), EXIT_FAILED)
    try:
        return await action(client, args)
    except HostRequestError as err:
        return _fail(str(err), EXIT_FAILED)
    except RPCError as err:
        reason = f"{err.status.name if err.status else '?'}: {err.message}".splitlines()[0]
        if temporal_lost(err):  # Temporal went away: like "cannot reach Temporal", the environment's
            return _fail(f"lost Temporal at {address} ({reason})", EXIT_USAGE)
        return _fail(f"Temporal refused the request ({reason})", EXIT_FAILED)
    except Exception as err:  # one line, never a traceback: the command's user cannot act on one
        return _fail(f"failed: {type(err).__name__}: {err}".splitlines()[0], EXIT_FAILED)


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


def _say(message: str) -> None:
    print(terminal_safe(message), flush=True)


def _entity(args: argparse.Namespace) -> HostWorkflowInput:
    return HostWorkflowInput(host_id=args.host)


def _operation_request(args: argparse.Namespace) -> OperationRequest | FirmwareRequest | ResetRequest:
    if args.operation == RESET_OPERATION:
        target = (
            ResetTarget.HOST if args.host_only else ResetTarget.BOTH if args.both
            else ResetTarget.ALL_DPUS if args.all_dpus else ResetTarget.DPU
        )  # fmt: skip
        if args.full and target in (ResetTarget.HOST, ResetTarget.BOTH):
            raise HostRequestError(
                "--full applies to --dpu and --all-dpus (--both always resets Arm and NIC)"
            )
        return ResetRequest(
            requested_by=args.by, reason=args.reason, target=target, dpu_ids=args.dpus, full=args.full
        )
    if args.operation == names.FIRMWARE:
        return FirmwareRequest(
            requested_by=args.by, target_version=args.version, image_uri=args.image, dpu_ids=args.dpus
        )
    changes: dict[str, Any] = {}
    if getattr(args, "power_down_wait", None) is not None:
        changes["power_down_wait_seconds"] = args.power_down_wait
    if getattr(args, "manual_reboot", False):
        changes["reboot_method"] = RebootMethod.MANUAL
    return OperationRequest(
        requested_by=args.by,
        reason=args.reason,
        dpu_ids=getattr(args, "dpus", None),
        force=getattr(args, "force", False),
        policy=OperationPolicy(**changes) if changes else None,
    )


async def _request(client: Client, args: argparse.Namespace) -> int:
    request = _operation_request(args)
    await require_worker(client, args.task_queue)
    accepted = await send_update(
        client, _entity(args), args.update, request, OperationAccepted, args.task_queue
    )
    if not args.wait:
        _say(f"{args.host}: {accepted.message}")
        return EXIT_OK
    with Progress() as progress:
        progress.note(f"{args.host}: {accepted.message}")
        if getattr(args, "manual_reboot", False):
            progress.note(
                f"{args.host}: manual reboot: after each reboot request, reboot {args.host} by hand and "
                f"run `metalflow host-rebooted {args.host}`"
            )
        if accepted.awaiting_approval:
            progress.step(args.host, "awaiting approval", waiting_for=f"`metalflow approve {args.host}`")
            if not await _await_start(client, args.host, accepted.workflow_id, progress):
                return EXIT_FAILED
        return await _follow(client, args.host, accepted.workflow_id, progress)


async def _await_start(client: Client, host: str, workflow_id: str, progress: Progress) -> bool:
    while True:
        status = await host_status(client, host)
        current = status.current
        if current is not None and current.workflow_id == workflow_id and current.outcome == "running":
            return True
        if current is None or current.workflow_id != workflow_id:
            ended = [r for r in status.recent if r.workflow_id == workflow_id]
            progress.finish(host, ended[-1].outcome if ended else "the request was dropped")
            return False
        await asyncio.sleep(FOLLOW_POLL_SECONDS)


async def _follow(client: Client, host: str, workflow_id: str, progress: Progress) -> int:
    ok, summary = await follow_operation(client, workflow_id, progress, host, host)
    # The entity learns of the end a moment later; until then it refuses the next request as busy,
    # so a script's `... --wait && metalflow host ...` would race it.
    await recorded_status(client, host, workflow_id)
    progress.finish(host, f"{workflow_id} {summary}" if ok else f"{workflow_id} failed: {summary}")
    return EXIT_OK if ok else EXIT_FAILED


async def _approve(client: Client, args: argparse.Namespace) -> int:
    await host_status(client, args.host)  # an unknown host is a clear error, not a new entity
    request = OperatorRequest(requested_by=args.by, reason=args.reason)
    await require_worker(client, args.task_queue)
    answer = await send_update(
        client, _entity(args), APPROVE_UPDATE, request, OperatorAnswer, args.task_queue
    )
    _say(f"{args.host}: {answer.message}")
    if not args.wait:
        return EXIT_OK
    current = (await host_status(client, args.host)).current
    if current is None:
        return EXIT_FAILED
    with Progress() as progress:
        return await _follow(client, args.host, current.workflow_id, progress)


async def _instance(client: Client, args: argparse.Namespace) -> int:
    request = AssignInstanceRequest(instance=args.instance, requested_by=args.by)
    await require_worker(client, args.task_queue)
    answer = await send_update(client, _entity(args), args.update, request, OperatorAnswer, args.task_queue)
    _say(f"{args.host}: {answer.message}")
    return EXIT_OK


async def _status(client: Client, args: argparse.Namespace) -> int:
    # Status is the truth: an entity that failed or was terminated is said so (exit 1), not
    # shown as the idle host its last state would describe.
    try:
        ended = await ended_badly(client, names.host_workflow_id(args.host), "host entity")
    except CommandError:
        ended = None  # no entity at all: `host_status` says so, naming the host
    if ended is not None:
        return _fail(f"{ended}; its next request starts a new entity", EXIT_FAILED)
    status = await host_status(client, args.host)
    operation, seen = None, None
    if status.current is not None and status.current.outcome == "running":
        operation = await operation_status(client, status.current.workflow_id)
        if operation is None:  # a reboot has no status query: its Phase and details say where it is
            seen = await operation_progress(client, status.current.workflow_id, args.host)
    monitor = await running_monitor_status(client, args.host)
    # An idle entity says nothing of DPUs an ended operation left waiting (an abort before the
    # power cycle leaves DPF waiting for a reboot): DPF is asked, and what needs a person is said.
    idle = status.current is None or status.current.outcome != "running"
    warnings = await idle_dpu_warnings(args.host) if idle else []
    if args.json:
        shown = {
            "host": status.model_dump(mode="json"),
            "operation": operation
            if seen is None
            else {"phase": seen.phase, "waiting_for": seen.waiting_for, "details": seen.details},
            "monitor": None if monitor is None else monitor.model_dump(mode="json"),
            "warnings": warnings,
        }
        print(json.dumps(shown, indent=2))
        return EXIT_OK
    _say(render_status(status, operation, monitor, seen))
    for warning in warnings:
        _say(f"  WARNING          {warning}")
    return EXIT_OK


def render_status(
    status: HostStatus,
    operation: dict[str, Any] | None,
    monitor: HostMonitorStatus | None = None,
    seen: Seen | None = None,
) -> str:
    """The host, its operation in flight and its monitor's pool state, for a person."""
    lines = [
        f"host {status.host_id} (site {status.site}): {status.phase}",
        f"  instance         {status.instance or 'none'}",
        f"  boot generation  {status.boot_generation}",
    ]
    if status.auto_approved_until is not None:
        lines.append(f"  auto-approved until {iso_z(status.auto_approved_until)}")
    if monitor is not None:
        lines.append(f"  monitor          {host_monitor.pool_line(monitor)}")
    current = status.current
    if current is not None:
        lines.append(f"  operation        {current.operation} ({current.workflow_id}): {current.outcome}")
        lines.append(
            f"    requested by   {current.requested_by}" + (f" ({current.reason})" if current.reason else "")
        )
        if current.approved_by:
            lines.append(f"    approved by    {current.approved_by}")
    if seen is not None:
        lines.append(f"    now            {seen.text}")
        if seen.waiting_for:
            lines.append(f"    waiting for    {seen.waiting_for}")
    if operation is not None:
        lines.append(f"    now            {describe_operation(operation)}")
        for dpu in operation.get("dpus") or []:
            phase = dpu.get("phase") or "-"
            since = _parsed(dpu.get("since"))
            lines.append(f"    {dpu.get('dpu_id', '?'):<22} {phase:<24} since {iso_z(since, none='?')}")
        for key in ("reboots_requested", "power_cycles_issued", "reboot_attempts"):
            if key in operation:
                lines.append(f"    {key.replace('_', ' '):<22} {operation[key]}")
    if status.recent:
        lines.append("  recent")
        for record in status.recent[-5:]:
            when = iso_z(record.finished_at, none="")
            lines.append(f"    {when}  {record.operation:<12} {record.outcome}  by {record.requested_by}")
    return "\n".join(lines)


def _parsed(value: Any) -> datetime | None:
    """A timestamp from a query answered as plain JSON (an ISO string), or None."""
    if isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return None
