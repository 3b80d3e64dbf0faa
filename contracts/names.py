"""Names shared by every part of metalflow: the task queue, search attributes, workflow ids.

One place on purpose: the dev server registration, docker-compose.temporal.yml, the worker, the
CLI and the tests all read these, so a renamed attribute cannot drift between them.

Workflow ids are business keys (docs/ARCHITECTURE.md section 2, "How a request flows"): the id is the lock,
so a second request for the same host is refused while the first runs.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Final
from urllib.parse import urlsplit

from temporalio.common import SearchAttributeIndexedValueType, SearchAttributeKey

TASK_QUEUE: Final = "metalflow"
DEFAULT_NAMESPACE: Final = "default"

HOST_ID: Final = SearchAttributeKey.for_keyword("HostId")
OPERATION: Final = SearchAttributeKey.for_keyword("Operation")
PHASE: Final = SearchAttributeKey.for_keyword("Phase")
CAMPAIGN: Final = SearchAttributeKey.for_keyword("Campaign")
SITE: Final = SearchAttributeKey.for_keyword("Site")
POOL_STATE: Final = SearchAttributeKey.for_keyword("PoolState")
"""`in-pool` or `out-of-pool`: set by a host's monitor, so the UI lists hosts taken out of service."""
INSTANCE: Final = SearchAttributeKey.for_keyword("Instance")
"""The instance a host's entity has assigned (unset when none): `host list` reads it from visibility."""
PHASE_SINCE: Final = SearchAttributeKey.for_datetime("PhaseSince")
"""When a host's entity entered its Phase: `host list` shows how long without asking the entity."""
BFB_VERSION: Final = SearchAttributeKey.for_keyword_list("BfbVersion")
"""Every BFB a host's DPUs run, as its entity last read them after an operation (`unknown` for a
DPU whose BFB could not be read): `BfbVersion = "bf-bundle-2.9.1"` lists the hosts with a DPU on
it. A list, not one keyword, because the DPUs of one host can run different BFBs. The rest of
the versions are in the entity's memo (`workflows/host/versions.py`), not searchable."""

MAINTENANCE: Final = SearchAttributeKey.for_keyword("Maintenance")
"""Who put a host in maintenance (`metalflow host maintenance HOST on --by ...`), set by its entity
while the host is in maintenance and unset after: `Maintenance IS NOT NULL` lists those hosts."""
MAINTENANCE_SINCE: Final = SearchAttributeKey.for_datetime("MaintenanceSince")
"""Since when a host is in maintenance (unset while it is not): the metric and its alert read it."""

LEFT_OFF_BY: Final = SearchAttributeKey.for_keyword("LeftOffBy")
"""The run a host's entity holds as having left the host OFF (its `left_off_by`, busy or idle),
set by the entity when the mark is set or moves and unset when it clears: rare, and shown in the
same upsert as the Phase the end brings (no event more). Searchable because a terminated entity
writes nothing at its end: `host list` lists closed entity runs with it (`LeftOffBy IS NOT NULL`)
whose host has no running entity, as `no entity (host may be OFF)`."""

LEFT_OFF_MEMO: Final = "left_off"
"""Memo entry of a host's entity: the run whose outcome says it left the host OFF, while the host
is idle after it (absent otherwise). In the memo, not a search attribute: `host list` reads it
from the same visibility listing, and nothing needs registering on the namespace."""

MAYBE_OFF_MEMO: Final = "maybe_off"
"""Memo entry of a host's entity: the run whose end had the host's power read and not answered (the
host may be OFF), while the host is idle and no reading has decided it since (absent otherwise):
`host list` shows `idle (host may be OFF)`, from the same listing as `left_off`."""

AWAITING_MEMO: Final = "awaiting"
"""Memo entry of a host's entity: the operation its request awaiting approval would run (e.g.
`reprovision`), while one awaits (absent otherwise): `host list` names it in the OPERATION column
of a host in phase `awaiting-approval`, from the same listing. In the memo like `left_off`: nothing
to register, and written only when a request starts or stops awaiting (approvals are rare)."""

CARRIED_MEMO: Final = "carried"
"""Memo entry of a host's entity: what must outlive its run (the boot generation, the run that left
the host OFF, maintenance, an operator's hold on automation), written when it changes. A
terminated entity leaves its last memo: the next entity of the host reads it once at its start
(`read_entity_predecessor`, workflows/host/takeover_rules.py) and carries it on."""

SEARCH_ATTRIBUTES: Final[tuple[SearchAttributeKey[Any], ...]] = (
    HOST_ID,
    OPERATION,
    PHASE,
    CAMPAIGN,
    SITE,
    POOL_STATE,
    INSTANCE,
    PHASE_SINCE,
    BFB_VERSION,
    MAINTENANCE,
    MAINTENANCE_SINCE,
    LEFT_OFF_BY,
)
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
    """Workflow id of an operation on one host, e.g. ``reprovision/host-001``."""
    return f"{_checked('operation', operation)}/{_checked('host id', host_id)}"


