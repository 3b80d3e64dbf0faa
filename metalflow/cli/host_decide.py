"""`metalflow host retry|abort|mark-rebooted HOST [--reason R] [--json]` and `metalflow
host-rebooted HOST [--json]`: the operator's answers (`--json`: one document, errors included).

A manual-intervention message asks for `retry`, `mark_rebooted` or `abort`; these commands send
exactly those updates (payload `OperatorRequest`: who and why) to the operation in flight on the
host, found through the host's entity (`host/<id>`, its `status` query). The workflow's own
validators decide whether the answer fits now (e.g. `retry` only in manual-intervention-required);
a refusal is printed as the workflow words it, and exits 1. `abort` of a request awaiting
approval (nothing started yet) sends the entity's `withdraw` of that request instead
(`what_abort_reaches`): every pending request can be withdrawn from here.
An operation that waits on its reboot (firmware) and has no `retry`, or refuses `abort` while its
power cycle runs, passes them to that reboot (`reboot/<host>/generation-<n>`, its status'
generation) when it runs (`abort_passes_to_reboot`: a firmware run's in any phase of the reboot,
which stops safely and ends the firmware run aborted too; another operation's while the reboot
waits for a person, e.g. with the host OFF). So `host abort` is taken in every phase where a
host operation waits (tests/fast/test_abort_every_phase.py).

`host-rebooted` sends the update `host_rebooted` (not the older signal, which cannot answer): the
operation's validator refuses it, naming what the operation waits for, unless a reboot is awaited.

Cost per command: one query of the entity, one update of the operation (two RPCs, a few history
events on the operation); no worker slot beyond the update's workflow task. `host-rebooted` to an
operation without the update (firmware, removal) adds a query and a describe, and answers through
its reboot in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from contracts import names
from contracts.host_entity import HostEntityClient
from contracts.models.control import ABORT_UPDATE, RETRY_UPDATE, OperatorAnswer, OperatorRequest
from contracts.models.host import (
    HOST_REBOOTED_UPDATE,
    MANUAL_INTERVENTION_REQUIRED,
    MARK_REBOOTED_UPDATE,
    RELEASE_AUTOMATION_UPDATE,
    WITHDRAW_UPDATE,
    OperationRecord,
    WithdrawRequest,
)
from contracts.validation import REASON_MAX, Reason, arg_type, terminal_safe
from contracts.with_start import NotAccepted, execute_update
from contracts.wording import HOST_ANSWER_COMMANDS
from metalflow.cli import exits
from metalflow.hosts import (
    ACCEPT_WITHIN,
    HostRequestError,
    host_status,
    not_taken,
    require_worker,
    send_update,
)
from metalflow.operation_progress import operation_progress, operation_status
from metalflow.site_name import entity_input
from workflows.host.abort_rule import (
    AWAITING_APPROVAL,
    STARTING,
    WAIT_FOR_START,
    WITHDRAW_REQUEST,
    what_abort_reaches,
)

Action = Callable[[Client, argparse.Namespace], Awaitable[int]]
STARTING_WAIT_SECONDS = 20.0  # an approved operation's child being started: waited for this long
PERSON_PHASES = (MANUAL_INTERVENTION_REQUIRED, "waiting-for-manual-reboot")  # a reboot waiting for a person


NOT_FOUND = "expected but not found"  # Temporal's words for an update the workflow has no handler of
ANSWER_COMMANDS = {
    **{kind: command.format(host="{host}") for kind, command in HOST_ANSWER_COMMANDS.items()},
    HOST_REBOOTED_UPDATE: "metalflow host-rebooted {host}",
}  # each operator update as the CLI's command


def refusal_words(workflow_id: str, operation: str, update: str, why: str, host: str) -> str:
    """An operation's refusal of `update` in words for an operator: Temporal's "no handler"
    (`why`: `Update handler for 'mark_rebooted' expected but not found ... known updates: [...]`)
    becomes which command it does not take and which of the CLI's answers it does; any other
    refusal is the workflow's own words."""
    if NOT_FOUND not in why:
        return f"{workflow_id} ({operation}) refused `{update}`: {why}"
    asked = ANSWER_COMMANDS.get(update, update).format(host=host)
    listed = why.rsplit("known updates: [", 1)
    known = listed[1].rstrip("]").split() if len(listed) == 2 else []
    takes = [f"`{ANSWER_COMMANDS[k].format(host=host)}`" for k in ANSWER_COMMANDS if k in known]
    also = f": it takes {', '.join(takes)} when it asks (`metalflow host status {host}`)" if takes else ""
    return f"{workflow_id} ({operation}) does not take `{asked}`{also}"


