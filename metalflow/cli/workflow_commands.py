"""What the `campaign` and `rollout` commands share: each drives one long-running workflow by its
id, so each runs against Temporal the same way and sends the operator's updates the same way.

- `runner`: connect, run the command, exit with its status (`metalflow.cli.exits`); every error
  is one line on stderr (a refusal 1, bad input or no such workflow 2, Temporal unreachable or
  lost 3, naming the address), never a traceback; a reader of stdout gone (`| head -1`) ends it
  quietly, exit 141 (`metalflow.cli.reader_gone`).
- `query`: the workflow's status query; a workflow that does not exist is named, exit 2.
- `ended_badly`, `last_status`: how a run ended that did not complete (failed, aborted by an
  operator, terminated, timed out, cancelled), and the status query with it: a status command
  shows what such a run last showed, says how it ended, and exits 1 (README, "Status is the
  truth"): Temporal runs no workflow code on terminate, so its Phase and what it published say
  it still runs.
- `until_past`: after a start, wait until the run is past its first phase, or report why it
  refused (touching nothing: bad input 2, else 1).
- `send` and `answer`: an operator update (pause, resume, abort, ...): the workflow's answer, or
  its validator's refusal, no such workflow, or Temporal's refusal, each one line; a lost
  Temporal goes up to `runner`, which names it.

Cost: one connection per command; one call per query or update, one describe and one query per
FOLLOW_SECONDS while `until_past` waits.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, Protocol, TypeVar

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowHistoryEventFilterType,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from contracts.errors import InvalidInput, ObjectNotFound, abort_in_words, matches
from contracts.models.campaign import CampaignStatus
from contracts.with_start import NotAccepted, execute_update
from metalflow.cli import connection, exits, reader_gone
from metalflow.client import NO_WORKER, TemporalConfigError, no_worker_polls, temporal_lost
from metalflow.hosts import QUERY_TIMEOUT, unanswered_query
from metalflow.rollouts import root_cause

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = exits.OK, exits.FAILED, exits.USAGE, exits.UNREACHABLE
FOLLOW_SECONDS = 0.5
ACCEPT_WITHIN = timedelta(seconds=10)  # for a worker to take an operator's update (no silent hang)
START_CHECK_SECONDS = 60.0  # how long a start waits to see its run past the first phase or refused

Action = Callable[[Client, argparse.Namespace], Awaitable[int]]


class Answer(Protocol):
    """An update's answer (`OperatorAnswer`, `OperatorAnswer`): what the workflow did."""

    @property
    def message(self) -> str: ...


class Status(Protocol):
    """A status query's answer: the workflow's phase."""

    @property
    def phase(self) -> str: ...


AnswerT = TypeVar("AnswerT", bound=Answer)
StatusT = TypeVar("StatusT", bound=Status)


