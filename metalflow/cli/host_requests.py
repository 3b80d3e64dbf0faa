"""`metalflow host provision|reprovision|reboot|firmware|remove|reset|assign|release HOST` and
`metalflow approve HOST`: the requests to a host's entity workflow (`host/<id>`).

One command per operation request of `contracts.host_requests` (its command word, help and
description are the row's; its options and the request they make are `COMMANDS` below): the request
goes to the host's entity, created by the first request for that host, which runs the operation
as a child workflow and refuses a second one while the first runs. `--wait` follows the operation
to its end and exits 0 only when it succeeded. A host with an instance waits for `approve`.

Before anything is sent, a request is checked against the inventory (`inventory_check`, through
`check_inventory`): an unknown host or a DPU not the host's is refused and no entity is created.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from temporalio.client import Client

from contracts import names
from contracts.host_requests import ENTITY_REQUESTS, RESET
from contracts.models.control import OperatorAnswer
from contracts.models.host import (
    APPROVE_UPDATE,
    ASSIGN_INSTANCE_UPDATE,
    RELEASE_INSTANCE_UPDATE,
    ApproveRequest,
    AssignInstanceRequest,
    AwaitingRequest,
    EntityRequestBody,
    FirmwareRequest,
    HostWorkflowInput,
    OperationAccepted,
    OperationPolicy,
    OperationRequest,
    RebootMethod,
    ResetRequest,
    ResetTarget,
)
from contracts.models.removal import HostRemovalInput
from contracts.validation import (
    REASON_MAX,
    DPUId,
    InstanceId,
    PowerDownWait,
    Reason,
    arg_type,
    check,
    safe,
    terminal_safe,
)
from metalflow.cli import exits
from metalflow.hosts import (
    COMPLETED,
    FAILED,
    FOLLOW_POLL_SECONDS,
    HostRequestError,
    Unanswered,
    follow_operation,
    host_status,
    native_power_cycles,
    power_down_wait_not_applied,
    recorded_status,
    require_worker,
    send_update,
)
from metalflow.progress import Progress
from metalflow.site_name import entity_input

Action = Callable[[Client, argparse.Namespace], Awaitable[int]]
Common = Callable[[argparse.ArgumentParser], None]
Runner = Callable[[Action], Callable[[argparse.Namespace], int]]
EXIT_OK, EXIT_FAILED = exits.OK, exits.FAILED
FORCE_AFTER_SECONDS = HostRemovalInput.model_fields["force_after_seconds"].default
IMAGE_SCHEMES = ("http", "https", "scp")  # what a DPU BMC's SimpleUpdate fetches from
_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z._+-]{0,63}")
MAX_DPUS = 16
WAIT_HELP = "follow the operation; exit 0 only on success"
POWER_DOWN_WAIT_HELP = (
    "seconds between power Off and On, 0 to 3600 (default: the host's policy, 120), on a BMC "
    "without PowerCycle; a BMC with a native PowerCycle keeps its own off time (--wait warns)"
)


def register_operations(commands: Any, common: Common, runner: Runner) -> None:
    """Add `host <command>` for every operation request, in the rows' order."""
    for kind in ENTITY_REQUESTS:
        parser = commands.add_parser(kind.command, help=kind.help, description=kind.description)
        common(parser)
        COMMANDS[kind.operation].options(parser)
        parser.add_argument(
            "--in-maintenance",
            action="store_true",
            help="run it although the host is in maintenance (`metalflow host maintenance`); "
            "recorded with the operation and in its Event",
        )
        parser.set_defaults(
            handler=runner(_request), update=kind.update, operation=kind.operation, check_inventory=True
        )


def register_instance(commands: Any, common: Common, runner: Runner) -> None:
    """Add `host assign` and `host release`."""
    for name, text in (("assign", "assign an instance to the host"), ("release", "release its instance")):
        parser = commands.add_parser(name, help=text, description=f"{text[0].upper()}{text[1:]}.")
        common(parser)
        parser.add_argument("instance", type=arg_type(InstanceId), help="the instance id")
        update = ASSIGN_INSTANCE_UPDATE if name == "assign" else RELEASE_INSTANCE_UPDATE
        parser.set_defaults(handler=runner(_instance), update=update, check_inventory=True)


