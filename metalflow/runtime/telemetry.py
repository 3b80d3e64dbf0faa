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

What a trace holds: Temporal's interceptor (``temporalio.contrib.opentelemetry``) makes a span per
workflow start, run, child workflow, signal, update and activity, parented across workers through
the headers Temporal carries (`UpdateTracingInterceptor`: an update's handler runs in the update's
trace, not in the trace of the workflow's start); `instrument_http` adds a CLIENT span per HTTP
request under the activity that sends it: every httpx request (the Redfish client) and every urllib3
request (the official Kubernetes client; drivers/kube.py runs each call in the caller's context, so
its span joins the activity's trace). A request span carries `http.request.method`, `url.full` (no
user, password or query), `server.address`, `server.port`, `http.response.status_code` or
`error.type`; never a header or a body (the Redfish login's password and session token, the
Kubernetes bearer token never reach a span).

Why our own wrappers and not opentelemetry-instrumentation-httpx/-urllib3: their releases pin
`opentelemetry-semantic-conventions==0.66b1`, which the SDK metalflow requires (1.45.2, needing
0.66b2) excludes; the wrappers are the part of them metalflow needs (one span per request, the
stable HTTP client attributes) in a few lines. Cost: one span per request, only while tracing is on.

One trace per host operation: a campaign's trace holds the campaign's workflow and activities; its
request to each host (activities/campaign.py) starts a new trace, `RequestHostOperation`, linked to
the requesting activity's span, and the host's operation, its activities and their requests fall
in that trace (at 10,000 hosts one trace would hold ~500k spans, which tracing backends cannot
show). Cost: one extra span per host request. An operator's `metalflow host ...` command is the root
of its operation's trace.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

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
from temporalio.contrib.opentelemetry import TracingInterceptor, TracingWorkflowInboundInterceptor
from temporalio.contrib.opentelemetry._context import attached_context
from temporalio.worker import HandleUpdateInput, WorkflowInboundInterceptor, WorkflowInterceptorClassInput


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
    # The global provider lets libraries that trace on their own join the same traces; set it
    # once per process.
    trace.set_tracer_provider(provider)
    instrument_http(provider.get_tracer("metalflow.http"))
    return Tracing(interceptors=[UpdateTracingInterceptor(tracer)], provider=provider)


class UpdateTracingInterceptor(TracingInterceptor):
    """Temporal's tracing, with each traced update handled in the update's own trace.

    Temporal's interceptor runs an update handler in the context of the workflow's start and only
    links the update's span; what the handler starts (the entity's operation child) would then
    fall in the trace of whoever started the entity, for every operation of its life. Here the
    handler runs under the context the update carried (when it carried one), linked to the
    workflow's start instead. Replay-safe: a context is no command, and spans are skipped on replay.
    """

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[TracingWorkflowInboundInterceptor]:
        super().workflow_interceptor_class(input)  # the extern function making spans outside the sandbox
        return _UpdateTracingWorkflowInbound


class _UpdateTracingWorkflowInbound(TracingWorkflowInboundInterceptor):
    async def handle_update_handler(self, input: HandleUpdateInput) -> Any:
        header = input.headers.get(self.header_key)
        carrier = self.payload_converter.from_payloads([header])[0] if header else None
        if not carrier:
            return await super().handle_update_handler(input)
        context = self._set_on_context(self.text_map_propagator.extract(carrier))
        with attached_context(context):
            self._completed_span(
                f"HandleUpdate:{input.update}",
                link_context_carrier=self._load_workflow_context_carrier(),
                kind=trace.SpanKind.SERVER,
            )
            # Past Temporal's handler, which would attach the workflow's start context again.
            return await WorkflowInboundInterceptor.handle_update_handler(self, input)


_instrumented = False


def _url(scheme: str, host: str, port: int | None, path: str) -> str:
    """`url.full` without user info or query (a query could carry a token)."""
    netloc = f"{host}:{port}" if port else host
    return f"{scheme}://{netloc}{urlsplit(path).path}"


@contextmanager
def _client_span(
    tracer: trace.Tracer, method: str, full: str, host: str, port: int | None
) -> Iterator[trace.Span]:
    """One CLIENT span of an HTTP request (httpx or urllib3); an exception marks it failed."""
    with tracer.start_as_current_span(
        f"HTTP {method}", kind=trace.SpanKind.CLIENT, attributes=_attributes(method, full, host, port)
    ) as span:
        try:
            yield span
        except Exception as err:
            span.set_attribute("error.type", type(err).__name__)
            span.set_status(trace.StatusCode.ERROR)
            raise


def _answered(span: trace.Span, status: int) -> None:
    """The response's status on the span; 4xx and 5xx mark it failed."""
    span.set_attribute("http.response.status_code", status)
    if status >= 400:
        span.set_status(trace.StatusCode.ERROR)


def instrument_http(tracer: trace.Tracer) -> None:
    """A CLIENT span per httpx and urllib3 request (see the module docstring); once per process."""
    global _instrumented
    if _instrumented:
        return
    _instrumented = True
    import httpx
    import urllib3.connectionpool

    send = httpx.AsyncClient.send

    async def traced_send(self: httpx.AsyncClient, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        url = request.url
        full = _url(url.scheme, url.host, url.port, url.path)
        with _client_span(tracer, request.method, full, url.host, url.port) as span:
            response = await send(self, request, **kwargs)
            _answered(span, response.status_code)
            return response

    httpx.AsyncClient.send = traced_send  # type: ignore[method-assign]

    urlopen = urllib3.connectionpool.HTTPConnectionPool.urlopen

    def traced_urlopen(
        self: urllib3.connectionpool.HTTPConnectionPool, method: str, url: str, *args: Any, **kwargs: Any
    ) -> Any:
        full = _url(self.scheme, self.host, self.port, url)
        with _client_span(tracer, method, full, self.host, self.port) as span:
            response = urlopen(self, method, url, *args, **kwargs)
            _answered(span, response.status)
            return response

    urllib3.connectionpool.HTTPConnectionPool.urlopen = traced_urlopen  # type: ignore[method-assign]


def _attributes(method: str, url: str, host: str, port: int | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {"http.request.method": method, "url.full": url, "server.address": host}
    if port:
        attributes["server.port"] = port
    return attributes
