"""DPU BMCs: the BlueField's own system, UpdateService SimpleUpdate and FirmwareInventory.

The `Bluefield` System follows the BlueField BMC as NVIDIA documents it (BEHAVIOUR.md beside this
file has one row per behaviour with its source): `ForceRestart`/`GracefulRestart` restart the Arm
cores only; `PowerCycle` (Arm and NIC) is accepted and takes effect only once the host is Off
(PERST/All_STANDBY); `Oem/Nvidia/SOC.ForceReset` resets Arm and NIC at once; `GracefulShutdown`
leaves the Arm in low-power standby (`Paused`), as does the DPU agent's own shutdown for a
SystemLevelReset (`ArmShutdown`, published by the simulated DPF v26: dpf BEHAVIOUR.md R2); a DPU
stuck in its UEFI shell (fault `paused`) reports `Paused`, `On` changes nothing and `ForceRestart`
recovers it. The Arm has power only while its host is On (no separate power control: B10, B12): it
shows `Off` while the host is off and boots with the host at its On. Every reset that takes effect
restarts the Arm's boot (once the host is On) (`BootProgress` BootRom -> UEFI -> OsIsRunning over
`dpu_boot_seconds`), moves `LastResetTime` and is published as `DPUReset`.

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
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from simulators.events import DPUReset, Event, Hub, PowerCycled, PowerTransition
from simulators.timings import Timings

from . import messages
from .tasks import Task, Tasks

TRANSFER_PROTOCOLS = ("HTTP", "HTTPS", "SCP")
# What the `Bluefield` System takes (BEHAVIOUR.md B1): the documented types, and `On`, which DPF
# and NICo send; any other is 400 ActionParameterNotSupported (as DPF's own BMC mock answers).
DPU_RESET_TYPES = ("GracefulRestart", "ForceRestart", "GracefulShutdown", "PowerCycle", "On")
SOC_FORCE_RESET = "SOC.ForceReset"
BOOT_STAGES = ("BootRom", "UEFI", "OsIsRunning")  # BootProgress.OemLastState after a reset
SYSTEM_ID = "Bluefield"
BMC_FIRMWARE = {"BF3": "BF-24.10-24", "BF4": "BF-25.04-7"}
_VERSION = re.compile(r"\d+\.\d+\.\d+(?:\.\d+)?")


class DPUBMC:
    """The state of one DPU's BMC."""

    __slots__ = (
        "dpu_id", "host_id", "model", "running", "staged", "update_task", "fail_next", "timer", "resets",
        "arm", "arm_since", "paused", "latched", "last_reset_time", "boot_timer", "nic_resets", "powered",
        "reset_types",
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
        self.arm = "OsIsRunning"  # BootProgress.OemLastState
        self.arm_since = ""  # BootProgress.LastStateTime
        self.paused = False  # PowerState Paused: the UEFI shell, or the Arm after GracefulShutdown
        self.latched = False  # a PowerCycle accepted, waiting for the host to let go (Off)
        self.last_reset_time = ""
        self.boot_timer: asyncio.TimerHandle | None = None
        self.nic_resets = 0  # resets that took the NIC too (PowerCycle, SOC.ForceReset)
        # The Arm has power only while its host is On (BEHAVIOUR.md B10): no separate power control.
        self.powered = True
        self.reset_types: tuple[str, ...] = DPU_RESET_TYPES  # what the System takes (fault no-powercycle)


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


def system_power_state(dpu: DPUBMC) -> str:
    """The System's `PowerState`: `Off` without host power (B10), `Paused` in its UEFI shell or
    after an Arm shutdown, else `On`."""
    return "Off" if not dpu.powered else "Paused" if dpu.paused else "On"


def system_status_state(power_state: str) -> str:
    """The System's `Status.State` for its `PowerState`."""
    return "Enabled" if power_state == "On" else "StandbyOffline"


def system_body(dpu: DPUBMC, prefix: str, host_power: str) -> dict[str, Any]:
    """The DPU's Arm system: it has power only while its host is On (BEHAVIOUR.md B10: `Off`,
    BootProgress `None`, while the host is off); `Paused` in its UEFI shell or after an Arm
    shutdown."""
    state = system_power_state(dpu)
    body: dict[str, Any] = {
        "@odata.id": f"{prefix}/redfish/v1/Systems/{SYSTEM_ID}",
        "@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem",
        "Id": SYSTEM_ID,
        "Name": "Bluefield",
        "SystemType": "DPU",
        "Manufacturer": "NVIDIA",
        "Model": f"BlueField-{dpu.model[-1]} DPU",
        "SerialNumber": f"SN-{dpu.dpu_id}",
        "PowerState": state,
        "Status": {"State": system_status_state(state), "Health": "OK"},
        "BootProgress": (
            {"LastState": "OSRunning" if dpu.arm == "OsIsRunning" else "OEM", "OemLastState": dpu.arm}
            if dpu.powered
            else {"LastState": "None"}
        ),
        "Actions": {
            "#ComputerSystem.Reset": {
                "target": f"{prefix}/redfish/v1/Systems/{SYSTEM_ID}/Actions/ComputerSystem.Reset",
                "ResetType@Redfish.AllowableValues": list(dpu.reset_types),
                "@Redfish.ActionInfo": f"{prefix}/redfish/v1/Systems/{SYSTEM_ID}/ResetActionInfo",
            }
        },
        "Links": {"Chassis": [], "ManagedBy": []},
    }
    if dpu.arm_since:
        body["BootProgress"]["LastStateTime"] = dpu.arm_since
    if dpu.last_reset_time:
        body["LastResetTime"] = dpu.last_reset_time
    return body


def oem_nvidia_body(prefix: str) -> dict[str, Any]:
    """`Systems/Bluefield/Oem/Nvidia`: where `#SOC.ForceReset` is advertised (BEHAVIOUR.md B3)."""
    uri = f"{prefix}/redfish/v1/Systems/{SYSTEM_ID}/Oem/Nvidia"
    return {
        "@odata.id": uri,
        "@odata.type": "#NvidiaComputerSystem.v1_0_0.NvidiaComputerSystem",
        "Mode": "DpuMode",
        "Actions": {"#SOC.ForceReset": {"target": f"{uri}/{SOC_FORCE_RESET}"}},
    }


def reset_action_info(dpu: DPUBMC) -> dict[str, Any]:
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
                "AllowableValues": list(dpu.reset_types),
            }
        ],
    }


