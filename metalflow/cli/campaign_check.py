"""Check a campaign's selection against the inventory before anything is started.

`metalflow campaign start` refused an unknown host, a group or a selector matching nothing only
once the workflow ran its selection: the refusal left a FAILED `campaign/<name>` behind (red in
the UI) and replaced the status of the last real campaign of that name. Now the same check runs
here first, through the drivers the worker uses (the site file, or the cluster's DPUNodes), and
a refused request starts nothing. The workflow still selects for itself (the inventory may change
in between); this is the same rule, read earlier. Membership is the campaign's own
rule (`drivers.campaign.matches`, which `select_campaign_hosts` applies).

Cost: one read of the site file, or one list of DPUNodes plus one read per host named by a group
or selector (cluster inventory); `--all` reads no host.
"""

from __future__ import annotations

import asyncio

from contracts.errors import InvalidInput
from contracts.models.campaign import HostSelection
from contracts.models.dpf import HOST_ID_LABEL
from drivers.campaign import matches
from drivers.inventory import Inventory
from drivers.kube import DPUNODE
from drivers.settings import Settings
from drivers.site_file import SiteFileError, load_site
from metalflow.cli.inventory_check import InventoryRefusal, InventoryUnavailable


async def check_selection(selection: HostSelection) -> None:
    """Refuse a selection the inventory cannot satisfy, as the workflow would.

    Raises:
        InventoryRefusal: An unknown host is listed, or the selection matches no host.
        InventoryUnavailable: The settings, the site file or the cluster cannot be read.
    """
    try:
        settings = Settings.from_env()
    except ValueError as err:
        raise InventoryUnavailable(str(err)) from None
    inventory = Inventory(settings)
    source = f"the {settings.inventory} inventory"
    try:
        if settings.inventory == "site":
            site = await asyncio.to_thread(load_site, settings.site_file)
            ids = [h.id for h in site.hosts]
        else:
            listed = await inventory.kube.list(
                "campaign", DPUNODE, settings.dpf_namespace, label_selector=HOST_ID_LABEL
            )
            ids = [item["metadata"]["labels"][HOST_ID_LABEL] for item in listed.get("items") or []]
        if selection.hosts:
            unknown = [h for h in selection.hosts if h not in ids]
            if unknown:
                raise InventoryRefusal(f"unknown hosts {', '.join(unknown)}: not in {source}")
            return
        if selection.group or selection.selector:
            known = [await inventory.resolve(host_id) for host_id in ids]
            matched = sum(matches(h, selection) for h in known)
        else:
            known, matched = [], len(ids)
    except SiteFileError as err:
        raise InventoryUnavailable(err.message) from None
    except InvalidInput as err:
        raise InventoryUnavailable(f"cannot read {source}: {err.message}") from None
    except (InventoryRefusal, InventoryUnavailable):
        raise
    except Exception as err:  # the cluster unreachable, no kubeconfig: one line
        reason = f"{type(err).__name__}: {err}".splitlines()[0]
        raise InventoryUnavailable(f"cannot read {source}: {reason}") from None
    finally:
        inventory.kube.close()
    if not matched:
        hint = ""
        if selection.group:
            groups = sorted({g for h in known for g in h.groups})
            hint = f" (groups there: {', '.join(groups) or 'none'})"
        raise InventoryRefusal(f"{selection.describe()} matches no host in {source}{hint}")
