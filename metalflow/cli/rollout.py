"""`metalflow rollout ...`: coherent rollouts of Grove PodCliqueSets (workflow `RolloutWorkflow`).

`start` starts `rollout/<namespace>/<pcs>`; a second start of the same PodCliqueSet is refused
naming the rollout in flight, unless `--supersede` (then the new images take over after the
current step). `status` shows the status query (a live progress bar on a terminal, `--json` for
scripts); `pause`, `resume`, `abort`, `rollback` and `scale` are updates whose validators refuse
what does not apply now, with the reason.

Exit statuses (`metalflow.cli.exits`, README's table): 0 done (`--wait`: completed); 1 failed
or rolled back, or refused by what runs or is set up now (`refusal_status`: a rollout in flight,
not OnDelete, a dormant edit, an outage not allowed); 2 usage, or bad input or an unknown object
(no such PodCliqueSet, clique, container or rollout, a bad image), nothing changed; 3 Temporal or
the cluster unreachable; 4 aborted by an operator (`aborted by <who>: <reason>`). `status` of a
run that did not complete (failed, aborted, terminated, timed out) shows what it last showed,
says how it ended, exit 1 (4 for an abort).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from contracts import names, workflow_api
from contracts.errors import abort_in_words, abort_words
from contracts.models.control import (
    ABORT_UPDATE,
    PAUSE_UPDATE,
    RESUME_UPDATE,
    STATUS_QUERY,
    OperatorAnswer,
    OperatorRequest,
)
from contracts.models.grove import (
    ROLLBACK_UPDATE,
    SCALE_UPDATE,
    SUPERSEDE_UPDATE,
    PCSRef,
    RolloutInput,
    RolloutPolicy,
    RolloutResult,
    RolloutStatus,
    ScaleRequest,
    SupersedeRequest,
    image_problem,
)
from contracts.validation import Reason, Requester, arg_type
from drivers.kube import Kube
from drivers.settings import Settings
from metalflow.cli import exits, workflow_commands
from metalflow.cli.workflow_commands import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    FOLLOW_SECONDS,
    CommandError,
    fail,
    runner,
    until_past,
)
from metalflow.hosts import default_operator
from metalflow.progress import Progress
from metalflow.rollouts import plan, render, render_plan, root_cause

MISSING = "no rollout {id} in flight"  # an update's refusal when the workflow does not run
UPDATES = {
    "pause": (PAUSE_UPDATE, "stop after the current step"),
    "resume": (RESUME_UPDATE, "go on after a pause (after a foreign edit: to the template as it now is)"),
    "abort": (ABORT_UPDATE, "stop now: the step in flight is interrupted and every PodGang taken back"),
    "rollback": (ROLLBACK_UPDATE, "restore what ran before the rollout and roll back coherently"),
}


class RolloutError(CommandError):
    """A rollout command's refusal: one line and its exit status (metalflow/cli/workflow_commands.py)."""


