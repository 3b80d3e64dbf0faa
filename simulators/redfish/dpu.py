"""DPU BMCs: the BlueField's own system, UpdateService SimpleUpdate and FirmwareInventory.

`SimpleUpdate` stages an image: 202 with a task monitor; staging takes
`firmware_stage_seconds`; the task ends `Completed`, or `Exception` when the image URI is
malformed (no `http`/`https`/`scp` scheme and host, or no version in the file name) or a
failure was injected. The version staged is the first `N.N.N` (optionally `.N`) in the URI's
file name: `http://repo/bf-fw-32.45.1020.bfb` stages `32.45.1020`.

FirmwareInventory lists `BMC_Firmware` and `DPU_NIC` (the running NIC firmware, from the site's
DPU `firmware`), plus `DPU_NIC_Pending` while a staged version waits for activation
(`Status.State` `StandbyOffline`). The staged version becomes `DPU_NIC`'s `Version` at the next
`PowerCycled` of the DPU's host, and `DPU_NIC_Pending` disappears.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from simulators.events import Event, PowerCycled
from simulators.timings import Timings

from . import messages
from .tasks import Task, Tasks

TRANSFER_PROTOCOLS = ("HTTP", "HTTPS", "SCP")
# What a BlueField BMC's `Bluefield` System takes: restarts of the DPU's Arm cores, which leave
# the host's power alone (the host powers the DPU).
DPU_RESET_TYPES = ("GracefulRestart", "ForceRestart", "GracefulShutdown")
SYSTEM_ID = "Bluefield"
BMC_FIRMWARE = {"BF3": "BF-24.10-24", "BF4": "BF-25.04-7"}
_VERSION = re.compile(r"\d+\.\d+\.\d+(?:\.\d+)?")


class DPUBMC:
    """The state of one DPU's BMC."""

    __slots__ = (
        "dpu_id", "host_id", "model", "running", "staged", "update_task", "fail_next", "timer", "resets"
    )  # fmt: skip

    def __init__(self, dpu_id: str, host_id: str, model: str, firmware: str) -> None:
        self.dpu_id = dpu_id
        self.host_id = host_id
        self.model = model
        self.running = firmware
        self.staged: str | None = None
        self.update_task: Task | None = None
        self.fail_next: str | None = None  # an injected failure for the next update
        self.timer: asyncio.TimerHandle | None = None
        self.resets: dict[str, int] = {}  # resets of the DPU's Arm system, by type


def version_from_uri(image_uri: str) -> str | None:
    """The firmware version an image URI names, or None when the URI is not a usable image."""
    parts = urlsplit(image_uri)
    if parts.scheme.lower() not in ("http", "https", "scp") or not parts.netloc:
        return None
    name = parts.path.rsplit("/", 1)[-1]
    match = _VERSION.search(name)
    return None if match is None else match.group(0)


