"""What each host runs, side by side: per DPU its identity (model, serial and part number, as its
BMC reports them), BFB and flavor (DPF), DPU firmware and DPU BMC firmware (the DPU BMC's
`UpdateService/FirmwareInventory`), and the host BMC's firmware (its FirmwareInventory, when it
serves one). Used by `metalflow host versions` (metalflow/cli/host_versions.py) and the activity
the activities `read_host_versions` and `read_host_versions_brief` (activities/versions.py; the
brief one, without identity, fills the host entity's memo).

Sources (docs/DOMAIN.md sections 2.7 and 4.4; /tmp research notes cite DPF's Redfish client):
- BFB: DPF installed `status.bfbFile` (`/bfb/<namespace>-<bfb>.bfb`; NICo `find_outdated_dpus_dpf`),
  else `spec.bfb`; newer DPF builds also report `status.bfbVersion`, taken when present.
- Identity: `Chassis/Card1` (BF2/BF3) or `Chassis/BlueField_0` (BF4) `Model`, `SerialNumber`,
  `PartNumber` (DPF redfish client `GetChassis`; values may carry trailing spaces: stripped),
  else the `Systems/Bluefield` `Model` and `SerialNumber`.
- Firmware ids: `DPU_NIC` / `BlueField_FW_NIC_0`, `BMC_Firmware` / `BlueField_FW_BMC_0` (DPF
  redfish client `CheckDPUNIC`, `CheckBMCFirmware`).

A source that cannot be read leaves its fields None and says why in `errors`: one DPU's BMC down
never hides the rest. Cost per host: one DPU list (DPF); per DPU with a BMC one session and the
FirmwareInventory (one GET per member), and (unless `identity=False`) a second session for one
or two identity GETs; per host BMC the same inventory when served.
"""

from __future__ import annotations

import asyncio
import posixpath
import re
from collections.abc import Callable
from typing import Any

from contracts.errors import (
    BMCAuthenticationFailed,
    BMCRequestRejected,
    BMCUnavailable,
    KubernetesUnavailable,
    MetalflowError,
)
from contracts.models.dpf import DPUNODE_NAME_LABEL
from contracts.models.inventory import (
    EVERYTHING,
    BMCAccess,
    DPUVersions,
    HostInventory,
    HostVersions,
    VersionsScope,
)
from drivers import campaign as fleet
from drivers.kube import DPU, Kube
from drivers.redfish.client import RedfishClient
from drivers.redfish.connection import BMCConnection
from drivers.redfish.firmware import read_versions
from drivers.site_file import CompatibilityRule

NIC_IDS = ("DPU_NIC", "BlueField_FW_NIC_0")
BMC_IDS = ("BMC_Firmware", "BlueField_FW_BMC_0")
# A host BMC's own firmware among its FirmwareInventory members: each vendor names it its own way
# (sources in simulators/redfish/BEHAVIOUR.md H1-H7): Supermicro `BMC`, Lenovo XCC `BMC-Primary`,
# NVIDIA DGX `HostBMC_0`, OpenBMC `bmc_active`, Dell iDRAC `Installed-<id>-<version>__iDRAC.<fqdd>`
# (not `Previous-...`, the image it would roll back to), HPE iLO by its Name (`iLO 6`; Ids are numbers).
HOST_BMC_ID = re.compile(r"BMC|BMC-Primary|HostBMC_0|bmc_active|Installed-\d+-[^_]*__iDRAC\..+")
HOST_BMC_NAME = re.compile(r"iLO \d+")
CHASSIS = ("/redfish/v1/Chassis/Card1", "/redfish/v1/Chassis/BlueField_0")
DPU_SYSTEM = "/redfish/v1/Systems/Bluefield"


def dpf_versions(dpu: dict[str, Any], namespace: str) -> dict[str, str | None]:
    """BFB, flavor, outdated reason and phase of one DPU object."""
    spec, status = dpu.get("spec") or {}, dpu.get("status") or {}
    bfb = status.get("bfbVersion") or None
    if bfb is None and status.get("bfbFile"):
        bfb = posixpath.basename(str(status["bfbFile"])).removeprefix(f"{namespace}-").removesuffix(".bfb")
    return {
        "bfb": str(bfb or spec.get("bfb") or "") or None,
        "flavor": str(spec.get("dpuFlavor") or "") or None,
        "outdated": fleet.outdated_reason(dpu),
        "phase": str(status.get("phase") or "") or None,
    }


def _text(value: Any) -> str | None:
    return value.strip() or None if isinstance(value, str) else None


async def _identity(bmc: BMCConnection) -> dict[str, str | None]:
    for path in CHASSIS:
        try:
            body = await bmc.get(path)
        except MetalflowError:
            continue
        return {"model": _text(body.get("Model")), "serial": _text(body.get("SerialNumber")),
                "part_number": _text(body.get("PartNumber"))}  # fmt: skip
    body = await bmc.get(DPU_SYSTEM)
    return {"model": _text(body.get("Model")), "serial": _text(body.get("SerialNumber")), "part_number": None}


async def _firmware(bmc: BMCConnection) -> dict[str, str | None]:
    versions = await read_versions(bmc, NIC_IDS[0])
    found: dict[str, str | None] = {}
    for item in versions.components:
        key = item.software_id or item.id
        if item.id.endswith("Pending") or item.state in ("StandbyOffline", "StandbySpare"):
            continue  # staged, not running
        if key in NIC_IDS:
            found["dpu_firmware"] = item.version
        elif key in BMC_IDS or HOST_BMC_ID.fullmatch(item.id) or HOST_BMC_NAME.fullmatch(item.name or ""):
            found["bmc_firmware"] = item.version
    return found