def register(subparsers: Any) -> None:
    """Add `rollout` and its commands."""
    rollout = subparsers.add_parser(
        "rollout",
        help="roll a Grove PodCliqueSet to new images, coherently",
        description="Coherent rollouts (GREP-393 order) of Grove PodCliqueSets on updateStrategy OnDelete "
        "(Grove v0.1.0-alpha.12, commit 6eaa77f0): per replica its anchor PodGang, then its tail "
        "PodGangs, one at a time; a PodGang's pods are replaced together, so it never runs two "
        "versions by the rollout's doing.",
    )
    commands = rollout.add_subparsers(title="rollout commands", metavar="COMMAND")
    start = commands.add_parser(
        "start",
        help="start a rollout",
        description="Start a rollout. A refusal changes nothing and exits as `rollout plan` does "
        "(checked with the same code): 1 a rollout in flight, not OnDelete, a template holding an "
        "edit its pods do not run, an outage not allowed; 2 an unknown PodCliqueSet, clique or "
        "container, a bad image.",
    )
    _target(start)
    _change(start)
    start.add_argument("--wait", action="store_true", help="follow it; exit 0 only when it completed")
    start.add_argument(
        "--supersede",
        action="store_true",
        help="if a rollout of this PodCliqueSet is in flight, take over after its current step",
    )
    start.add_argument(
        "--step-deadline",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="a step not done by then pauses the rollout (default 600)",
    )
    start.add_argument("--reason", type=arg_type(Reason), default="", help="why, recorded with the request")
    start.set_defaults(handler=runner(_start))

    preview = commands.add_parser(
        "plan",
        help="show what `rollout start` would do, starting nothing",
        description="Read the PodCliqueSet as `rollout start` does and print the cliques it changes, the "
        "PodGangs it replaces in order (each replica's anchor, then its tails) with the pods each "
        "replaces and any replica outage, or why `start` would refuse (first, and alone but for an "
        "outage, which the steps show). Changes nothing. Exit 0: the plan; where start would refuse, "
        "as start exits: 1 a rollout in flight, not OnDelete, a template holding an edit its pods do "
        "not run, an outage not allowed; 2 an unknown PodCliqueSet, clique or container, a bad image, "
        "bad input; 3 the cluster cannot be reached.",
    )
    preview.add_argument(
        "pcs", metavar="NAMESPACE/PCS", type=_pcs_ref, help="the PodCliqueSet, e.g. default/inference"
    )
    _change(preview)
    preview.add_argument("--json", action="store_true", help="the plan as one JSON document")
    preview.set_defaults(handler=runner(_plan))

    status = commands.add_parser("status", help="show a rollout's progress", description="Show progress.")
    _target(status)
    status.add_argument("--json", action="store_true", help="the status query as JSON")
    status.set_defaults(handler=runner(_status))

    for command, (update, text) in UPDATES.items():
        parser = commands.add_parser(command, help=text, description=f"{text[0].upper()}{text[1:]}.")
        _target(parser)
        parser.add_argument(
            "--reason", type=arg_type(Reason), default="", help="why, recorded with the request"
        )
        parser.set_defaults(handler=runner(_update), update=update)

    scale = commands.add_parser(
        "scale",
        help="change the replicas between steps of the rollout in flight",
        description="Change the PodCliqueSet's replicas; the rollout in flight applies it between steps.",
    )
    _target(scale)
    scale.add_argument("--replicas", type=int, required=True, help="the new number of replicas")
    scale.set_defaults(handler=runner(_scale))


def _change(parser: argparse.ArgumentParser) -> None:
    """The change `rollout plan` previews and `rollout start` makes: one definition for both."""
    parser.add_argument(
        "--set",
        dest="images",
        action="append",
        type=_image_setting,
        required=True,
        metavar="CLIQUE[/CONTAINER]=IMAGE",
        help="new image of a container (CLIQUE alone: its only container; repeat for several)",
    )
    parser.add_argument("--concurrency", type=int, default=1, help="replicas rolled at once (default 1)")
    parser.add_argument(
        "--allow-replica-outage",
        action="store_true",
        help="roll steps that take a replica below a minAvailable (every change of a standalone "
        "clique, and Grove's default shape); one replica at a time",
    )


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
    namespace, slash, name = text.partition("/")
    if not slash:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give NAMESPACE/PCS, e.g. default/{text or 'inference'} (the namespace is missing)"
        )
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
            f"{text!r}: give CLIQUE[/CONTAINER]=IMAGE, e.g. router=registry.local/router:2.0"
        )
    if (problem := image_problem(image)) is not None:
        raise argparse.ArgumentTypeError(f"clique {clique}: {problem}")
    return clique, image


def _handle(client: Client, pcs: PCSRef) -> WorkflowHandle[Any, RolloutResult]:
    return client.get_workflow_handle(
        names.rollout_workflow_id(pcs.namespace, pcs.name), result_type=RolloutResult
    )


