"""Redfish: the worker's BMC client (`client`), the System and its power (`system`, `power`,
`powercycle`) and DPU firmware (`firmware`). `build_redfish_activities` builds them once."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from activities.redfish.dpu_reset import DPUResetActivities
from activities.redfish.firmware import FirmwareActivities
from activities.redfish.power import PowerActivities
from activities.redfish.waits import PowerWaitActivities
from drivers.credentials import CredentialResolver
from drivers.redfish.client import RedfishClient
from drivers.settings import Settings

if TYPE_CHECKING:
    from drivers.inventory import Inventory


def build_redfish_client(settings: Settings) -> RedfishClient:
    """The worker's one Redfish client, limited to `settings.bmc_max_in_flight` requests per BMC."""
    return RedfishClient(CredentialResolver(settings.kubeconfig), max_in_flight=settings.bmc_max_in_flight)


def power_activities(power: PowerActivities) -> list[Callable[..., Any]]:
    return [
        power.read_power_state,
        power.set_power_state,
        power.power_cycle_host,
        power.shut_down_host_gracefully,
    ]


def build_redfish_activities(
    settings: Settings, client: RedfishClient | None = None, inventory: Inventory | None = None
) -> list[Callable[..., Any]]:
    """Every Redfish activity, sharing one client (and so one request cap per BMC); `client`: the
    worker's, when other activities (the campaign's firmware check) share it too; `inventory`:
    the worker's, so the site file is parsed once per worker, not once per inventory (at 10,000
    hosts a parse took 6-13 s on the loaded bench machine, and a power cycle's first attempt
    spent it unable to heartbeat, was timed out and cancelled, twice: bench/README.md)."""
    from drivers.inventory import Inventory  # the inventory's Kubernetes client loads lazily

    client = client or build_redfish_client(settings)
    # Each attempt re-reads its BMC from the inventory: fixes take effect (`access.py`).
    inventory = inventory or Inventory(settings)
    firmware = FirmwareActivities(client, inventory)
    return [
        *power_activities(PowerActivities(client, inventory)),
        firmware.read_dpu_firmware_versions,
        firmware.stage_dpu_firmware,
        PowerWaitActivities(client, inventory).wait_for_power_state,
        *dpu_reset_activities(DPUResetActivities(client, inventory)),
    ]


def dpu_reset_activities(resets: DPUResetActivities) -> list[Callable[..., Any]]:
    return [resets.read_dpu_system, resets.reset_dpu, resets.wait_for_dpu_os]
