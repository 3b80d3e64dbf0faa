"""What the simulated site measures of its clients: requests per client and the reboot timeline.

Served at `/sim/requests` and `/sim/timeline` for the benchmarks (`bench/bench_fleet.py`):

- requests are counted per API (`kubernetes`, `redfish`) and per client library (its
  `User-Agent` without its comment), as a real API server's audit log would count them; a watch
  is one request however long it streams, so it counts once. The simulator's own `/sim/` API is not counted.
- the timeline records, with the simulator's own clock, when DPF set the reboot-required
  annotation on a host's DPUNode and when the host's BMC accepted a reset that starts a power
  transition, so a client's reaction time is measured where it matters, at the site.

Cost: one counter increment per request and one list entry per reboot asked and per reset; a
10,000-host campaign adds a few hundred KB.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from aiohttp import web

log = logging.getLogger(__name__)

KUBE_PREFIXES = ("/api", "/apis", "/version", "/openapi")


def client_of(request: web.BaseRequest) -> str:
    """The client a request came from: its User-Agent, whole (one per client instance when it
    names one, as metalflow's `metalflow-redfish (client <random>)` does), shortened."""
    return (request.headers.get("User-Agent") or "-")[:120]


def library_of(request: web.BaseRequest) -> str:
    """The client library a request came from: its User-Agent without its comment, shortened."""
    return client_of(request).split(" (", 1)[0][:80]


class RequestCounts:
    """Requests per (API, client) since the simulator started."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()

    def count(self, api: str, request: web.BaseRequest) -> None:
        self.counts[(api, library_of(request))] += 1

    def as_json(self) -> list[dict[str, Any]]:
        return [
            {"api": api, "client": client, "count": n} for (api, client), n in sorted(self.counts.items())
        ]

    def middleware(self) -> Callable[..., Awaitable[web.StreamResponse]]:
        """An aiohttp middleware counting the Kubernetes API's requests (not `/sim/`)."""

        @web.middleware
        async def counting(
            request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
        ) -> web.StreamResponse:
            if request.path.startswith(KUBE_PREFIXES):
                self.count("kubernetes", request)
            return await handler(request)

        return counting


class Timeline:
    """Reboots DPF asked for and resets BMCs accepted, each with the simulator's wall clock."""

    def __init__(self) -> None:
        self.reboots_asked: list[dict[str, str]] = []
        self.resets: list[dict[str, str]] = []

    def reboot_asked(self, host_id: str, node: str, at: datetime) -> None:
        self.reboots_asked.append({"host": host_id, "node": node, "time": at.isoformat()})
        log.info("timeline: DPF asked for a reboot of host %s (DPUNode %s) at %s", host_id, node, at)

    def reset_accepted(self, host_id: str, reset_type: str, at: datetime) -> None:
        self.resets.append({"host": host_id, "reset_type": reset_type, "time": at.isoformat()})
        log.info("timeline: BMC of host %s accepted reset %s at %s", host_id, reset_type, at)

    def as_json(self) -> dict[str, list[dict[str, str]]]:
        return {"reboots_asked": list(self.reboots_asked), "resets": list(self.resets)}