async def _start(client: Client, args: argparse.Namespace) -> int:
    from metalflow.site_check import consult_words
    from metalflow.site_verdicts import ROLLOUT

    pcs: PCSRef = args.pcs
    refuse, said = consult_words(
        None, ROLLOUT, pcs=str(pcs)
    )  # the kept `metalflow site check`, one file read
    if refuse:
        raise RolloutError("refused, nothing started: " + "; ".join(said), EXIT_FAILED)
    for line in said:
        print(f"metalflow rollout: {line}", file=sys.stderr)
    images = dict(args.images)
    request = RolloutInput(
        pcs=pcs,
        images=images,
        site_check=tuple(said),  # degraded (or an old check): the status and the UI say it too
        requested_by=args.by,
        reason=args.reason,
        policy=RolloutPolicy(
            replica_concurrency=args.concurrency,
            allow_replica_outage=args.allow_replica_outage,
            step_deadline_seconds=args.step_deadline,
        ),
    )
    # before starting: a refusal leaves no failed run behind
    running = await _in_flight(client, pcs)
    superseding = args.supersede and running is not None
    await _check_images(pcs, images, request.policy, None if args.supersede else running, superseding)
    workflow_id = names.rollout_workflow_id(pcs.namespace, pcs.name)
    if superseding:
        return await _supersede(client, args, pcs, images)
    summary = ", ".join(f"{c}={i}" for c, i in images.items())
    try:
        handle = await client.start_workflow(
            workflow_api.RolloutWorkflow.run,
            request,
            id=workflow_id,
            task_queue=args.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            static_summary=f"roll {pcs} to {summary} for {args.by}",
            static_details="\n".join(said) or None,  # the Temporal UI's details: the site check's words
            search_attributes=TypedSearchAttributes([SearchAttributePair(names.OPERATION, names.ROLLOUT)]),
        )
    except WorkflowAlreadyStartedError as err:
        if not args.supersede:  # started between the check and the start
            raise RolloutError(_in_flight_refusal(pcs, err.run_id), EXIT_FAILED) from None
        return await _supersede(client, args, pcs, images)
    # The images are written (phase past `preparing`), or the run refused them.
    refused = "rollout refused, nothing changed"
    try:
        status = await until_past(handle, "preparing", _query, refused)
        if status.phase == "failed":  # refused between the check of its status and the query
            status = await until_past(handle, "failed", _query, refused)  # raises, naming why
    except CommandError as err:  # the run's own refusal: the status `plan` gives the same one
        raise RolloutError(str(err), refusal_status(str(err), None)) from None
    print(f"rollout {workflow_id} started: target {status.target_hash} (from {status.previous_hash})")
    if not args.wait:  # else said once it ends
        for warning in status.warnings:
            print(f"warning: {warning}")
    return await _follow(handle) if args.wait else EXIT_OK


async def _supersede(client: Client, args: argparse.Namespace, pcs: PCSRef, images: dict[str, str]) -> int:
    handle = _handle(client, pcs)
    answer = await _send(handle, SUPERSEDE_UPDATE, SupersedeRequest(requested_by=args.by, images=images))
    print(f"{handle.id}: {answer.message}")
    return await _follow(handle) if args.wait else EXIT_OK


def _in_flight_refusal(pcs: PCSRef, run_id: str | None) -> str:
    workflow_id = names.rollout_workflow_id(pcs.namespace, pcs.name)
    return (
        f"a rollout of {pcs} is already in flight: workflow {workflow_id} (run {run_id}); "
        "wait for it, `metalflow rollout abort`, or start again with --supersede"
    )


async def _in_flight(client: Client, pcs: PCSRef) -> str | None:
    """The refusal `start` without `--supersede` gives while a rollout of `pcs` runs (and
    `plan` with it); None when none runs."""
    try:
        described = await _handle(client, pcs).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    if described.status != WorkflowExecutionStatus.RUNNING:
        return None
    return _in_flight_refusal(pcs, described.run_id)


async def _check_images(
    pcs: PCSRef,
    images: dict[str, str],
    policy: RolloutPolicy,
    in_flight: str | None = None,
    superseding: bool = False,
) -> None:
    """Refuse what the rollout would refuse, before starting it, with the same code: its first
    read's refusal (`RolloutState.refusal`: no such PodCliqueSet, not OnDelete, a replica outage
    not allowed), then its write's (`images_patch`, as `set_pcs_images`: an unknown clique or
    container, a bad image). Without this, the refused run failed in Temporal (red in the UI)
    and replaced the last real rollout of that PodCliqueSet in `rollout status`.

    Cost: the PodCliqueSet's state from the cluster KUBECONFIG names (the dev stack's by default;
    `drivers.grove.read_state`: one GET and four lists) and one GET for the write's check.

    Raises:
        RolloutError: Refused, nothing changed (`refusal_status`: 1 or 2), or the cluster cannot
            be read (exit 3; a bad setting 2).
    """
    try:
        kube = Kube(Settings.from_env())
    except ValueError as err:
        raise RolloutError(str(err), EXIT_USAGE) from None
    try:
        refusal = (await plan(kube, pcs, images, policy, in_flight, superseding)).refusal
    except Exception as err:  # the cluster unreachable, no kubeconfig: one line
        reason = f"{type(err).__name__}: {err}".splitlines()[0]
        raise RolloutError(
            f"cannot read PodCliqueSet {pcs} from the cluster: {reason}", EXIT_UNREACHABLE
        ) from None
    finally:
        kube.close()
    if refusal is not None:
        raise RolloutError(f"rollout refused, nothing changed: {refusal}", refusal_status(refusal, in_flight))


