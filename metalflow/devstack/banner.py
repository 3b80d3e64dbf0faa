"""What `metalflow dev` prints once its stack is ready: every URL the stack serves, and how to turn
on what is off (worker metrics, traces), so a person needs nothing else to find their way.

Served by the stack: the Temporal UI and gRPC frontend (the dev server; its own HTTP API and
metrics ports it picks itself, at random, and nothing here needs them), the worker's
`/metrics`, `/livez`, `/readyz` when it has a metrics address, and the simulated site: its
Kubernetes API, its control API under `/sim/` (faults, power logs, violations) and one Redfish
BMC per host and DPU (listed by `metalflow.cli.sim.describe_site`, printed after these lines).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from metalflow.devstack.stack import HOST, METRICS_ADDRESS_ENV, DevStackConfig

SUGGESTED_METRICS_PORT = 9464  # `make demo`'s (Makefile METRICS_PORT), Prometheus' exporter range


def metrics_address(config: DevStackConfig, environ: Mapping[str, str]) -> str | None:
    """Where the stack's worker serves /metrics: `--metrics-port` on 127.0.0.1, else the
    environment's METALFLOW_METRICS_ADDRESS (the worker inherits it, as before), else None."""
    if config.metrics_port:
        return f"{HOST}:{config.metrics_port}"
    return environ.get(METRICS_ADDRESS_ENV) or None


def banner(
    config: DevStackConfig, sim_info: Mapping[str, Any], client_config: Path, environ: Mapping[str, str]
) -> list[str]:
    """The lines, in the order a person reads them: Temporal, the worker, the simulated site."""
    lines = [
        f"Temporal UI:      {config.ui_url}   (each workflow's current step: its Phase column, and "
        "Current Details on its page)",
        f"Temporal address: {config.address} (namespace {config.namespace})",
        f"Client config:    TEMPORAL_CONFIG_FILE={client_config.resolve()}",
    ]
    address = metrics_address(config, environ)
    if address is not None:
        base = f"http://{address}"
        lines.append(f"Worker metrics:   {base}/metrics   (health {base}/livez, {base}/readyz)")
    else:
        lines.append(
            f"Worker metrics:   off; `metalflow dev --metrics-port {SUGGESTED_METRICS_PORT}` (as `make demo` "
            "does) serves /metrics, /livez, /readyz"
        )
    log = (config.state_dir / "worker.log").resolve()
    exporter = environ.get("OTEL_TRACES_EXPORTER", "none")
    if exporter == "console":
        lines.append(f"Traces:           printed by the worker into {log} (OTEL_TRACES_EXPORTER=console)")
    elif exporter == "otlp":
        endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get(
            "OTEL_EXPORTER_OTLP_ENDPOINT", "the OTLP default"
        )
        lines.append(f"Traces:           sent over OTLP to {endpoint}")
    else:
        lines.append(
            f"Traces:           off; OTEL_TRACES_EXPORTER=console prints them into {log}, "
            "=otlp sends them to OTEL_EXPORTER_OTLP_ENDPOINT"
        )
    lines.append(
        f"Simulator API:    {sim_info['url']}/sim/health   (rehearse a failure: metalflow sim fault --help)"
    )
    return lines