# Operations on a host; each is also the `Operation` search attribute of its workflow.
PROVISION: Final = "provision"
REPROVISION: Final = "reprovision"
FIRMWARE: Final = "firmware"
REBOOT: Final = "reboot"
REMOVE: Final = "remove"
MONITOR: Final = "monitor"
HOST: Final = "host"
ROLLOUT: Final = "rollout"
"""The `Operation` search attribute of a coherent PodCliqueSet rollout."""
CAMPAIGN_OPERATION: Final = "campaign"
"""The `Operation` search attribute of a fleet campaign (its `Campaign` attribute is its name)."""
CAMPAIGN_CLAIMS: Final = "campaign-claims"
"""The `Operation` search attribute, and the workflow id, of the registry of which running
campaign holds which host (`workflows/campaign_claims/workflow.py`)."""


def host_workflow_id(host_id: str) -> str:
    """Workflow id of a host's entity workflow, the one owner of the host: ``host/<id>``."""
    return f"host/{_checked('host id', host_id)}"


def host_reboot_workflow_id(host_id: str, boot_generation: int) -> str:
    """Workflow id of one reboot: ``reboot/<id>/generation-<n>``.

    The boot generation is the number of reboots owed: asking twice for the same generation
    finds the same workflow, so the host reboots once.
    """
    if boot_generation < 1:
        raise ValueError(f"invalid boot generation {boot_generation}: generations start at 1")
    return f"{host_operation_workflow_id(REBOOT, host_id)}/generation-{boot_generation}"


DPF_WATCH: Final = "dpf-watch"
"""The `Operation` search attribute of a site's DPF watch."""


def dpf_watch_workflow_id(namespace: str, task_queue: str = TASK_QUEUE) -> str:
    """Workflow id of the DPF watch of one site (its DPF namespace): ``dpf-watch/<namespace>``,
    with ``/<task queue>`` for a queue other than metalflow's (workers of another queue serve
    another deployment, so they keep a watch of their own)."""
    base = f"{DPF_WATCH}/{_checked('namespace', namespace)}"
    return base if task_queue == TASK_QUEUE else f"{base}/{task_queue}"


def monitor_workflow_id(host_id: str) -> str:
    """Workflow id of a host's long-running monitor: ``monitor/host-<id>``.

    A monitor runs for months and is found by this id (a second start attaches to it)."""
    return f"{MONITOR}/host-{_checked('host id', host_id)}"


def reprovision_workflow_id(host_id: str) -> str:
    """Workflow id of the reprovisioning of one host: ``reprovision/<id>``."""
    return host_operation_workflow_id("reprovision", host_id)


def rollout_workflow_id(namespace: str, pcs_name: str) -> str:
    """Workflow id of a PodCliqueSet rollout: ``rollout/<namespace>/<pcs>``."""
    return f"rollout/{_checked('namespace', namespace)}/{_checked('PodCliqueSet name', pcs_name)}"


def campaign_claims_workflow_id(task_queue: str = TASK_QUEUE) -> str:
    """Workflow id of the registry of campaign claims: ``campaign-claims``, with ``/<task queue>``
    for a queue other than metalflow's (workers of another queue serve another deployment)."""
    return (
        CAMPAIGN_CLAIMS
        if task_queue == TASK_QUEUE
        else f"{CAMPAIGN_CLAIMS}/{_checked('task queue', task_queue)}"
    )


def campaign_workflow_id(name: str) -> str:
    """Workflow id of a fleet campaign: ``campaign/<name>``."""
    return f"campaign/{_checked('campaign name', name)}"


_SCHEDULED_RUN = re.compile(r"(?P<name>.+)-(?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")


def campaign_run_workflow_id(name: str) -> str:
    """Workflow id of a campaign given by name, or of a scheduled run of one: a Schedule appends
    its time to the id it starts (``campaign/<name>-2026-11-22T02:00:00Z``), so the run's name
    ``<name>-2026-11-22T02:00:00Z`` is accepted too."""
    scheduled = _SCHEDULED_RUN.fullmatch(name)
    if scheduled is not None:
        return f"{campaign_workflow_id(scheduled.group('name'))}-{scheduled.group('time')}"
    return campaign_workflow_id(name)


BMC_LEASE: Final = "bmc-lease"
"""The `Operation` search attribute of a BMC's fleet-wide lease workflow."""


def bmc_lease_workflow_id(endpoint: str, task_queue: str) -> str:
    """Workflow id of the fleet-wide lease of one BMC: ``bmc-lease/<24 hex digits>``.

    The digits are a SHA-256 of the endpoint's origin (scheme, host, port; lower case, default
    port filled in: `bmc_origin`) and the task queue, so hosts behind one BMC share one lease,
    nothing of the URL (a user name in it, an odd character) lands in an id, the UI or a log,
    and the lease is served by the workers that ask for it (one fleet polls one task queue).
    """
    digest = hashlib.sha256(f"{task_queue}\n{bmc_origin(endpoint)}".encode()).hexdigest()
    return f"{BMC_LEASE}/{digest[:24]}"


def bmc_origin(endpoint: str) -> str:
    """The BMC an endpoint reaches: its origin, `scheme://host:port` (lower case, default port
    filled in). Two endpoints of one origin are one BMC (several Systems behind it)."""
    parts = urlsplit(endpoint.strip())
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        raise ValueError("invalid BMC endpoint: its port is not a number from 0 to 65535") from None
    host = (parts.hostname or "").lower()
    if scheme not in ("http", "https") or not host:
        raise ValueError("invalid BMC endpoint: not an http(s) URL with a host")
    return f"{scheme}://{host}:{port or (443 if scheme == 'https' else 80)}"