_WORLD_REFUSALS = (
    " has updateStrategy ",
    " holds an edit its pods do not run ",
    " takes replicas below minAvailable",
)


def refusal_status(refusal: str, in_flight: str | None) -> int:
    """A refusal's exit status, the same from `plan` and `start`: 1 what runs or is set up now
    refuses it (a rollout in flight, Grove's own strategy, an edit the pods do not run, an outage
    not allowed); 2 bad input (no such PodCliqueSet, an unknown clique or container, a bad image)."""
    if refusal == in_flight or any(marker in refusal for marker in _WORLD_REFUSALS):
        return EXIT_FAILED
    return EXIT_USAGE


async def _plan(client: Client, args: argparse.Namespace) -> int:
    """`rollout plan`: what `start` would do, read and decided as `start` (`rollouts.plan`),
    refused as `start` refuses (`refusal_status`), a rollout in flight included."""
    from metalflow.site_check import consult_words
    from metalflow.site_verdicts import ROLLOUT

    refuse, said = consult_words(None, ROLLOUT, pcs=str(args.pcs))  # as `start`: the kept site check
    if refuse:
        print(f"start would refuse it: {'; '.join(said)}")
        return EXIT_FAILED
    for line in said:
        print(f"metalflow rollout: {line}", file=sys.stderr)
    policy = RolloutPolicy(
        replica_concurrency=args.concurrency, allow_replica_outage=args.allow_replica_outage
    )
    in_flight = await _in_flight(client, args.pcs)
    try:
        kube = Kube(Settings.from_env())
    except ValueError as err:  # the settings
        return fail(str(err), EXIT_USAGE)
    try:
        found = await plan(kube, args.pcs, dict(args.images), policy, in_flight)
    except Exception as err:  # the cluster unreachable, no kubeconfig: one line
        reason = f"{type(err).__name__}: {err}".splitlines()[0]
        return fail(f"cannot read PodCliqueSet {args.pcs} from the cluster: {reason}", EXIT_UNREACHABLE)
    finally:
        kube.close()
    print(found.model_dump_json(indent=2) if args.json else render_plan(found))
    return refusal_status(found.refusal, in_flight) if found.refusal else EXIT_OK


async def _query(handle: WorkflowHandle[Any, Any]) -> RolloutStatus:
    return await workflow_commands.query(handle, STATUS_QUERY, RolloutStatus, "rollout")


async def _follow(handle: WorkflowHandle[Any, RolloutResult]) -> int:
    with Progress() as progress:  # a live status region on a terminal, stamped lines otherwise
        await _show_progress(handle, progress)
    return await _outcome(handle)


def in_flight_words(status: RolloutStatus) -> str:
    """What a followed rollout waits for: its PodGangs in flight whole and Ready at the version it
    moves them to (a rollback's is the previous one: it read "the new version", issue 38)."""
    if not status.in_flight:
        return ""
    version = "the previous version (rolling back)" if status.rolling_back else "the new version"
    return f"{', '.join(status.in_flight)} whole and Ready at {version}"


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
        else:
            waiting = in_flight_words(status)
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
        aborted = abort_in_words(err)  # an operator's abort is asked for: said as such, exit 4
        if aborted is not None:
            print(f"rollout {handle.id} {aborted}")
            return exits.ABORTED
        raise RolloutError(f"rollout {handle.id} failed: {root_cause(err)}") from None
    steps = "; ".join(
        f"{'+'.join(s.podgangs)} {s.seconds:.1f}s" for s in result.steps if s.seconds is not None
    )
    if result.outcome == "aborted":  # an operator's abort completes the run: said as such, exit 4
        print(f"rollout {handle.id} {abort_words(result.aborted)}")
        return exits.ABORTED
    print(f"rollout {handle.id} {result.outcome}: every PodGang at {result.target_hash} ({steps})")
    for warning in result.warnings:
        print(f"warning: {warning}")
    return EXIT_OK if result.outcome == "completed" else EXIT_FAILED


