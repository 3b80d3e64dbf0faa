"""What metalflow knows about a host: its BMC, its DPUs, whether an instance is assigned.

Resolved by the inventory activity from a site source (the site file, or labels and annotations
on the DPF objects in the cluster) and passed to the other activities. Nothing here is a secret:
a BMC is reached through a `CredentialRef` that only the activity resolves.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

from contracts.validation import Requester

DPF_NAMESPACE = "dpf-operator-system"


class _Frozen(BaseModel):
    # Unknown fields are ignored, never refused: a newer worker may add one to a payload that an
    # older worker (a mixed fleet, a rollback) reads back from history (metalflow/runtime/versioning.py).
    model_config = ConfigDict(frozen=True)


class EnvCredentials(_Frozen):
    """Names of the environment variables holding the username and the password."""

    username: str
    password: str


class SecretRef(_Frozen):
    """A Kubernetes Secret with keys `username` and `password`."""

    namespace: str
    name: str


class CredentialRef(_Frozen):
    """Where a BMC's credentials are; exactly one of `file`, `env`, `secret`.

    `file` is a JSON file with `username` and `password`. The same shape as the site file's.
    """

    file: str | None = None
    env: EnvCredentials | None = None
    secret: SecretRef | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> CredentialRef:
        given = [k for k in ("file", "env", "secret") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("a credential reference names exactly one of file, env, secret")
        return self

    def describe(self) -> str:
        """The reference in words, for messages (never the secret itself)."""
        if self.file is not None:
            return f"file {self.file}"
        if self.env is not None:
            return f"environment variables {self.env.username}/{self.env.password}"
        assert self.secret is not None
        return f"Secret {self.secret.namespace}/{self.secret.name}"


BMCAuth = Literal["session", "basic", "auto"]


class BMCAccess(_Frozen):
    """How to reach one BMC (a host's or a DPU's)."""

    bmc_id: str
    endpoint: str  # the BMC's base URL: its service root is `<endpoint>/redfish/v1`
    credentials: CredentialRef
    insecure: bool = False  # skip TLS verification (logged as a warning on every use)
    ca_bundle: str | None = None  # a PEM file to verify the BMC's certificate with
    # session, basic, or auto: session where the service offers a SessionService, else basic.
    auth: BMCAuth = "auto"
    # The host's System on a BMC that has several (its Id, or its path `/redfish/v1/Systems/<id>`);
    # None: the BMC's only System (a BMC with several refuses to guess).
    system: str | None = None


class DPUInventory(_Frozen):
    id: str
    model: Literal["BF3", "BF4"] | str
    serial: str | None = None
    bmc: BMCAccess | None = None

    def dpu_device_name(self) -> str:
        return f"device-{self.id}"


class HostInventory(_Frozen):
    """One host as the inventory knows it."""

    host_id: str
    site: str
    bmc: BMCAccess
    dpus: tuple[DPUInventory, ...] = ()
    groups: tuple[str, ...] = ()
    labels: dict[str, str] = {}
    instance: str | None = None  # the instance assigned to the host, if any
    namespace: str = DPF_NAMESPACE  # where its DPF objects live

    def dpu_node_name(self) -> str:
        """DPUNode `node-<host-id>` (docs/DOMAIN.md section 2.1)."""
        return f"node-{self.host_id}"

    def dpu_name(self, dpu_id: str) -> str:
        """DPU `node-<host-id>-device-<dpu-id>`."""
        return f"node-{self.host_id}-device-{dpu_id}"

    def hold_name(self) -> str:
        """DPUNodeMaintenance `<dpunode>-hold`."""
        return f"{self.dpu_node_name()}-hold"


Source = Literal["site", "cluster"]


class HostLookup(_Frozen):
    """The input of `resolve_host_inventory`: which host, from which source."""

    host_id: str
    source: Source | None = None  # default: the worker's METALFLOW_INVENTORY


# -- versions: what each host runs (`metalflow host versions`, drivers/versions.py) ----------------


class DPUVersions(_Frozen):
    """One DPU: its identity as its BMC reports it, and what it runs, from DPF and its BMC.
    None: not known (not reported, or the source could not be read; `errors` says why)."""

    dpu_id: str
    model: str | None = None  # the BMC's Chassis (or System) `Model`, e.g. "BlueField-3 DPU"
    serial: str | None = None
    part_number: str | None = None
    bfb: str | None = None  # DPF: the BFB the DPU was installed with (`status.bfbFile`, else spec)
    flavor: str | None = None  # DPF: `spec.dpuFlavor`
    outdated: str | None = None  # DPF: why it is outdated (`status.outdated.reason` or the condition)
    phase: str | None = None
    dpu_firmware: str | None = None  # its BMC's FirmwareInventory `DPU_NIC` (BF4 `BlueField_FW_NIC_0`)
    dpu_bmc_firmware: str | None = None  # `BMC_Firmware` (BF4 `BlueField_FW_BMC_0`)
    errors: tuple[str, ...] = ()
    # What the host entity knows of the two firmware fields above (None from a direct read):
    firmware_read_at: datetime | None = None  # when its BMC was last read
    firmware_read_before: str | None = None
    """An operation since that can have changed them without the entity reading them again (e.g.
    `reprovision/host-001`: a BFB can carry NIC firmware): they are shown as read before it."""


class HostVersions(_Frozen):
    host_id: str
    host_bmc_firmware: str | None = None  # the host BMC's FirmwareInventory `BMC_Firmware`, if served
    dpus: tuple[DPUVersions, ...] = ()
    errors: tuple[str, ...] = ()


class VersionTargets(_Frozen):
    """The versions a site declares as its targets (site file `versions.targets`); "" none."""

    bfb: str = ""
    flavor: str = ""
    dpu_firmware: str = ""
    dpu_bmc_firmware: str = ""
    host_bmc_firmware: str = ""


class VersionsScope(_Frozen):
    """What one versions read asks (`read_host_versions_brief`), each source only when named:
    `dpf`, each DPU's BFB and flavor (one DPU list from the Kubernetes API, no BMC request);
    `dpu_bmcs`, the DPUs whose BMCs are read (one session and FirmwareInventory each: DPU
    firmware and DPU BMC firmware); `host_bmc`, the host BMC's firmware (one session and its
    FirmwareInventory). The default reads everything. The host entity decides what a read needs
    (workflows/host/state.py, `versions_scope_after`)."""

    dpf: bool = True
    dpu_bmcs: tuple[str, ...] | None = None  # None: every DPU's BMC; (): none
    host_bmc: bool = True
    # Not read, marked: the DPUs whose firmware an operation can have changed and this read does
    # not ask (None: every DPU), and that operation (`firmware_unread_by`, its workflow id): what
    # the entity knew of them stays, shown as read before it (`DPUVersions.firmware_read_before`).
    firmware_unread: tuple[str, ...] | None = ()
    firmware_unread_by: str = ""

    def marks_firmware_unread(self, dpu_id: str) -> bool:
        return bool(self.firmware_unread_by) and (
            self.firmware_unread is None or dpu_id in self.firmware_unread
        )

    def reads_dpu_bmc(self, dpu_id: str) -> bool:
        return self.dpu_bmcs is None or dpu_id in self.dpu_bmcs

    def reads_nothing(self) -> bool:
        return not self.dpf and self.dpu_bmcs == () and not self.host_bmc

    def union(self, other: VersionsScope) -> VersionsScope:
        """Both reads in one: each source either names (every DPU's BMC when either says every)."""
        if self.dpu_bmcs is None or other.dpu_bmcs is None:
            dpu_bmcs: tuple[str, ...] | None = None
        else:
            dpu_bmcs = tuple(sorted({*self.dpu_bmcs, *other.dpu_bmcs}))
        if self.firmware_unread is None or other.firmware_unread is None:
            unread: tuple[str, ...] | None = None
        else:
            unread = tuple(sorted({*self.firmware_unread, *other.firmware_unread}))
        return VersionsScope(
            dpf=self.dpf or other.dpf,
            dpu_bmcs=dpu_bmcs,
            host_bmc=self.host_bmc or other.host_bmc,
            firmware_unread=unread,
            # The earlier operation: what was read before it was read before the later one too.
            firmware_unread_by=self.firmware_unread_by or other.firmware_unread_by,
        )


EVERYTHING = VersionsScope()
NOTHING = VersionsScope(dpf=False, dpu_bmcs=(), host_bmc=False)


class ReadVersionsInput(_Frozen):
    host_id: str
    scope: VersionsScope = EVERYTHING  # the sources to read; the fields of the others stay None


class HostVersionsBrief(_Frozen):
    """What `read_host_versions_brief` returns for the host entity's memo: the host's versions
    without the DPUs' identity (model, serial, part number: left None), and the site's targets
    (all "" when the inventory declares none, e.g. the cluster inventory)."""

    versions: HostVersions
    targets: VersionTargets = VersionTargets()


VERSION_FIELDS: tuple[str, ...] = ("bfb", "flavor", "dpu_firmware", "dpu_bmc_firmware")


VERSIONS_READ_SIGNAL = "versions_read"  # to the host entity (HostWorkflow): `host versions --refresh`


class VersionsRead(_Frozen):
    """Signal `versions_read` to a host's entity: everything `metalflow host versions HOST
    --refresh` read of the host, with the site's targets, for the entity to show as its own read
    (no BMC is asked again for it)."""

    requested_by: Requester
    brief: HostVersionsBrief
