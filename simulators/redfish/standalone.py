"""Serve the BMCs of a site alone on 127.0.0.1 (tests and the Redfish benchmark).

The simulator proper serves `BMCs` next to its other pieces; this helper serves them alone, so
Redfish behaviour can be exercised over real HTTP in isolation.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from simulators.events import Event, Hub, PowerCycled, PowerTransition
from simulators.faults import Faults
from simulators.site import Site
from simulators.timings import Timings, timings_for
from simulators.violations import Violations

from . import BMCs, service_groups


def credentials_for(site: Site, username: str = "admin") -> dict[str, tuple[str, str]]:
    """One username and a distinct password per BMC of the site (one per shared BMC service)."""
    groups = service_groups(site)
    creds: dict[str, tuple[str, str]] = {}
    for host in site.hosts:
        creds[host.id] = (username, f"pw-{groups[host.id]}")
        for dpu in host.dpus:
            creds[dpu.id] = (username, f"pw-{dpu.id}")
    return creds


@dataclass
class RunningBMCs:
    """BMCs being served, with what a test needs to observe them."""

    bmcs: BMCs
    hub: Hub
    violations: Violations
    credentials: dict[str, tuple[str, str]]
    events: list[Event] = field(default_factory=list)

    def base(self, bmc_id: str) -> str:
        """The base URL a Redfish client is given for this BMC (`/redfish/v1` is under it)."""
        return self.bmcs.endpoint(bmc_id)


@asynccontextmanager
async def serve_bmcs(
    site: Site,
    *,
    timings: Timings | None = None,
    faults: Faults | None = None,
    credentials: dict[str, tuple[str, str]] | None = None,
    tls_everywhere: bool = False,
) -> AsyncIterator[RunningBMCs]:
    """Serve each of the site's BMCs on a free port of 127.0.0.1 until the block exits."""
    hub = Hub()
    violations = Violations()
    creds = credentials if credentials is not None else credentials_for(site)
    bmcs = BMCs(
        site, hub, faults or Faults("none"), timings or timings_for("zero"), violations, creds,
        tls_everywhere=tls_everywhere,
    )  # fmt: skip
    await bmcs.serve()
    running = RunningBMCs(bmcs, hub, violations, creds)
    hub.subscribe(PowerTransition, running.events.append)
    hub.subscribe(PowerCycled, running.events.append)
    await bmcs.start()
    try:
        yield running
    finally:
        await bmcs.stop()
