"""Where a running operation is, read from Temporal for `host status` and `--wait`: its own
`status` query (`operation_status`, `running_status`), the one line a person reads
(`describe_operation`, `waiting_words`), and for a workflow without a status query (a reboot)
its Phase and current details (`operation_progress`); an operation that waits on its reboot
child says what that reboot waits for (`with_its_reboot`). Reads only: no write, no BMC request.
`metalflow.hosts` follows an operation to its end with these.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.client import Client, WorkflowQueryFailedError, WorkflowQueryRejectedError
from temporalio.service import RPCError

from contracts import names
from contracts.models.control import STATUS_QUERY
from contracts.models.host import MANUAL_INTERVENTION_REQUIRED
from contracts.models.redfish import PowerCycleProgress
from contracts.wording import plural
from contracts.wording import with_its_reboot as its_reboot_words
from metalflow.cancelled import METADATA_QUERY
from metalflow.seen import (
    _POWER_DOWN_WAIT,
    Seen,
    as_running,
    power_cycle_trouble,
    seen_without_status,
    with_trouble,
)

QUERY_TIMEOUT = timedelta(seconds=10)  # a query nobody answers (no worker) must not hang the CLI
POWER_CYCLE_ACTIVITY = "power_cycle_host"  # `contracts.activity_api.power_cycle_host`'s name


async def operation_status(client: Client, workflow_id: str) -> dict[str, Any] | None:
    """An operation's own `status` query as plain data; None while it cannot answer yet."""
    try:
        status: dict[str, Any] = await client.get_workflow_handle(workflow_id).query(
            STATUS_QUERY, rpc_timeout=QUERY_TIMEOUT
        )
    except (RPCError, WorkflowQueryFailedError, WorkflowQueryRejectedError):
        return None
    return status


async def running_status(client: Client, workflow_id: str) -> dict[str, Any] | None:
    """`operation_status` of an operation its host records as running (`as_running`)."""
    status = await operation_status(client, workflow_id)
    return None if status is None else as_running(status)


def waiting_words(status: dict[str, Any]) -> str:
    """What an operation's `status` says it waits for: "an operator: ..." in a manual intervention,
    its reason said once (the line's `MANUAL INTERVENTION: <reason>` says it), or the run's words
    (a reset's "the host H is OFF: ..." once read "waiting for the host H is OFF: ...")."""
    waiting = str(status.get("waiting_for") or "")
    reason = str(status.get("manual_intervention_reason") or "")
    if reason and waiting.startswith(reason):
        rest = waiting[len(reason) :].lstrip(". ")
        return f"an operator: {rest[:1].lower()}{rest[1:]}" if rest else "an operator"
    person = waiting and status.get("phase") == MANUAL_INTERVENTION_REQUIRED
    return f"an operator: {waiting}" if person else waiting


def describe_operation(status: dict[str, Any], *, waiting: bool = True) -> str:
    """One line for a person: the phase, what it waits for, the DPUs' phases, power cycles."""
    parts = [str(status.get("phase", "?"))]
    if waiting and (waits := waiting_words(status)):
        parts.append(f"waiting for {waits}")
    dpus = status.get("dpus") or []
    phases = [d.get("phase") or "-" for d in dpus]
    if phases and len(set(phases)) == 1:
        parts.append(f"{plural(len(phases), 'DPU')} {phases[0]}")
    elif phases:
        parts.append(", ".join(f"{d.get('dpu_id')} {phase}" for d, phase in zip(dpus, phases, strict=True)))
    if "power_cycles_issued" in status:
        # Resets the BMC accepted; attempts apart once the BMC refused one: the reboot in flight
        # (counted as started) is no refusal (it read "0 power cycles (1 reboot attempt)").
        cycles, attempts = int(status["power_cycles_issued"]), int(status.get("reboot_attempts") or 0)
        in_flight = 1 if status.get("phase") in WAITS_ON_ITS_REBOOT else 0
        shown = plural(cycles, "power cycle")
        refused = attempts - in_flight > cycles
        parts.append(shown + (f" ({plural(attempts, 'reboot attempt')})" if refused else ""))
    if status.get("manual_intervention_reason"):
        parts.append(f"MANUAL INTERVENTION: {status['manual_intervention_reason']}")
    if status.get("site_check"):  # started under a degraded verdict of the kept site check
        parts.append("site check: " + "; ".join(status["site_check"]))
    return "; ".join(parts)


WAITS_ON_ITS_REBOOT = ("rebooting-host", "power-cycling")
"""The phases in which an operation waits on its reboot child: a reset's `--host` and a
provision's or reprovision's reboot round (`rebooting-host`), a firmware run (`power-cycling`)."""


