"""A campaign's reads of the inventory and of DPF, as plain functions over objects already read:
which hosts a selection names, a host's limits key (its BMC), which hosts a DPUDeployment covers
and under which strategy, and whether a host's DPUs run a BFB or flavor target.

Reads only: what follows from them (which hosts run, which are left out and why, whether a
deployment may be pointed, the canary) is the campaign's admission
(workflows/campaign/admission.py), which the campaign and `metalflow campaign plan` and `start`
call alike on what `Fleet` here read. The campaign activities (activities/campaign_select.py,
activities/campaign_deploy.py) are thin adapters over `Fleet`, and the CLI calls the same
`Fleet`, so the plan reads what the campaign will read.

Selection (`select`) names the hosts and reads, for the admission: the hosts DPF does not know
(no DPUNode; a kind that reprovisions), the hosts the inventory shows an instance on (when the
campaign skips assigned hosts), and the site's compatibility rules a DPU of the others breaks.

The deployments (`read_deployments`), for each deployment a BFB or flavor campaign would point
(the fleet's, and the canary's own): found or not, its `dpuSetStrategy` (the CRD's default when
the object omits it), its current value, the roster's hosts it selects and those outside it; and
whether the BFB or flavor exists.

Cost: selection reads the site file once (or lists the DPUNodes once), resolves each host from
the inventory and lists the namespace's DPUNodes once (one call, not one per host); the
at-target check lists each host's DPUs (PARALLEL_READS hosts at once) or reads each DPU's
firmware from its BMC (one Redfish session per DPU, as many hosts at once); the deployment read
one get per deployment (and of the BFB or flavor) and one list each of DPUNodes and DPUDevices.
Payloads: ~30 bytes a selected host (the roster), ~15 a host read unknown to DPF or assigned, ~15
a roster host a deployment selects.
"""

from __future__ import annotations

import asyncio
import hashlib
import posixpath
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from contracts.dpf_presence import not_in_dpf
from contracts.errors import InvalidInput, MetalflowError, ObjectNotFound
from contracts.models.campaign import (
    KINDS,
    CampaignHost,
    CheckHostsInput,
    CheckHostsResult,
    DeploymentFacts,
    DeploymentsInput,
    DeploymentsRead,
    HostSelection,
    Reading,
    Roster,
    SelectHostsInput,
    SelectHostsResult,
    TargetKind,
)
from contracts.models.campaign_facts import ON_DELETE, SHOWN, strategy_refusal
from contracts.models.dpf import DPUNODE_NAME_LABEL, HOST_ID_LABEL
from contracts.models.inventory import HostInventory
from contracts.models.redfish import ReadFirmwareInput
from drivers.inventory import Inventory
from drivers.kube import BFB, DEPLOYMENT, DPU, DPUDEVICE, DPUNODE, FLAVOR, SITE_KEY, Kube
from drivers.redfish.client import RedfishClient
from drivers.redfish.firmware import read_versions

Object = dict[str, Any]

PARALLEL_READS = 50  # hosts read at once (DPF lists, BMC sessions; the per-BMC cap still holds)
NIC_FIRMWARE = ReadFirmwareInput.model_fields["component"].default  # what the firmware workflow reads

CRD_DEFAULT_STRATEGY = ON_DELETE
"""What the vendored DPUDeployment CRD defaults `spec.dpus.dpuSetStrategy.type` to (DPF nightly
CRD vendored by NICo 7778162; v26.4 makes the field required: docs/DOMAIN.md section 2.7). An API
server that serves that CRD fills it in, so a deployment read without it is taken as OnDelete."""

POINTED = {k.kind: k for k in (BFB, FLAVOR)}
"""The DPF objects a DPUDeployment's value names (`KindSpec.dpf_object` of the campaign's target
kinds), written out so that the static RBAC check (tests/test_deploy_static.py) reads which kinds
the campaign gets; tests/fast/test_campaign_targets_table.py holds it to the kinds table."""


def matches(host: HostInventory, selection: HostSelection) -> bool:
    """Whether the host belongs to the selection (`hosts` is checked by the caller)."""
    if selection.group:
        return selection.group in host.groups
    if selection.selector:
        return all(host.labels.get(k) == v for k, v in selection.selector.items())
    return True


def bmc_key(endpoint: str) -> str:
    """A short key of a BMC endpoint (10 hex digits of its SHA-256): equal for hosts behind one
    BMC, so `max_per_bmc` can count them; nothing of the URL lands in a payload."""
    return hashlib.sha256(endpoint.strip().lower().encode()).hexdigest()[:10] if endpoint else ""


