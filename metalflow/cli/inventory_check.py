"""Refuse a request about something the inventory does not know, before anything is sent.

`metalflow host provision|reprovision|reboot|firmware|remove|reset|assign|release|monitor` first
look the host up in the same inventory the worker uses (`METALFLOW_INVENTORY`: the
site file through the shared loader, validated as a whole, or the DPF objects in the cluster): an
unknown host, or a `--dpus` entry that is not one of the host's DPUs, is refused (exit 2, as an
unknown object is in every command) and no entity or monitor workflow is created
(without this, `host/host-999` would be created and run forever). A reprovision also needs DPF's
DPU objects of the chosen DPUs, in either mode (the site file names the hosts; DPF's objects live
in the cluster `KUBECONFIG` points at): reprovisioning deletes them for DPF to recreate, so a
missing one is named at once instead of the operation waiting for it in `waiting-for-hold`, and
a cluster that cannot be reached is an error (exit 3; no usable kubeconfig: 2) rather than a
check skipped. A firmware update needs them too: its power cycle ends only once every DPU is
Ready again, which a DPU DPF has no object of never is (the run would otherwise stage the image,
power-cycle the host and wait an hour in `waiting-for-dpus`; workflows/firmware/state.py ends
such a run before its power cycle, whoever asked for it). A provision in
flight has not created them yet: `metalflow host` then lets the entity say that a provision is in
flight, rather than "provision it first" (`DPUsNotInDPF`).

Cost: one read of the site file, or two to 2 + DPUs Kubernetes GETs, per command (a reprovision in
site mode: the site file and one GET per chosen DPU); nothing per host at rest.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Final

from contracts import names
from contracts.dpf_presence import not_in_dpf
from contracts.errors import InvalidInput, MetalflowError
from contracts.models.dpf import DPUNODE_NAME_LABEL
from contracts.models.host import HostStatus
from contracts.models.inventory import HostInventory
from drivers.inventory import Inventory, host_from_site
from drivers.kube import DPU, Kube
from drivers.settings import Settings
from drivers.site_file import Site, SiteFileError, load_site
from workflows.host.abort_rule import AWAITING_APPROVAL

NEEDS_DPF_DPUS: Final = {
    # The operations that need DPF's DPU objects of the DPUs they name, and their verb.
    names.REPROVISION: "reprovision",
    names.FIRMWARE: "update the DPU firmware of",
}


class InventoryRefusal(Exception):
    """The world refuses the request as it is now (exit 1)."""


class UnknownToInventory(InventoryRefusal):
    """The request names something the inventory does not have: a host, a DPU (exit 2)."""


class DPUsNotInDPF(InventoryRefusal):
    """A reprovision names DPUs DPF has no objects of (yet: a provision in flight creates them)."""


class InventoryUnavailable(Exception):
    """The inventory itself cannot be read: a bad setting or site file (exit 2)."""


class InventoryUnreachable(InventoryUnavailable):
    """The cluster the inventory or DPF's objects are read from cannot be reached (exit 3)."""


async def check_request(args: argparse.Namespace) -> None:
    """Check `args.host` (and `args.dpus`, and for a reprovision DPF's DPUs) against the inventory.

    Raises:
        InventoryRefusal: Unknown host, a DPU not the host's, or (cluster) a DPU DPF does not have.
        InventoryUnavailable: The settings, the site file or the cluster cannot be read.
    """
    try:
        settings = Settings.from_env()
    except ValueError as err:
        raise InventoryUnavailable(str(err)) from None
    site: Site | None = None
    try:
        if settings.inventory == "site":
            site = await asyncio.to_thread(load_site, settings.site_file)
            host = host_from_site(site, settings.site_file, args.host, settings.dpf_namespace)
        else:
            host = await _from_cluster(settings, args)
    except SiteFileError as err:
        raise InventoryUnavailable(err.message) from None
    except InvalidInput as err:
        raise UnknownToInventory(err.message) from None
    _check_dpus(host, tuple(getattr(args, "dpus", None) or ()), site)
    if site is not None and getattr(args, "operation", None) in NEEDS_DPF_DPUS:
        kube = Kube(settings)
        try:
            await _require_dpf_dpus(kube, host, tuple(getattr(args, "dpus", None) or ()), args.operation)
        except InventoryRefusal:
            raise
        except Exception as err:
            raise _unreadable(err, f"cannot check that DPF has the DPUs of {host.host_id}") from None
        finally:
            kube.close()


def _check_dpus(host: HostInventory, wanted: tuple[str, ...], site: Site | None) -> None:
    owned = [d.id for d in host.dpus]
    for dpu_id in wanted:
        if dpu_id in owned:
            continue
        hosts = site.hosts if site else []
        owner = next((h.id for h in hosts if any(d.id == dpu_id for d in h.dpus)), None)
        where = f" (it is a DPU of {owner})" if owner else ""
        raise UnknownToInventory(
            f"{dpu_id} is not a DPU of {host.host_id}{where}; its DPUs: {', '.join(owned) or 'none'}"
        )


async def _from_cluster(settings: Settings, args: argparse.Namespace) -> HostInventory:
    kube = Kube(settings)
    try:
        host = await Inventory(settings, kube).resolve(args.host, "cluster")
        if getattr(args, "operation", None) in NEEDS_DPF_DPUS:
            await _require_dpf_dpus(kube, host, tuple(getattr(args, "dpus", None) or ()), args.operation)
        return host
    except (InvalidInput, InventoryRefusal):
        raise
    except Exception as err:  # the cluster unreachable, no kubeconfig: one line, not a traceback
        raise _unreadable(err, "cannot read the cluster inventory") from None
    finally:
        kube.close()


