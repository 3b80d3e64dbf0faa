"""No orphans: when `metalflow dev`, `metalflow sim up` or a test session is SIGKILLed, every
process it started stops by itself (the lifeline, `metalflow/runtime/lifeline.py`) and frees
its ports. Each test starts the parent for real, kills it with SIGKILL and watches the children.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cli_support import METALFLOW, clean_env
from ports_support import free_port
from site_worker_support import eventually

TESTS = Path(__file__).parent
GONE_WITHIN = 45.0  # generous: the machine is shared; children stop in about a second (xdist: ~15 s)


def _alive(pid: int) -> bool:
    """Running (a zombie awaiting its reaper counts as gone: it holds no port and runs nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _group_alive(pgid: int) -> bool:
    """Any running process in the process group (a lifeline wrapper's binary is in its group)."""
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def _listening(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    with socket.socket() as probe:
        return probe.connect_ex((host, int(port))) == 0


def _spawn(argv: list[str], output: Path, cwd: Path) -> subprocess.Popen[bytes]:
    with output.open("wb") as out:
        return subprocess.Popen(argv, cwd=cwd, env=clean_env(), stdout=out, stderr=subprocess.STDOUT)


async def _output_has(output: Path, text: str, process: subprocess.Popen[bytes], timeout: float) -> str:
    async def read() -> str:
        if process.poll() is not None:
            raise AssertionError(f"exited with {process.returncode}:\n{output.read_text()}")
        return output.read_text()

    return await eventually(read, lambda seen: text in seen, timeout=timeout)


async def _assert_all_gone(pids: list[int], addresses: list[str]) -> None:
    async def running() -> list[str]:
        alive = [f"pid {pid}" for pid in pids if _alive(pid) or _group_alive(pid)]
        return alive + [f"port {address}" for address in addresses if _listening(address)]

    await eventually(running, lambda left: not left, timeout=GONE_WITHIN)


def _sigkill(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)


async def test_a_sigkilled_sim_up_leaves_no_simulator(tmp_path: Path) -> None:
    port, state_dir = free_port(), tmp_path / "state"
    argv = [METALFLOW, "sim", "up", "--sim-port", str(port), "--state-dir", str(state_dir)]
    parent = _spawn(argv, tmp_path / "sim-up.out", tmp_path)
    try:
        await _output_has(tmp_path / "sim-up.out", "Press Ctrl-C", parent, timeout=120)
        simulator = int(json.loads((state_dir / "sim.json").read_text())["pid"])
        assert _alive(simulator) and _listening(f"127.0.0.1:{port}")
        _sigkill(parent)
        await _assert_all_gone([simulator], [f"127.0.0.1:{port}"])
    finally:
        parent.kill()


async def test_a_sigkilled_dev_stack_leaves_no_server_simulator_or_worker(tmp_path: Path) -> None:
    ports = {"--port": free_port(), "--ui-port": free_port(), "--sim-port": free_port()}
    argv = [METALFLOW, "dev", "--no-demo", "--state-dir", str(tmp_path / "state"), "--timings", "zero"]
    argv += [str(part) for option in ports.items() for part in option]
    output = tmp_path / "dev.out"
    parent = _spawn(argv, output, tmp_path)
    try:
        seen = await _output_has(output, "metalflow worker is ready", parent, timeout=240)
        started = [int(pid) for pid in re.findall(r"starting .* \(pid (\d+),", seen)]
        assert len(started) == 3, seen  # Temporal dev server (its wrapper), simulated site, worker
        addresses = [f"127.0.0.1:{port}" for port in ports.values()]
        assert all(_listening(address) for address in addresses)
        _sigkill(parent)
        await _assert_all_gone(started, addresses)
    finally:
        parent.kill()


SESSION_THAT_HANGS = """
import asyncio, json, os
from pathlib import Path
from sim_support import running_sim

async def test_hold_servers_then_hang(local_env, time_skipping_env, tmp_path):
    with running_sim(tmp_path / "sim") as sim:
        report = {
            "pids": [sim.process.pid],
            "addresses": [
                local_env.client.service_client.config.target_host,
                time_skipping_env.client.service_client.config.target_host,
                sim.url.removeprefix("http://").split("/")[0],
            ],
        }
        written = Path(os.environ["LIFELINE_REPORT"] + ".tmp")
        written.write_text(json.dumps(report))
        written.rename(os.environ["LIFELINE_REPORT"])  # whole or not at all
        await asyncio.sleep(600)
"""


@pytest.mark.parametrize("xdist", [[], ["-n", "1"]], ids=["one-process", "xdist-controller"])
async def test_a_sigkilled_test_session_leaves_no_temporal_servers_or_simulator(
    tmp_path: Path, xdist: list[str]
) -> None:
    """A pytest session with the suite's fixtures (dev server, time-skipping server, simulator).
    Under xdist (as `make test` runs) the controller is killed: its worker notices (execnet stops
    it within about 15 s), and with it go the lifelines of the servers it started."""
    test_file = tmp_path / "test_hang.py"
    test_file.write_text(textwrap.dedent(SESSION_THAT_HANGS))
    report = tmp_path / "report.json"
    env = clean_env() | {"LIFELINE_REPORT": str(report), "PYTHONPATH": str(TESTS)}
    argv = [
        sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider",
        "-c", str(TESTS.parent / "pyproject.toml"), "--rootdir", str(tmp_path), str(test_file), *xdist,
    ]  # fmt: skip
    output = tmp_path / "pytest.out"
    with output.open("wb") as out:
        session = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:

        async def reported() -> bool:
            if session.poll() is not None:
                raise AssertionError(f"the session exited with {session.returncode}:\n{output.read_text()}")
            return report.exists()

        await eventually(reported, bool, timeout=180)
        held = json.loads(report.read_text())
        assert all(_listening(address) for address in held["addresses"]), held
        _sigkill(session)
        await _assert_all_gone(held["pids"], held["addresses"])
    finally:
        session.kill()
