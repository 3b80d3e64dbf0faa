"""README says what a first-day operator needs around the demo (issue 38 item 8): what `make test`
installs besides Python and make, where console traces go under `metalflow dev`, and a Prometheus
to ask for the `:9090` alerts example."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from metalflow.devstack import process, stack
from metalflow.runtime import telemetry

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
MAKEFILE = (REPO / "Makefile").read_text()


def _flat(text: str) -> str:
    return " ".join(text.split())


def _section(title: str) -> str:
    text = README.read_text()
    start = text.index(title)
    return _flat(text[start : text.index("\n## ", start + 1)])


def test_what_make_test_needs_besides_python_and_make_is_said() -> None:
    """README said "Python 3.11 and make; nothing else" while `make test` installs Prometheus."""
    assert re.search(r"^pytest: .*prometheus-tools", MAKEFILE, re.M)  # `make test` runs it
    assert "apt-get install" in MAKEFILE and "prometheus" in MAKEFILE
    two = _section("## Two commands")
    assert "`make demo` needs Python 3.11 and `make`, nothing else" in two
    assert "`make test` also needs Prometheus's `promtool` and `prometheus`" in two
    assert "`apt-get`" in two and "`sudo`" in two


def test_console_traces_of_the_dev_worker_are_said_to_land_in_its_log() -> None:
    """`console` writes spans to stderr; `metalflow dev` sends its worker's stderr to worker.log."""
    assert "ConsoleSpanExporter(out=sys.stderr)" in Path(telemetry.__file__).read_text()
    assert "stderr=asyncio.subprocess.STDOUT" in Path(process.__file__).read_text()  # into its log
    assert (
        '"worker.log"' in Path(stack.__file__).read_text()
    )  # the worker's log (tests/fast/test_dev_banner.py)
    tracing = _flat(README.read_text()).split("**Tracing.**")[1].split("**Kubernetes")[0]
    assert "`console` writes each span to the process's stderr" in tracing
    assert "into its log, `.metalflow/worker.log`" in tracing


def test_the_alerts_example_has_a_prometheus_to_ask() -> None:
    config = yaml.safe_load((REPO / "deploy/monitoring/prometheus-local.yml").read_text())
    port = re.search(r"^METRICS_PORT \?= (\d+)$", MAKEFILE, re.M)
    assert port is not None
    (scrape,) = config["scrape_configs"]
    assert scrape["static_configs"] == [{"targets": [f"127.0.0.1:{port.group(1)}"]}]  # `make demo`'s worker
    assert config["rule_files"] == ["metalflow-rules.yaml"]
    assert (REPO / "deploy/monitoring/metalflow-rules.yaml").exists()
    alerts = _section("## Observability")
    assert (
        "prometheus --config.file=deploy/monitoring/prometheus-local.yml "
        "--storage.tsdb.path=.metalflow/prometheus --web.listen-address=127.0.0.1:9090 &"
        in alerts.replace("\\ ", "")
    )
    assert "curl -s 127.0.0.1:9090/api/v1/alerts" in alerts
