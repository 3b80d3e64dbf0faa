"""The fast tier (`make check`): state objects and pure decision code, tested with plain pytest.

A test here starts no server, no subprocess and opens no socket: the guard below fails any
test that tries, so the tier stays a few seconds however it grows. What needs Temporal, the
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
