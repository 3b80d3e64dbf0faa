"""Host BMC profiles and the ComputerSystem resource each host BMC serves.

A profile is how one vendor's BMC behaves; the site picks one per host (`HOST_BMC_PROFILES`):

| profile | System id | reset answer | PowerCycle / GracefulRestart | LastResetTime | other |
| --- | --- | --- | --- | --- | --- |
| `powercycle` | `System.Embedded.1` | 204 | yes / yes | yes | |
| `no-powercycle` | `1` | 200 + Success message | no / no (400) | no | |
| `task-monitor` | `Self` | 202 + task monitor | yes / yes | yes | |
| `etag-required` | `1` | 200 + Success message | yes / yes | yes | PATCH needs If-Match |
| `reset-cooldown` | `1` | 204 | yes / yes | no | 409 for a while after Off |
| `basic-only` | `1` | 204 | no / no | no | no SessionService (404): basic auth only |
| `power-lag` | `1` | 204 | no / no | no | PowerState keeps the old value 1-15 s, no Powering* |
| `powercycle-501` | `System.Embedded.1` | 204 | advertised, 501 / yes | yes | |
| `multi-system` | the host id | 204 | yes / yes | yes | hosts of one `group` share the BMC |
| `self-signed-tls` | `System.Embedded.1` | 204 | yes / yes | yes | https, the simulator's own CA |

Clients must find the System through the `Systems` collection, never assume its id.

Firmware (`UpdateService/FirmwareInventory`, BEHAVIOUR.md H1-H7): each profile lists the inventory
members its vendor's BMC serves for the BMC and the host firmware (ids and names as the vendor
shows them; versions are examples). A profile with none serves no UpdateService and its service
root links none: no source was found for that vendor's member ids.
"""

from __future__ import annotations

import json
import uuid
import zlib
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from . import messages
from .tasks import Task

SYSTEM_TYPE = "#ComputerSystem.v1_20_0.ComputerSystem"
ALL_RESET_TYPES = (
    "On",
    "ForceOff",
    "GracefulShutdown",
    "GracefulRestart",
    "ForceRestart",
    "Nmi",
    "ForceOn",
    "PushPowerButton",
    "PowerCycle",
)
BOOT_TARGETS = ("None", "Pxe", "Hdd", "Cd", "Usb", "BiosSetup", "UefiHttp")
BOOT_ENABLED = ("Disabled", "Once", "Continuous")
BOOT_MODES = ("UEFI", "Legacy")
READ_ONLY = frozenset(
    {"@odata.id", "@odata.type", "Id", "Name", "SystemType", "Manufacturer", "Model", "SerialNumber",
     "UUID", "HostName", "PowerState", "Status", "LastResetTime", "Actions", "Links"}
)  # fmt: skip


@dataclass(frozen=True)
class FirmwareItem:
    """One member of a host BMC's FirmwareInventory (a SoftwareInventory resource)."""

    id: str
    name: str
    version: str
    software_id: str | None = None


# The members each vendor's BMC serves for itself and the host firmware (BEHAVIOUR.md H1-H7).
DELL_IDRAC = (
    FirmwareItem("Installed-25227-7.10.50.00__iDRAC.Embedded.1-1", "Integrated Dell Remote Access Controller",
                 "7.10.50.00", "25227"),
    FirmwareItem("Installed-159-2.3.5__BIOS.Setup.1-1", "BIOS", "2.3.5", "159"),
)  # fmt: skip
SUPERMICRO = (FirmwareItem("BMC", "BMC", "01.03.19"), FirmwareItem("BIOS", "BIOS", "2.1"))
NVIDIA_DGX = (FirmwareItem("HostBMC_0", "Software Inventory", "24.09.17"),
              FirmwareItem("HostBIOS_0", "Software Inventory", "01.05.03"))  # fmt: skip
HPE_ILO = (FirmwareItem("1", "iLO 6", "1.58"), FirmwareItem("2", "System ROM", "U58 v2.22 (04/09/2024)"))
LENOVO_XCC = (FirmwareItem("BMC-Primary", "XCC Primary Firmware", "4.10"),
              FirmwareItem("UEFI", "UEFI Firmware", "5.30"))  # fmt: skip


