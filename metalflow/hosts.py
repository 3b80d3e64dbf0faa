"""The CLI's side of a host's entity workflow: send a request (creating the entity on first
use), read its status, follow an operation to its end. Used by `metalflow host ...` and the demo.

Every request goes through the one client of the entity (`contracts.host_entity`): an
update-with-start on `host/<id>` with id conflict policy USE_EXISTING, so the first request for
a host creates its entity and later ones reach the running one. This module adds what a person
needs: refusals as `HostRequestError`, a worker check before asking, and progress while
following an operation. The site's inventory decides nothing here; the workflows resolve the
host themselves.
"""

from __future__ import annotations

import asyncio
import getpass
import socket
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.exceptions import CancelledError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.workflow import UpdateMethodMultiParam

from contracts import host_entity, names, workflow_api
from contracts.errors import abort_in_words, abort_words, cause_in_words
from contracts.host_entity import EntityRefused, HostEntityClient
from contracts.host_requests import ENTITY_REQUESTS
from contracts.models.host import (
    APPROVE_UPDATE,
    ASSIGN_INSTANCE_UPDATE,
    MAINTENANCE_UPDATE,
    RELEASE_AUTOMATION_UPDATE,
    RELEASE_INSTANCE_UPDATE,
    WITHDRAW_UPDATE,
    HostStatus,
    HostWorkflowInput,
)
from contracts.models.inventory import VERSIONS_READ_SIGNAL, VersionsRead
from contracts.with_start import NotAccepted
from contracts.wording import plural
from metalflow.cancelled import CANCELLED_WORDS, cancelled_words, final_details
from metalflow.client import no_worker_polls
from metalflow.operation_progress import QUERY_TIMEOUT as QUERY_TIMEOUT
from metalflow.operation_progress import operation_progress, operation_status
from metalflow.progress import Progress
from metalflow.unanswered import not_taken_words, unanswered_words

FOLLOW_POLL_SECONDS = 0.5
WORKER_GRACE_SECONDS = 5.0
# The exit status of a request metalflow could not ask (`metalflow.cli.exits.UNREACHABLE`), and
# what it tells the operator: nothing was asked, so nothing changed.
COULD_NOT_ASK = 3
NOTHING_SENT = "Nothing was changed: send the command again once a worker runs"
# How long a person's request waits for a worker to take it (accept or refuse it), as a query
# waits: a request no worker takes must not hang the CLI (issue 38: `host reboot` to a stopped
# worker printed nothing for 90 s and more).
ACCEPT_WITHIN = QUERY_TIMEOUT
_TIMED_OUT = (RPCStatusCode.CANCELLED, RPCStatusCode.DEADLINE_EXCEEDED)  # how an expired rpc_timeout shows
R = TypeVar("R", bound=BaseModel)


def default_operator() -> str:
    """`$USER@hostname`: who is asking, recorded in the workflows' history."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers)
        user = "metalflow"
    return f"{user}@{socket.gethostname()}"


class HostRequestError(Exception):
    """The entity refused a request, or there is nothing to act on; the message says why.
    `status`: the command's exit status (`metalflow.cli.exits`): 1 refused, 2 no such entity, 3
    could not ask (no worker serves the task queue, or the workflow did not answer in time)."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


class Unanswered(HostRequestError):
    """A workflow did not answer a query: exit 3. `why` is the reason alone, without the words
    "Nothing was changed": true of a command that only asked so far, not of a `--wait` following
    a request the entity already accepted (`metalflow/cli/host_requests.py`, `_following`)."""

    def __init__(self, why: str) -> None:
        super().__init__(f"{why}. {NOTHING_SENT}", status=COULD_NOT_ASK)
        self.why = why


ENTITY_UPDATES: dict[str, UpdateMethodMultiParam[Any, Any]] = {
    **{kind.update: getattr(workflow_api.HostWorkflow, kind.update) for kind in ENTITY_REQUESTS},
    APPROVE_UPDATE: workflow_api.HostWorkflow.approve,
    WITHDRAW_UPDATE: workflow_api.HostWorkflow.withdraw,
    ASSIGN_INSTANCE_UPDATE: workflow_api.HostWorkflow.assign_instance,
    RELEASE_INSTANCE_UPDATE: workflow_api.HostWorkflow.release_instance,
    MAINTENANCE_UPDATE: workflow_api.HostWorkflow.set_maintenance,
    RELEASE_AUTOMATION_UPDATE: workflow_api.HostWorkflow.release_automation,
}
"""The entity's updates by name (what the CLI's subcommands send): every operation request of
`contracts.host_requests` (declared on `workflow_api.HostWorkflow` under its update's name), and
the others."""


