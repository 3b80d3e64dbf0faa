"""The fast tier's guard holds: a test here cannot reach a server, start a process or ask for a
Temporal server."""

from __future__ import annotations

import socket
import subprocess

import pytest


def test_a_fast_test_cannot_open_a_connection() -> None:
    with pytest.raises(AssertionError, match="connected a socket"):
        socket.create_connection(("127.0.0.1", 7233), timeout=0.1)


def test_a_fast_test_cannot_start_a_process() -> None:
    with pytest.raises(AssertionError, match="started a process"):
        subprocess.run(["true"], check=False)


@pytest.mark.parametrize("server", ["local_env", "time_skipping_env", "client"])
def test_a_fast_test_cannot_have_a_temporal_server(request: pytest.FixtureRequest, server: str) -> None:
    with pytest.raises(AssertionError, match="a Temporal server"):
        request.getfixturevalue(server)