def reboot_child_of(status: dict[str, Any], host_id: str) -> str | None:
    """The reboot child an operation's status waits on: by `rebooting_to` (a host operation's
    round) or its `boot_generation` (a reset's, a firmware run's: the child's once started).
    None outside `WAITS_ON_ITS_REBOOT`."""
    if status.get("phase") not in WAITS_ON_ITS_REBOOT:
        return None
    generation = status.get("rebooting_to") or status.get("boot_generation")
    if not isinstance(generation, int) or generation < 1:
        return None
    return names.host_reboot_workflow_id(host_id, generation)


async def with_its_reboot(
    client: Client, status: dict[str, Any], host_id: str
) -> tuple[dict[str, Any], Seen | None]:
    """An operation that waits on its reboot child says, after its own words, what that reboot
    waits for: `...; its reboot reboot/HOST/generation-N: PHASE: DETAILS`, e.g. its power-down
    wait with when the host went Off and when it is turned On (a reset's own status said only
    "power cycle of HOST to generation N"). The same words in `host status`'s "now" and
    `--wait` (both read the status through here). Returns the status and the reboot as seen.

    Cost: per status read in `WAITS_ON_ITS_REBOOT` only, what `operation_progress` asks of the
    reboot (its `status` query, which it has not, a describe and a metadata query); no BMC
    request, no write."""
    reboot = reboot_child_of(status, host_id)
    if reboot is None:
        return status, None
    seen = await operation_progress(client, reboot, host_id)
    said = seen.waiting_for or seen.details if seen is not None else ""
    if seen is None or not said:
        return status, seen
    waiting = its_reboot_words(str(status.get("waiting_for") or ""), reboot, seen.phase, said)
    return {**status, "waiting_for": waiting}, seen


async def operation_progress(client: Client, workflow_id: str, host_id: str) -> Seen | None:
    """Where an operation is: its `status` query, or for one without (a reboot) its Phase and
    current details, and what its pending power cycle says of a BMC that does not answer or of a
    failed attempt (`power_cycle_trouble`); None while it cannot say yet.

    Cost: one query, or a describe and a query when the workflow has no `status` (the pending
    power cycle is read from that describe: nothing extra)."""
    status = await running_status(client, workflow_id)
    if status:
        status, reboot = await with_its_reboot(client, status, host_id)
        waiting = waiting_words(status)
        phase = str(status.get("phase", ""))
        milestone = f"{phase} {status.get('power_cycles_issued')} {status.get('manual_intervention_reason')}"
        if reboot is not None:  # the reboot's phase, its power-down wait and BMC trouble beginning: steps
            off_wait = reboot.details.startswith(_POWER_DOWN_WAIT)
            milestone += f" {reboot.phase} {off_wait} {bool(reboot.trouble)}"
        return Seen(describe_operation(status, waiting=False), waiting, phase=phase, milestone=milestone)
    handle = client.get_workflow_handle(workflow_id)
    try:
        described = await handle.describe(rpc_timeout=QUERY_TIMEOUT)
    except RPCError:
        return None
    shown = described.typed_search_attributes.get(names.PHASE)
    if not shown:
        return None
    details: str | None = None  # None: not read (no worker answered: the phase alone)
    try:
        metadata = await handle.query(METADATA_QUERY, result_type=WorkflowMetadata, rpc_timeout=QUERY_TIMEOUT)
        details = metadata.current_details
    except (RPCError, WorkflowQueryFailedError, WorkflowQueryRejectedError):
        pass  # the phase alone still says where it is
    seen = seen_without_status(shown, details, host_id)
    trouble = await _power_cycle_trouble(client, described.raw_description.pending_activities)
    return with_trouble(seen, trouble)


async def _power_cycle_trouble(client: Client, pending: Sequence[PendingActivityInfo]) -> str:
    """`power_cycle_trouble`'s words for a reboot's pending `power_cycle_host` ("" none): its BMC
    not answering (its heartbeat details) or an attempt after a failed one. Cost: none extra (the
    describe `operation_progress` made holds the pending activities, their details, attempt and
    last failure); decoding the details only."""
    cycle = next((p for p in pending if p.activity_type.name == POWER_CYCLE_ACTIVITY), None)
    if cycle is None:
        return ""
    progress: PowerCycleProgress | None = None
    if cycle.heartbeat_details.payloads:
        try:
            payloads = cycle.heartbeat_details.payloads
            decoded = await client.data_converter.decode(payloads, [PowerCycleProgress])
        except (ValueError, TypeError):  # details of another shape (an older worker's): no words
            decoded = []
        progress = decoded[0] if decoded and isinstance(decoded[0], PowerCycleProgress) else None
    failure = cycle.last_failure.message if cycle.HasField("last_failure") else ""
    return power_cycle_trouble(progress, cycle.attempt, cycle.maximum_attempts, failure, datetime.now(UTC))
