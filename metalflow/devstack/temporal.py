"""Talking to the dev stack's Temporal: readiness, search attribute registration, worker pollers."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from temporalio.api.enums.v1 import IndexedValueType, TaskQueueKind, TaskQueueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest, DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.common import SearchAttributeKey


class SearchAttributeConflictError(RuntimeError):
    """The namespace already has a metalflow search attribute with another type."""


async def namespace_exists(client: Client) -> bool:
    """True once the server answers for the client's namespace."""
    await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace=client.namespace))
    return True


async def ensure_search_attributes(client: Client, keys: Iterable[SearchAttributeKey[Any]]) -> list[str]:
    """Register the search attributes the namespace lacks; safe to call on every start.

    The dev server's ``--search-attribute`` flags only apply to a new database, so a state dir
    created by an older metalflow still gets attributes added later.

    Returns:
        The names that were added (empty when all existed).

    Raises:
        SearchAttributeConflictError: One exists with a different type.
    """
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace)
    )
    existing = dict(listed.custom_attributes)
    missing: dict[str, IndexedValueType.ValueType] = {}
    keys = list(keys)
    for key in keys:
        wanted = IndexedValueType.ValueType(int(key.indexed_value_type))
        if key.name not in existing:
            missing[key.name] = wanted
        elif existing[key.name] != wanted:
            raise SearchAttributeConflictError(
                f"search attribute {key.name} exists in namespace {client.namespace} with type "
                f"{IndexedValueType.Name(existing[key.name])}, "
                f"metalflow needs {IndexedValueType.Name(wanted)}"
            )
    await add_search_attributes(client, [key for key in keys if key.name in missing])
    return sorted(missing)


async def add_search_attributes(client: Client, keys: Iterable[SearchAttributeKey[Any]]) -> None:
    """Register search attributes without listing first (the time-skipping test server can add
    but not list them); the server refuses ones that already exist."""
    wanted = {key.name: IndexedValueType.ValueType(int(key.indexed_value_type)) for key in keys}
    if wanted:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(namespace=client.namespace, search_attributes=wanted)
        )


async def has_poller(client: Client, task_queue: str, identity_prefix: str) -> bool:
    """True when a worker whose identity starts with ``identity_prefix`` polls both the workflow
    and the activity side of ``task_queue``.

    Matching the identity (``<pid>@<host>`` by default) keeps a previous run's worker, which the
    server remembers for a few minutes, from passing for the new one.
    """
    for queue_type in (TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY):
        described = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=client.namespace,
                task_queue=TaskQueue(name=task_queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
                task_queue_type=queue_type,
            )
        )
        if not any(poller.identity.startswith(identity_prefix) for poller in described.pollers):
            return False
    return True
