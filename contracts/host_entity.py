"""The one client of a host's entity workflow (`host/<id>`), for every caller outside workflows.

The CLI and the demo (`metalflow.hosts`), the monitor's owner requests and the campaign's
requests, sweeps and aborts (`activities/pool.py`, `activities/campaign*.py`) all reach an entity
here, so the entity's start options, its refusals and its status read the same everywhere:

- `ask`: an update-with-start: the first request for a host creates its entity (id conflict
  policy USE_EXISTING), later ones reach the running one. A refusal (busy, instance, nothing to
  approve) raises `EntityRefused` with the entity's error type and words.
- `update`: an update of a running entity only (`EntityMissing` when none runs).
- `status`: the entity's `status` query, None when the host has no entity.
- `running`: whether the entity runs (a describe, served by the server alone).
- `ensure`: start the entity unless it runs, saying whether it did (`start_unless_running`, which
  the monitor's start uses too).

Why in `contracts`: callers on every floor above it (activities, the CLI) need the same client,
and the floors forbid activities to import the applications; the client adds no I/O of its own
beyond the Temporal client it is given.

Cost per call: one RPC (an update-with-start, an update, a query or a describe).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar, cast

from pydantic import BaseModel
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.workflow import UpdateMethodMultiParam

from contracts import names, workflow_api
from contracts.models.campaign import SelectHostsResult
from contracts.models.host import HostStatus, HostWorkflowInput
from contracts.models.host_records import AutomationHold
from contracts.with_start import execute_update, execute_update_with_start

ArgT = TypeVar("ArgT", bound=BaseModel)
ResultT = TypeVar("ResultT")
Update = UpdateMethodMultiParam[[Any, ArgT], Awaitable[ResultT]]
"""A declared update of the entity, e.g. `workflow_api.HostWorkflow.request_reprovision`. The
declarations are `async def`, which the SDK's types take as returning a coroutine of the result;
the client answers the result itself (`ResultT`), as the SDK does at run time."""


class EntityRefused(Exception):
    """The entity refused an update; `kind` is its error type (`HostBusy`, ...), the message why,
    `details` what the error carried (e.g. `DPUsRemoved`'s `{"dpu_ids": [...]}`)."""

    def __init__(self, message: str, kind: str | None = None, details: tuple[Any, ...] = ()) -> None:
        super().__init__(message)
        self.kind = kind
        self.details = details


class EntityMissing(Exception):
    """No entity runs for the host (nothing was ever asked of it, or it was ended by hand)."""


POWER_WATCH_ENV = "METALFLOW_POWER_WATCH_SECONDS"
DEFAULT_POWER_WATCH_SECONDS = 900.0  # 96 readings of its power per host per day (power_watch.py)


def with_power_watch(entity: HostWorkflowInput, env: Mapping[str, str] | None = None) -> HostWorkflowInput:
    """The entity's input with its power watch's interval (`workflows/host/power_watch.py`):
    the caller's, else `METALFLOW_POWER_WATCH_SECONDS` (0: no watch), else 900 s. A bad value
    raises ValueError naming the variable, and nothing is started."""
    if "power_watch_seconds" in entity.model_fields_set:
        return entity
    text = (os.environ if env is None else env).get(POWER_WATCH_ENV)
    try:
        seconds = DEFAULT_POWER_WATCH_SECONDS if text is None else float(text)
    except ValueError:
        raise ValueError(f"{POWER_WATCH_ENV} must be a number of seconds, not {text!r}") from None
    if not 0 <= seconds < float("inf"):
        raise ValueError(f"{POWER_WATCH_ENV} must be 0 (no watch) or more seconds, not {text!r}")
    return entity.model_copy(update={"power_watch_seconds": seconds})


def entity_options(entity: HostWorkflowInput, task_queue: str) -> dict[str, Any]:
    """The start options of a host's entity: its id, queue, search attributes and summary."""
    return {
        "id": names.host_workflow_id(entity.host_id),
        "task_queue": task_queue,
        "id_conflict_policy": WorkflowIDConflictPolicy.USE_EXISTING,
        "search_attributes": TypedSearchAttributes(
            [
                SearchAttributePair(names.HOST_ID, entity.host_id),
                SearchAttributePair(names.OPERATION, names.HOST),
                SearchAttributePair(names.SITE, entity.site),
            ]
        ),
        "static_summary": (
            f"host {entity.host_id}: the one owner of the host (instance, operations, approvals)"
        ),
    }


def entity_start(entity: HostWorkflowInput, task_queue: str) -> WithStartWorkflowOperation[Any, None]:
    """The start half of an update-with-start: the host's entity, created only when missing."""
    return WithStartWorkflowOperation(
        workflow_api.HostWorkflow.run, with_power_watch(entity), **entity_options(entity, task_queue)
    )


class HostEntityClient:
    """Requests to, and reads of, the hosts' entities of one task queue.

    Args:
        client: A connected Temporal client (with metalflow's data converter).
        task_queue: The queue the entities run on (a new entity starts there).
    """

    def __init__(self, client: Client, task_queue: str = names.TASK_QUEUE) -> None:
        self.client = client
        self.task_queue = task_queue

    def handle(self, host_id: str) -> WorkflowHandle[Any, Any]:
        """The entity's handle (whether or not it runs)."""
        return self.client.get_workflow_handle(names.host_workflow_id(host_id))

    def start_operation(self, entity: HostWorkflowInput) -> WithStartWorkflowOperation[Any, None]:
        """The start half of an update-with-start: the host's entity, created only when missing."""
        return entity_start(entity, self.task_queue)

    async def ensure(self, entity: HostWorkflowInput) -> bool:
        """Start the host's entity unless it runs; True when this call started it."""
        return await start_unless_running(
            self.client, workflow_api.HostWorkflow.run, with_power_watch(entity),
            **entity_options(entity, self.task_queue),
        )  # fmt: skip

    async def ask(
        self,
        entity: HostWorkflowInput,
        update: Update[ArgT, ResultT],
        request: ArgT,
        *,
        rpc_timeout: timedelta | None = None,
        accept_within: timedelta | None = None,
    ) -> ResultT:
        """Send `update` to the host's entity, starting the entity when it does not run yet.
        `accept_within`: how long a worker has to take it (a person's command must not hang).

        Raises:
            EntityRefused: The entity refused, with its reason.
            contracts.with_start.NotAccepted: No worker took it within `accept_within` (it may
                still be applied when a worker comes back).
        """
        options: dict[str, Any] = {"accept_within": accept_within}
        if rpc_timeout is not None:
            options["rpc_timeout"] = rpc_timeout
        try:
            answer = await execute_update_with_start(
                self.client, update, request, start=self.start_operation(entity), **options
            )
        except WorkflowUpdateFailedError as err:
            raise _refused(err) from None
        return cast(ResultT, answer)  # the result, not a coroutine (`Update`)

    async def update(self, host_id: str, update: Update[ArgT, ResultT], request: ArgT) -> ResultT:
        """Send `update` to the running entity of `host_id`.

        Raises:
            EntityRefused: The entity refused, with its reason.
            EntityMissing: No entity runs for the host.
        """
        try:
            answer = await execute_update(self.handle(host_id), update, request)
        except WorkflowUpdateFailedError as err:
            raise _refused(err) from None
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise EntityMissing(f"no running {names.host_workflow_id(host_id)}") from None
            raise
        return cast(ResultT, answer)  # the result, not a coroutine (`Update`)

    async def status(self, host_id: str, *, rpc_timeout: timedelta | None = None) -> HostStatus | None:
        """The entity's `status` query; None when the host has no entity."""
        try:
            return await self.handle(host_id).query(workflow_api.HostWorkflow.status, rpc_timeout=rpc_timeout)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return None
            raise

    async def running(self, host_id: str) -> bool:
        """Whether the host's entity runs now."""
        try:
            described = await self.handle(host_id).describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return described.status == WorkflowExecutionStatus.RUNNING


MAINTENANCE_QUERY = (
    f'{names.OPERATION.name} = "{names.HOST}" AND ExecutionStatus = "Running" '
    f"AND {names.MAINTENANCE.name} IS NOT NULL"
)
"""The host entities in maintenance (Temporal visibility: one listing, not one query per host)."""


async def hosts_in_maintenance(
    client: Client, host_ids: Iterable[str]
) -> dict[str, tuple[str, datetime | None]]:
    """Which of `host_ids` are in maintenance, as their entities show it in visibility: host ->
    (who set it, since when). One listing of the entities in maintenance (few: people work on a
    few hosts at a time), filtered here. Visibility trails the entity by a moment; the entity's
    own refusal (`InMaintenance`) is what holds."""
    wanted, found = set(host_ids), {}
    async for execution in client.list_workflows(MAINTENANCE_QUERY):
        attributes = execution.typed_search_attributes
        host = attributes.get(names.HOST_ID) or execution.id.removeprefix(f"{names.HOST}/")
        by = attributes.get(names.MAINTENANCE)
        if host in wanted and by:
            found[host] = (by, attributes.get(names.MAINTENANCE_SINCE))
    return found


ENTITIES_QUERY = f'{names.OPERATION.name} = "{names.HOST}" AND ExecutionStatus = "Running"'
"""The running host entities (their memos: the `carried` entry holds an operator's hold)."""


async def hosts_held_back(
    client: Client, host_ids: Iterable[str]
) -> dict[str, tuple[str, str, datetime | None]]:
    """Which of `host_ids` an operator held automation back on (`AutomationHeldBack`), as their
    entities' memos carry it (`names.CARRIED_MEMO`'s `automation_held_back`): host -> (who, why,
    since when). One listing of the running entities (a page per 1,000), filtered here; the
    entity's own refusal is what holds."""
    wanted, found = set(host_ids), dict[str, tuple[str, str, datetime | None]]()
    async for execution in client.list_workflows(ENTITIES_QUERY):
        host = execution.typed_search_attributes.get(names.HOST_ID) or execution.id.removeprefix(
            f"{names.HOST}/"
        )
        if host not in wanted:
            continue
        carried = await execution.memo_value(names.CARRIED_MEMO, None)
        entry = carried.get("automation_held_back") if isinstance(carried, dict) else None
        if entry:
            hold = AutomationHold.model_validate(entry)
            found[host] = (hold.by, hold.reason, hold.since)
    return found


async def with_maintenance(client: Client, selected: SelectHostsResult) -> SelectHostsResult:
    """A campaign's selection with its hosts in maintenance (`SelectHostsResult.maintenance`) and
    those an operator held automation back on (`held_back`): read by `campaign plan` and the
    campaign's own selection alike, so they cannot disagree (the plan's canary is the start's).

    A server that cannot list workflows at all (UNIMPLEMENTED: Temporal's time-skipping test
    server) gives the selection as it is: each entity still refuses a request while its host is in
    maintenance or held back, and the campaign skips a host so refused. Any other error is raised
    (retried)."""
    try:
        found = await hosts_in_maintenance(client, selected.roster.ids)
        held = await hosts_held_back(client, selected.roster.ids)
    except RPCError as err:
        if err.status != RPCStatusCode.UNIMPLEMENTED:
            raise
        return selected
    if not found and not held:
        return selected
    return selected.model_copy(update={"maintenance": found, "held_back": held})


async def start_unless_running(
    client: Client, run: Callable[[Any, ArgT], Awaitable[Any]], arg: ArgT, **options: Any
) -> bool:
    """Start a workflow unless a run of its id is open; True when this call started it.

    One start request with id conflict policy FAIL, which the server refuses while a run of the
    id is open (`WorkflowAlreadyStartedError`: False) and otherwise starts (a closed run's id is
    reused). Why not USE_EXISTING, which attaches to the open run instead: its answer says
    whether it started one only in a response the SDK keeps private on the handle.
    """
    try:
        await client.start_workflow(
            run, arg, **{**options, "id_conflict_policy": WorkflowIDConflictPolicy.FAIL}
        )
    except WorkflowAlreadyStartedError:
        return False
    return True


def _refused(err: WorkflowUpdateFailedError) -> EntityRefused:
    cause = err.cause
    if isinstance(cause, ApplicationError):
        return EntityRefused(cause.message, cause.type, tuple(cause.details))
    return EntityRefused(str(cause or err))
