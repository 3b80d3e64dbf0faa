"""The campaign's selection result at 10,000 hosts (one activity result: one payload), as
`Fleet.select` (drivers/campaign.py) makes it from a site file of 10,000 hosts, 9,000 with an
instance: it stays far under the payload limit. Not in the fast tier (tests/fast): it reads and
resolves a site file of 10,000 hosts, seconds of CPU. The state's own bound is
tests/fast/test_campaign_bound.py.
"""

from __future__ import annotations

from pathlib import Path

from contracts.converter import DATA_CONVERTER
from contracts.models.campaign import (
    CampaignHost,
    CampaignTarget,
    HostSelection,
    SelectHostsInput,
    TargetKind,
)
from drivers.campaign import Fleet
from drivers.inventory import Inventory
from drivers.kube import Kube
from drivers.settings import Settings

BOUND = 1024 * 1024  # what the campaign promises at 10,000 hosts: half the payload limit, for margin


def _host(i: int) -> CampaignHost:
    # Long ids and keys: a worst case, not the simulated site's short `host-001`.
    return CampaignHost(host_id=f"rack{i // 40:03d}-node{i:05d}.dc1", site="dc1", group=f"rack-{i // 40:03d}",
                        bmc=f"{i:010x}")  # fmt: skip


async def test_the_selection_of_10000_hosts_with_9000_assigned_fits_too(tmp_path: Path) -> None:
    """The selection's result (one activity result: one payload), as `Fleet.select` makes it from
    a site file of 10,000 hosts, 9,000 with an instance (each its own)."""
    credentials = tmp_path / "bmc.json"
    credentials.write_text('{"username": "u", "password": "p"}')
    lines = ["name: bound", "hosts:"]
    for i in range(10_000):
        host = _host(i)
        lines += [
            f"  - id: {host.host_id}",
            f"    groups: [{host.group}]",
            f"    bmc: {{endpoint: 'https://bmc-{host.host_id}.example.net', "
            f"credentials: {{file: '{credentials}'}}}}",
        ]
        if i % 10:
            lines.append(f"    instance: vm-{i:05d}-{'x' * 20}")
    site = tmp_path / "site.yaml"
    site.write_text("\n".join(lines) + "\n")
    settings = Settings(site_file=site, inventory="site")
    kube = Kube(settings)

    async def every_host() -> set[str]:
        return {_host(i).host_id for i in range(10_000)}

    fleet = Fleet(Inventory(settings, kube), kube, dpf_hosts=every_host)
    result = await fleet.select(
        SelectHostsInput(
            selection=HostSelection(all=True),
            target=CampaignTarget(kind=TargetKind.REPROVISION),
            skip_assigned=True,
        )
    )
    assert len(result.assigned) == 9_000
    [payload] = DATA_CONVERTER.payload_converter.to_payloads([result])
    assert len(payload.data) < BOUND, f"{len(payload.data)} bytes"