@dataclass(frozen=True)
class HostProfile:
    """How one vendor's host BMC behaves."""

    name: str
    system_id: str
    manufacturer: str
    model: str
    reset_types: tuple[str, ...]
    exposes_last_reset_time: bool
    reset_answer: str  # "204", "200" (body with a Success message) or "202" (task monitor)
    etag_required: bool = False
    cooldown_after_off: bool = False
    sessions: bool = True  # False: no SessionService, HTTP basic only
    power_lag: bool = False  # PowerState keeps its old value for a while, no Powering* states
    not_implemented: tuple[str, ...] = ()  # advertised reset types answered 501
    multi_system: bool = False  # the System id is the host id; one service serves a group of hosts
    tls: bool = False  # served over https
    firmware: tuple[FirmwareItem, ...] = ()  # its FirmwareInventory; () = no UpdateService


PROFILES: dict[str, HostProfile] = {
    "powercycle": HostProfile(
        "powercycle", "System.Embedded.1", "Dell Inc.", "PowerEdge XE9680", ALL_RESET_TYPES, True, "204",
        firmware=DELL_IDRAC,
    ),
    "no-powercycle": HostProfile(
        "no-powercycle",
        "1",
        "Supermicro",
        "SYS-821GE-TNHR",
        ("On", "ForceOff", "GracefulShutdown", "ForceRestart", "Nmi", "ForceOn"),
        False,
        "200",
        firmware=SUPERMICRO,
    ),
    "task-monitor": HostProfile(
        "task-monitor",
        "Self",
        "NVIDIA",
        "DGX H100",
        ("On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "PowerCycle"),
        True,
        "202",
        firmware=NVIDIA_DGX,
    ),
    "etag-required": HostProfile(
        "etag-required",
        "1",
        "HPE",
        "ProLiant XD670",
        (
            "On",
            "ForceOff",
            "GracefulShutdown",
            "GracefulRestart",
            "ForceRestart",
            "Nmi",
            "PushPowerButton",
            "PowerCycle",
        ),
        True,
        "200",
        etag_required=True,
        firmware=HPE_ILO,
    ),  # fmt: skip
    "reset-cooldown": HostProfile(
        "reset-cooldown",
        "1",
        "Lenovo",
        "ThinkSystem SR675 V3",
        ("On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "PowerCycle"),
        False,
        "204",
        cooldown_after_off=True,
        firmware=LENOVO_XCC,
    ),
    "basic-only": HostProfile(
        "basic-only", "1", "Gigabyte", "G593-SD0",
        ("On", "ForceOff", "GracefulShutdown", "ForceRestart"), False, "204", sessions=False,
    ),
    "power-lag": HostProfile(
        "power-lag", "1", "ASRockRack", "6U8X-EGS2",
        ("On", "ForceOff", "GracefulShutdown", "ForceRestart"), False, "204", power_lag=True,
    ),
    "powercycle-501": HostProfile(
        "powercycle-501", "System.Embedded.1", "Quanta", "S7G", ALL_RESET_TYPES, True, "204",
        not_implemented=("PowerCycle",),
    ),
    "multi-system": HostProfile(
        "multi-system", "", "Inspur", "NF5688M7 (multi-node)", ALL_RESET_TYPES, True, "204",
        multi_system=True,
    ),
    "self-signed-tls": HostProfile(
        "self-signed-tls", "System.Embedded.1", "Dell Inc.", "PowerEdge R760xa", ALL_RESET_TYPES, True,
        "204", tls=True, firmware=DELL_IDRAC,
    ),
}  # fmt: skip


class HostBMC:
    """The state of one host's BMC; small, and with nothing running while the host is idle."""

    __slots__ = (
        "host_id",
        "service_id",
        "profile",
        "power",
        "pending",
        "reset_type",
        "timer",
        "task",
        "off_at",
        "last_reset_time",
        "asset_tag",
        "boot",
        "log",
    )

    def __init__(self, host_id: str, profile: HostProfile, started: str, service_id: str = "") -> None:
        self.host_id = host_id
        self.service_id = service_id or host_id  # the BMC service (address) serving this System
        self.profile = profile
        # A site in service: every host starts On.
        self.power = "On"
        self.pending: tuple[str, ...] = ()  # settled states still to reach in this transition
        self.reset_type: str | None = None
        self.timer: Any = None  # asyncio.TimerHandle of the running transition step
        self.task: Task | None = None
        self.off_at: float | None = None  # loop time the host last reached Off
        self.last_reset_time = started
        self.asset_tag = ""
        self.boot: tuple[str, str, str] = ("Disabled", "None", "UEFI")
        self.log: list[dict[str, str | None]] | None = None

    @property
    def system_id(self) -> str:
        return self.host_id if self.profile.multi_system else self.profile.system_id

    def system_uri(self, prefix: str = "") -> str:
        return f"{prefix}/redfish/v1/Systems/{self.system_id}"

    def body(self, prefix: str) -> dict[str, Any]:
        uri = self.system_uri(prefix)
        enabled, target, mode = self.boot
        body: dict[str, Any] = {
            "@odata.id": uri,
            "@odata.type": SYSTEM_TYPE,
            "Id": self.system_id,
            "Name": "System",
            "SystemType": "Physical",
            "Manufacturer": self.profile.manufacturer,
            "Model": self.profile.model,
            "SerialNumber": f"SN-{self.host_id}",
            "UUID": str(uuid.uuid5(uuid.NAMESPACE_URL, f"metalflow-sim:{self.host_id}")),
            "HostName": self.host_id,
            "AssetTag": self.asset_tag,
            "PowerState": self.power,
            "Status": {"State": "Enabled" if self.power == "On" else "StandbyOffline", "Health": "OK"},
            "Boot": {
                "BootSourceOverrideEnabled": enabled,
                "BootSourceOverrideTarget": target,
                "BootSourceOverrideMode": mode,
                "BootSourceOverrideTarget@Redfish.AllowableValues": list(BOOT_TARGETS),
            },
            "Actions": {
                "#ComputerSystem.Reset": {
                    "target": f"{uri}/Actions/ComputerSystem.Reset",
                    "ResetType@Redfish.AllowableValues": list(self.profile.reset_types),
                    "@Redfish.ActionInfo": f"{uri}/ResetActionInfo",
                }
            },
            "Links": {"Chassis": [], "ManagedBy": []},
        }
        if self.profile.exposes_last_reset_time:
            body["LastResetTime"] = self.last_reset_time
        return body

    def reset_action_info(self, prefix: str) -> dict[str, Any]:
        return {
            "@odata.id": f"{self.system_uri(prefix)}/ResetActionInfo",
            "@odata.type": "#ActionInfo.v1_4_2.ActionInfo",
            "Id": "ResetActionInfo",
            "Name": "Reset Action Info",
            "Parameters": [
                {
                    "Name": "ResetType",
                    "Required": True,
                    "DataType": "String",
                    "AllowableValues": list(self.profile.reset_types),
                }
            ],
        }


def host_update_service_body(prefix: str) -> dict[str, Any]:
    """A host BMC's UpdateService: its inventory only. Real BMCs also offer updates (SimpleUpdate,
    HttpPushUri); the simulator does not update host firmware, so it advertises no action."""
    return messages.update_service(prefix)


def host_inventory_item(profile: HostProfile, item_id: str, prefix: str) -> dict[str, Any] | None:
    """One SoftwareInventory member of the profile's FirmwareInventory, or None."""
    for item in profile.firmware:
        if item.id == item_id:
            body: dict[str, Any] = {
                "@odata.id": f"{prefix}/redfish/v1/UpdateService/FirmwareInventory/{item.id}",
                "@odata.type": "#SoftwareInventory.v1_10_0.SoftwareInventory",
                "Id": item.id,
                "Name": item.name,
                "Version": item.version,
                "Updateable": True,
                "Status": {"State": "Enabled", "Health": "OK"},
            }
            if item.software_id is not None:
                body["SoftwareId"] = item.software_id
            return body
    return None


def etag_of(host: HostBMC) -> str:
    """A weak ETag that changes whenever any property of the host's ComputerSystem changes.

    Every mutable property is in the digest, so the ETag changes with PowerState too: a client
    must read the ETag right before its PATCH, as on BMCs that version the whole resource.
    """
    state = (host.power, host.asset_tag, host.boot, host.last_reset_time)
    return f'W/"{zlib.crc32(repr(state).encode()):08x}"'


def check_if_match(host: HostBMC, request: web.BaseRequest, current_etag: str) -> web.Response | None:
    """The 428/412 a PATCH earns for its If-Match header, or None when it may proceed."""
    if_match = request.headers.get("If-Match")
    if if_match is None:
        if not host.profile.etag_required:
            return None
        return messages.error_response(
            428,
            "PreconditionRequired",
            "A precondition header or annotation is required to change the resource.",
            resolution="Try the request again with an If-Match header holding the resource's current ETag.",
        )
    given = {tag.strip() for tag in if_match.split(",")}
    # Weak comparison: a client may echo the ETag with or without the W/ prefix.
    current_strong = current_etag.removeprefix("W/")
    if "*" in given or current_etag in given or current_strong in given:
        return None
    return messages.error_response(
        412,
        "PreconditionFailed",
        "The ETag supplied did not match the ETag required to change this resource.",
        resolution="Try the operation again using the appropriate ETag.",
    )


def apply_patch(host: HostBMC, changes: dict[str, Any]) -> web.Response | None:
    """Validate then apply a PATCH of the ComputerSystem; the 400 for the first bad property."""
    asset_tag = host.asset_tag
    enabled, target, mode = host.boot
    for name, value in changes.items():
        if name in READ_ONLY:
            text = f"The property {name} is a read only property and cannot be assigned a value."
            return _property_error("PropertyNotWritable", name, text)
        if name == "AssetTag":
            if not isinstance(value, str):
                return _type_error(name, value)
            asset_tag = value
        elif name == "Boot":
            if not isinstance(value, dict):
                return _type_error(name, value)
            for key, item in value.items():
                allowed = {
                    "BootSourceOverrideEnabled": BOOT_ENABLED,
                    "BootSourceOverrideTarget": BOOT_TARGETS,
                    "BootSourceOverrideMode": BOOT_MODES,
                }.get(key)
                if allowed is None:
                    text = f"The property {key} is not in the list of valid properties for the resource."
                    return _property_error("PropertyUnknown", f"Boot/{key}", text)
                if not isinstance(item, str):
                    return _type_error(key, item)
                if item not in allowed:
                    return messages.error_response(
                        400,
                        "PropertyValueNotInList",
                        f"The value '{item}' for the property {key} is not in the list of acceptable values.",
                        args=[item, key],
                        resolution="Choose a value from the enumeration list that the implementation can "
                        "support and resubmit the request if the operation failed.",
                    )
                if key == "BootSourceOverrideEnabled":
                    enabled = item
                elif key == "BootSourceOverrideTarget":
                    target = item
                else:
                    mode = item
        else:
            return _property_error(
                "PropertyUnknown",
                name,
                f"The property {name} is not in the list of valid properties for the resource.",
            )
    host.asset_tag = asset_tag
    host.boot = (enabled, target, mode)
    return None


def _property_error(message_id: str, name: str, text: str) -> web.Response:
    return messages.error_response(
        400,
        message_id,
        text,
        args=[name],
        resolution="Remove the property from the request body and resubmit.",
    )


def _type_error(name: str, value: Any) -> web.Response:
    shown = json.dumps(value)
    return messages.error_response(
        400,
        "PropertyValueTypeError",
        f"The value '{shown}' for the property {name} is not a type that the property can accept.",
        args=[shown, name],
        resolution="Correct the value for the property in the request body and resubmit the request.",
    )
