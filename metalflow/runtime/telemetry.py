"""OpenTelemetry tracing for Temporal clients and workers, configured by standard OTEL_* variables.

Tracing is off unless ``OTEL_TRACES_EXPORTER`` asks for it:

- ``console``: spans are printed to stderr (handy to see the shape of one operation);
- ``otlp``: spans go to ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``)
  over the protocol in ``OTEL_EXPORTER_OTLP_PROTOCOL`` (``grpc`` by default, or
  ``http/protobuf``). This needs the package ``opentelemetry-exporter-otlp``, which metalflow
  does not install by default;
- ``none`` or unset: no tracing.

The service name comes from ``OTEL_SERVICE_NAME`` (default ``metalflow``) and
``OTEL_RESOURCE_ATTRIBUTES``, as the OpenTelemetry SDK reads them.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from temporalio.client import Interceptor
from temporalio.contrib.opentelemetry import TracingInterceptor


class TelemetryConfigError(ValueError):
    """The OTEL_* settings ask for something metalflow cannot provide; the message says what."""


_OTLP_MODULES = {
    "grpc": "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
    "http/protobuf": "opentelemetry.exporter.otlp.proto.http.trace_exporter",
}


@dataclass
class Tracing:
    """The tracing set up for one process: the interceptors to give to clients, and its shutdown."""

    interceptors: list[Interceptor] = field(default_factory=list)
    provider: TracerProvider | None = None

    def shutdown(self) -> None:
        """Flush pending spans and stop the exporter; a no-op when tracing is off."""
        if self.provider is not None:
            self.provider.shutdown()
            self.provider = None


def _otlp_exporter(env: Mapping[str, str]) -> SpanExporter:
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "grpc"
    )
    module_name = _OTLP_MODULES.get(protocol)
    if module_name is None:
        choices = ", ".join(sorted(_OTLP_MODULES))
        raise TelemetryConfigError(
            f"unsupported OTEL_EXPORTER_OTLP_PROTOCOL {protocol!r}: use one of {choices}"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise TelemetryConfigError(
            f"OTEL_TRACES_EXPORTER=otlp (protocol {protocol}) needs the package "
            "`opentelemetry-exporter-otlp`, which is not installed: "
            "`pip install opentelemetry-exporter-otlp`"
        ) from error
    exporter: SpanExporter = module.OTLPSpanExporter()
    return exporter


def setup_tracing(env: Mapping[str, str] | None = None) -> Tracing:
    """Build the tracing for this process from OTEL_* variables.

    Args:
        env: The environment to read; the process environment when omitted.

    Returns:
        A `Tracing` whose ``interceptors`` go to every `Client.connect`; empty when tracing is off.

    Raises:
        TelemetryConfigError: An unknown exporter, or the OTLP exporter package is missing.
    """
    env = os.environ if env is None else env
    choice = (env.get("OTEL_TRACES_EXPORTER") or "none").strip().lower()
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true" or choice == "none":
        return Tracing()
    if choice == "console":
        processor: SimpleSpanProcessor | BatchSpanProcessor = SimpleSpanProcessor(
            ConsoleSpanExporter(out=sys.stderr)
        )
    elif choice == "otlp":
        processor = BatchSpanProcessor(_otlp_exporter(env))
    else:
        raise TelemetryConfigError(f"unsupported OTEL_TRACES_EXPORTER {choice!r}: use console, otlp or none")
    service_name = env.get("OTEL_SERVICE_NAME") or "metalflow"
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("metalflow")
    # The global provider lets libraries that trace on their own (httpx instrumentation, if a
    # user adds it) join the same traces; set it once per process.
    trace.set_tracer_provider(provider)
    return Tracing(interceptors=[TracingInterceptor(tracer)], provider=provider)
