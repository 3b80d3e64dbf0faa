"""The activities: thin Temporal adapters over the drivers (`drivers/`), methods of small classes
that hold their clients (heartbeats, retries and error mapping live here; the I/O itself in the
drivers).

`build_activities` is the one list the worker registers; a new activity class is added there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio.client import Client

from drivers.settings import Settings


def build_activities(
    *, temporal_client: Client | None = None, settings: Settings | None = None
) -> list[Callable[..., Any]]:
    """Build every activity class once and return all activity callables to register.

    Args:
        temporal_client: The worker's client; the site's DPF watch and the activities that message
            workflows use it (without one they are not registered).
        settings: The worker settings; default `Settings.from_env()`.
    """
    # Imported here, not at module top: importing `activities` (e.g. for this function's type)
    # must not load the Kubernetes and HTTP clients until a worker builds them.
    from activities.bmc_lease import BMCLeaseActivities
    from activities.campaign import CampaignActivities
    from activities.dpf import DPFActivities
    from activities.grove import GroveActivities, RolloutWatcherActivities
    from activities.inventory import InventoryActivities
    from activities.pool import OwnerActivities, PoolActivities
    from activities.redfish import build_redfish_activities, build_redfish_client
    from activities.site_watch import SiteWatchActivities
    from activities.versions import VersionActivities
    from drivers.inventory import Inventory
    from drivers.kube import Kube

    settings = settings or Settings.from_env()
    kube = Kube(settings)  # one Kubernetes client, thread pool and set of per-host limits
    dpf = DPFActivities(settings, kube)
    hosts = Inventory(settings, kube)
    inventory = InventoryActivities(hosts)
    found: list[Callable[..., Any]] = [inventory.resolve_host_inventory]
    found += [
        dpf.create_site_objects,
        dpf.register_host_dpus,
        dpf.release_node_effect_hold,
        dpf.mark_dpu_node_rebooted,
        dpf.read_host_dpf_state,
        dpf.reprovision_dpu,
        dpf.update_deployment_bfb,
        dpf.update_deployment_flavor,
        dpf.delete_dpu,
        dpf.delete_dpu_node,
        dpf.wait_until_dpu_devices_gone,
    ]
    pool = PoolActivities(kube)
    found += [pool.set_host_pool_state, pool.read_host_pool_state]
    redfish = build_redfish_client(settings)  # one client: one request cap per BMC
    found += build_redfish_activities(settings, redfish, hosts)  # one site file parse per worker
    versions = VersionActivities(hosts, kube, redfish)
    found.append(versions.read_host_versions_brief)  # the host entity's memo (workflows/host/workflow.py)
    lease = BMCLeaseActivities(
        settings, hosts
    )  # the fleet-wide per-BMC limit (workflows/bmc_lease/workflow.py)
    found += [
        lease.request_bmc_lease,
        lease.lease_host_bmc,
        lease.find_closed_workflow_runs,
        lease.describe_reboot_run,  # is a reboot id's generation used up? (`start_next_reboot`)
    ]
    grove = GroveActivities(kube)
    found += [
        grove.read_pcs_state,
        grove.set_pcs_images,
        grove.restore_pcs_template,
        grove.put_back_foreign_edits,
        grove.describe_template_change,
        grove.roll_podgang,
        grove.publish_rollout_progress,
        grove.scale_pcs,
    ]
    if temporal_client is not None:
        site_watch = SiteWatchActivities(kube, temporal_client, settings.site_watch_heartbeat_timeout_seconds)
        found += [site_watch.watch_site_dpf, site_watch.join_site_dpf_watch]
        owner = OwnerActivities(temporal_client)
        found += [owner.request_host_reprovision, owner.withdraw_host_request, owner.find_host_operation]
        found += [owner.read_entity_predecessor, owner.await_operation_end]
        found.append(RolloutWatcherActivities(kube, temporal_client).watch_pcs)
        campaign = CampaignActivities(hosts, kube, temporal_client, redfish)
        found.append(versions.read_host_versions)
        found += [
            campaign.select_campaign_hosts,
            campaign.check_campaign_hosts,
            campaign.request_campaign_hosts,
            campaign.sweep_campaign_hosts,
            campaign.abort_campaign_hosts,
            campaign.read_campaign_deployments,
            campaign.point_campaign_deployment,
            campaign.claim_campaign_hosts,
            campaign.record_campaign_changes,
            campaign.release_campaign_hosts,
        ]
    return found
