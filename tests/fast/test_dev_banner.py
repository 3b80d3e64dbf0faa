"""`metalflow dev`'s banner names every URL its stack serves (issue 38 item 6): the Temporal UI and
frontend, the worker's metrics and health when served (and how to serve them when not), where
traces go, the simulator's control API; and the worker of a stack given `--metrics-port` serves
them there (`make demo` gives 9464)."""

from __future__ import annotations

import json
from pathlib import Path

from metalflow.devstack.banner import banner, metrics_address
from metalflow.devstack.stack import DevStack, DevStackConfig

SIM = {"url": "http://127.0.0.1:8280", "site": "/s/site.yaml", "kubeconfig": "/s/kubeconfig"}


def _config(tmp_path: Path, metrics_port: int | None) -> DevStackConfig:
    return DevStackConfig(state_dir=tmp_path, port=7300, ui_port=8300, metrics_port=metrics_port)


def test_every_url_the_stack_serves_is_printed(tmp_path: Path) -> None:
    text = "\n".join(banner(_config(tmp_path, 9500), SIM, tmp_path / "temporal.toml", {}))
    for url in (
        "http://127.0.0.1:8300",  # the Temporal UI
        "127.0.0.1:7300",  # its frontend
        "http://127.0.0.1:9500/metrics",
        "http://127.0.0.1:9500/livez",
        "http://127.0.0.1:9500/readyz",
        "http://127.0.0.1:8280/sim/health",
    ):
        assert url in text, text
    assert "Current Details" in text  # where the UI shows each operation's current step
    log = tmp_path.resolve() / "worker.log"
    assert f"Traces:           off; OTEL_TRACES_EXPORTER=console prints them into {log}" in text


def test_metrics_off_says_how_to_turn_them_on_and_the_environment_still_counts(tmp_path: Path) -> None:
    off = "\n".join(banner(_config(tmp_path, None), SIM, tmp_path / "t.toml", {}))
    assert "Worker metrics:   off; `metalflow dev --metrics-port 9464` (as `make demo` does)" in off
    environ = {"METALFLOW_METRICS_ADDRESS": "127.0.0.1:9600", "OTEL_TRACES_EXPORTER": "console"}
    assert metrics_address(_config(tmp_path, None), environ) == "127.0.0.1:9600"
    assert metrics_address(_config(tmp_path, 9500), environ) == "127.0.0.1:9500"  # the flag wins
    shown = "\n".join(banner(_config(tmp_path, None), SIM, tmp_path / "t.toml", environ))
    assert "http://127.0.0.1:9600/metrics" in shown
    assert f"printed by the worker into {(tmp_path / 'worker.log').resolve()}" in shown


def test_the_worker_of_a_stack_given_a_metrics_port_serves_there(tmp_path: Path) -> None:
    (tmp_path / "sim.json").write_text(json.dumps(SIM))
    served = DevStack(_config(tmp_path, 9500))._worker_env()
    assert served["METALFLOW_METRICS_ADDRESS"] == "127.0.0.1:9500"


def test_make_demo_turns_metrics_on() -> None:
    makefile = (Path(__file__).resolve().parents[2] / "Makefile").read_text()
    assert "METRICS_PORT ?= 9464" in makefile
    assert "metalflow dev --metrics-port $(METRICS_PORT) $(DEMO_ARGS)" in makefile
