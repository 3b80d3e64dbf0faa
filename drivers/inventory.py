"""Resolve a host id to its `HostInventory`: BMC endpoint, credential reference, DPUs, groups and
whether an instance is assigned. One interface (`Inventory.resolve`), two sources:

`site` (the default): the site file (YAML), as `METALFLOW_SITE_FILE` names it:

    name: <site>
    namespace: dpf-operator-system      # optional; default METALFLOW_DPF_NAMESPACE
    hosts:
      - id: host-001
        groups: [gpu-compute]
        labels: {rack: r01}
        instance: null
        bmc: {endpoint: https://..., credentials: {file: PATH} | {env: {...}} | {secret: {...}},
              insecure: false, ca_bundle: PATH,
              auth: auto,                       # session | basic | auto (session where offered)
              system: null}                     # the host's System id or path on a multi-system BMC
        dpus:
          - {id: host-001-dpu-0, model: BF3, serial: MT..., bmc: {...}}

The file is validated as a whole (`drivers/site_file.py`: unknown keys, duplicate ids, DPU
models, endpoints, credential references; every problem at once). The worker re-reads it when it
changes and keeps the last valid content while the file is invalid. A BMC's id is the host's
(or the DPU's) id.

`cluster`: labels and annotations metalflow writes on the DPF objects when it registers a host
(`register_host_dpus`), so a cluster registered by metalflow is its own inventory:

| object | key | kind | value |
| --- | --- | --- | --- |
| DPUNode `node-<host>` | `metalflow.io/host-id` | label | the host id |
| DPUNode, DPUDevice | `metalflow.io/dpu-group` | label | the DPU group (the DPUDeployment selects on it) |
| DPUNode | `metalflow.io/bmc` | annotation | the host BMC as JSON (`BMCAccess`: endpoint, credentials...) |
| DPUNode | `metalflow.io/site` | annotation | the site name |
| DPUNode | `metalflow.io/groups` | annotation | JSON list of the host's groups |
| DPUNode | `metalflow.io/host-labels` | annotation | JSON object of the host's labels (e.g. rack) |
| DPUNode | `metalflow.io/instance` | annotation | the assigned instance; absent when none |
| DPUDevice `device-<dpu>` | `metalflow.io/dpu-id`, `.../dpu-model` | annotation | the DPU's id and model |
| DPUDevice | `metalflow.io/bmc` | annotation | the DPU BMC as JSON (optional) |

The DPUs of a host are the DPUDevices its DPUNode lists in `spec.dpus`; a DPU's serial is the
DPUDevice's `spec.serialNumber`. An operator assigns an instance with
`kubectl annotate dpunode node-<host> metalflow.io/instance=<id>`. No annotation holds a secret.

An unknown host is `InvalidInput` naming the source (the file, or the cluster and namespace).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from contracts import names
from contracts.errors import InvalidInput
from contracts.models.dpf import (
    BMC_ANNOTATION,
    DPU_ID_ANNOTATION,
    DPU_MODEL_ANNOTATION,
    GROUP_LABEL,
    GROUPS_ANNOTATION,
    HOST_LABELS_ANNOTATION,
    INSTANCE_ANNOTATION,
    SITE_ANNOTATION,
)
from contracts.models.inventory import (
    BMCAccess,
    CredentialRef,
    DPUInventory,
    HostInventory,
    Source,
)
from drivers.kube import DPUDEVICE, DPUNODE, Kube
from drivers.settings import Settings
from drivers.site_file import Site, SiteBMC, SiteFileCache, load_site


def _bmc(owner: str, bmc: SiteBMC) -> BMCAccess:
    return BMCAccess(
        bmc_id=owner,
        endpoint=bmc.endpoint,
        credentials=CredentialRef.model_validate(bmc.credentials.model_dump()),
        insecure=bmc.insecure,
        ca_bundle=bmc.ca_bundle,
        auth=bmc.auth,
        system=bmc.system,
    )


def host_from_site(site: Site, path: Path, host_id: str, default_namespace: str) -> HostInventory:
    """The host as the (validated) site read from `path` describes it."""
    host = site.host(host_id)
    if host is None:
        raise InvalidInput(f"unknown host {host_id!r}: not in the site file {path} (site {site.name!r})")
    return HostInventory(
        host_id=host.id,
        site=site.name,
        bmc=_bmc(host.id, host.bmc),
        dpus=tuple(
            DPUInventory(id=d.id, model=d.model, serial=d.serial, bmc=_bmc(d.id, d.bmc) if d.bmc else None)
            for d in host.dpus
        ),
        groups=tuple(host.groups),
        labels=host.labels,
        instance=host.instance,
        namespace=site.namespace or default_namespace,
    )


def host_from_site_file(path: Path, host_id: str, default_namespace: str) -> HostInventory:
    """The host as the site file at `path` describes it (the file validated as a whole)."""
    return host_from_site(load_site(path), path, host_id, default_namespace)


def bmc_from_site(site: Site, bmc_id: str) -> BMCAccess | None:
    """The BMC with this id (a host's id, or a DPU's) as the site describes it (by index)."""
    host = site.host(bmc_id)
    if host is not None:
        return _bmc(host.id, host.bmc)
    dpu = site.dpu_bmc(bmc_id)
    return None if dpu is None else _bmc(bmc_id, dpu)


def _origin(endpoint: str) -> str:
    try:
        return names.bmc_origin(endpoint)
    except ValueError:
        return endpoint  # the site file check refuses such an endpoint; count it as written


def _json_annotation(annotations: dict[str, str], key: str, where: str) -> Any:
    try:
        return json.loads(annotations[key])
    except (KeyError, ValueError):
        raise InvalidInput(
            f"{where} has no valid JSON annotation {key}: was it registered by metalflow?"
        ) from None


class Inventory:
    """Resolves hosts from the configured source (`Settings.inventory`) or the one asked for."""

    def __init__(self, settings: Settings, kube: Kube | None = None) -> None:
        self.settings = settings
        self.kube = kube or Kube(settings)
        self.site_file = SiteFileCache.shared(settings.site_file)  # the worker's start check read it
        self._origins_of: Site | None = None  # the site `_origins` counts BMCs of
        self._origins: dict[str, int] = {}  # BMC origin -> hosts and DPUs behind it

    async def resolve(self, host_id: str, source: Source | None = None) -> HostInventory:
        """The host's inventory.

        Raises:
            InvalidInput: The host is unknown to the source, or its record is incomplete.
        """
        if (source or self.settings.inventory) == "site":
            site = await asyncio.to_thread(self.site_file.site)
            return host_from_site(site, self.settings.site_file, host_id, self.settings.dpf_namespace)
        return await self._from_cluster(host_id)

    async def serves_one_host(self, bmc: BMCAccess) -> bool:
        """Whether `bmc`'s endpoint (its origin: `names.bmc_origin`) is the BMC of one host or DPU
        only, by the site file (False for the cluster source, which cannot tell without listing
        every host: a BMC then takes its fleet-wide lease). Cost: one pass over the site per
        site file version, then a dict lookup."""
        if self.settings.inventory != "site":
            return False
        site = await asyncio.to_thread(self.site_file.site)
        if site is not self._origins_of:
            counts: dict[str, int] = {}
            for host in site.hosts:
                for each in [host.bmc, *(d.bmc for d in host.dpus if d.bmc is not None)]:
                    origin = _origin(each.endpoint)
                    counts[origin] = counts.get(origin, 0) + 1
            self._origins_of, self._origins = site, counts
        return self._origins.get(_origin(bmc.endpoint), 0) == 1

    async def bmc_access(self, bmc_id: str) -> BMCAccess | None:
        """The BMC's access as the inventory says now (None when it does not know the BMC).

        Power activities call this at each attempt, so a corrected endpoint or credential
        reference takes effect for an operation already running. The cluster source knows host
        BMCs only (a DPU's BMC is found through its host).
        """
        if self.settings.inventory == "site":
            return bmc_from_site(await asyncio.to_thread(self.site_file.site), bmc_id)
        try:
            return (await self._from_cluster(bmc_id)).bmc
        except InvalidInput:
            return None

    async def _from_cluster(self, host_id: str) -> HostInventory:
        ns = self.settings.dpf_namespace
        name = f"node-{host_id}"
        node = await self.kube.get(host_id, DPUNODE, ns, name, missing_ok=True)
        if node is None:
            raise InvalidInput(
                f"unknown host {host_id!r}: no DPUNode {name} in namespace {ns} of the cluster inventory"
            )
        where = f"DPUNode {ns}/{name}"
        annotations = dict(node["metadata"].get("annotations") or {})
        labels = dict(node["metadata"].get("labels") or {})
        bmc = _json_annotation(annotations, BMC_ANNOTATION, where)
        groups = json.loads(annotations.get(GROUPS_ANNOTATION) or "[]") or (
            [labels[GROUP_LABEL]] if GROUP_LABEL in labels else []
        )
        dpus = []
        for entry in (node.get("spec") or {}).get("dpus") or []:
            device = await self.kube.get(host_id, DPUDEVICE, ns, entry["name"], missing_ok=True)
            if device is None:
                raise InvalidInput(f"{where} lists DPUDevice {entry['name']}, which does not exist")
            dev_annotations = dict(device["metadata"].get("annotations") or {})
            dev_where = f"DPUDevice {ns}/{entry['name']}"
            dpu_bmc = None
            if BMC_ANNOTATION in dev_annotations:
                dpu_bmc = _json_annotation(dev_annotations, BMC_ANNOTATION, dev_where)
            dpus.append(
                DPUInventory(
                    id=dev_annotations.get(DPU_ID_ANNOTATION) or entry["name"].removeprefix("device-"),
                    model=dev_annotations.get(DPU_MODEL_ANNOTATION, "unknown"),
                    serial=(device.get("spec") or {}).get("serialNumber"),
                    bmc=BMCAccess.model_validate(dpu_bmc) if dpu_bmc is not None else None,
                )
            )
        try:
            return HostInventory(
                host_id=host_id,
                site=annotations.get(SITE_ANNOTATION, ""),
                bmc=BMCAccess.model_validate(bmc),
                dpus=tuple(dpus),
                groups=tuple(groups),
                labels=json.loads(annotations.get(HOST_LABELS_ANNOTATION) or "{}"),
                instance=annotations.get(INSTANCE_ANNOTATION) or None,
                namespace=ns,
            )
        except (ValidationError, ValueError) as err:
            raise InvalidInput(f"{where} carries an invalid metalflow inventory record: {err}") from None