def entity_start(
    entity: HostWorkflowInput, task_queue: str = names.TASK_QUEUE
) -> WithStartWorkflowOperation[Any, Any]:
    """The start half of an update-with-start: the host's entity, created only when missing."""
    return host_entity.entity_start(entity, task_queue)


async def ensure_entity(
    client: Client, entity: HostWorkflowInput, task_queue: str = names.TASK_QUEUE
) -> bool:
    """Start the host's entity unless it runs (never a second run).

    Returns:
        True when this call started it, False when it was running already.
    """
    return await HostEntityClient(client, task_queue).ensure(entity)


async def worker_polls(client: Client, task_queue: str) -> bool:
    """Whether any worker polled the workflow side of `task_queue` lately (the server remembers
    pollers for a few minutes)."""
    described = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=task_queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    return bool(described.pollers)


async def require_worker(client: Client, task_queue: str, grace: float = WORKER_GRACE_SECONDS) -> None:
    """Refuse to ask anything of a task queue no worker polls: the request would wait silently.

    A worker that is starting is seen within `grace` seconds (the server records a poller when
    its first poll arrives).

    Raises:
        HostRequestError: No worker polled `task_queue` lately.
    """
    deadline = asyncio.get_running_loop().time() + grace
    while not await worker_polls(client, task_queue):
        if asyncio.get_running_loop().time() > deadline:
            raise HostRequestError(
                f"no worker polls task queue {task_queue!r}, so nothing would act on the request: start "
                f"one (python worker.py --task-queue {task_queue}) and try again",
                status=COULD_NOT_ASK,
            )
        await asyncio.sleep(FOLLOW_POLL_SECONDS)


async def send_update(
    client: Client,
    entity: HostWorkflowInput,
    update: str,
    request: BaseModel,
    result_type: type[R],
    task_queue: str = names.TASK_QUEUE,
) -> R:
    """Send the entity's update named `update`, starting the entity when it does not run yet.

    Raises:
        HostRequestError: The entity refused (busy, nothing awaits approval, ...), with its reason.
    """
    try:
        result = await HostEntityClient(client, task_queue).ask(
            entity, ENTITY_UPDATES[update], request, accept_within=ACCEPT_WITHIN
        )
    except EntityRefused as err:
        raise HostRequestError(str(err)) from None
    except NotAccepted as err:
        raise not_taken(
            entity.host_id, names.host_workflow_id(entity.host_id), update, task_queue, err.seconds
        ) from None
    if not isinstance(result, result_type):
        raise TypeError(
            f"the entity answered {update} with {type(result).__name__}, not {result_type.__name__}"
        )
    return result


def not_taken(host: str, workflow_id: str, update: str, task_queue: str, seconds: float) -> HostRequestError:
    """A request no worker took within `seconds` (`NotAccepted`): exit 3, in `not_taken_words`."""
    return HostRequestError(
        not_taken_words(host, workflow_id, update, task_queue, seconds), status=COULD_NOT_ASK
    )


async def tell_versions_read(client: Client, host_id: str, read: VersionsRead) -> bool:
    """Give the host's entity what `host versions --refresh` read (signal `versions_read`): it
    shows it as its own read, asking no BMC again. False: the host has no running entity (it
    reads everything once when it starts).

    Raises:
        RPCError: Temporal refused or could not be reached.
    """
    handle = client.get_workflow_handle(names.host_workflow_id(host_id))
    try:
        await handle.signal(VERSIONS_READ_SIGNAL, read)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return True


async def host_status(client: Client, host_id: str) -> HostStatus:
    """The entity's `status` query.

    Raises:
        HostRequestError: The host has no entity yet (nothing was ever asked of it).
    """
    entities = HostEntityClient(client)
    try:
        status = await entities.status(host_id, rpc_timeout=QUERY_TIMEOUT)
    except RPCError as err:
        if err.status in _TIMED_OUT or no_worker_polls(err):
            raise await _unanswered(client, entities.handle(host_id)) from None
        raise
    if status is None:
        raise HostRequestError(
            f"unknown host {host_id}: no entity workflow {names.host_workflow_id(host_id)} "
            "(nothing was asked of this host yet)",
            status=2,
        )
    return status