async def _require_dpf_dpus(kube: Kube, host: HostInventory, chosen: tuple[str, ...], operation: str) -> None:
    """Refuse a reprovision or firmware update of DPUs DPF does not have (or of a host with
    none), naming them."""
    wanted = chosen or tuple(d.id for d in host.dpus)
    _check_dpus(host, wanted, None)
    present = set()
    for dpu_id in wanted:
        if (
            await kube.get(host.host_id, DPU, host.namespace, host.dpu_name(dpu_id), missing_ok=True)
            is not None
        ):
            present.add(dpu_id)
    missing_ids = not_in_dpf(wanted, present)  # the campaign's admission decides the same
    missing = [host.dpu_name(dpu_id) for dpu_id in missing_ids]
    if missing or not wanted:
        # The hint names the DPUs unless every DPU of the host is missing: followed literally, a
        # plain `host provision HOST` would provision the DPUs DPF still has too.
        everyone = set(missing_ids) == {d.id for d in host.dpus}
        dpus = "" if everyone or not missing_ids else f" --dpus {','.join(missing_ids)}"
        raise DPUsNotInDPF(
            f"cannot {NEEDS_DPF_DPUS[operation]} {host.host_id}: DPF has no DPU "
            f"{', '.join(missing) or 'of this host'} in namespace {host.namespace} "
            f"(provision it first: metalflow host provision {host.host_id}{dpus})"
        )


def _unreadable(err: Exception, what: str) -> InventoryUnavailable:
    """A bad Kubernetes configuration (no kubeconfig: `InvalidInput`) is the user's to fix (2);
    anything else is a cluster that cannot be reached (3)."""
    reason = err.message if isinstance(err, MetalflowError) else f"{type(err).__name__}: {err}"
    kind = InventoryUnavailable if isinstance(err, InvalidInput) else InventoryUnreachable
    return kind(f"{what}: {reason}".splitlines()[0])


def rebooting_words(dpu: str, host_id: str, held: str = "", awaiting: str = "") -> str:
    """The WARNING of a DPU `Rebooting` on an idle host, with the advice that works: `host
    reboot` (or `reprovision`) reboots the host and tells DPF; while a reboot run still waits for
    a person holding the next generation (`held`: `boot_generation.waits_for_a_person`'s words),
    both would be refused behind it, so the advice is to end that run first. While a request
    awaits approval (`awaiting`: `awaiting_words`), that request is what stands, and is named."""
    if awaiting:
        return f"DPU {dpu} is Rebooting: DPF waits for a reboot of {host_id}; {awaiting}"
    said = f"DPU {dpu} is Rebooting: DPF waits for a reboot of {host_id} and no operation runs to do it"
    if held:
        return (
            f"{said}; `metalflow host reboot {host_id}` and `reprovision` are refused while {held} "
            "(the reboot)"
        )
    return (
        f"{said} (`metalflow host reboot {host_id}` reboots it and tells DPF, or "
        f"`metalflow host reprovision {host_id}`)"
    )


def awaiting_words(status: HostStatus) -> str:
    """The request awaiting approval on the host (its entity's `status`), as a DPU WARNING names
    it: no operation runs, but one is asked for, with both answers ("" when none awaits). Issue
    40: the WARNING said "no operation runs" while the monitor's reprovision of that DPU awaited
    approval."""
    current, host = status.current, status.host_id
    if current is None or current.outcome != AWAITING_APPROVAL:
        return ""
    named = status.awaiting.dpu_ids if status.awaiting is not None else None
    of = f" of {', '.join(named)}" if named else ""
    return (
        f"{current.operation}{of} ({current.workflow_id}, requested by {current.requested_by}) awaits "
        f"approval: `metalflow approve {host}` runs it, `metalflow host abort {host}` withdraws it"
    )


def not_ready_words(dpu: str, phase: str, host_id: str, awaiting: str = "") -> str:
    """The WARNING of a DPU not `Ready` on a host where no operation runs; `awaiting`: the request
    awaiting approval (`awaiting_words`), named instead of "no operation runs"."""
    if awaiting:
        return f"DPU {dpu} is {phase}, not Ready; {awaiting}"
    return f"DPU {dpu} is {phase}, not Ready, and no operation runs on {host_id}"


async def idle_dpu_warnings(host_id: str, held: str = "", awaiting: str = "") -> list[str]:
    """What DPF shows of an idle host's DPUs that needs a person: a DPU `Rebooting` with no
    operation to reboot the host (an aborted provision or reprovision left it so: DPF waits for a
    reboot nobody will do; `held`: a reboot run waiting for a person holds the next generation,
    `rebooting_words`), or any DPU not `Ready`. Empty when every DPU is Ready, or when the
    inventory or the cluster cannot be read (status must not fail for it). `awaiting`: the
    request awaiting approval (`awaiting_words`; "": none), which each warning names.

    Cost: the inventory read and one list of the host's DPUs.
    """
    try:
        settings = Settings.from_env()
        kube = Kube(settings)
    except Exception:  # noqa: BLE001 - no cluster to read: nothing to warn about
        return []
    try:
        host = await Inventory(settings, kube).resolve(host_id)
        listed = await kube.list(
            host_id, DPU, host.namespace, label_selector=f"{DPUNODE_NAME_LABEL}={host.dpu_node_name()}"
        )
    except Exception:  # noqa: BLE001 - as above
        return []
    finally:
        kube.close()
    warnings = []
    for item in sorted(listed.get("items") or [], key=lambda i: i["metadata"]["name"]):
        phase = (item.get("status") or {}).get("phase") or "no phase yet"
        name = item["metadata"]["name"]
        if phase == "Rebooting":
            warnings.append(rebooting_words(name, host_id, held, awaiting))
        elif phase != "Ready":
            warnings.append(not_ready_words(name, phase, host_id, awaiting))
    return warnings
