"""A host's maintenance in words, and whether a request may start on a host in maintenance: the
entity's rule (`HostEntityState.refuse_request`), which the campaign's selection, `campaign plan`
and the monitor read the same way (issue 39). Pure: no Temporal, no I/O.

Split out of `workflows/host/state.py` (the 550-line house rule); `state` re-exports both names.
"""

from __future__ import annotations

from typing import Any

from contracts.errors import InMaintenance
from contracts.host_requests import EntityRequest, of_operation
from contracts.models.host import Maintenance, OperationRecord, PendingOperation
from contracts.wording import iso_z

__all__ = [
    "approved_in_maintenance",
    "leaves_running",
    "maintenance_refusal",
    "maintenance_words",
    "standing",
]


def maintenance_words(maintenance: Maintenance) -> str:
    """A host's maintenance in words, as every refusal, skip and view says it."""
    return f"in maintenance since {iso_z(maintenance.since)}, set by {maintenance.by}: {maintenance.reason}"


def maintenance_refusal(
    host_id: str,
    maintenance: Maintenance | None,
    kind: EntityRequest[Any],
    in_maintenance: bool,
    *,
    awaiting: str = "",
) -> str | None:
    """May this request start on a host in maintenance? None: yes. Else the refusal in words.

    Every operation request is disruptive (each waits for `approve` on an assigned host: it powers
    the host, its DPUs or DPF's objects), so in maintenance each is refused unless the request
    says `in_maintenance` (an operator's `--in-maintenance`; the monitor and campaigns never say
    it). Read-only commands are no requests and never come here. The same rule holds when an
    approval starts a request (`awaiting`: its workflow id) that awaited approval since before the
    maintenance began: `in_maintenance` is then the request's or the approval's
    (`metalflow approve --in-maintenance`)."""
    if maintenance is None or in_maintenance or not kind.approval:
        return None
    if awaiting:
        return (
            f"host {host_id} is {maintenance_words(maintenance)}; approval of {kind.operation} "
            f"({awaiting}) refused: it was requested without --in-maintenance (to run it anyway: "
            f"metalflow approve {host_id} --in-maintenance; to drop it: metalflow host abort "
            f"{host_id}; to end the maintenance: metalflow host maintenance {host_id} off)"
        )
    return (
        f"host {host_id} is {maintenance_words(maintenance)}; {kind.operation} refused "
        f"(to run it anyway: metalflow host {kind.command} {host_id} --in-maintenance ...; "
        f"to end the maintenance: metalflow host maintenance {host_id} off)"
    )


def approved_in_maintenance(
    host_id: str, maintenance: Maintenance | None, current: PendingOperation, in_maintenance: bool
) -> OperationRecord:
    """An `approve` of `current` (the request awaiting approval), `in_maintenance` or not: the
    record it starts with, or `InMaintenance` naming the maintenance (`maintenance_refusal`, the
    one rule: in maintenance, the request or its approval must say `in_maintenance`). An approval
    that says it on a host in maintenance is recorded with the operation (its history, the Event
    its start tells), as a request that says it is."""
    record = current.record
    asked = current.request.in_maintenance or in_maintenance
    kind = of_operation(record.operation)
    refusal = maintenance_refusal(host_id, maintenance, kind, asked, awaiting=record.workflow_id)
    if refusal is not None:
        raise InMaintenance(refusal, {"by": maintenance.by if maintenance else ""})
    if maintenance is None or not in_maintenance or record.in_maintenance:
        return record
    return record.model_copy(update={"in_maintenance": maintenance_words(maintenance)})


def standing(current: PendingOperation) -> str:
    """Where a pending operation stands, in words."""
    return "is in flight" if current.approved else "awaits approval"


def leaves_running(host_id: str, current: PendingOperation | None) -> str | None:
    """What turning maintenance on does not stop (the operation in flight or awaiting approval),
    in words with how to stop it; None when nothing runs."""
    if current is None:
        return None
    record, held = current.record, current.approved or current.request.in_maintenance
    approve = "" if held else f"; its approval needs: metalflow approve {host_id} --in-maintenance"
    return (
        f"{record.operation} ({record.workflow_id}) {standing(current)} and is not stopped by "
        f"maintenance (stop it with: metalflow host abort {host_id}){approve}"
    )
