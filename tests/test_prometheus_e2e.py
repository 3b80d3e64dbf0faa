"""A real Prometheus end to end: it scrapes the worker of the dev stack (`metalflow dev`, the
worker's METALFLOW_METRICS_ADDRESS), a host is driven into manual intervention on the simulated
site by wrong BMC credentials, and the shipped alert becomes `firing` in Prometheus's API; fixed
and retried, it resolves. The same run shows the ManualInterventionRequired Event with the reason
(`metalflow events`), and that the metric names and labels README lists are what Prometheus
scraped.

The stack is also where `metalflow dev --no-demo` is tested as a service manager runs it: it
waits without a demo, a second `dev` on its state dir is refused and every command finds it
(`dev_support.assert_one_stack_found_by_every_command`), and SIGTERM stops everything it started
(Ctrl-C's half ends tests/test_cli_dev.py's demo test): one stack for both, not two.

The only change to the shipped rules: MetalflowHostInManualIntervention's `for` is 2 s instead of
15 minutes (scrape and evaluation every second), so the test takes well under a minute of waiting.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_support import METALFLOW
from dev_support import alive, assert_one_stack_found_by_every_command, listening, ready, worker_ready
from ports_support import free_port
from prometheus_support import RunningPrometheus, running_prometheus
from sim_support import sim_http, stop_process

from contracts.models.control import RETRY_UPDATE, OperatorAnswer, OperatorRequest
from contracts.models.host import (
    REQUEST_REPROVISION_UPDATE,
    HostWorkflowInput,
    OperationAccepted,
    OperationPolicy,
    OperationRequest,
)
from contracts.with_start import execute_update
from metalflow.client import connect
from metalflow.hosts import host_status, send_update

REPO = Path(__file__).resolve().parent.parent
RULES = REPO / "deploy" / "monitoring" / "metalflow-rules.yaml"
ALERT = "MetalflowHostInManualIntervention"
METRICS_SOURCE = (REPO / "contracts" / "metrics.py").read_text()
HOST = "host-001"
# README's metrics that this run cannot produce a sample of (no campaign halts, no rollout, no
# wait reaches a quarter of its timeout, the DPF watch is not dropped): Prometheus stores no
# series for them, so their names are checked on the worker's /metrics page instead.
# The Temporal SDK's meter adds these to every metric a workflow or an activity records (README
# says so once, above its table).
SDK_LABELS = {"namespace", "service_name", "task_queue", "workflow_type", "activity_type"}
NOT_EXERCISED = {
    "metalflow_campaign_halted",
    "metalflow_rollout_paused",
    "metalflow_operation_wait_fraction",
    "metalflow_dpf_watch_reconnects_total",
    "metalflow_host_maintenance_since_seconds",  # tests/test_host_maintenance.py
}


def _env(metrics: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "OTEL_"))}
    env["METALFLOW_METRICS_ADDRESS"] = f"127.0.0.1:{metrics}"
    return env


@dataclass
class DevStack:
    """`metalflow dev --no-demo` as started: its process, state dir, ports and output file."""

    process: subprocess.Popen[bytes]
    state: Path
    metrics: int
    ports: tuple[int, int, int]  # Temporal gRPC, UI, simulated site
    output: Path  # its stdout and stderr

    def said(self) -> str:
        return self.output.read_text()


@pytest.fixture
def dev_stack(tmp_path: Path) -> Iterator[DevStack]:
    """`metalflow dev --no-demo` on free ports, its worker serving /metrics, up and ready."""
    state, metrics = tmp_path / "state", free_port()
    port, ui_port, sim_port = sorted({free_port() for _ in range(8)} - {metrics})[:3]  # four different ports
    output = tmp_path / "dev.log"
    with output.open("wb") as out:
        process = subprocess.Popen(
            [METALFLOW, "dev", "--no-demo", "--state-dir", str(state), "--port", str(port),
             "--ui-port", str(ui_port), "--sim-port", str(sim_port), "--hosts", "2", "--timings", "zero",
             "--initialised"],
            env=_env(metrics), stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    stack = DevStack(process, state, metrics, (port, ui_port, sim_port), output)
    try:
        _wait("the dev stack's worker and banner", lambda: _up(stack), timeout=120)
        yield stack
    finally:
        stop_process(process, grace=60)


def _up(stack: DevStack) -> bool:
    assert stack.process.poll() is None, stack.said()
    return worker_ready(stack.metrics) and ready(stack.said())


def _rules() -> dict[str, Any]:
    rules: dict[str, Any] = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == ALERT:
                rule["for"] = "2s"
    return rules


def _wait(what: str, check: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.5)


def _firing(prometheus: RunningPrometheus) -> list[dict[str, Any]]:
    return [a for a in prometheus.alerts() if a["labels"]["alertname"] == ALERT and a["state"] == "firing"]


async def test_a_host_in_manual_intervention_fires_the_alert_and_resolves_and_sigterm_stops_the_stack(
    dev_stack: DevStack, tmp_path: Path
) -> None:
    state, metrics, (port, ui_port, sim_port) = dev_stack.state, dev_stack.metrics, dev_stack.ports
    # `--no-demo` waits without a demo; no second stack, and commands find this one.
    assert listening(port) and listening(ui_port), dev_stack.said()
    assert not any(" demo: " in line or line.startswith("demo:") for line in dev_stack.said().splitlines())
    assert_one_stack_found_by_every_command(state, dev_stack.process.pid, dev_stack.ports)

    sim = json.loads((state / "sim.json").read_text())
    site = yaml.safe_load(Path(sim["site"]).read_text())
    bmc = next(h["bmc"] for h in site["hosts"] if h["id"] == HOST)
    credentials = state / str(bmc["credentials"]["file"])
    if not credentials.is_absolute() and not credentials.exists():
        credentials = Path(sim["site"]).parent / str(bmc["credentials"]["file"])
    good = credentials.read_text()
    env = {"TEMPORAL_CONFIG_FILE": str(state / "temporal.toml")}
    client = await connect(config_file=state / "temporal.toml", env={})

    with running_prometheus(tmp_path / "prometheus", [f"127.0.0.1:{metrics}"], _rules()) as prometheus:
        started = time.monotonic()
        credentials.write_text(json.dumps({**json.loads(good), "password": "not-the-password"}))
        policy = OperationPolicy(power_down_wait_seconds=0, reboot_wait_seconds=60, phase_timeout_seconds=300)
        accepted = await send_update(
            client, HostWorkflowInput(host_id=HOST, policy=policy), REQUEST_REPROVISION_UPDATE,
            OperationRequest(requested_by="alice", reason="new BFB"), OperationAccepted,
        )  # fmt: skip
        firing = _wait("the alert to fire", lambda: _firing(prometheus), timeout=60)
        fired_after = time.monotonic() - started
        assert firing[0]["labels"]["host_id"] == HOST
        assert firing[0]["labels"]["workflow_id"] == accepted.workflow_id
        assert "metalflow host retry|mark-rebooted|abort host-001" in firing[0]["annotations"]["description"]

        # What on-call reads next: the Event with the reason, next to the operation's phase.
        shown = subprocess.run(
            [METALFLOW, "events", HOST], capture_output=True, text=True, timeout=60,
            env={**os.environ, **env, "KUBECONFIG": sim["kubeconfig"], "METALFLOW_SITE_FILE": sim["site"]},
        )  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        intervention = next(
            line for line in shown.stdout.splitlines() if "ManualInterventionRequired" in line
        )
        assert "Warning" in intervention and "credentials" in intervention.lower(), shown.stdout
        assert "not-the-password" not in shown.stdout  # never a secret in an Event
        assert f"{accepted.workflow_id}: manual-intervention-required" in shown.stdout

        credentials.write_text(good)
        answer = await execute_update(
            client.get_workflow_handle(accepted.workflow_id),
            RETRY_UPDATE,
            OperatorRequest(requested_by="bob", reason="credentials fixed"),
            result_type=OperatorAnswer,
        )
        assert answer.accepted
        _wait(
            "the alert to resolve",
            lambda: not [a for a in prometheus.alerts() if a["labels"]["alertname"] == ALERT],
        )
        resolved_after = time.monotonic() - started
        status = await host_status(client, HOST)
        assert status.current is None and status.recent[-1].outcome == "completed"

        # The operation's end is counted when its workflow ends, a scrape after the entity shows it.
        scraped = _wait(
            "the finished operation's counter",
            lambda: (
                (found := _scraped_labels(prometheus))
                and "metalflow_operations_finished_total" in found
                and found
            ),
        )
    await client.get_workflow_handle(f"host/{HOST}").terminate("test over")
    print(f"alert firing after {fired_after:.1f} s, resolved after {resolved_after:.1f} s")
    _readme_matches(scraped, sim_http().get(f"http://127.0.0.1:{metrics}/metrics").text)

    # SIGTERM (a service manager's stop) stops everything the stack started.
    dev_stack.process.send_signal(signal.SIGTERM)
    returncode = dev_stack.process.wait(timeout=60)
    output = dev_stack.said()
    assert returncode == 0, output
    assert "everything stopped" in output
    started = [int(pid) for pid in re.findall(r"starting .* \(pid (\d+),", output)]
    assert len(started) == 3 and not any(alive(pid) for pid in started)
    assert not listening(port) and not listening(ui_port) and not listening(sim_port)


def _scraped_labels(prometheus: RunningPrometheus) -> dict[str, set[str]]:
    """Every metalflow_ metric Prometheus holds, with the label names of its series."""
    labels: dict[str, set[str]] = {}
    for name in prometheus.get("/api/v1/label/__name__/values"):
        if not name.startswith("metalflow_"):
            continue
        for series in prometheus.get("/api/v1/series", **{"match[]": name}):
            labels.setdefault(name, set()).update(set(series) - {"__name__", "job", "instance"} - SDK_LABELS)
    return labels


def _readme_metrics() -> dict[str, set[str]]:
    """README's table of metrics: `| \\`name\\` | kind | \\`label\\`, ... |`."""
    text = (REPO / "README.md").read_text()
    table = text[text.index("<!-- metrics table -->") : text.index("<!-- end of metrics table -->")]
    found = {}
    for match in re.finditer(r"^\| `(metalflow_[a-z_]+)` \| [a-z]+ \| ([^|]*)\|", table, re.M):
        found[match.group(1)] = set(re.findall(r"`([a-z_]+)`", match.group(2)))
    return found


def _readme_matches(scraped: dict[str, set[str]], page: str) -> None:
    listed = _readme_metrics()
    assert listed, "README lists no metric"
    for name, labels in listed.items():
        if name in NOT_EXERCISED:
            # A gauge is declared on the page even without series; an SDK counter appears only once
            # counted, so it is looked up where it is recorded.
            recorded = (
                f'PREFIX + "{name.removeprefix("metalflow_").removesuffix("_total")}"' in METRICS_SOURCE
            )
            assert re.search(rf"^# TYPE {name} ", page, re.M) or recorded, name
            continue
        base = name.removesuffix("_bucket")
        assert base in scraped or f"{base}_bucket" in scraped, (
            f"README lists {name}; Prometheus has no such series"
        )
        got = scraped[base] if base in scraped else scraped[f"{base}_bucket"] - {"le"}
        assert got == labels, f"{name}: README says labels {sorted(labels)}, Prometheus scraped {sorted(got)}"
    unlisted = {n for n in scraped if not n.endswith(("_bucket", "_sum", "_count")) or n.endswith("_total")}
    assert unlisted <= set(listed), f"scraped but not in README: {sorted(unlisted - set(listed))}"
