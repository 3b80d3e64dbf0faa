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
  visibility at each scrape (one count query; the same number on every worker, so use `max`),
  and `metalflow_hosts_in_maintenance` with `metalflow_host_maintenance_since_seconds{host_id, by}`
  (one listing of the hosts in maintenance per scrape).

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
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import httpx
from aiohttp import web
from temporalio.client import Client
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import Worker

from contracts import events, names
from contracts.host_entity import MAINTENANCE_QUERY
from metalflow.runtime.ports import free_port

if TYPE_CHECKING:
    from metalflow.runtime.events import Emitter

ADDRESS_ENV = "METALFLOW_METRICS_ADDRESS"
HEALTH_CHECK_TIMEOUT = timedelta(seconds=2)
MANUAL_INTERVENTION_QUERY = (
    f"{names.PHASE.name} = 'manual-intervention-required' AND ExecutionStatus = 'Running'"
)
_ATTENTION_PHASES = "'manual-intervention-required', 'halted', 'paused'"
ATTENTION_QUERY = f"{names.PHASE.name} IN ({_ATTENTION_PHASES}) AND ExecutionStatus = 'Running'"
ATTENTION_LISTED = 500  # workflows listed per scrape at most (one page of visibility)
WAIT_SHOWN_FROM = 0.25  # a bounded wait shows on /metrics once past this fraction of its timeout
WAITS_SHOWN = 500
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
        self.emitter: Emitter | None = None  # the worker's Kubernetes Events, for their counters

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
        text += await self._attention()
        text += await self._maintenance()
        text += self._waits(datetime.now(UTC))
        text += self._event_counts()
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    async def _attention(self) -> str:
        """Per workflow waiting on a person (visibility, one list per scrape): a host in manual
        intervention, a halted campaign, a paused rollout; 1 while it lasts."""
        assert self._client is not None
        hosts, campaigns, rollouts = [], [], []
        try:
            async with asyncio.timeout(5):
                async for execution in self._client.list_workflows(ATTENTION_QUERY, limit=ATTENTION_LISTED):
                    attributes = execution.typed_search_attributes
                    phase = attributes.get(names.PHASE)
                    operation = attributes.get(names.OPERATION) or ""
                    if phase == "manual-intervention-required":
                        host = attributes.get(names.HOST_ID) or ""
                        hosts.append(_labels(host_id=host, operation=operation, workflow_id=execution.id))
                    elif phase == "halted" and operation == names.CAMPAIGN_OPERATION:
                        campaign = attributes.get(names.CAMPAIGN) or execution.id
                        campaigns.append(_labels(campaign=campaign, workflow_id=execution.id))
                    elif phase == "paused" and operation == names.ROLLOUT:
                        rollouts.append(_labels(workflow_id=execution.id))
        except Exception as err:  # the scrape still shows the other metrics
            log.warning("cannot list the workflows waiting on an operator: %s", err)
            return ""
        out = ""
        for name, help_text, series in (
            (
                "metalflow_host_manual_intervention",
                "1 per host operation in manual-intervention-required",
                hosts,
            ),
            ("metalflow_campaign_halted", "1 per running campaign halted (failure budget spent)", campaigns),
            ("metalflow_rollout_paused", "1 per running rollout paused", rollouts),
        ):
            out += f"# HELP {name} {help_text} (Temporal visibility)\n# TYPE {name} gauge\n"
            out += "".join(f"{name}{{{labels}}} 1\n" for labels in series)
        return out

    async def _maintenance(self) -> str:
        """Hosts in maintenance (visibility, one listing per scrape): their count, and per host
        since when (unix seconds), which the alert `MetalflowHostInMaintenanceLong` compares."""
        assert self._client is not None
        series = []
        try:
            async with asyncio.timeout(5):
                async for execution in self._client.list_workflows(MAINTENANCE_QUERY, limit=ATTENTION_LISTED):
                    attributes = execution.typed_search_attributes
                    since = attributes.get(names.MAINTENANCE_SINCE)
                    host = attributes.get(names.HOST_ID) or execution.id
                    if since is not None:
                        labels = _labels(host_id=host, by=attributes.get(names.MAINTENANCE) or "")
                        series.append(
                            f"metalflow_host_maintenance_since_seconds{{{labels}}} {since.timestamp():.0f}\n"
                        )
        except Exception as err:  # the scrape still shows the other metrics
            log.warning("cannot list the hosts in maintenance: %s", err)
            return ""
        return (
            "# HELP metalflow_hosts_in_maintenance Hosts in maintenance (Temporal visibility)\n"
            "# TYPE metalflow_hosts_in_maintenance gauge\n"
            f"metalflow_hosts_in_maintenance {len(series)}\n"
            "# HELP metalflow_host_maintenance_since_seconds Since when a host is in maintenance "
            "(unix seconds; Temporal visibility)\n"
            "# TYPE metalflow_host_maintenance_since_seconds gauge\n" + "".join(series)
        )

    @staticmethod
    def _waits(now: datetime) -> str:
        """Bounded waits of this worker's workflows past `WAIT_SHOWN_FROM` of their timeout
        (`contracts.events`): how far each is towards its timeout (1: the timeout is due)."""
        shown = []
        for wait in events.waits(now):
            fraction = (
                (now - wait.since).total_seconds() / wait.timeout_seconds if wait.timeout_seconds else 0.0
            )
            if fraction >= WAIT_SHOWN_FROM:
                shown.append((fraction, wait))
        shown.sort(key=lambda item: -item[0])
        out = (
            "# HELP metalflow_operation_wait_fraction Time waited over the wait's timeout, for waits "
            f"past {WAIT_SHOWN_FROM:g} of it (this worker's workflows)\n"
            "# TYPE metalflow_operation_wait_fraction gauge\n"
        )
        for fraction, wait in shown[:WAITS_SHOWN]:
            labels = _labels(
                host_id=wait.host_id or "",
                operation=wait.operation or "",
                phase=wait.phase,
                workflow_id=wait.workflow_id,
                timeout_seconds=f"{wait.timeout_seconds:g}",
            )
            out += f"metalflow_operation_wait_fraction{{{labels}}} {fraction:.4f}\n"
        return out

    def _event_counts(self) -> str:
        if self.emitter is None:
            return ""
        out = (
            "# HELP metalflow_kube_events_total Kubernetes Events of this worker, by what became of them\n"
            "# TYPE metalflow_kube_events_total counter\n"
        )
        for result, count in self.emitter.stats.as_labels().items():
            out += f'metalflow_kube_events_total{{result="{result}"}} {count}\n'
        return out

    async def _manual_intervention_count(self) -> int | None:
        assert self._client is not None
        try:
            counted = await asyncio.wait_for(self._client.count_workflows(MANUAL_INTERVENTION_QUERY), 5)
        except Exception as err:  # the scrape still shows the other metrics
            log.warning("cannot count operations in manual intervention: %s", err)
            return None
        return counted.count


def _labels(**labels: str) -> str:
    """Prometheus label pairs, values escaped as the text format wants."""

    def escape(value: str) -> str:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return ",".join(f'{key}="{escape(value)}"' for key, value in labels.items())