class Firmware:
    """SimpleUpdate staging and activation for every DPU BMC."""

    def __init__(self, timings: Timings, tasks: Tasks, dpus_by_host: dict[str, list[DPUBMC]]) -> None:
        self._timings = timings
        self._tasks = tasks
        self._dpus_by_host = dpus_by_host

    def on_power_cycled(self, event: Event) -> None:
        """Hub handler: a host power cycle activates its DPUs' staged firmware."""
        if not isinstance(event, PowerCycled):
            return
        for dpu in self._dpus_by_host.get(event.host_id, ()):
            if dpu.staged is not None:
                dpu.running, dpu.staged = dpu.staged, None

    def simple_update(self, dpu: DPUBMC, body: dict[str, Any], prefix: str) -> web.Response:
        """Start staging an image; 202 with the task monitor, or the 400/409 a BMC answers."""
        action = "UpdateService.SimpleUpdate"
        image_uri = body.get("ImageURI")
        if image_uri is None:
            return messages.action_parameter_missing(action, "ImageURI")
        if not isinstance(image_uri, str):
            return _parameter_type_error("ImageURI", image_uri, action)
        protocol = body.get("TransferProtocol")
        if protocol is not None and protocol not in TRANSFER_PROTOCOLS:
            return messages.error_response(
                400,
                "ActionParameterValueNotInList",
                f"The value '{protocol}' for the parameter TransferProtocol in the action {action} is not "
                "in the list of acceptable values.",
                args=[str(protocol), "TransferProtocol", action],
                resolution=f"Choose a value from {', '.join(TRANSFER_PROTOCOLS)} and resubmit the request.",
            )
        unknown = sorted(set(body) - {"ImageURI", "TransferProtocol", "Targets", "Username", "Password"})
        if unknown:
            return messages.error_response(
                400,
                "ActionParameterNotSupported",
                f"The parameter {unknown[0]} for the action {action} is not supported on the target "
                "resource.",
                args=[unknown[0], action],
                resolution="Remove the parameter supplied and resubmit the request if the operation failed.",
            )
        if dpu.update_task is not None:
            return messages.resource_in_use(
                f"A firmware update is already in progress (task {dpu.update_task.id}); "
                "wait for it to finish and retry."
            )
        seconds = self._timings.firmware_stage_seconds
        task = self._tasks.new(dpu.dpu_id, prefix, "Firmware update (SimpleUpdate)", seconds)
        dpu.update_task = task
        loop = asyncio.get_running_loop()
        dpu.timer = loop.call_later(seconds, self._finish, dpu, image_uri)
        retry = max(1, round(min(seconds, 30)))
        return messages.json_response(
            task.body(), status=202, headers={"Location": task.uri, "Retry-After": str(retry)}
        )

    def _finish(self, dpu: DPUBMC, image_uri: str) -> None:
        task = dpu.update_task
        dpu.update_task, dpu.timer = None, None
        if task is None:
            return
        version = version_from_uri(image_uri)
        if dpu.fail_next is not None:
            task.fail(dpu.fail_next)
            dpu.fail_next = None
        elif version is None:
            task.fail(
                f"The image at '{image_uri}' could not be used: the URI must be http, https or scp with "
                "a host, and its file name must carry the firmware version (e.g. bf-fw-32.45.1020.bfb)."
            )
        else:
            dpu.staged = version
            task.complete(
                f"The firmware image {version} was staged for DPU_NIC; it becomes active at the next "
                "power cycle of the host."
            )

    def cancel(self, dpu: DPUBMC) -> None:
        if dpu.timer is not None:
            dpu.timer.cancel()
            dpu.timer = None


def _parameter_type_error(name: str, value: Any, action: str) -> web.Response:
    return messages.error_response(
        400,
        "ActionParameterValueTypeError",
        f"The value '{value!r}' for the parameter {name} in the action {action} is of a different type "
        "than the parameter can accept.",
        args=[repr(value), name, action],
        resolution="Correct the value for the parameter in the request body and resubmit the request.",
    )


def inventory_members(dpu: DPUBMC) -> list[str]:
    members = ["BMC_Firmware", "DPU_NIC"]
    if dpu.staged is not None:
        members.append("DPU_NIC_Pending")
    return members


def inventory_item(dpu: DPUBMC, item_id: str, prefix: str) -> dict[str, Any] | None:
    """One SoftwareInventory resource, or None when the DPU has no such component now."""
    if item_id == "BMC_Firmware":
        name, version, state = "BMC firmware", BMC_FIRMWARE.get(dpu.model, "BF-24.10-24"), "Enabled"
    elif item_id == "DPU_NIC":
        name, version, state = "DPU NIC firmware", dpu.running, "Enabled"
    elif item_id == "DPU_NIC_Pending" and dpu.staged is not None:
        name, version, state = "DPU NIC firmware (staged, pending activation)", dpu.staged, "StandbyOffline"
    else:
        return None
    return {
        "@odata.id": f"{prefix}/redfish/v1/UpdateService/FirmwareInventory/{item_id}",
        "@odata.type": "#SoftwareInventory.v1_10_0.SoftwareInventory",
        "Id": item_id,
        "Name": name,
        "Manufacturer": "NVIDIA",
        "SoftwareId": item_id.removesuffix("_Pending"),
        "Version": version,
        "Updateable": item_id != "BMC_Firmware",
        "WriteProtected": False,
        "Status": {"State": state, "Health": "OK"},
    }