async def _unanswered(client: Client, handle: WorkflowHandle[Any, Any]) -> Unanswered:
    """A workflow that did not answer in time: metalflow could not ask (exit 3), nothing was sent
    on (a command that reads the status first, e.g. `host abort`, stops there)."""
    task_queue = (await handle.describe()).task_queue
    return Unanswered(
        unanswered_words(
            handle.id,
            task_queue,
            QUERY_TIMEOUT.total_seconds(),
            polled=await worker_polls(client, task_queue),
        )
    )


async def unanswered_query(handle: WorkflowHandle[Any, Any], err: RPCError) -> Unanswered | None:
    """A query's RPCError as `Unanswered` (exit 3) when it means no worker answered (Temporal's
    "no poller seen", or QUERY_TIMEOUT expired); None for any other error."""
    if not (err.status in _TIMED_OUT or no_worker_polls(err)):
        return None
    try:
        task_queue = (await handle.describe(rpc_timeout=QUERY_TIMEOUT)).task_queue
    except RPCError:
        task_queue = "?"
    return Unanswered(
        unanswered_words(
            handle.id, task_queue, QUERY_TIMEOUT.total_seconds(), polled=not no_worker_polls(err)
        )
    )


async def native_power_cycles(client: Client, workflow_id: str, host_id: str) -> list[str]:
    """The BMC's own methods (`PowerCycle`, `ForceRestart`) of the reboots an ended operation ran:
    a power-down wait applies only to a BMC cycled by ForceOff, the wait, On; one that cycles
    itself keeps its own off time (drivers/redfish/powercycle.py). Empty when it cannot tell (a
    failed run, a manual reboot).

    Cost: one result read of the operation, and one per reboot it ran (a reboot's own: none)."""

    async def outcome_of(workflow: str) -> dict[str, Any]:
        try:
            ended = await client.get_workflow_handle(workflow).result(rpc_timeout=QUERY_TIMEOUT)
        except Exception:  # failed, gone, unreachable: nothing to tell
            return {}
        return ended if isinstance(ended, dict) else {}

    outcome = await outcome_of(workflow_id)
    if "method" in outcome:  # a reboot
        methods = [str(outcome["method"])]
    else:  # an operation that ran reboots (its result's count, or a reset's `--host`: one)
        generation = outcome.get("boot_generation")
        count = outcome.get("reboots", 1 if outcome.get("target") == "host" else 0)
        if not isinstance(generation, int) or not isinstance(count, int):
            return []
        reboots = [
            names.host_reboot_workflow_id(host_id, g) for g in range(generation - count + 1, generation + 1)
        ]
        methods = [str((await outcome_of(reboot)).get("method", "")) for reboot in reboots]
    native = [m.removeprefix("bmc:").split(",")[0] for m in methods if m.startswith("bmc:")]
    return [m for m in native if m in ("PowerCycle", "ForceRestart")]


def power_down_wait_not_applied(host_id: str, seconds: float, native: list[str]) -> str:
    """The warning line when a `--power-down-wait` was not applied (`native_power_cycles`)."""
    methods = " and ".join(dict.fromkeys(native))
    return (
        f"{host_id}: warning: --power-down-wait {seconds:g} was not applied to "
        f"{plural(len(native), 'power cycle')}: the BMC cycled the host itself ({methods}), with its "
        f"own off time; the wait applies to a BMC without PowerCycle (ForceOff, the wait, On; "
        f"`metalflow bmc check {host_id}` says how it cycles)"
    )


COMPLETED, ABORTED, FAILED, CANCELLED = "completed", "aborted", "failed", "cancelled"
"""How a followed operation ended (`follow_operation`)."""