def register_approve(subparsers: Any, common: Common, runner: Runner) -> None:
    """Add `approve`."""
    approve = subparsers.add_parser(
        "approve",
        help="approve the disruptive operation awaiting approval on a host",
        description="Approve the request awaiting approval on HOST (a host with an instance "
        "assigned); the operation starts at once.",
    )
    common(approve)
    reason_option(approve, "recorded with the approval")
    approve.add_argument(
        "--in-maintenance",
        action="store_true",
        help="start it although the host went into maintenance (`metalflow host maintenance`) after "
        "it was requested; recorded with the operation and in its Event",
    )
    approve.add_argument("--wait", action="store_true", help=WAIT_HELP)
    approve.set_defaults(handler=runner(_approve))


# -- each operation's options -----------------------------------------------------------------------


def _power_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--power-down-wait",
        type=arg_type(PowerDownWait, number=float),
        metavar="SECONDS",
        help=POWER_DOWN_WAIT_HELP,
    )
    parser.add_argument(
        "--manual-reboot",
        action="store_true",
        help="do not power-cycle: wait for `metalflow host-rebooted HOST` after each reboot request",
    )


def _provision_options(parser: argparse.ArgumentParser) -> None:
    _dpus_option(parser, "every DPU of the host")
    _reboot_options(parser)


def _reboot_options(parser: argparse.ArgumentParser) -> None:
    reason_option(parser, "why, recorded with the request")
    parser.add_argument("--wait", action="store_true", help=WAIT_HELP)
    _power_options(parser)


def _firmware_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--version", required=True, type=_firmware_version, help="the firmware version, e.g. 32.45.1020"
    )
    parser.add_argument(
        "--image",
        required=True,
        type=_image_uri,
        metavar="URI",
        help=f"the image the DPU BMCs fetch ({', '.join(IMAGE_SCHEMES)}; no credentials in it)",
    )
    _dpus_option(parser, "every DPU of the host")
    reason_option(parser, "why, recorded with the request")
    parser.add_argument("--wait", action="store_true", help=WAIT_HELP)


def _removal_options(parser: argparse.ArgumentParser) -> None:
    _dpus_option(parser, "the whole DPU node")
    parser.add_argument(
        "--force",
        action="store_true",
        help=f"when DPF has not finished deleting within {FORCE_AFTER_SECONDS:g} s (a finalizer nobody "
        "releases), delete again removing the finalizers",
    )
    reason_option(parser, "why, recorded with the request")
    parser.add_argument("--wait", action="store_true", help=WAIT_HELP)


def _reset_options(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--dpu", dest="dpus", type=_dpu_ids, metavar="A,B", help="these DPUs (comma-separated ids)"
    )
    which.add_argument("--all-dpus", action="store_true", help="every DPU of the host")
    which.add_argument(
        "--host", dest="host_only", action="store_true", help="the host only (its next boot generation)"
    )
    which.add_argument("--both", action="store_true", help="the host and every DPU (Arm and NIC)")
    parser.add_argument(
        "--full",
        action="store_true",
        help="with --dpu/--all-dpus: reset Arm and NIC (PowerCycle, the host off around it), "
        "not the Arm only",
    )
    parser.add_argument(
        "--power-down-wait",
        type=arg_type(PowerDownWait, number=float),
        metavar="SECONDS",
        help=f"with --host: {POWER_DOWN_WAIT_HELP}",
    )
    reason_option(parser, "why, recorded with the request")
    parser.add_argument("--wait", action="store_true", help=WAIT_HELP)


def _operation_request(args: argparse.Namespace) -> EntityRequestBody:
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
        in_maintenance=args.in_maintenance,
        site_check=tuple(getattr(args, "site_check", ())),
    )


