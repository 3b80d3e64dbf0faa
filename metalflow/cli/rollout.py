"""`metalflow rollout ...`: coherent rollouts of Grove PodCliqueSets (workflow `RolloutWorkflow`).

`start` starts `rollout/<namespace>/<pcs>`; a second start of the same PodCliqueSet is refused
naming the rollout in flight, unless `--supersede` (then the new images take over after the
current step). `status` shows the status query (a live progress bar on a terminal, `--json` for
scripts); `pause`, `resume`, `abort`, `rollback` and `scale` are updates whose validators refuse
what does not apply now, with the reason.

Exit statuses: 0 done (`--wait`: completed), 1 refused, failed, rolled back or aborted, 2 usage,
bad input that changed nothing, or Temporal unreachable.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from metalflow import names
from metalflow.client import connect, temporal_lost
from metalflow.hosts import default_operator
from metalflow.models.grove import (
    ABORT_UPDATE,
    PAUSE_UPDATE,
    RESUME_UPDATE,
    ROLLBACK_UPDATE,
    SCALE_UPDATE,
    STATUS_QUERY,
    SUPERSEDE_UPDATE,
    PCSRef,
    RolloutAnswer,
    RolloutInput,
    RolloutPolicy,
    RolloutRequest,
    RolloutResult,
    RolloutStatus,
    ScaleRequest,
    SupersedeRequest,
    image_problem,
)
from metalflow.progress import Progress
from metalflow.rollouts import render, root_cause
from metalflow.validation import Reason, Requester, arg_type

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
FOLLOW_SECONDS = 0.5
START_CHECK_SECONDS = 60.0  # how long `start` waits to see the images accepted or refused
UPDATES = {
    "pause": (PAUSE_UPDATE, "stop after the current step"),
    "resume": (RESUME_UPDATE, "go on after a pause (recreates PodGangs that are not Available)"),
    "abort": (ABORT_UPDATE, "stop now; PodGangs stay as they are, each of one version"),
    "rollback": (ROLLBACK_UPDATE, "restore the previous template and roll back coherently"),
}


class RolloutError(Exception):
    def __init__(self, message: str, status: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.status = status


def register(subparsers: Any) -> None:
    """Add `rollout` and its commands."""
    rollout = subparsers.add_parser(
        "rollout",
        help="roll a Grove PodCliqueSet to new images, coherently",
        description="Coherent rollouts (GREP-393) of Grove PodCliqueSets on updateStrategy OnDelete: "
        "per replica its minimum-viable PodGangs one at a time, then its tail PodGangs; never two "
        "versions inside one PodGang.",
    )
    commands = rollout.add_subparsers(title="rollout commands", metavar="COMMAND")
    start = commands.add_parser("start", help="start a rollout", description="Start a rollout.")
    _target(start)
    start.add_argument(
        "--set",
        dest="images",
        action="append",
        type=_image_setting,
        required=True,
        metavar="CLIQUE=IMAGE",
        help="new image of a clique (repeat for several)",
    )
    start.add_argument("--wait", action="store_true", help="follow it; exit 0 only when it completed")
    start.add_argument(
        "--supersede",
        action="store_true",
        help="if a rollout of this PodCliqueSet is in flight, take over after its current step",
    )
    start.add_argument("--concurrency", type=int, default=1, help="replicas rolled at once (default 1)")
    start.add_argument(
        "--condition",
        choices=("Available", "Ready"),
        default="Available",
        help="the PodGang condition a step waits for (default Available)",
    )
    start.add_argument(
        "--step-deadline",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="a step not done by then pauses the rollout (default 600)",
    )
    start.add_argument("--reason", type=arg_type(Reason), default="", help="why, recorded with the request")
    start.set_defaults(handler=_runner(_start))

    status = commands.add_parser("status", help="show a rollout's progress", description="Show progress.")
    _target(status)
    status.add_argument("--json", action="store_true", help="the status query as JSON")
    status.set_defaults(handler=_runner(_status))

    for command, (update, text) in UPDATES.items():
        parser = commands.add_parser(command, help=text, description=f"{text[0].upper()}{text[1:]}.")
        _target(parser)
        parser.add_argument(
            "--reason", type=arg_type(Reason), default="", help="why, recorded with the request"
        )
        parser.set_defaults(handler=_runner(_update), update=update)

    scale = commands.add_parser(
        "scale",
        help="change the replicas between steps of the rollout in flight",
        description="Change the PodCliqueSet's replicas; the rollout in flight applies it between steps.",
    )
    _target(scale)
    scale.add_argument("--replicas", type=int, required=True, help="the new number of replicas")
    scale.set_defaults(handler=_runner(_scale))


def _target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "pcs", metavar="NAMESPACE/PCS", type=_pcs_ref, help="the PodCliqueSet, e.g. default/inference"
    )
    parser.add_argument(
        "--by", type=arg_type(Requester), default=default_operator(), help="who asks (default: %(default)s)"
    )
    parser.add_argument(
        "--task-queue", default=names.TASK_QUEUE, help="worker task queue (default: %(default)s)"
    )


def _pcs_ref(text: str) -> PCSRef:
    namespace, _, name = text.partition("/")
    try:
        names.rollout_workflow_id(namespace, name)
    except ValueError as err:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give NAMESPACE/PCS, e.g. default/inference ({err})"
        ) from None
    return PCSRef(namespace=namespace, name=name)


def _image_setting(text: str) -> tuple[str, str]:
    clique, sep, image = text.partition("=")
    if not sep or not clique:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give CLIQUE=IMAGE, e.g. router=registry.local/router:2.0"
        )
    if (problem := image_problem(image)) is not None:
        raise argparse.ArgumentTypeError(f"clique {clique}: {problem}")
    return clique, image


def _runner(
    action: Callable[[Client, argparse.Namespace], Awaitable[int]],
) -> Callable[[argparse.Namespace], int]:
    def handle(args: argparse.Namespace) -> int:
        status = asyncio.run(_connected(action, args))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)  # skip the SDK runtime's teardown, as `metalflow host` does

    return handle


async def _connected(
    action: Callable[[Client, argparse.Namespace], Awaitable[int]], args: argparse.Namespace
) -> int:
    try:
        client = await connect()
    except Exception as err:
        return _fail(
            f"cannot reach Temporal ({type(err).__name__}); start it with `metalflow dev`, "
            "or set TEMPORAL_ADDRESS",
            EXIT_USAGE,
        )
    try:
        return await action(client, args)
    except RolloutError as err:
        return _fail(str(err), err.status)
    except RPCError as err:  # one line, never a traceback; Temporal gone is the environment's (2)
        reason = f"{err.status.name if err.status else '?'}: {err.message}".splitlines()[0]
        if temporal_lost(err):
            address = client.service_client.config.target_host
            return _fail(f"lost Temporal at {address} ({reason})", EXIT_USAGE)
        return _fail(f"Temporal refused the request ({reason})", 1)
    except Exception as err:
        return _fail(f"failed: {type(err).__name__}: {err}".splitlines()[0], 1)


def _fail(message: str, status: int) -> int:
    print(f"metalflow: {message}", file=sys.stderr)
    return status


def _handle(client: Client, pcs: PCSRef) -> WorkflowHandle[Any, RolloutResult]:
    return client.get_workflow_handle(
        names.rollout_workflow_id(pcs.namespace, pcs.name), result_type=RolloutResult
    )


async def _start(client: Client, args: argparse.Namespace) -> int:
    pcs: PCSRef = args.pcs
    images = dict(args.images)
    request = RolloutInput(
        pcs=pcs,
        images=images,
        requested_by=args.by,
        reason=args.reason,
        policy=RolloutPolicy(
            replica_concurrency=args.concurrency,
            condition=args.condition,
            step_deadline_seconds=args.step_deadline,
        ),
    )
    workflow_id = names.rollout_workflow_id(pcs.namespace, pcs.name)
    summary = ", ".join(f"{c}={i}" for c, i in images.items())
    try:
        handle = await client.start_workflow(
            "RolloutWorkflow",
            request,
            id=workflow_id,
            task_queue=args.task_queue,
            result_type=RolloutResult,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            static_summary=f"roll {pcs} to {summary} for {args.by}",
            search_attributes=TypedSearchAttributes([SearchAttributePair(names.OPERATION, names.ROLLOUT)]),
        )
    except WorkflowAlreadyStartedError as err:
        if not args.supersede:
            raise RolloutError(
                f"a rollout of {pcs} is already in flight: workflow {workflow_id} (run {err.run_id}); "
                "wait for it, `metalflow rollout abort`, or start again with --supersede"
            ) from None
        answer = await _send(
            _handle(client, pcs), SUPERSEDE_UPDATE, SupersedeRequest(requested_by=args.by, images=images)
        )
        print(f"{workflow_id}: {answer.message}")
        return await _follow(_handle(client, pcs)) if args.wait else EXIT_OK
    status = await _until_started(handle)
    print(f"rollout {workflow_id} started: target {status.target_hash} (from {status.previous_hash})")
    return await _follow(handle) if args.wait else EXIT_OK


async def _until_started(handle: WorkflowHandle[Any, RolloutResult]) -> RolloutStatus:
    """Wait until the images are written (phase past `preparing`) or refused (the run failed)."""
    deadline = time.monotonic() + START_CHECK_SECONDS
    while True:
        described = await handle.describe()
        if described.status == WorkflowExecutionStatus.FAILED:
            try:
                await handle.result()
            except WorkflowFailureError as err:
                raise RolloutError(
                    f"rollout refused, nothing changed: {root_cause(err)}", EXIT_USAGE
                ) from None
        status = await _query(handle)
        if status.phase != "preparing" or time.monotonic() > deadline:
            return status
        await asyncio.sleep(FOLLOW_SECONDS)


async def _query(handle: WorkflowHandle[Any, Any]) -> RolloutStatus:
    try:
        result: RolloutStatus = await handle.query(STATUS_QUERY, result_type=RolloutStatus)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise RolloutError(f"no rollout {handle.id}") from None
        raise
    return result


async def _follow(handle: WorkflowHandle[Any, RolloutResult]) -> int:
    with Progress() as progress:  # a live status region on a terminal, stamped lines otherwise
        await _show_progress(handle, progress)
    return await _outcome(handle)


async def _show_progress(handle: WorkflowHandle[Any, RolloutResult], progress: Progress) -> None:
    last = ""
    while True:
        described = await handle.describe()
        if described.status != WorkflowExecutionStatus.RUNNING:
            progress.waiting(handle.id, "")
            return
        status = await _query(handle)
        line = render(status)
        if status.paused_reason:
            waiting = f"`metalflow rollout resume|rollback|abort {status.pcs}` ({status.paused_reason})"
        elif status.in_flight:
            waiting = f"{', '.join(status.in_flight)} back at the new version"
        else:
            waiting = ""
        if line != last:
            progress.step(handle.id, line, waiting_for=waiting)
            last = line
        else:
            progress.waiting(handle.id, waiting)
        await asyncio.sleep(FOLLOW_SECONDS)


async def _outcome(handle: WorkflowHandle[Any, RolloutResult]) -> int:
    try:
        result = await handle.result()
    except WorkflowFailureError as err:
        raise RolloutError(f"rollout {handle.id} failed: {root_cause(err)}") from None
    steps = "; ".join(
        f"{'+'.join(s.podgangs)} {s.seconds:.1f}s" for s in result.steps if s.seconds is not None
    )
    print(f"rollout {handle.id} {result.outcome}: every PodGang at {result.target_hash} ({steps})")
    return EXIT_OK if result.outcome == "completed" else EXIT_FAILED


async def _status(client: Client, args: argparse.Namespace) -> int:
    handle = _handle(client, args.pcs)
    status = await _query(handle)
    if args.json:
        print(status.model_dump_json(indent=2))
        return EXIT_OK
    if not sys.stdout.isatty():
        print(render(status))
        for step in status.steps:
            took = f"{step.seconds:.1f}s" if step.seconds is not None else "unfinished"
            print(f"  replica {step.replica}: {', '.join(step.podgangs)} -> {step.target_hash} {took}")
        return EXIT_OK
    while True:  # a live bar until the rollout ends (Ctrl-C leaves it running)
        print("\r\033[K" + render(status), end="", flush=True)
        if status.phase in ("completed", "rolled-back", "aborted"):
            print()
            return EXIT_OK
        described = await handle.describe()
        if described.status != WorkflowExecutionStatus.RUNNING:
            print()
            return EXIT_OK
        await asyncio.sleep(FOLLOW_SECONDS)
        status = await _query(handle)


async def _send(handle: WorkflowHandle[Any, Any], update: str, request: Any) -> RolloutAnswer:
    try:
        answer: RolloutAnswer = await handle.execute_update(update, request, result_type=RolloutAnswer)
    except WorkflowUpdateFailedError as err:
        raise RolloutError(f"{update} refused: {root_cause(err)}") from None
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise RolloutError(f"no rollout {handle.id} in flight") from None
        if temporal_lost(err):
            raise
        raise RolloutError(f"{update} refused: {err.message}") from None
    return answer


async def _update(client: Client, args: argparse.Namespace) -> int:
    answer = await _send(
        _handle(client, args.pcs), args.update, RolloutRequest(requested_by=args.by, reason=args.reason)
    )
    print(answer.message)
    return EXIT_OK


async def _scale(client: Client, args: argparse.Namespace) -> int:
    if args.replicas < 0:
        return _fail("--replicas must be 0 or more", EXIT_USAGE)
    answer = await _send(
        _handle(client, args.pcs), SCALE_UPDATE, ScaleRequest(requested_by=args.by, replicas=args.replicas)
    )
    print(answer.message)
    return EXIT_OK