async def follow_operation(
    client: Client, workflow_id: str, progress: Progress, key: str, host_id: str
) -> tuple[str, str]:
    """Show the operation's phase changes, and what it waits for since when, until it ends.

    Returns:
        ``(COMPLETED, summary)`` when it completed, ``(ABORTED, "aborted by <who>: <reason>; ...")``
        when an operator aborted it (asked for: not a failure), ``(CANCELLED, words)`` when it
        was cancelled in Temporal (`temporal workflow cancel`: its final Phase details, what it
        did and left: `cancelled_words`), ``(FAILED, reason)`` when it failed or was ended otherwise.
    """
    handle: WorkflowHandle[Any, Any] = client.get_workflow_handle(workflow_id)
    result = asyncio.ensure_future(handle.result())
    last, last_text = "", ""
    try:
        while not result.done():
            seen = await operation_progress(client, workflow_id, host_id)
            if seen is not None and seen.partial and last:
                seen = None  # no worker answered (killed, restarting): what was shown stands
            # A new phase or power cycle is a step (a lasting line); a DPU's phase is a detail.
            if seen is not None and seen.milestone != last:
                progress.step(key, seen.text, waiting_for=seen.waiting_for, since=seen.since)
                last, last_text = seen.milestone, seen.text
            elif seen is not None:
                progress.detail(
                    key, seen.text if seen.text != last_text else "", seen.waiting_for, seen.since
                )
                last_text = seen.text
            await asyncio.wait({result}, timeout=FOLLOW_POLL_SECONDS)
        outcome = result.result()
    except WorkflowFailureError as err:
        aborted = abort_in_words(err)
        if aborted is None and isinstance(err.cause, CancelledError):  # a cancel stays a cancel
            return CANCELLED, cancelled_words(await final_details(client, workflow_id, QUERY_TIMEOUT))
        return (ABORTED, aborted) if aborted is not None else (FAILED, failure_reason(err))
    finally:
        result.cancel()
    if isinstance(outcome, dict) and outcome.get("aborted"):  # an abort completes the run
        return ABORTED, abort_words(str(outcome["aborted"]))
    summary = _summary(outcome)
    if isinstance(outcome, dict) and outcome.get("cancelled"):  # a reboot cancelled past its ForceOff:
        # it completes (its cancel sent On), and stays a cancel (before: `completed`, exit 0)
        return CANCELLED, f"{CANCELLED_WORDS}: {outcome['cancelled']}; {summary}"
    # A DPU's Error the operation cured by reprovisioning it passes between two polls: the
    # ended run's status still counts it, so the summary says it.
    try:
        ended = await operation_status(client, workflow_id)
    except Exception:  # the summary stands without it
        ended = None
    for dpu in (ended or {}).get("dpus") or []:
        if dpu.get("error_reprovisions"):
            words = dpu.get("last_error") or f"DPU {dpu.get('dpu_id')} was in Error"
            summary += f"; reprovisioned {dpu.get('dpu_id')} {dpu['error_reprovisions']}x for Error: {words}"
    return COMPLETED, summary


def failure_reason(err: BaseException) -> str:
    """The cause of a workflow failure in words (`cause_in_words`): "Activity task failed" says
    nothing, the type and message of the error raised do."""
    return cause_in_words(err)


async def recorded_status(
    client: Client, host_id: str, workflow_id: str, timeout: float = 10.0
) -> HostStatus:
    """The entity's status once it has recorded the end of `workflow_id` (it learns it a moment later)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        status = await host_status(client, host_id)
        current = status.current
        if current is None or current.workflow_id != workflow_id:
            return status
        if asyncio.get_running_loop().time() > deadline:
            return status
        await asyncio.sleep(FOLLOW_POLL_SECONDS / 5)


def _summary(outcome: Any) -> str:
    if not isinstance(outcome, dict):
        return "completed"
    facts = [
        f"{key} {outcome[key]}" for key in ("reboots", "boot_generation") if outcome.get(key) is not None
    ]
    # Firmware and removal results name what they changed; say it, a person checks it.
    for key, words in (
        ("staged", "staged on"),
        ("already_running", "already running on"),
        ("removed", "removed"),
    ):
        if outcome.get(key):
            facts.append(f"{words} {', '.join(str(item) for item in outcome[key])}")
    if outcome.get("forced"):
        facts.append("finalizers removed (force)")
    if outcome.get("dpf_told"):  # a reboot DPF waited for (`HostRebootResult.dpf_told`)
        facts.append(str(outcome["dpf_told"]))
    return "completed" + (f" ({', '.join(facts)})" if facts else "")