def abort_passes_to_reboot(operation: str, reboot_phase: str) -> bool:
    """Whether `host abort`, refused by the operation in flight, goes to the reboot it waits on
    (running, in `reboot_phase`): a firmware run's always (it refuses only while its power cycle
    runs, and says that reboot takes the abort); another's only while that reboot waits for a
    person (the operation's own abort stops its reboot otherwise)."""
    if operation == names.REBOOT:
        return False
    return operation == names.FIRMWARE or reboot_phase in PERSON_PHASES


EXIT_OK, EXIT_FAILED = exits.OK, exits.FAILED
DECISIONS = {
    "retry": (
        RETRY_UPDATE,
        "start the stuck wait over (in manual-intervention-required)",
        "Answer `retry` to the operation in flight on HOST: it starts the wait that escalated over, "
        "with its retries counted afresh; a host the operation turned off and could not power on "
        "(its status says the host is OFF) is powered on again. Accepted only while the operation "
        "waits for a person (manual-intervention-required, or a reboot's manual wait). On an idle host "
        "whose automation an operator held back (an abort of the monitor's request), it ends that hold: "
        "the monitor and campaigns may ask again.",
    ),
    "abort": (
        ABORT_UPDATE,
        "stop the operation in flight, or withdraw the request awaiting approval",
        "Answer `abort` to the operation in flight on HOST: it stops at its next safe point, cleans "
        "up (the DPF hold is released) and ends as aborted. Accepted at any time until it finishes. "
        "A request awaiting approval (nothing started yet, e.g. the monitor's reprovision of an "
        "assigned host) is withdrawn instead: the entity drops it, records who withdrew it and "
        "why, and the host is idle again.",
    ),
    "mark-rebooted": (
        MARK_REBOOTED_UPDATE,
        "confirm that the host was rebooted by hand",
        "Answer `mark_rebooted` to the operation in flight on HOST: the host was rebooted outside "
        "metalflow. Confirms a manual reboot in flight (reboot method manual, an unreachable BMC), "
        "or ends a reboot wait that escalated to manual-intervention-required.",
    ),
}


def register(
    commands: Any,
    common: Callable[[argparse.ArgumentParser], None],
    runner: Callable[[Action], Callable[[argparse.Namespace], int]],
) -> None:
    """Add `host retry`, `host abort` and `host mark-rebooted`."""
    for command, (update, text, description) in DECISIONS.items():
        parser = commands.add_parser(command, help=text, description=description)
        common(parser)
        parser.add_argument(
            "--reason",
            type=arg_type(Reason),
            default="",
            help=f"why, recorded with the answer (at most {REASON_MAX} characters)",
        )
        parser.add_argument(
            "--json",
            action="store_true",
            help="the answer as JSON: host_id, workflow_id (who answered), accepted, message",
        )
        parser.set_defaults(handler=runner(_decide), update=update)


def _said(args: argparse.Namespace, workflow_id: str, answer: OperatorAnswer, text: str) -> int:
    """The answer, in words (`text`), or with `--json` one document of the shape `host
    maintenance --json` prints: the host, the workflow that answered, whether it accepted, its words."""
    if getattr(args, "json", False):
        shown = {
            "host_id": args.host,
            "workflow_id": workflow_id,
            "accepted": answer.accepted,
            "message": answer.message,
        }
        print(json.dumps(shown, indent=2), flush=True)
    else:
        print(terminal_safe(text), flush=True)
    return EXIT_OK if answer.accepted else EXIT_FAILED


async def _in_flight(client: Client, args: argparse.Namespace) -> OperationRecord | None:
    """What the entity shows in flight. An entity ended by hand (`temporal workflow terminate`)
    answers with its last view, which is past: it is started again first, as every request does
    (it adopts the operation still running, records one that ended), and the operation is its
    only if it still runs. A request that awaited approval is its too: the new entity takes it over
    (its memo carries it) and its `withdraw` waits for that takeover before it decides (before: "no
    request awaits approval: nothing to abort", and a second abort withdrew it). Before that: the
    answer went to an operation already closed, or to the closed entity: Temporal's raw NOT_FOUND."""
    current = (await host_status(client, args.host)).current
    entities = HostEntityClient(client, args.task_queue)
    if await entities.running(args.host):
        return current
    await require_worker(client, args.task_queue)
    await entities.ensure(entity_input(args.host))
    if current is not None and current.outcome == "running" and await _runs(client, current.workflow_id):
        return current
    if current is not None and current.outcome == AWAITING_APPROVAL:
        return current
    return None