def _success() -> web.Response:
    """The answer a BlueField BMC gives a reset: 200 with the Base Success message (BEHAVIOUR.md B2)."""
    return messages.json_response(
        {"@Message.ExtendedInfo": [messages.message("Success", "The request completed successfully.")]}
    )


class DPUResets:
    """What the `Bluefield` System does with a reset, and the Arm's boot after it."""

    def __init__(self, hub: Hub, timings: Timings, dpus_by_host: dict[str, list[DPUBMC]]) -> None:
        self._hub = hub
        self._timings = timings
        self._dpus_by_host = dpus_by_host

    def reset(self, dpu: DPUBMC, reset_type: object, host_power: str) -> web.Response:
        """`ComputerSystem.Reset` on `Systems/Bluefield`; never waits for the reset."""
        action = "ComputerSystem.Reset"
        if reset_type is None:
            return messages.action_parameter_missing(action, "ResetType")
        if not isinstance(reset_type, str) or reset_type not in dpu.reset_types:
            return messages.error_response(
                400,
                "ActionParameterNotSupported",
                f"The parameter ResetType for the action {action} is not supported on the target resource: "
                f"{reset_type!r} is not one of {', '.join(dpu.reset_types)}.",
                args=["ResetType", action],
                resolution="Remove the parameter supplied and resubmit the request if the operation failed.",
            )
        dpu.resets[reset_type] = dpu.resets.get(reset_type, 0) + 1
        if reset_type == "On":
            pass  # accepted; changes nothing, also while Paused (dsx#6281, dsx#6350)
        elif not dpu.powered and reset_type != "PowerCycle":
            pass  # the Arm has no power while its host is off (B10): accepted, nothing happens
        elif reset_type == "GracefulShutdown":
            if not dpu.paused and dpu.arm == "OsIsRunning":
                self._cancel_boot(dpu)
                dpu.paused, dpu.arm, dpu.arm_since = True, "LowPowerStandby", messages.now_rfc3339()
        elif reset_type == "PowerCycle":
            if host_power == "Off":
                self.take_effect(dpu, "PowerCycle", nic=True)
            else:
                dpu.latched = True  # held until the host is off (PERST/All_STANDBY); no error
        else:  # ForceRestart, GracefulRestart: the Arm cores only
            self.take_effect(dpu, reset_type, nic=False)
        return _success()

    def soc_force_reset(self, dpu: DPUBMC) -> web.Response:
        """`Oem/Nvidia/SOC.ForceReset`: Arm and NIC at once, whatever the host does."""
        dpu.resets[SOC_FORCE_RESET] = dpu.resets.get(SOC_FORCE_RESET, 0) + 1
        self.take_effect(dpu, SOC_FORCE_RESET, nic=True)
        return _success()

    def on_power(self, event: Event) -> None:
        """Hub handler: the DPUs' Arm follows its host's power (B10). Off: the Arm loses power and
        a latched PowerCycle takes effect (PERST/All_STANDBY asserted, B5). On: the Arm boots
        from BootRom together with the host (the BSP's "Serialized DPU and Host Boot Sequence")."""
        if not isinstance(event, PowerTransition) or event.to_state not in ("Off", "On"):
            return
        for dpu in self._dpus_by_host.get(event.host_id, ()):
            if event.to_state == "Off":
                self._cancel_boot(dpu)
                dpu.powered, dpu.paused = False, False
                dpu.arm, dpu.arm_since = "None", messages.now_rfc3339()  # shown as LastState None
                if dpu.latched:
                    self.take_effect(dpu, "PowerCycle", nic=True)
            elif not dpu.powered:
                dpu.powered = True
                self._boot(dpu, 0)

    def take_effect(self, dpu: DPUBMC, reset_type: str, *, nic: bool) -> None:
        """The reset happens: LastResetTime moves, the DPU is no longer Paused, and its Arm boots
        again, at once when its host is On, else when the host is powered on (B10)."""
        dpu.latched = False
        dpu.paused = False
        dpu.nic_resets += int(nic)
        now = messages.now_rfc3339()
        dpu.last_reset_time = now
        self._cancel_boot(dpu)
        if dpu.powered:
            self._boot(dpu, 0)
        self._hub.publish(DPUReset(dpu.host_id, dpu.dpu_id, datetime.now(UTC), reset_type))

    def arm_shut_down(self, dpu: DPUBMC) -> None:
        """The Arm OS shut itself down (its agent's SystemLevelReset): low-power standby, shown
        `Paused` as after a `GracefulShutdown`, until the next reset or host power-off."""
        if dpu.powered and not dpu.paused:
            self._cancel_boot(dpu)
            dpu.paused, dpu.arm, dpu.arm_since = True, "LowPowerStandby", messages.now_rfc3339()

    def pause(self, dpu: DPUBMC) -> None:
        """A fault: the DPU is stuck in its UEFI shell (no OS to boot)."""
        if not dpu.powered:
            return  # no Arm running to get stuck: its host is off
        self._cancel_boot(dpu)
        dpu.paused, dpu.arm, dpu.arm_since = True, "UEFI", messages.now_rfc3339()

    def _boot(self, dpu: DPUBMC, stage: int) -> None:
        dpu.arm, dpu.arm_since = BOOT_STAGES[stage], messages.now_rfc3339()
        dpu.boot_timer = None
        if stage + 1 < len(BOOT_STAGES):
            delay = self._timings.dpu_boot_seconds / (len(BOOT_STAGES) - 1)
            dpu.boot_timer = asyncio.get_running_loop().call_later(delay, self._boot, dpu, stage + 1)

    @staticmethod
    def _cancel_boot(dpu: DPUBMC) -> None:
        if dpu.boot_timer is not None:
            dpu.boot_timer.cancel()
            dpu.boot_timer = None


def update_service_body(prefix: str) -> dict[str, Any]:
    """The DPU BMC's UpdateService: the shared body and its SimpleUpdate action."""
    base = f"{prefix}/redfish/v1/UpdateService"
    return {
        **messages.update_service(prefix),
        "Actions": {
            "#UpdateService.SimpleUpdate": {
                "target": f"{base}/Actions/UpdateService.SimpleUpdate",
                "TransferProtocol@Redfish.AllowableValues": list(TRANSFER_PROTOCOLS),
            }
        },
    }
