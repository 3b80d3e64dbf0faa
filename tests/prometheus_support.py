"""A real Prometheus (the OS package's `prometheus`, installed by `make prometheus-tools`) on
127.0.0.1 for a test: its own config, rules and TSDB in a temporary folder, stopped at the end."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from ports_support import free_port
from sim_support import sim_http, stop_process

READY_SECONDS = 30


@dataclass
class RunningPrometheus:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def get(self, path: str, **params: Any) -> Any:
        response = sim_http().get(f"{self.url}{path}", params=params)
        response.raise_for_status()
        return response.json()["data"]

    def alerts(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.get("/api/v1/alerts")["alerts"]
        return found


@contextlib.contextmanager
def running_prometheus(
    directory: Path,
    targets: list[str],
    rules: dict[str, Any],
    *,
    interval: str = "1s",
    job: str = "metalflow-worker",
) -> Iterator[RunningPrometheus]:
    """Prometheus scraping `targets` (host:port) every `interval`, evaluating `rules` as often."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail(
            "prometheus is not installed: `make prometheus-tools` (README, Observability)", pytrace=False
        )
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(directory / "rules.yaml")],
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": targets}]}],
    }
    (directory / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    port = free_port()
    log = directory / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                binary, f"--config.file={directory / 'prometheus.yml'}",
                f"--storage.tsdb.path={directory / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_SECONDS
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"prometheus exited with {process.returncode}:\n{log.read_text()}")
            try:
                if sim_http().get(f"{url}/-/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"prometheus not ready within {READY_SECONDS} s:\n{log.read_text()}")
            time.sleep(0.2)
        yield RunningPrometheus(url, process, log)
    finally:
        stop_process(process, grace=15)