def _firmware_request(args: argparse.Namespace) -> EntityRequestBody:
    return FirmwareRequest(
        requested_by=args.by,
        reason=args.reason,
        target_version=args.version,
        image_uri=args.image,
        dpu_ids=args.dpus,
        in_maintenance=args.in_maintenance,
        site_check=tuple(getattr(args, "site_check", ())),
    )


def _reset_request(args: argparse.Namespace) -> EntityRequestBody:
    target = (
        ResetTarget.HOST if args.host_only else ResetTarget.BOTH if args.both
        else ResetTarget.ALL_DPUS if args.all_dpus else ResetTarget.DPU
    )  # fmt: skip
    if args.full and target in (ResetTarget.HOST, ResetTarget.BOTH):
        raise HostRequestError(
            "--full applies to --dpu and --all-dpus (--both always resets Arm and NIC)", exits.USAGE
        )
    if args.power_down_wait is not None and target != ResetTarget.HOST:
        raise HostRequestError(
            "--power-down-wait applies to --host (the DPU resets keep the host off until its DPUs are up)",
            exits.USAGE,
        )
    return ResetRequest(
        requested_by=args.by,
        reason=args.reason,
        target=target,
        dpu_ids=args.dpus,
        full=args.full,
        in_maintenance=args.in_maintenance,
        policy=(
            None
            if args.power_down_wait is None
            else OperationPolicy(power_down_wait_seconds=args.power_down_wait)
        ),
        site_check=tuple(getattr(args, "site_check", ())),
    )


class Command(NamedTuple):
    """What a request's command adds to `metalflow host <command>`, and the request its arguments make."""

    options: Callable[[argparse.ArgumentParser], None]
    request: Callable[[argparse.Namespace], EntityRequestBody]


COMMANDS: dict[str, Command] = {
    names.PROVISION: Command(_provision_options, _operation_request),
    names.REPROVISION: Command(_provision_options, _operation_request),
    names.REBOOT: Command(_reboot_options, _operation_request),
    names.FIRMWARE: Command(_firmware_options, _firmware_request),
    names.REMOVE: Command(_removal_options, _operation_request),
    RESET.operation: Command(_reset_options, _reset_request),
}
"""Each operation request's command, by operation (tests/fast/test_host_requests.py: one each)."""


def reason_option(parser: argparse.ArgumentParser, text: str) -> None:
    parser.add_argument(
        "--reason", type=arg_type(Reason), default="", help=f"{text} (at most {REASON_MAX} characters)"
    )


