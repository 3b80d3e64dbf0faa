"""The worker's health and Prometheus endpoint: `/livez`, `/readyz`, `/metrics` on one address.

Off unless an address is given (`--metrics-address` or `METALFLOW_METRICS_ADDRESS`, e.g.
`127.0.0.1:9464`; `0.0.0.0:9464` in a pod, where the kubelet and Prometheus must reach it).

- `/livez`: 200 while the worker runs (its pollers have not failed); 503 once it has stopped.
  The kubelet restarts a worker that stays unlive.
- `/readyz`: 200 when the worker polls its task queue and Temporal's frontend answers a health
  check (two seconds at most); 503 with the reason otherwise.
- `/metrics`: the Temporal SDK's runtime metrics (workflow and activity task latencies, slots,
  poll counts, sticky cache) and metalflow's own (`contracts.metrics`), both recorded by the
  SDK's meter and exported by its Prometheus exporter, which listens on a private 127.0.0.1 port
  and is served here, plus `metalflow_hosts_in_manual_intervention` read from Temporal
  visibility at each scrape (one count query; the same number on every worker, so use `max`).

Why the SDK's meter and not prometheus-client: workflow metrics must not count again when a
history replays on another worker, which `workflow.metric_meter()` guarantees, and one runtime
exports everything on one endpoint.

Cost per worker: one aiohttp listener, one loopback HTTP request per scrape to the SDK
exporter, one visibility count per scrape. Nothing per host.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from datetime import timedelta

import httpx
from aiohttp import web
from temporalio.client import Client
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import Worker

from contracts import names
from metalflow.runtime.ports import free_port

ADDRESS_ENV = "METALFLOW_METRICS_ADDRESS"
HEALTH_CHECK_TIMEOUT = timedelta(seconds=2)
MANUAL_INTERVENTION_QUERY = (
    f"{names.PHASE.name} = 'manual-intervention-required' AND ExecutionStatus = 'Running'"
)
log = logging.getLogger(__name__)


def parse_address(address: str) -> tuple[str, int]:
    """`host:port` as a pair.

    Raises:
        ValueError: Not `host:port` with a port from 0 to 65535.
    """
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"metrics address {address!r} is not host:port (e.g. 127.0.0.1:9464)")
    return host.strip("[]"), int(port)


class Observability:
    """The SDK runtime that records metrics, and the HTTP server that shows them and the health."""

    def __init__(self, address: str | None) -> None:
        self.address = parse_address(address) if address else None
        self._exporter_port = free_port() if self.address else None
        self._runner: web.AppRunner | None = None
        self._client: Client | None = None
        self._worker: Worker | None = None
        self.url = ""

    @classmethod
    def from_env(cls, address: str | None = None, env: Mapping[str, str] | None = None) -> Observability:
        """`address` when given, else `METALFLOW_METRICS_ADDRESS`, else off."""
        return cls(address or (env if env is not None else os.environ).get(ADDRESS_ENV) or None)

    def runtime(self) -> Runtime | None:
        """A runtime exporting every metric to the private Prometheus port (None when off)."""
        if self._exporter_port is None:
            return None
        prometheus = PrometheusConfig(
            bind_address=f"127.0.0.1:{self._exporter_port}",
            counters_total_suffix=True,
            durations_as_seconds=True,
        )
        return Runtime(telemetry=TelemetryConfig(metrics=prometheus))

    async def start(self, client: Client, worker: Worker) -> None:
        """Serve the endpoints for `worker` (call once it polls)."""
        if self.address is None:
            return
        self._client, self._worker = client, worker
        app = web.Application()
        app.router.add_get("/livez", self._livez)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.address[0], self.address[1])
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://{self.address[0]}:{port}"
        log.info("health and metrics on %s (/livez, /readyz, /metrics)", self.url)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _livez(self, request: web.Request) -> web.Response:
        if self._worker is None or not self._worker.is_running:
            return web.Response(status=503, text="worker stopped\n")
        return web.Response(text="ok\n")

    async def _readyz(self, request: web.Request) -> web.Response:
        if self._worker is None or not self._worker.is_running or self._worker.is_shutdown:
            return web.Response(status=503, text="not polling: the worker is not running\n")
        assert self._client is not None
        try:
            healthy = await self._client.service_client.check_health(timeout=HEALTH_CHECK_TIMEOUT)
        except Exception as err:  # any failure to reach Temporal means not ready
            return web.Response(status=503, text=f"Temporal unreachable: {type(err).__name__}: {err}\n")
        if not healthy:
            return web.Response(status=503, text="Temporal frontend reports not serving\n")
        return web.Response(text=f"ok: polling task queue {self._worker.task_queue}\n")

    async def _metrics(self, request: web.Request) -> web.Response:
        async with httpx.AsyncClient(timeout=5) as http:
            exported = await http.get(f"http://127.0.0.1:{self._exporter_port}/metrics")
        text = exported.text
        gauge = await self._manual_intervention_count()
        if gauge is not None:
            text += (
                "# HELP metalflow_hosts_in_manual_intervention Running operations in "
                "manual-intervention-required (Temporal visibility)\n"
                "# TYPE metalflow_hosts_in_manual_intervention gauge\n"
                f"metalflow_hosts_in_manual_intervention {gauge}\n"
            )
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    async def _manual_intervention_count(self) -> int | None:
        assert self._client is not None
        try:
            counted = await asyncio.wait_for(self._client.count_workflows(MANUAL_INTERVENTION_QUERY), 5)
        except Exception as err:  # the scrape still shows the other metrics
            log.warning("cannot count operations in manual intervention: %s", err)
            return None
        return counted.count