async def _status(client: Client, args: argparse.Namespace) -> int:
    """The status query; a run that failed, was aborted, terminated or timed out shows what it
    last showed (a terminated one: `rolling`, no code of it ran) and says how it ended, exit 1."""
    handle = _handle(client, args.pcs)
    status, ended = await workflow_commands.last_status(client, handle, _query, "rollout")
    if ended is None and status.phase == "aborted":
        ended = await _aborted(handle)
    if ended is not None:
        status = status.model_copy(update={"ended": ended, "doing": "ended", "wake_at": None})
    if args.json:
        print(status.model_dump_json(indent=2))
        return EXIT_OK if ended is None else ended.status
    if ended is not None or not sys.stdout.isatty():
        print(render(status))
        for warning in status.warnings:
            print(f"warning: {warning}")
        for step in status.steps:
            took = f"{step.seconds:.1f}s" if step.seconds is not None else "unfinished"
            print(
                f"  replica {step.replica} {step.role}: {', '.join(step.podgangs)} "
                f"-> {step.target_hash} {took}"
            )
        if ended is not None:
            raise RolloutError(str(ended), ended.status)  # it names rollout/NS/NAME
        return EXIT_OK
    while True:  # a live bar until the rollout ends (Ctrl-C leaves it running)
        print("\r\033[K" + render(status), end="", flush=True)
        if status.phase in ("completed", "rolled-back", "aborted"):
            print()
            if status.phase == "aborted" and (aborted := await _aborted(handle)) is not None:
                raise RolloutError(str(aborted), aborted.status)  # it names rollout/NS/NAME
            return EXIT_OK
        described = await handle.describe()
        if described.status != WorkflowExecutionStatus.RUNNING:
            print()
            await _raise_if_ended_badly(client, handle.id)
            return EXIT_OK
        await asyncio.sleep(FOLLOW_SECONDS)
        status = await _query(handle)


async def _aborted(handle: WorkflowHandle[Any, RolloutResult]) -> workflow_commands.Ended | None:
    """How a rollout an operator aborted ended (it completes `aborted`, its result saying who
    and why): `<id> aborted by <who>: <why>; ...`, exit 4; None for a run that has not ended so."""
    if (await handle.describe()).status != WorkflowExecutionStatus.COMPLETED:
        return None
    result = await handle.result()
    if result.outcome != "aborted":
        return None
    return workflow_commands.ended_as(f"{handle.id} {abort_words(result.aborted)}", exits.ABORTED)


async def _raise_if_ended_badly(client: Client, workflow_id: str) -> None:
    """Status is the truth: a rollout that failed, was terminated or timed out is said so, exit 1."""
    why = await workflow_commands.ended_badly(client, workflow_id, "rollout")
    if why is not None:
        raise RolloutError(str(why), why.status)  # it names rollout/NS/NAME


async def _send(handle: WorkflowHandle[Any, Any], update: str, request: Any) -> OperatorAnswer:
    return await workflow_commands.send(handle, update, request, OperatorAnswer, MISSING)


async def _answer(handle: WorkflowHandle[Any, Any], update: str, request: Any) -> int:
    return await workflow_commands.answer(handle, update, request, OperatorAnswer, MISSING)


async def _update(client: Client, args: argparse.Namespace) -> int:
    request = OperatorRequest(requested_by=args.by, reason=args.reason)
    return await _answer(_handle(client, args.pcs), args.update, request)


async def _scale(client: Client, args: argparse.Namespace) -> int:
    if args.replicas < 0:
        return fail("--replicas must be 0 or more", EXIT_USAGE)
    request = ScaleRequest(requested_by=args.by, replicas=args.replicas)
    return await _answer(_handle(client, args.pcs), SCALE_UPDATE, request)