async def started(
    read: Callable[[], Awaitable[OperationRecord | None]],
    host: str,
    current: OperationRecord,
    *,
    wait_seconds: float = STARTING_WAIT_SECONDS,
    poll_seconds: float = 0.2,
) -> OperationRecord | None:
    """An approved operation whose child the entity is still starting (`STARTING`: one workflow
    task, longer on a loaded worker) is waited out, so an answer sent in that moment reaches the
    run (before: `host abort` said "nothing to abort (... is starting)" and the operation ran on).
    Returns the host's operation once it is no longer starting; still starting past
    `wait_seconds`: an error saying so (nothing sent).

    Cost: one status query (`read`) per `poll_seconds` of the wait, on this path only."""
    deadline = time.monotonic() + wait_seconds
    now: OperationRecord | None = current
    while now is not None and now.outcome == STARTING:
        if time.monotonic() > deadline:
            raise HostRequestError(
                f"{now.workflow_id} is still starting after {wait_seconds:g} s (its entity has not "
                f"started it): nothing was sent; see `metalflow host status {host}` and answer again"
            )
        await asyncio.sleep(poll_seconds)
        now = await read()
    return now


async def _decide(client: Client, args: argparse.Namespace) -> int:
    current = await _in_flight(client, args)
    if current is not None and what_abort_reaches(current) == WAIT_FOR_START:  # any answer waits for it

        async def now() -> OperationRecord | None:
            return (await host_status(client, args.host)).current

        current = await started(now, args.host, current)
    if args.update == ABORT_UPDATE:
        reaches = what_abort_reaches(current)
        if reaches is None:
            raise HostRequestError(
                f"no operation in flight on {args.host} and no request awaits approval: nothing to abort"
                + (f" ({current.workflow_id} is {current.outcome})" if current is not None else "")
            )
        if reaches == WITHDRAW_REQUEST:
            assert current is not None
            return await _withdraw(client, args, current)
    if args.update == RETRY_UPDATE and current is None:  # an idle host: automation held back?
        return await _release_automation(client, args)
    if current is None or current.outcome != "running":
        raise HostRequestError(f"no operation in flight on {args.host}: nothing to answer `{args.update}` to")
    await require_worker(client, args.task_queue)
    handle = client.get_workflow_handle(current.workflow_id)
    request = OperatorRequest(requested_by=args.by, reason=args.reason)
    target = current.workflow_id
    try:
        answer = await _sent(handle, args.update, request, args)
    except WorkflowUpdateFailedError as err:
        cause = err.cause
        why = cause.message if isinstance(cause, ApplicationError) else str(cause or err)
        reboot = None
        if args.update == RETRY_UPDATE and "not found" in why and RETRY_UPDATE in why:
            reboot = await _reboot_in_flight(client, args.host, current.workflow_id)
        elif args.update == ABORT_UPDATE and current.operation != names.REBOOT:
            # An operation that refuses abort while its power cycle runs (firmware): the reboot is
            # what can be stopped (safely: it powers the host back on, or says the host is OFF).
            reboot = await _reboot_in_flight(
                client, args.host, current.workflow_id, operation=current.operation
            )
        if reboot is None:
            raise HostRequestError(
                refusal_words(current.workflow_id, current.operation, args.update, why, args.host)
            ) from None
        # An operation without `retry` (firmware) waits on its reboot: that one waits for a person.
        target = reboot
        answer = await _answer(client, reboot, args.update, request, args)
    return _said(args, target, answer, f"{args.host}: {target}: {answer.message}")


async def _reboot_in_flight(
    client: Client, host: str, workflow_id: str, *, operation: str | None = None
) -> str | None:
    """The reboot an operation without the update waits on (its status' boot generation), if it
    runs (`operation`: an abort of that operation, and the reboot takes it: `abort_passes_to_reboot`)."""
    status = await operation_status(client, workflow_id) or {}
    reboot = names.host_reboot_workflow_id(host, int(status.get("boot_generation") or 0) or 1)
    if not await _runs(client, reboot):
        return None
    if operation is not None:
        seen = await operation_progress(client, reboot, host)
        if seen is None or not abort_passes_to_reboot(operation, seen.phase):
            return None
    return reboot


async def _sent(handle: Any, update: str, request: Any, args: argparse.Namespace) -> OperatorAnswer:
    """The operator's update, answered: a worker has `ACCEPT_WITHIN` to take it, else exit 3 saying
    it may still be applied once a worker comes back (`not_taken`), never a silent hang."""
    try:
        answer: OperatorAnswer = await execute_update(
            handle, update, request, result_type=OperatorAnswer, accept_within=ACCEPT_WITHIN
        )
    except NotAccepted as err:
        raise not_taken(args.host, handle.id, update, args.task_queue, err.seconds) from None
    return answer


