"""The fast tier (`make check`): state objects and pure decision code, tested with plain pytest.

A test here starts no server, no subprocess and opens no socket: the guard below fails any
test that tries, so the tier stays a few seconds however it grows. Temporal's servers and
clients open their sockets and processes in the SDK's Rust core, out of the guard's sight: the
suite's Temporal fixtures (tests/conftest.py) are refused here by name instead. What needs Temporal, the
simulated site or a process belongs in `tests/` beside this folder (`make test` runs both).
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from typing import Any, NoReturn

import pytest


def _refuse(what: str) -> Any:
    def refused(*args: Any, **kwargs: Any) -> NoReturn:
        raise AssertionError(f"a fast test {what}: move it to tests/ (make test), or test the pure code")

    return refused


@pytest.fixture(autouse=True)
def _no_servers(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Refuse a connection, a listening socket and a subprocess for the test's duration."""
    monkeypatch.setattr(socket.socket, "connect", _refuse("connected a socket"))
    monkeypatch.setattr(socket.socket, "bind", _refuse("bound a socket"))
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse("started a process"))
    yield


def _no_temporal(name: str) -> Any:
    @pytest.fixture(name=name, scope="session")
    def refused() -> NoReturn:
        raise AssertionError(
            f"a fast test asked for `{name}` (a Temporal server): move it to tests/ (make test)"
        )

    return refused


local_env = _no_temporal("local_env")
time_skipping_env = _no_temporal("time_skipping_env")
