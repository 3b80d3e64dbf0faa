"""DPU firmware through the DPU's own BMC: read running/staged versions, stage an image.

The functions behind the activities `read_dpu_firmware_versions` and `stage_dpu_firmware`
(`activities/redfish/firmware.py`). Staging is idempotent: it is
skipped when the FirmwareInventory already shows the target version staged or running, so a
retry after a crash (or a second request) never stages twice. A retry that meets the first
attempt's update still running gets 409 from the BMC (`BMCUnavailable`, retried) and then finds
it staged. A staged image becomes running at the next power cycle of the host
(`power_cycle_host` on the host's BMC).

Which inventory member is which: a member whose `SoftwareId` (or `Id`, minus a `_Pending`
suffix) is the component asked for (default `DPU_NIC`) is running when its `Status.State` is
`Enabled` (or absent), and staged when it is `StandbyOffline` or its `Id` ends in `Pending`.
"""

from __future__ import annotations

import time
from typing import Any

from contracts.errors import BMCRequestRejected
from contracts.models.redfish import (
    FirmwareComponent,
    FirmwareVersions,
    StageFirmwareInput,
    StageFirmwareResult,
)
from drivers.redfish.answers import odata_id, required_link
from drivers.redfish.connection import BMCConnection
from drivers.redfish.tasks import follow_task

_STAGED_STATES = frozenset({"StandbyOffline", "StandbySpare", "UnavailableOffline"})


async def _update_service(connection: BMCConnection) -> dict[str, Any]:
    root = await connection.service_root()
    return await connection.get(required_link(connection, root, "UpdateService", "the service root"))


async def read_versions(connection: BMCConnection, component: str) -> FirmwareVersions:
    """Every FirmwareInventory member, and the running and staged version of `component`."""
    service = await _update_service(connection)
    inventory_link = required_link(connection, service, "FirmwareInventory", "the UpdateService")
    members = (await connection.get(inventory_link)).get("Members")
    components: list[FirmwareComponent] = []
    for member in members if isinstance(members, list) else []:
        link = odata_id(member)
        if link is None:
            continue
        body = await connection.get(link)
        status = body.get("Status")
        state = status.get("State") if isinstance(status, dict) else None
        components.append(
            FirmwareComponent(
                id=str(body.get("Id", link.rsplit("/", 1)[-1])),
                software_id=body.get("SoftwareId") if isinstance(body.get("SoftwareId"), str) else None,
                version=body.get("Version") if isinstance(body.get("Version"), str) else None,
                state=state if isinstance(state, str) else None,
                name=body.get("Name") if isinstance(body.get("Name"), str) else None,
            )
        )
    running: str | None = None
    staged: str | None = None
    for item in components:
        if (item.software_id or item.id.removesuffix("_Pending")) != component:
            continue
        if item.state in _STAGED_STATES or item.id.endswith("Pending"):
            staged = item.version
        elif running is None:
            running = item.version
    return FirmwareVersions(
        bmc_id=connection.bmc_id,
        component=component,
        running=running,
        staged=staged,
        components=tuple(components),
    )


async def stage(connection: BMCConnection, request: StageFirmwareInput) -> StageFirmwareResult:
    """SimpleUpdate the image unless its version is already staged or running; verify it staged."""
    before = await read_versions(connection, request.component)
    if before.running == request.version or before.staged == request.version:
        outcome = "already_running" if before.running == request.version else "already_staged"
        return StageFirmwareResult(
            bmc_id=connection.bmc_id, version=request.version, outcome=outcome,
            running=before.running, staged=before.staged,
        )  # fmt: skip
    service = await _update_service(connection)
    action = (service.get("Actions") or {}).get("#UpdateService.SimpleUpdate")
    target = action.get("target") if isinstance(action, dict) else None
    if not isinstance(target, str):
        raise BMCRequestRejected(f"BMC {connection.bmc_id}: the UpdateService offers no SimpleUpdate action")
    body: dict[str, Any] = {"ImageURI": request.image_uri}
    if request.transfer_protocol is not None:
        body["TransferProtocol"] = request.transfer_protocol
    deadline = time.monotonic() + request.timeout_seconds
    response = await connection.post(target, body)
    monitor = response.headers.get("Location")
    task = await follow_task(connection, response, deadline)
    after = await read_versions(connection, request.component)
    if after.staged != request.version and after.running != request.version:
        raise BMCRequestRejected(
            f"BMC {connection.bmc_id}: SimpleUpdate of {request.image_uri} finished, but FirmwareInventory "
            f"shows {request.component} running {after.running}, staged {after.staged}, not {request.version}"
        )
    return StageFirmwareResult(
        bmc_id=connection.bmc_id,
        version=request.version,
        outcome="staged",
        task=monitor,
        task_state=None if task is None else task.get("TaskState"),
        running=after.running,
        staged=after.staged,
    )
