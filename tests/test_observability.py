"""The worker's health endpoint says not live/not ready when the worker does not run, and a bad
metrics address is a configuration error (exit 2) before anything connects."""

from __future__ import annotations

import httpx
import pytest
from temporalio.client import Client

from drivers.settings import Settings
from metalflow.runtime.observability import Observability, parse_address
from metalflow.runtime.ports import free_port
from metalflow.runtime.worker import build_worker, main


@pytest.mark.parametrize("address", ["9464", "localhost", ":9464", "127.0.0.1:99999", "127.0.0.1:http"])
def test_a_bad_metrics_address_is_refused_with_its_value(address: str) -> None:
    with pytest.raises(ValueError, match="is not host:port"):
        parse_address(address)


def test_worker_exits_2_on_a_bad_metrics_address(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--metrics-address", "nowhere"]) == 2
    assert "metrics address 'nowhere' is not host:port" in capsys.readouterr().err


def test_metrics_are_off_without_an_address() -> None:
    observability = Observability.from_env(None, env={})
    assert observability.address is None and observability.runtime() is None


async def test_a_worker_that_is_not_running_is_neither_live_nor_ready(
    client: Client, task_queue: str
) -> None:
    observability = Observability(f"127.0.0.1:{free_port()}")
    worker = build_worker(client, task_queue, Settings())  # built, never run
    await observability.start(client, worker)
    try:
        async with httpx.AsyncClient(base_url=observability.url, timeout=10) as http:
            live, ready = await http.get("/livez"), await http.get("/readyz")
    finally:
        await observability.stop()
    assert (live.status_code, live.text) == (503, "worker stopped\n")
    assert (ready.status_code, ready.text) == (503, "not polling: the worker is not running\n")