class VersionReader:
    """Reads hosts' versions through the given clients (no Temporal)."""

    def __init__(
        self,
        kube: Kube,
        redfish: RedfishClient,
        on_wait: Callable[[], None] | None = None,
        *,
        bmc_seconds: float | None = None,
        dpf_seconds: float | None = None,
    ) -> None:
        """`bmc_seconds`: one BMC read (its session and every GET) at most, else that BMC is
        unreached; `dpf_seconds`: one host's DPU list at most, else DPF is unreached for the
        host. None: no bound beyond the clients' own (the activities: Temporal bounds them)."""
        self.kube = kube
        self.redfish = redfish
        self.on_wait = on_wait
        self.bmc_seconds = bmc_seconds
        self.dpf_seconds = dpf_seconds
        # Hosts whose DPU list DPF did not give (down, timed out): `host versions` says so.
        self.dpf_unreached: set[str] = set()
        self.dpf_answered: set[str] = set()
        # Every BMC this reader asked: those that answered, those it could not reach (down, timed
        # out, 5xx: `BMCUnavailable`), by BMC id. `host versions` exits 3 when it reached none.
        self.answered: set[str] = set()
        self.unreached: set[str] = set()

    async def _bmc(self, access: BMCAccess, read: Any) -> Any:
        try:
            async with asyncio.timeout(self.bmc_seconds):
                async with self.redfish.connect(access, on_wait=self.on_wait) as bmc:
                    found = await read(bmc)
        except TimeoutError:
            self.unreached.add(access.bmc_id)
            raise BMCUnavailable(f"BMC {access.bmc_id}: no answer within {self.bmc_seconds:g} s") from None
        except BMCUnavailable:
            self.unreached.add(access.bmc_id)
            raise
        except (BMCAuthenticationFailed, BMCRequestRejected):  # it answered, and refused
            self.answered.add(access.bmc_id)
            raise
        self.answered.add(access.bmc_id)
        return found

    async def host(
        self, host: HostInventory, *, identity: bool = True, scope: VersionsScope = EVERYTHING
    ) -> HostVersions:
        """The host's versions; `identity=False` skips each DPU's identity GETs (and their BMC
        session): model and part number stay None, the serial is the inventory's. `scope` names
        the sources read (`VersionsScope`): a source not named is not asked, its fields stay None
        and no error is said of it."""
        errors: list[str] = []
        objects: dict[str, dict[str, Any]] = {}
        if scope.dpf:
            try:
                async with asyncio.timeout(self.dpf_seconds):
                    listed = await self.kube.list(
                        host.host_id,
                        DPU,
                        host.namespace,
                        label_selector=f"{DPUNODE_NAME_LABEL}={host.dpu_node_name()}",
                    )
                objects = {
                    str((d.get("spec") or {}).get("dpuDeviceName") or ""): d
                    for d in listed.get("items") or []
                }
                self.dpf_answered.add(host.host_id)
            except TimeoutError:
                self.dpf_unreached.add(host.host_id)
                errors.append(f"DPF: the API server did not answer within {self.dpf_seconds:g} s")
            except KubernetesUnavailable as err:
                self.dpf_unreached.add(host.host_id)
                errors.append(f"DPF: {err}")
            except MetalflowError as err:
                errors.append(f"DPF: {err}")
        dpus = []
        for dpu in host.dpus:
            values: dict[str, Any] = {"dpu_id": dpu.id, "model": None, "serial": dpu.serial}
            dpu_errors: list[str] = []
            obj = objects.get(dpu.dpu_device_name())
            if obj is not None:
                values.update(dpf_versions(obj, host.namespace))
            elif scope.dpf and not errors:
                dpu_errors.append("DPF has no DPU object")
            if not scope.reads_dpu_bmc(dpu.id):
                pass
            elif dpu.bmc is None:
                dpu_errors.append("no BMC in the inventory")
            else:
                try:
                    if identity:
                        values.update({k: v for k, v in (await self._bmc(dpu.bmc, _identity)).items() if v})
                    firmware = await self._bmc(dpu.bmc, _firmware)
                    values["dpu_firmware"] = firmware.get("dpu_firmware")
                    values["dpu_bmc_firmware"] = firmware.get("bmc_firmware")
                except MetalflowError as err:
                    dpu_errors.append(f"BMC: {err}")
            dpus.append(DPUVersions(**values, errors=tuple(dpu_errors)))
        host_bmc = None
        if scope.host_bmc:
            try:
                host_bmc = (await self._bmc(host.bmc, _firmware)).get("bmc_firmware")
            except MetalflowError as err:
                errors.append(f"host BMC firmware: {err}")
        return HostVersions(
            host_id=host.host_id, host_bmc_firmware=host_bmc, dpus=tuple(dpus), errors=tuple(errors)
        )


def version_key(version: str) -> tuple[int, ...]:
    """A version's numbers, in order, for comparing (`BF-24.10-24` -> (24, 10, 24))."""
    return tuple(int(n) for n in re.findall(r"\d+", version))


def rule_breaks(rule: CompatibilityRule, dpu: DPUVersions) -> str | None:
    """Why the DPU breaks the rule (a firmware below its minimum, or unknown), or None."""
    for field, minimum in (
        ("dpu_bmc_firmware", rule.min_dpu_bmc_firmware),
        ("dpu_firmware", rule.min_dpu_firmware),
    ):
        if not minimum:
            continue
        running = getattr(dpu, field)
        if running is None:
            why = "; ".join(dpu.errors) or "not reported"
            return f"{dpu.dpu_id}: {field} unknown ({why}), needs >= {minimum}"
        if version_key(running) < version_key(minimum):
            return f"{dpu.dpu_id}: {field} {running} < {minimum}"
    return None
