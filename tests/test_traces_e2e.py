"""Traces end to end: the dev stack's worker exports OTLP (http/protobuf) to a receiver in this test,
which decodes the real protobuf (opentelemetry-proto). Two campaigns over two hosts (the second
finds the hosts' entities running): each host operation is a trace of its own, linked to the
campaign activity that asked for it, and traced down to each Redfish and Kubernetes request,
asserted by parent links; no span attribute holds a secret (a BMC password, the Kubernetes bearer
token)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from cli_support import METALFLOW
from dev_support import worker_ready
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from ports_support import free_port
from sim_support import stop_process

from contracts.names import campaign_workflow_id

HOSTS = ("host-001", "host-002")
CAMPAIGNS = ("traced", "again")
HOST_REQUEST = "RequestHostOperation"


class Receiver:
    """An OTLP/HTTP trace receiver: POST /v1/traces, protobuf in, protobuf out."""

    def __init__(self) -> None:
        self.spans: dict[bytes, Any] = {}

    async def export(self, request: web.Request) -> web.Response:
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        for resource in message.resource_spans:
            for scope in resource.scope_spans:
                for span in scope.spans:
                    self.spans[span.span_id] = span
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(), content_type="application/x-protobuf"
        )


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[Receiver, int]]:
    found = Receiver()
    app = web.Application()
    app.router.add_post("/v1/traces", found.export)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield found, port
    finally:
        await runner.cleanup()


def _attributes(span: Any) -> dict[str, Any]:
    out = {}
    for kv in span.attributes:
        value = kv.value
        out[kv.key] = getattr(value, value.WhichOneof("value")) if value.WhichOneof("value") else None
    return out


def _ancestors(span: Any, spans: dict[bytes, Any]) -> list[Any]:
    chain = []
    while span.parent_span_id and span.parent_span_id in spans:
        span = spans[span.parent_span_id]
        chain.append(span)
    return chain


async def test_a_campaign_is_traced_down_to_each_redfish_and_kubernetes_request(
    receiver: tuple[Receiver, int], tmp_path: Path
) -> None:
    found, otlp = receiver
    state, metrics = tmp_path / "state", free_port()
    ports = sorted({free_port() for _ in range(8)} - {metrics})[:3]  # four different ports
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "OTEL_"))}
    worker_env = {
        **env, "METALFLOW_METRICS_ADDRESS": f"127.0.0.1:{metrics}", "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{otlp}",
        "OTEL_BSP_SCHEDULE_DELAY": "200",
    }  # fmt: skip
    dev = subprocess.Popen(
        [METALFLOW, "dev", "--no-demo", "--state-dir", str(state), "--port", str(ports[0]), "--ui-port",
         str(ports[1]), "--sim-port", str(ports[2]), "--hosts", "2", "--timings", "zero", "--initialised"],
        env=worker_env, stdout=subprocess.DEVNULL, stderr=(tmp_path / "dev.log").open("wb"),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not worker_ready(metrics):
            assert dev.poll() is None and time.monotonic() < deadline, (tmp_path / "dev.log").read_text()
            await asyncio.sleep(0.5)
        # The operator's command traces too: its start of a campaign is the campaign trace's root.
        cli_env = {
            **worker_env,
            "TEMPORAL_CONFIG_FILE": str(state / "temporal.toml"),
            "METALFLOW_STATE_DIR": str(state),
        }
        for name in CAMPAIGNS:  # the second finds both entities running (their traces started)
            # Started without blocking this loop: the receiver runs on it, and a command whose
            # export finds no answer waits out the exporter's timeouts before it exits.
            command = await asyncio.create_subprocess_exec(
                METALFLOW, "campaign", "start", name, "--hosts", ",".join(HOSTS), "--reprovision",
                "--canary", "0", "--batch-size", "2", "--max-in-flight", "2", "--power-down-wait", "0",
                "--wait", env=cli_env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            )  # fmt: skip
            output, _ = await asyncio.wait_for(command.communicate(), 180)
            assert command.returncode == 0, output.decode()
        secrets = _secrets(state)  # while the stack runs (it removes sim.json on exit)
        deadline = time.monotonic() + 30
        while not _complete(found.spans):
            assert time.monotonic() < deadline, (
                f"the operations' spans are not there: {sorted({s.name for s in found.spans.values()})}"
            )
            await asyncio.sleep(0.5)
    finally:  # in a thread: the worker's last export, as it stops, is answered by this loop
        await asyncio.to_thread(stop_process, dev, grace=60)

    spans = found.spans
    by_name: dict[str, list[Any]] = {}
    for span in spans.values():
        by_name.setdefault(span.name, []).append(span)
    operation_traces: set[bytes] = set()
    for name in CAMPAIGNS:
        campaign = next(
            s for s in by_name["StartWorkflow:CampaignWorkflow"]
            if _attributes(s).get("temporalWorkflowID") == campaign_workflow_id(name)
        )  # fmt: skip
        assert not campaign.parent_span_id  # the operator's command is the campaign trace's root
        for host in HOSTS:
            # One trace per host operation: its root is the campaign activity's request to the
            # host, a span of its own trace linked to the activity that made it.
            root = next(
                s for s in by_name[HOST_REQUEST]
                if _attributes(s).get("metalflow.campaign") == name
                and _attributes(s).get("metalflow.host_id") == host
            )  # fmt: skip
            assert not root.parent_span_id and root.trace_id != campaign.trace_id
            assert root.trace_id not in operation_traces  # not the other host's, nor an earlier one
            operation_traces.add(root.trace_id)
            assert [(link.trace_id, spans[link.span_id].name) for link in root.links] == [
                (campaign.trace_id, "RunActivity:request_campaign_hosts")
            ]
            asker = spans[root.links[0].span_id]
            assert [a.name for a in reversed(_ancestors(asker, spans))] == [
                "StartWorkflow:CampaignWorkflow", "StartActivity:request_campaign_hosts",
            ]  # fmt: skip
            assert _ancestors(asker, spans)[-1].span_id == campaign.span_id
            operations = [
                s for s in by_name["RunWorkflow:HostOperationWorkflow"]
                if s.trace_id == root.trace_id
                and _attributes(s).get("temporalWorkflowID") == f"reprovision/{host}"
            ]  # fmt: skip
            assert len(operations) == 1, f"campaign {name}: {host}'s operation is not in its own trace"
            operation = operations[0]
            # The request asks the host's entity (an update-with-start), which starts the operation
            # as its child: RequestHostOperation > StartUpdateWithStartWorkflow:HostWorkflow >
            # StartChildWorkflow:HostOperationWorkflow > RunWorkflow:HostOperationWorkflow, also when
            # the entity was started earlier, by another trace.
            chain = _ancestors(operation, spans)
            assert [a.name for a in reversed(chain)] == [
                HOST_REQUEST, "StartUpdateWithStartWorkflow:HostWorkflow",
                "StartChildWorkflow:HostOperationWorkflow",
            ]  # fmt: skip
            assert chain[-1].span_id == root.span_id
            # The operation's spans hang under its start (the workflow's context comes from its headers).
            start = spans[operation.parent_span_id]
            under = [s for s in spans.values() if start.span_id in {a.span_id for a in _ancestors(s, spans)}]
            assert all(s.trace_id == root.trace_id for s in under)
            activities = {s.name for s in under if s.name.startswith("RunActivity:")}
            assert {"RunActivity:reprovision_dpu", "RunActivity:power_cycle_host"} <= activities
            requests = [s for s in under if s.name.startswith("HTTP ")]
            for request in requests:  # each request's parent is the activity that sent it
                assert spans[request.parent_span_id].name.startswith(("RunActivity:", "HTTP "))
            urls = [str(_attributes(r)["url.full"]) for r in requests]
            assert any("/redfish/v1/" in u for u in urls), urls  # the power cycle's Redfish requests
            assert any("/apis/provisioning.dpu.nvidia.com/" in u for u in urls), urls  # DPF, Kubernetes
            answered = [r for r in requests if "error.type" not in _attributes(r)]
            assert answered and all(_attributes(r).get("http.response.status_code") for r in answered)
        # The campaign's own trace holds no host's operation (at 10,000 hosts it would not show).
        assert not [
            s for s in by_name["RunWorkflow:HostOperationWorkflow"] if s.trace_id == campaign.trace_id
        ]

    assert secrets, "no secret found to look for"
    for span in spans.values():
        for key, value in _attributes(span).items():
            assert not any(secret in str(value) for secret in secrets), f"{span.name}: {key} holds a secret"
    print(f"{len(spans)} spans, {sum(1 for s in spans.values() if s.name.startswith('HTTP '))} HTTP requests")


def _complete(spans: dict[bytes, Any]) -> bool:
    runs = [s for s in spans.values() if s.name == "RunWorkflow:HostOperationWorkflow"]
    campaigns = [s for s in spans.values() if s.name == "StartWorkflow:CampaignWorkflow"]
    return len(runs) >= len(HOSTS) * len(CAMPAIGNS) and len(campaigns) >= len(CAMPAIGNS)


def _secrets(state: Path) -> list[str]:
    sim = json.loads((state / "sim.json").read_text())
    kubeconfig = yaml.safe_load(Path(sim["kubeconfig"]).read_text())
    found = [kubeconfig["users"][0]["user"]["token"]]
    for path in Path(sim["site"]).parent.glob("credentials/*.json"):
        found.append(json.loads(path.read_text())["password"])
    return [s for s in found if s]
