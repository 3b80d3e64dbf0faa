"""A real Prometheus end to end: it scrapes the worker of the dev stack (`metalflow dev`, the
worker's METALFLOW_METRICS_ADDRESS), a host is driven into manual intervention on the simulated
site by wrong BMC credentials, and the shipped alert becomes `firing` in Prometheus's API; fixed
and retried, it resolves. The same run shows the ManualInterventionRequired Event with the reason
(`metalflow events`), and that the metric names and labels README lists are what Prometheus
scraped.

The only change to the shipped rules: MetalflowHostInManualIntervention's `for` is 2 s instead of
15 minutes (scrape and evaluation every second), so the test takes well under a minute of waiting.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from cli_support import METALFLOW
from dev_support import worker_ready
from ports_support import free_port
from prometheus_support import RunningPrometheus, running_prometheus
from sim_support import stop_process

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


@pytest.fixture
def dev_stack(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """`metalflow dev --no-demo` on free ports, its worker serving /metrics; (state dir, metrics port)."""
    state, metrics = tmp_path / "state", free_port()
    ports = sorted({free_port() for _ in range(8)} - {metrics})[:3]  # four different ports
    process = subprocess.Popen(
        [METALFLOW, "dev", "--no-demo", "--state-dir", str(state), "--port", str(ports[0]),
         "--ui-port", str(ports[1]), "--sim-port", str(ports[2]), "--hosts", "2", "--timings", "zero",
         "--initialised"],
        env=_env(metrics), stdout=subprocess.DEVNULL, stderr=(tmp_path / "dev.log").open("wb"),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not worker_ready(metrics):
            assert process.poll() is None, (tmp_path / "dev.log").read_text()
            assert time.monotonic() < deadline, "the dev stack's worker was not ready in 120 s"
            time.sleep(0.5)
        yield state, metrics
    finally:
        stop_process(process, grace=60)


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


async def test_a_host_in_manual_intervention_fires_the_alert_and_resolves(
    dev_stack: tuple[Path, int], tmp_path: Path
) -> None:
    state, metrics = dev_stack
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
    _readme_matches(scraped, httpx.get(f"http://127.0.0.1:{metrics}/metrics", timeout=10).text)


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