async def _answer(
    client: Client, workflow_id: str, update: str, request: OperatorRequest, args: argparse.Namespace
) -> OperatorAnswer:
    try:
        answer = await _sent(client.get_workflow_handle(workflow_id), update, request, args)
    except WorkflowUpdateFailedError as err:
        cause = err.cause
        why = cause.message if isinstance(cause, ApplicationError) else str(cause or err)
        raise HostRequestError(f"{workflow_id} refused `{update}`: {why}") from None
    return answer


async def _release_automation(client: Client, args: argparse.Namespace) -> int:
    """`host retry` of an idle host: the entity's `release_automation`, which ends an operator's
    hold on automation (the monitor and campaigns may ask again); refused, naming why, when
    automation is not held back (nothing to retry). An entity ended by hand is started again, as
    every request does (update-with-start): the new one takes over its predecessor's record first."""
    await require_worker(client, args.task_queue)
    request = OperatorRequest(requested_by=args.by, reason=args.reason)
    entity = entity_input(args.host)
    answer = await send_update(
        client, entity, RELEASE_AUTOMATION_UPDATE, request, OperatorAnswer, args.task_queue
    )
    return _said(args, names.host_workflow_id(args.host), answer, f"{args.host}: {answer.message}")


async def _withdraw(client: Client, args: argparse.Namespace, current: OperationRecord) -> int:
    """`host abort` of a request awaiting approval: the entity's `withdraw` of exactly that one."""
    await require_worker(client, args.task_queue)
    handle = client.get_workflow_handle(names.host_workflow_id(args.host))
    request = WithdrawRequest(requested_by=args.by, reason=args.reason, workflow_id=current.workflow_id)
    try:
        answer = await _sent(handle, WITHDRAW_UPDATE, request, args)
    except WorkflowUpdateFailedError as err:
        cause = err.cause
        why = cause.message if isinstance(cause, ApplicationError) else str(cause or err)
        raise HostRequestError(f"{current.workflow_id} ({current.operation}) not withdrawn: {why}") from None
    asked = f"requested by {current.requested_by}" + (f": {current.reason}" if current.reason else "")
    text = f"{args.host}: {current.workflow_id} ({asked}) awaited approval: {answer.message}"
    return _said(args, current.workflow_id, answer, text)


async def host_rebooted(client: Client, args: argparse.Namespace) -> int:
    """The update `host_rebooted` to the operation in flight: its validator refuses it, naming what
    the operation waits for, unless a reboot is awaited. An operation without that update (firmware,
    removal) is answered by its reboot in flight, if any."""
    current = await _in_flight(client, args)
    if current is None or current.outcome != "running":
        raise HostRequestError(f"no operation in flight on {args.host}: nothing waits for a reboot")
    await require_worker(client, args.task_queue)
    request = OperatorRequest(requested_by=args.by, reason=args.reason)
    target = current.workflow_id
    try:
        answer = await _confirm_reboot(client, target, request, args)
    except _NoSuchUpdate:
        status = await operation_status(client, target) or {}
        target = names.host_reboot_workflow_id(args.host, int(status.get("boot_generation") or 0) or 1)
        if current.operation == names.REBOOT or not await _runs(client, target):
            what = f"{status.get('phase', '?')}: {status.get('waiting_for', '?')}"
            raise HostRequestError(
                f"{current.workflow_id} refused `host-rebooted`: it is not waiting for a reboot: it is {what}"
            ) from None
        answer = await _confirm_reboot(client, target, request, args)
    return _said(args, target, answer, f"{args.host}: {target}: {answer.message}")


class _NoSuchUpdate(Exception):
    """The workflow has no `host_rebooted` update (an operation that does not take it)."""


async def _confirm_reboot(
    client: Client, workflow_id: str, request: OperatorRequest, args: argparse.Namespace
) -> OperatorAnswer:
    handle = client.get_workflow_handle(workflow_id)
    try:
        answer = await _sent(handle, HOST_REBOOTED_UPDATE, request, args)
    except WorkflowUpdateFailedError as err:
        cause = err.cause
        why = cause.message if isinstance(cause, ApplicationError) else str(cause or err)
        if isinstance(cause, ApplicationError) and "not found" in why and HOST_REBOOTED_UPDATE in why:
            raise _NoSuchUpdate from None
        raise HostRequestError(f"{workflow_id} refused `host-rebooted`: {why}") from None
    return answer


async def _runs(client: Client, workflow_id: str) -> bool:
    try:
        described = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return described.status == WorkflowExecutionStatus.RUNNING