class CommandError(Exception):
    """A refusal the command reports as one line, with its exit status."""

    def __init__(self, message: str, status: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.status = status


def fail(message: str, status: int) -> int:
    print(f"metalflow: {message}", file=sys.stderr)
    return status


def runner(action: Action) -> Callable[[argparse.Namespace], int]:
    """The command's handler: connect, run `action`, exit with its status."""

    def handle(args: argparse.Namespace) -> int:
        try:
            status = asyncio.run(_connected(action, args))
            connection.flush_tracing()
            sys.stdout.flush()
        except (BrokenPipeError, exits.ReaderGone):  # `metalflow ... | head -1`
            status = reader_gone()
        exits.JsonOutput.finish(status)
        sys.stderr.flush()
        os._exit(status)  # skip the SDK runtime's teardown, as `metalflow host` does

    handle.talks_to_temporal = True  # type: ignore[attr-defined]  # gets --address, --namespace
    return handle


async def _connected(action: Action, args: argparse.Namespace) -> int:
    # With OTEL_TRACES_EXPORTER set, the command's request is the root of the workflow's trace
    # (a campaign's hosts' operations then share it); flushed before the process ends.
    try:
        target = connection.resolve(args)
    except TemporalConfigError as err:  # names the file; a TOML error quotes no value
        return fail(str(err), EXIT_USAGE)
    except Exception as err:  # a broken config file: say which setting, never its secrets
        return fail(f"cannot read the Temporal client configuration: {type(err).__name__}", EXIT_USAGE)
    try:
        client = await connection.connect_to(target)
    except TemporalConfigError as err:  # the tracing settings
        return fail(str(err), EXIT_USAGE)
    except Exception as err:
        return fail(connection.unreachable(target.address, err), EXIT_UNREACHABLE)
    try:
        return await action(client, args)
    except CommandError as err:
        return fail(str(err), err.status)
    except BrokenPipeError:  # the reader of stdout went away: `handle` ends quietly
        raise
    except RPCError as err:  # one line, never a traceback; Temporal gone is the environment's (3)
        reason = f"{err.status.name if err.status else '?'}: {err.message}".splitlines()[0]
        if temporal_lost(err):
            address = client.service_client.config.target_host
            return fail(f"lost Temporal at {address} ({reason})", EXIT_UNREACHABLE)
        if no_worker_polls(err):  # nobody can answer: the environment's, as a query nobody answers
            return fail(NO_WORKER, EXIT_UNREACHABLE)
        return fail(f"Temporal refused the request ({reason})", EXIT_FAILED)
    except Exception as err:
        return fail(f"failed: {type(err).__name__}: {err}".splitlines()[0], EXIT_FAILED)


async def query(
    handle: WorkflowHandle[Any, Any], name: str, result_type: type[StatusT], what: str
) -> StatusT:
    """The workflow's status query `name`; `what` names the workflow's kind in the refusal."""
    try:
        result: StatusT = await handle.query(name, result_type=result_type, rpc_timeout=QUERY_TIMEOUT)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise CommandError(f"no {what} {handle.id}", EXIT_USAGE) from None
        unanswered = await unanswered_query(handle, err)
        if unanswered is not None:  # no worker answers: exit 3, as `host status` says it
            raise NoAnswer(str(unanswered)) from None
        raise
    return result


class NoAnswer(CommandError):
    """No worker answered the status query (`metalflow.hosts.unanswered_words`): exit 3."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_UNREACHABLE)


_ENDED_BADLY = {
    WorkflowExecutionStatus.FAILED: "failed",
    WorkflowExecutionStatus.TERMINATED: "was terminated",
    WorkflowExecutionStatus.TIMED_OUT: "timed out",
    WorkflowExecutionStatus.CANCELED: "was cancelled",
}


class Ended(str):
    """How a run ended that did not complete, in words (`ended_badly`), and the exit status a
    command that shows it returns: `exits.ABORTED` for an operator's abort (asked for, not a
    failure), else `EXIT_FAILED`."""

    status: int = EXIT_FAILED


def ended_as(words: str, status: int = EXIT_FAILED) -> Ended:
    """`words` as an `Ended` with its exit status."""
    ended = Ended(words)
    ended.status = status
    return ended


def aborted_as(workflow_id: str, status: CampaignStatus) -> Ended | None:
    """A campaign whose last status shows it `aborted` (it completed so: an operator's abort is
    no failure): `<id> aborted by <who>: <reason>`, exit 4 (`exits.ABORTED`); else None."""
    if status.phase != "aborted":
        return None
    return ended_as(f"{workflow_id} {campaign_ended(status)}", exits.ABORTED)


def campaign_ended(status: CampaignStatus) -> str:
    """How a completed campaign ended, by its last status: `aborted by <who>: <why>` (it
    completes so: an abort is no failure), else its final phase (`completed`, `stopped`)."""
    if status.phase != "aborted":
        return status.phase
    by, why = status.aborting or "an operator", status.abort_reason or "no reason given"
    return f"aborted by {by}: {why}"


async def last_status(
    client: Client,
    handle: WorkflowHandle[Any, Any],
    status: Callable[[WorkflowHandle[Any, Any]], Awaitable[StatusT]],
    what: str,
) -> tuple[StatusT, Ended | None]:
    """The status query of the workflow's latest run, and how that run ended when it did not
    complete (`ended_badly`; None while it runs or once it completed).

    Raises:
        CommandError: No such workflow, or a run that ended badly whose status cannot be read
            (no worker to answer the query): how it ended, exit 1 (4 for an abort).
        RPCError: The query failed for a run that did not end badly.
    """
    ended = await ended_badly(client, handle.id, what)
    try:
        return await status(handle), ended
    except (RPCError, NoAnswer):
        if ended is None:
            raise
        raise CommandError(f"{what} {ended} (its status cannot be read: no worker?)", ended.status) from None


async def ended_badly(client: Client, workflow_id: str, what: str) -> Ended | None:
    """How the workflow's latest run ended when it did not complete (`<id> failed: <why>`,
    `<id> aborted by <who>: <why>` for a failure that is the workflow's abort error, `<id> was
    terminated: <reason>`, `timed out`, `was cancelled`); None while it runs or once it
    completed. A status command says this and exits with its `status` (1; 4 for an abort)
    rather than show the last status as if the run were still in progress.

    Raises:
        CommandError: No such workflow (`no <what> <id>`).
    """
    try:
        described = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise CommandError(f"no {what} {workflow_id}", EXIT_USAGE) from None
        raise
    word = _ENDED_BADLY.get(described.status) if described.status is not None else None
    if word is None:
        return None
    run = client.get_workflow_handle(workflow_id, run_id=described.run_id)  # that run, not a later one
    if described.status == WorkflowExecutionStatus.TERMINATED:  # the reason is in the close event only
        async for event in run.fetch_history_events(
            event_filter_type=WorkflowHistoryEventFilterType.CLOSE_EVENT
        ):
            if event.HasField("workflow_execution_terminated_event_attributes"):
                reason = event.workflow_execution_terminated_event_attributes.reason
                return ended_as(f"{workflow_id} {word}: {reason or 'no reason given'}")
    try:
        await run.result(follow_runs=False)
    except WorkflowFailureError as err:
        aborted = abort_in_words(err)  # it names who aborted and why: "aborted by alice: ..."
        if aborted is not None:
            # "rollout of ns/x aborted by bob: ..." is said from "aborted by": the id names it
            return ended_as(f"{workflow_id} {aborted}", exits.ABORTED)
        reason = root_cause(err) or "no reason given"
    else:  # a race: it was reset and completed meanwhile
        return None
    return ended_as(f"{workflow_id} {word}: {reason}")


async def until_past(
    handle: WorkflowHandle[Any, Any],
    phase: str,
    status: Callable[[WorkflowHandle[Any, Any]], Awaitable[StatusT]],
    refused: str,
) -> StatusT:
    """Wait until the run's phase is past `phase` (or START_CHECK_SECONDS passed); a run that
    failed meanwhile refused the request: CommandError `refused: <why>`, exit 2 for bad input
    (`InvalidInput`, `ObjectNotFound`), else 1, as the same refusal from `plan`."""
    deadline = time.monotonic() + START_CHECK_SECONDS
    while True:
        described = await handle.describe()
        if described.status == WorkflowExecutionStatus.FAILED:
            try:
                await handle.result()
            except WorkflowFailureError as err:
                raise CommandError(f"{refused}: {root_cause(err)}", refusal_status(err)) from None
        current = await status(handle)
        if current.phase != phase or time.monotonic() > deadline:
            return current
        await asyncio.sleep(FOLLOW_SECONDS)


def refusal_status(err: BaseException) -> int:
    """The exit status of a run's refusal: 2 when its root cause is bad input or an unknown object
    (`InvalidInput`, `ObjectNotFound`), else 1 (the world refused it)."""
    while isinstance(getattr(err, "cause", None), BaseException):
        err = err.cause  # type: ignore[attr-defined]
    if isinstance(err, ApplicationError) and matches(err, InvalidInput, ObjectNotFound):
        return EXIT_USAGE
    return EXIT_FAILED


async def send(
    handle: WorkflowHandle[Any, Any],
    update: str,
    request: Any,
    answer_type: type[AnswerT],
    missing: str,
    *,
    command: str = "",
    ended: EndedWords | None = None,
) -> AnswerT:
    """Send the operator's update and return the workflow's answer. `command`: the CLI's words
    for it (`retry-failed`, `skip`, `limits`; the update's name when not given), never the
    update's internal name; `ended`: how a completed run ended, in words (`campaign` says
    `aborted by <who>: <why>` where the run's status says aborted).

    Raises:
        CommandError: The workflow refused it (its validator's reason), it does not run
            (`missing`, where `{id}` stands for the workflow id), or Temporal refused the call.
        RPCError: Temporal was lost (`runner` names it).
    """
    said = command or update
    try:
        answer: AnswerT = await execute_update(
            handle, update, request, result_type=answer_type, accept_within=ACCEPT_WITHIN
        )
    except WorkflowUpdateFailedError as err:
        raise CommandError(f"{said} refused: {root_cause(err)}") from None
    except NotAccepted as err:
        raise CommandError(not_accepted_words(handle.id, said, err.seconds), EXIT_UNREACHABLE) from None
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise await _not_running(handle, said, missing, ended) from None
        if temporal_lost(err):
            raise
        raise CommandError(f"{said} refused: {err.message}") from None
    return answer


def not_accepted_words(workflow_id: str, command: str, seconds: float) -> str:
    """An operator's update no worker took within `seconds` (`NotAccepted`): what is true of it
    (it may still be applied once a worker comes back), never "nothing was changed"."""
    return (
        f"no worker answered `{command}` to {workflow_id} within {seconds:g} s: its workers are stopped, "
        "stuck or gone. The request waits in Temporal and may still be applied when a worker comes "
        "back (Temporal hands an update no worker has taken to the workflow's next task; nothing can "
        "withdraw it): once a worker runs, its status shows whether it was; do not send it again before"
    )


EndedWords = Callable[[WorkflowHandle[Any, Any]], Awaitable[str | None]]
"""How a completed run ended, in words (e.g. `aborted by alice: why`), or None to say `completed`."""


def ended_refusal(workflow_id: str, how: str, command: str) -> str:
    """An operator's command to a run that has ended: how it ended and the command's own words,
    as a name (`nothing to limits` read as a verb that is none: issue 38)."""
    return f"{workflow_id} has ended ({how}): `{command}` has nothing to act on; nothing was changed"


async def _not_running(
    handle: WorkflowHandle[Any, Any], command: str, missing: str, ended: EndedWords | None
) -> CommandError:
    """Why an update found no running workflow: it ended (the world: exit 1, saying how), or it
    never was (`missing`: exit 2). Cost: one describe, on this refusal only (and `ended`'s read
    of a completed run)."""
    try:
        described = await handle.describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return CommandError(missing.format(id=handle.id), EXIT_USAGE)
        raise
    how = described.status.name.lower().replace("_", " ") if described.status is not None else "ended"
    if described.status == WorkflowExecutionStatus.COMPLETED and ended is not None:
        try:
            how = await ended(handle) or how
        except RPCError:
            pass  # its status cannot be read (no worker): Temporal's word stays
    return CommandError(ended_refusal(handle.id, how, command))


async def answer(
    handle: WorkflowHandle[Any, Any],
    update: str,
    request: Any,
    answer_type: type[AnswerT],
    missing: str,
    *,
    command: str = "",
    ended: EndedWords | None = None,
) -> int:
    """`send`, then print the workflow's answer: the command's output and EXIT_OK."""
    print((await send(handle, update, request, answer_type, missing, command=command, ended=ended)).message)
    return EXIT_OK
