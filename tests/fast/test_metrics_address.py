"""A bad metrics address is a configuration error (exit 2) before anything connects, and metrics
are off without an address. (The health endpoint of a worker that does not run:
tests/test_observability.py.)"""

from __future__ import annotations

import pytest

from metalflow.runtime.observability import Observability, parse_address
from metalflow.runtime.worker import main


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