def campaign_host(host: HostInventory) -> CampaignHost:
    return CampaignHost(
        host_id=host.host_id,
        site=host.site or "default",
        group=host.groups[0] if host.groups else "",
        bmc=bmc_key(host.bmc.endpoint),
    )


# -- DPUDeployments ---------------------------------------------------------------------------------


def strategy_of(deployment: Object) -> str:
    """`spec.dpus.dpuSetStrategy.type`, or the CRD's default when the object does not say."""
    strategy = ((deployment.get("spec") or {}).get("dpus") or {}).get("dpuSetStrategy") or {}
    return str(strategy.get("type") or CRD_DEFAULT_STRATEGY)


def field_of(deployment: Object, field: str) -> str:
    return str(((deployment.get("spec") or {}).get("dpus") or {}).get(field) or "")


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A Kubernetes LabelSelector (`matchLabels`, `matchExpressions`) against labels; an empty or
    absent selector matches every object (as DPF's DPUSet controller reads it)."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


def _labels(obj: Object) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def host_of_node(node: Object) -> str:
    """The host id of a DPUNode: its `metalflow.io/host-id` label, else its name minus `node-`."""
    labels = _labels(node)
    name = str(node["metadata"]["name"])
    return labels.get(HOST_ID_LABEL) or name.removeprefix("node-")


def deployment_hosts(deployment: Object, nodes: Iterable[Object], devices: Iterable[Object]) -> set[str]:
    """The hosts whose DPUs the deployment's DPUSets select: per `spec.dpus.dpuSets[]` entry, the
    DPUNodes its `nodeSelector` (v26: `dpuNodeSelector`) matches that list a DPUDevice its
    `dpuSelector` (a label map; v26: `dpuDeviceSelector`, a LabelSelector) matches."""
    device_labels = {str(d["metadata"]["name"]): _labels(d) for d in devices}
    nodes = list(nodes)
    covered: set[str] = set()
    for entry in ((deployment.get("spec") or {}).get("dpus") or {}).get("dpuSets") or []:
        node_selector = entry.get("dpuNodeSelector") or entry.get("nodeSelector")
        device_map = entry.get("dpuSelector") or {}
        device_selector = entry.get("dpuDeviceSelector")
        for node in nodes:
            if not selector_matches(node_selector, _labels(node)):
                continue
            for listed in (node.get("spec") or {}).get("dpus") or []:
                labels = device_labels.get(str(listed.get("name")))
                if labels is None:
                    continue
                if all(labels.get(k) == v for k, v in device_map.items()) and selector_matches(
                    device_selector, labels
                ):
                    covered.add(host_of_node(node))
                    break
    return covered


# -- at the target ----------------------------------------------------------------------------------


def outdated_reason(dpu: Object) -> str | None:
    """Why DPF reports the DPU outdated: `status.outdated.reason` (DPF 26.7+) or an `Outdated`
    condition that is True (docs/DOMAIN.md section 2.7); None: not outdated."""
    status = dpu.get("status") or {}
    outdated = status.get("outdated")
    if isinstance(outdated, dict) and outdated.get("reason"):
        return str(outdated["reason"])
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Outdated" and cond.get("status") == "True":
            return str(cond.get("reason") or "Outdated")
    return None


DRIFT_NAMES = {"bfb": "BFB", "dpuFlavor": "DPUFlavor"}
"""A DPU spec field a campaign points -> the name DPF's Outdated report gives its drift
(`OutdatedBFB`, message `... (BFB: a -> b, DPUFlavor: c -> d)`)."""


def other_drift(dpu: Object, field: str) -> str:
    """The DPU's Outdated report's words when they name drift of another field than `field` (the
    one the campaign points), "" when they name none (or only `field`'s)."""
    status = dpu.get("status") or {}
    reports = [status.get("outdated") or {}] + [
        c for c in status.get("conditions") or [] if c.get("type") == "Outdated" and c.get("status") == "True"
    ]
    for report in reports:
        reason, message = str(report.get("reason") or ""), str(report.get("message") or "")
        for other, name in DRIFT_NAMES.items():
            if other != field and (reason == f"Outdated{name}" or f"{name}:" in message):
                return message or reason
    return ""


def dpu_reading(
    dpu: Object, kind: TargetKind, value: str, namespace: str, *, as_pointed: bool = False
) -> tuple[bool, str]:
    """Whether one DPU runs the `value` of a kind read from DPF (a BFB, a flavor), and what it
    runs, in words. `as_pointed`: judged as it will read once the campaign's deployment is
    pointed at `value` (a DPU on `value` reads Outdated only because its deployment is not
    pointed yet: `campaign plan` and `start` read before the campaign points it, the workflow
    after, and all three must judge alike); only that field's drift is dropped (`other_drift`).

    At the target: its spec names `value` (the kind's `dpu_field`), DPF does not report it
    outdated, it is not being deleted, it is `Ready`, and where the kind names the file DPF
    installed (a BFB's `status.bfbFile`, named `<namespace>-<bfb>.bfb`; NICo
    `find_outdated_dpus_dpf`) that file is the value's when DPF reports one."""
    spec, status, meta = dpu.get("spec") or {}, dpu.get("status") or {}, dpu["metadata"]
    name = str(meta["name"])
    reads = KINDS[kind]
    named = str(spec.get(reads.dpu_field) or "")
    running = named
    ok = named == value
    file = str(status.get(reads.installed_file) or "") if reads.installed_file else ""
    if file:
        installed = (
            posixpath.basename(file).removeprefix(f"{namespace}-").removesuffix(reads.installed_suffix)
        )
        if installed != named:
            running = f"{installed} (spec {named})"
        ok = ok and installed == value
    what = f"{kind} {running or '-'}"
    phase = str(status.get("phase") or "")
    outdated = outdated_reason(dpu)
    notes = [f"phase {phase or '-'}"]
    if outdated:
        notes.append(f"outdated {outdated}")
    if meta.get("deletionTimestamp"):
        notes.append("deleting")
    # As pointed, only the drift of the field the campaign points goes away: a DPU outdated for
    # another field too (its flavor changed) is not at the target, and its reprovision takes both.
    other = other_drift(dpu, reads.dpu_field) if outdated else ""
    if other:
        notes.append(f"also outdated: {other}: a reprovision takes it too")
    outdated_now = outdated is not None and not (as_pointed and named == value and not other)
    ok = ok and not outdated_now and not meta.get("deletionTimestamp") and phase == "Ready"
    return ok, f"{name}: {what}, {', '.join(notes)}"


def host_reading(
    dpus: list[Object],
    host_id: str,
    kind: TargetKind,
    value: str,
    namespace: str,
    *,
    as_pointed: bool = False,
) -> tuple[bool, str]:
    """Whether every DPU of the host runs the target (a host with none does not), and in words
    what the DPUs not at the target run."""
    mine = [d for d in dpus if (d.get("spec") or {}).get("dpuNodeName") == f"node-{host_id}"]
    if not mine:
        return False, "no DPU objects"
    readings = [dpu_reading(d, kind, value, namespace, as_pointed=as_pointed) for d in mine]
    off = [words for ok, words in readings if not ok]
    return not off, "; ".join(off)


# -- the reads, for the activities and the plan ------------------------------------------------------


class Fleet:
    """The campaign's reads of one site: its inventory, its DPF, its BMCs.

    Args:
        inventory: The worker's (or the CLI's) inventory.
        kube: Its Kubernetes client.
        redfish: The Redfish client (firmware targets only).
        dpf_hosts: The hosts DPF knows (a DPUNode); default: one list of the DPUNodes. A test
            worker without DPF gives its own (DPF then has every DPU of those hosts: no DPU
            objects are read).
    """

    def __init__(
        self,
        inventory: Inventory,
        kube: Kube,
        redfish: RedfishClient | None = None,
        dpf_hosts: Callable[[], Awaitable[set[str]]] | None = None,
    ) -> None:
        self.inventory = inventory
        self.kube = kube
        self.redfish = redfish
        self.dpf_hosts = dpf_hosts

    @property
    def namespace(self) -> str:
        return self.inventory.settings.dpf_namespace

    async def all_hosts(self) -> list[HostInventory]:
        settings = self.inventory.settings
        if settings.inventory == "site":
            site = await asyncio.to_thread(self.inventory.site_file.site)
            ids = [h.id for h in site.hosts]
        else:
            listed = await self.kube.list("campaign", DPUNODE, self.namespace, label_selector=HOST_ID_LABEL)
            ids = [item["metadata"]["labels"][HOST_ID_LABEL] for item in listed.get("items") or []]
        return [await self.inventory.resolve(host_id) for host_id in ids]

    async def known_to_dpf(self) -> set[str]:
        """The hosts with a DPUNode in the DPF namespace (one list call)."""
        if self.dpf_hosts is not None:
            return await self.dpf_hosts()
        listed = await self.kube.list("campaign", DPUNODE, self.namespace)
        return {host_of_node(node) for node in listed.get("items") or []}

    async def dpus_in_dpf(self) -> set[str] | None:
        """The names of the DPU objects in the DPF namespace (one list call); None: not read
        (`dpf_hosts` given: a test worker without DPF)."""
        if self.dpf_hosts is not None:
            return None
        listed = await self.kube.list("campaign", DPU, self.namespace)
        return {item["metadata"]["name"] for item in listed.get("items") or []}

    async def select(self, request: SelectHostsInput) -> SelectHostsResult:
        """The selected hosts, in inventory order (a list: in its own order), and what the read
        found about them (see the module docstring); whether each runs is not decided here.

        Raises:
            InvalidInput: An unknown host is listed, or the selection matches no host.
        """
        selection = request.selection
        known = await self.all_hosts()
        source = f"the {self.inventory.settings.inventory} inventory"
        if selection.hosts:
            by_id = {h.host_id: h for h in known}
            unknown = [h for h in selection.hosts if h not in by_id]
            if unknown:
                raise InvalidInput(f"unknown hosts {', '.join(unknown)}: not in {source}")
            chosen = [by_id[h] for h in dict.fromkeys(selection.hosts)]
        else:
            chosen = [h for h in known if matches(h, selection)]
        if not chosen:
            hint = ""
            if selection.group:
                groups = sorted({g for h in known for g in h.groups})
                hint = f" (groups there: {', '.join(groups) or 'none'})"
            raise InvalidInput(f"{selection.describe()} matches no host in {source}{hint}")
        target = request.target
        no_dpf: list[str] = []
        if target is not None and target.spec.needs_dpf:
            dpf = await self.known_to_dpf()
            no_dpf = [h.host_id for h in chosen if h.host_id not in dpf]
        assigned = [h.host_id for h in chosen if h.instance] if request.skip_assigned else []
        lacking: dict[str, tuple[str, ...]] = {}
        # Every kind reprovisions or updates firmware: DPF must have each DPU (`dpf_presence`).
        present = None if target is None else await self.dpus_in_dpf()
        if present is not None:
            for host in (h for h in chosen if h.host_id not in no_dpf):
                missing = not_in_dpf(
                    [d.id for d in host.dpus], {d.id for d in host.dpus if host.dpu_name(d.id) in present}
                )
                if missing:
                    lacking[host.host_id] = tuple(missing)
        breaks: list[str] = []
        if target is not None and target.spec.site_rules:
            # Only the hosts that may run: a host left out anyway is not read (its BMC may be away).
            out = set(no_dpf) | set(assigned) | set(lacking)
            breaks = await self._rule_breaks(target.value, [h for h in chosen if h.host_id not in out])
        return SelectHostsResult(
            roster=Roster.of([campaign_host(h) for h in chosen]),
            no_dpf=tuple(no_dpf),
            not_in_dpf=lacking,
            assigned=tuple(assigned),
            rule_breaks=tuple(breaks),
        )

    async def _rule_breaks(self, bfb: str, hosts: list[HostInventory]) -> list[str]:
        """The site file's compatibility rules for this BFB (`versions.rules`) that a selected
        host's DPU breaks, in words (each DPU's BMC read, PARALLEL_READS hosts at once).

        Raises:
            InvalidInput: The rules need the DPUs' BMC firmware and there is no Redfish client.
        """
        if self.inventory.settings.inventory != "site":
            return []
        site = await asyncio.to_thread(self.inventory.site_file.site)
        rules = [r for r in site.versions.rules if r.bfb == bfb]
        if not rules or not hosts:
            return []
        if self.redfish is None:
            raise InvalidInput("no Redfish client: the DPU BMC firmware the site's rules need cannot be read")
        from drivers.versions import VersionReader, rule_breaks

        reader = VersionReader(self.kube, self.redfish)
        gate = asyncio.Semaphore(PARALLEL_READS)

        async def breaks(host: HostInventory) -> list[str]:
            async with gate:
                versions = await reader.host(host)
            return [
                f"{host.host_id} {why}" for r in rules for d in versions.dpus if (why := rule_breaks(r, d))
            ]

        return [b for host_breaks in await asyncio.gather(*(breaks(h) for h in hosts)) for b in host_breaks]

    async def check(
        self, request: CheckHostsInput, on_wait: Callable[[], None] | None = None
    ) -> CheckHostsResult:
        """Hosts at the target: every DPU runs the target BFB or flavor, Ready and not outdated
        (DPF), or every DPU's own BMC reports the target firmware running (Redfish); the others
        with what they read. A reprovision has no such state: none is at target."""
        target = request.target
        gate = asyncio.Semaphore(PARALLEL_READS)
        ns = self.namespace

        async def dpf_read(host_id: str) -> tuple[bool, str]:
            async with gate:
                listed = await self.kube.list(
                    host_id, DPU, ns, label_selector=f"{DPUNODE_NAME_LABEL}=node-{host_id}"
                )
            dpus = list(listed.get("items") or [])
            return host_reading(dpus, host_id, target.kind, target.value, ns, as_pointed=request.as_pointed)

        async def bmc_read(host_id: str) -> tuple[bool, str]:
            async with gate:
                return await self._firmware_reading(host_id, target.value, on_wait)

        if target.spec.at_target == "bmc":
            found = await asyncio.gather(*(bmc_read(h) for h in request.host_ids))
        elif target.spec.at_target == "dpf":
            found = await asyncio.gather(*(dpf_read(h) for h in request.host_ids))
        else:
            return CheckHostsResult(at_target=())
        ids = request.host_ids
        return CheckHostsResult(
            at_target=tuple(h for h, (ok, _) in zip(ids, found, strict=True) if ok),
            readings=tuple(
                Reading(host_id=h, read=words[:300])
                for h, (ok, words) in zip(ids, found, strict=True)
                if not ok
            ),
        )

    async def _firmware_reading(
        self, host_id: str, version: str, on_wait: Callable[[], None] | None
    ) -> tuple[bool, str]:
        """Each DPU's running firmware from its BMC (the Redfish client's cap per BMC holds). A
        host whose BMC cannot say is not at target: its firmware operation runs and reports the
        BMC's words."""
        redfish = self.redfish
        if redfish is None:
            raise InvalidInput("no Redfish client: this worker cannot read DPU firmware")
        host = await self.inventory.resolve(host_id)
        bmcs = [(d.id, d.bmc) for d in host.dpus if d.bmc is not None]
        if not host.dpus or len(bmcs) != len(host.dpus):
            return False, "a DPU without a BMC in the inventory"
        off = []
        try:
            for dpu_id, access in bmcs:
                async with redfish.connect(access, on_wait=on_wait) as bmc:
                    versions = await read_versions(bmc, NIC_FIRMWARE)
                if versions.running != version:
                    off.append(f"{dpu_id}: {NIC_FIRMWARE} {versions.running or '-'}")
        except MetalflowError as err:
            return False, f"firmware unknown: {err}"
        return not off, "; ".join(off)

    # -- deployments ----------------------------------------------------------------------------------
    async def deployment(self, name: str) -> Object:
        try:
            found = await self.kube.get(SITE_KEY, DEPLOYMENT, self.namespace, name)
        except ObjectNotFound:
            raise InvalidInput(f"no DPUDeployment {name} in namespace {self.namespace}") from None
        assert found is not None
        return found

    async def read_deployments(self, request: DeploymentsInput) -> DeploymentsRead:
        """The deployments a BFB or flavor campaign would point (the canary's and the fleet's),
        each as read: found or not, its strategy and current value, the roster's hosts it
        selects and how many outside it; and whether the BFB or flavor exists. Decides nothing,
        changes nothing (the admission decides: workflows/campaign/admission.py)."""
        target = request.target
        ns = self.namespace
        field = target.spec.deployment_field
        kind = POINTED[target.spec.dpf_object]
        found = await self.kube.get(SITE_KEY, kind, ns, target.value, missing_ok=True) is not None
        nodes = list((await self.kube.list(SITE_KEY, DPUNODE, ns)).get("items") or [])
        devices = list((await self.kube.list(SITE_KEY, DPUDEVICE, ns)).get("items") or [])
        roster = set(request.host_ids)
        read = []
        for role, name in (("canary", target.canary_deployment), ("fleet", target.deployment)):
            if not name:
                continue
            deployment = await self.kube.get(SITE_KEY, DEPLOYMENT, ns, name, missing_ok=True)
            if deployment is None:
                read.append(DeploymentFacts(role=role, name=name, found=False))
                continue
            covered = deployment_hosts(deployment, nodes, devices)
            outside = sorted(covered - roster)
            read.append(
                DeploymentFacts(
                    role=role,
                    name=name,
                    strategy=strategy_of(deployment),
                    value=field_of(deployment, field),
                    covered=tuple(h for h in request.host_ids if h in covered),
                    outside=len(outside),
                    outside_named=tuple(outside[:SHOWN]),
                )
            )
        return DeploymentsRead(target_found=found, namespace=ns, deployments=tuple(read))


def check_strategy(name: str, deployment: Object) -> None:
    """InvalidInput unless the deployment's strategy is OnDelete, naming the one it has (the
    admission's words: `strategy_refusal`)."""
    refusal = strategy_refusal(name, strategy_of(deployment))
    if refusal is not None:
        raise InvalidInput(refusal)