def _dpus_option(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument(
        "--dpus",
        type=_dpu_ids,
        metavar="A,B",
        help=f"comma-separated DPU ids, e.g. host-001-dpu-0,host-001-dpu-1 (default: {default})",
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


# -- sending a request, following its operation -------------------------------------------------------


def _say(message: str) -> None:
    print(terminal_safe(message), flush=True)


def _entity(args: argparse.Namespace) -> HostWorkflowInput:
    return entity_input(args.host)  # its site named, as the site file names it


async def _request(client: Client, args: argparse.Namespace) -> int:
    request = COMMANDS[args.operation].request(args)
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
            with _following(args.host, accepted.workflow_id, awaiting_approval=True):
                never = await _await_start(client, args.host, accepted.workflow_id, progress)
            if never is not None:  # an operator's abort or withdrawal is asked for: no failure
                return exits.ABORTED if never.startswith(("aborted", "withdrawn")) else EXIT_FAILED
        with _following(args.host, accepted.workflow_id):
            ended = await _follow(client, args.host, accepted.workflow_id, progress)
        wait = getattr(args, "power_down_wait", None)
        if wait:  # a wait the BMC's own PowerCycle did not apply is said, not silently skipped
            native = await native_power_cycles(client, accepted.workflow_id, args.host)
            if native:
                progress.note(power_down_wait_not_applied(args.host, wait, native))
        return ended


@contextmanager
def _following(host: str, workflow_id: str, *, awaiting_approval: bool = False) -> Iterator[None]:
    """A `--wait` whose entity stops answering (its worker gone) after the request was accepted:
    exit 3 as for any workflow that does not answer, but never "Nothing was changed": the request
    stands, recorded by the entity, and sending it again is refused as busy (issue 38). The words
    name it, say that only the following stopped, and how to see it again."""
    try:
        yield
    except Unanswered as err:
        then = (
            f"it awaits approval: `metalflow approve {host} --wait` approves it and follows it"
            if awaiting_approval
            else f"`metalflow host status {host}` shows how it goes"
        )
        raise HostRequestError(
            f"{host}: the request was accepted ({workflow_id}) and stands; following it stopped: "
            f"{err.why}. Do not send it again: once a worker runs, {then}",
            status=exits.UNREACHABLE,
        ) from None


async def _await_start(client: Client, host: str, workflow_id: str, progress: Progress) -> str | None:
    """Wait until the approved operation starts (None), or how it ended without starting."""
    while True:
        status = await host_status(client, host)
        current = status.current
        if current is not None and current.workflow_id == workflow_id and current.outcome == "running":
            return None
        if current is None or current.workflow_id != workflow_id:
            ended = [r for r in status.recent if r.workflow_id == workflow_id]
            outcome = ended[-1].outcome if ended else "the request was dropped"
            progress.finish(host, outcome)
            return outcome
        await asyncio.sleep(FOLLOW_POLL_SECONDS)


async def _follow(client: Client, host: str, workflow_id: str, progress: Progress) -> int:
    ending, summary = await follow_operation(client, workflow_id, progress, host, host)
    # The entity learns of the end a moment later; until then it refuses the next request as busy,
    # so a script's `... --wait && metalflow host ...` would race it.
    await recorded_status(client, host, workflow_id)
    if ending == FAILED:
        progress.finish(host, f"{workflow_id} failed: {summary}")
        return EXIT_FAILED
    # An abort says "aborted by <who>: <reason>"; a cancel "cancelled in Temporal ..., not by an
    # operator's abort. Done: ..." (its own words): both stopped as asked, exit 4, not a failure.
    progress.finish(host, f"{workflow_id} {summary}")
    return EXIT_OK if ending == COMPLETED else exits.ABORTED


def approval_site_check(host: str, awaiting: AwaitingRequest | None) -> list[str]:
    """The kept site check's words on the request awaiting approval, judged now as its own
    command judged it (its operation, the DPUs it acts on, `--manual-reboot`): a blocked one
    raises `HostRequestError` (exit 1), nothing approved; a degraded one's words to say."""
    from metalflow.site_check import consult_words
    from metalflow.site_verdicts import capability_of

    if awaiting is None:  # nothing awaits: the entity says so
        return []
    capability = capability_of(
        awaiting.operation,
        host_only=awaiting.target == ResetTarget.HOST,
        both=awaiting.target == ResetTarget.BOTH,
        full=awaiting.full,
    )
    refuse, lines = consult_words(
        host, capability, dpus=awaiting.dpu_ids, manual_reboot=awaiting.manual_reboot
    )
    if refuse:
        raise HostRequestError(f"{host}: not approved: " + "; ".join(lines), EXIT_FAILED)
    return lines


async def _approve(client: Client, args: argparse.Namespace) -> int:
    # an unknown host is a clear error, not a new entity; the request awaiting approval is judged
    # by the kept site check again, as maintenance is by the entity (a check kept since may block it)
    status = await host_status(client, args.host)
    for line in approval_site_check(args.host, status.awaiting):
        print(f"metalflow approve: {line}", file=sys.stderr)
    request = ApproveRequest(requested_by=args.by, reason=args.reason, in_maintenance=args.in_maintenance)
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
    with Progress() as progress, _following(args.host, current.workflow_id):
        return await _follow(client, args.host, current.workflow_id, progress)


async def _instance(client: Client, args: argparse.Namespace) -> int:
    request = AssignInstanceRequest(instance=args.instance, requested_by=args.by)
    await require_worker(client, args.task_queue)
    answer = await send_update(client, _entity(args), args.update, request, OperatorAnswer, args.task_queue)
    _say(f"{args.host}: {answer.message}")
    return EXIT_OK
