"""The fast tier's guard holds: a test here cannot reach a server or start a process."""

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
