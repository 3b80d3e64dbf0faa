"""Names shared by every part of metalflow: the task queue, search attributes, workflow ids.

One place on purpose: the dev server registration, docker-compose.temporal.yml, the worker, the
CLI and the tests all read these, so a renamed attribute cannot drift between them.

Workflow ids are business keys (ARCHITECTURE.md "How an operation flows"): the id is the lock,
so a second request for the same host is refused while the first runs.
"""

from __future__ import annotations

import re
from typing import Final

from temporalio.common import SearchAttributeIndexedValueType, SearchAttributeKey

TASK_QUEUE: Final = "metalflow"
DEFAULT_NAMESPACE: Final = "default"

HOST_ID: Final = SearchAttributeKey.for_keyword("HostId")
OPERATION: Final = SearchAttributeKey.for_keyword("Operation")
PHASE: Final = SearchAttributeKey.for_keyword("Phase")
CAMPAIGN: Final = SearchAttributeKey.for_keyword("Campaign")
SITE: Final = SearchAttributeKey.for_keyword("Site")

SEARCH_ATTRIBUTES: Final[tuple[SearchAttributeKey[str], ...]] = (HOST_ID, OPERATION, PHASE, CAMPAIGN, SITE)
"""Every custom search attribute metalflow sets; each must be registered on the namespace."""

_TYPE_NAMES: Final = {
    SearchAttributeIndexedValueType.TEXT: "Text",
    SearchAttributeIndexedValueType.KEYWORD: "Keyword",
    SearchAttributeIndexedValueType.INT: "Int",
    SearchAttributeIndexedValueType.DOUBLE: "Double",
    SearchAttributeIndexedValueType.BOOL: "Bool",
    SearchAttributeIndexedValueType.DATETIME: "Datetime",
    SearchAttributeIndexedValueType.KEYWORD_LIST: "KeywordList",
}

# Ids end up in URLs of the Temporal UI and in `temporal workflow` commands; keep them to a
# conservative alphabet so they never need quoting.
_ID_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def search_attribute_types() -> dict[str, str]:
    """Return ``{name: type}`` for every metalflow search attribute, types as Temporal spells them.

    Returns:
        For example ``{"HostId": "Keyword", ...}``, the form `temporal server start-dev
        --search-attribute` and `temporal operator search-attribute create` take.
    """
    return {key.name: _TYPE_NAMES[key.indexed_value_type] for key in SEARCH_ATTRIBUTES}


def _checked(kind: str, value: str) -> str:
    if not _ID_PART.fullmatch(value):
        raise ValueError(
            f"invalid {kind} {value!r}: use letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return value


def host_operation_workflow_id(operation: str, host_id: str) -> str:
    """Workflow id of an operation on one host, e.g. ``reprovision/host-h001``.

    Args:
        operation: The operation name (``reprovision``, ``firmware``, ...).
        host_id: The host's id in the site.
    """
    return f"{_checked('operation', operation)}/host-{_checked('host id', host_id)}"


def reprovision_workflow_id(host_id: str) -> str:
    """Workflow id of the reprovisioning of one host: ``reprovision/host-<id>``."""
    return host_operation_workflow_id("reprovision", host_id)


def rollout_workflow_id(namespace: str, pcs_name: str) -> str:
    """Workflow id of a PodCliqueSet rollout: ``rollout/<namespace>/<pcs>``."""
    return f"rollout/{_checked('namespace', namespace)}/{_checked('PodCliqueSet name', pcs_name)}"


def campaign_workflow_id(name: str) -> str:
    """Workflow id of a fleet campaign: ``campaign/<name>``."""
    return f"campaign/{_checked('campaign name', name)}"


def demo_workflow_id(run: str) -> str:
    """Workflow id of one run of the foundation demo: ``demo/<run>``."""
    return f"demo/{_checked('demo run', run)}"