def system_body(dpu: DPUBMC, prefix: str, host_power: str) -> dict[str, Any]:
    """The DPU's ARM system; it is powered by its host, so its PowerState follows the host's."""
    return {
        "@odata.id": f"{prefix}/redfish/v1/Systems/{SYSTEM_ID}",
        "@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem",
        "Id": SYSTEM_ID,
        "Name": "Bluefield",
        "SystemType": "DPU",
        "Manufacturer": "NVIDIA",
        "Model": f"BlueField-{dpu.model[-1]} DPU",
        "SerialNumber": f"SN-{dpu.dpu_id}",
        "PowerState": host_power,
        "Status": {"State": "Enabled" if host_power == "On" else "StandbyOffline", "Health": "OK"},
        "Actions": {
            "#ComputerSystem.Reset": {
                "target": f"{prefix}/redfish/v1/Systems/{SYSTEM_ID}/Actions/ComputerSystem.Reset",
                "ResetType@Redfish.AllowableValues": list(DPU_RESET_TYPES),
                "@Redfish.ActionInfo": f"{prefix}/redfish/v1/Systems/{SYSTEM_ID}/ResetActionInfo",
            }
        },
        "Links": {"Chassis": [], "ManagedBy": []},
    }


def reset_action_info() -> dict[str, Any]:
    return {
        "@odata.id": f"/redfish/v1/Systems/{SYSTEM_ID}/ResetActionInfo",
        "@odata.type": "#ActionInfo.v1_4_2.ActionInfo",
        "Id": "ResetActionInfo",
        "Name": "Reset Action Info",
        "Parameters": [
            {
                "Name": "ResetType",
                "Required": True,
                "DataType": "String",
                "AllowableValues": list(DPU_RESET_TYPES),
            }
        ],
    }


def reset(dpu: DPUBMC, reset_type: object) -> web.Response:
    """A reset of the DPU's Arm system: counted, answered 204; the host's power is not touched."""
    action = "ComputerSystem.Reset"
    if reset_type is None:
        return messages.action_parameter_missing(action, "ResetType")
    if not isinstance(reset_type, str) or reset_type not in DPU_RESET_TYPES:
        return messages.error_response(
            400,
            "ActionParameterNotSupported",
            f"The parameter ResetType for the action {action} is not supported on the target resource: "
            f"{reset_type!r} is not one of {', '.join(DPU_RESET_TYPES)}.",
            args=["ResetType", action],
            resolution="Remove the parameter supplied and resubmit the request if the operation failed.",
        )
    dpu.resets[reset_type] = dpu.resets.get(reset_type, 0) + 1
    return web.Response(status=204, headers={"OData-Version": "4.0"})


def update_service_body(prefix: str) -> dict[str, Any]:
    base = f"{prefix}/redfish/v1/UpdateService"
    return {
        "@odata.id": base,
        "@odata.type": "#UpdateService.v1_11_0.UpdateService",
        "Id": "UpdateService",
        "Name": "Update Service",
        "ServiceEnabled": True,
        "Status": {"State": "Enabled", "Health": "OK"},
        "FirmwareInventory": {"@odata.id": f"{base}/FirmwareInventory"},
        "Actions": {
            "#UpdateService.SimpleUpdate": {
                "target": f"{base}/Actions/UpdateService.SimpleUpdate",
                "TransferProtocol@Redfish.AllowableValues": list(TRANSFER_PROTOCOLS),
            }
        },
    }
