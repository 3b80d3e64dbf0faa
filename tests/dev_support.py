"""Support for the tests of `metalflow dev` run for real (the console script, `cli_support.METALFLOW`):
free ports for its three servers, its output read line by line until a line says enough, whether a
port listens and a pid runs after it stopped, the BMC's power cycles it left in its state dir, and
whether its worker reports ready."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from cli_support import run_metalflow
from ports_support import free_port


def three_ports() -> tuple[int, int, int]:
    """Three different free ports (the kernel may hand out a just-released port again)."""
    ports: set[int] = set()
    while len(ports) < 3:
        ports.add(free_port())
    first, second, third = sorted(ports)
    return first, second, third


def read_until(
    process: subprocess.Popen[str], lines: list[str], done: Callable[[str], bool], timeout: float
) -> None:
    """Append the process's stdout lines to `lines` until one is `done` (it is kept), the output
    ends, or `timeout` seconds pass (`lines` holds what came, for the test's message)."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        if done(line):
            break


def ready(line: str) -> bool:
    """The line `metalflow dev` prints once everything runs."""
    return "press Ctrl-C to stop" in line


def listening(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:`port`."""
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def alive(pid: int) -> bool:
    """Whether a process `pid` exists (a zombie not yet reaped counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def power_cycles(host: str, state_dir: Path) -> int:
    """Off transitions in the host's BMC power log, read with `metalflow sim power-log`."""
    # In this process (tests/cli_support.py): the command's own process is not what is tested here.
    completed = run_metalflow("sim", "power-log", host, "--json", "--state-dir", state_dir)
    assert completed.returncode == 0, completed.stderr
    return sum(1 for entry in json.loads(completed.stdout) if entry["to"] == "Off")


def worker_ready(metrics_port: int) -> bool:
    """Whether the dev stack's worker answers 200 on /readyz (METALFLOW_METRICS_ADDRESS's port)."""
    try:
        return httpx.get(f"http://127.0.0.1:{metrics_port}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
