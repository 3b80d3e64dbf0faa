"""Support for the tests of `metalflow dev` run for real (the console script, `cli_support.METALFLOW`):
free ports for its three servers, its output read line by line until a line says enough, whether a
port listens and a pid runs after it stopped, the BMC's power cycles it left in its state dir,
whether its worker reports ready, a command run as a user runs it (`run_console`), and what every
command finds of a running stack (`assert_one_stack_found_by_every_command`)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from cli_support import METALFLOW, clean_env, run_metalflow
from ports_support import free_port
from sim_support import sim_http


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


def power_cycles(host: str, state_dir: Path, skip: int = 0) -> int:
    """Off transitions in the host's BMC power log, read with `metalflow sim power-log`, after its
    first `skip` entries (the log is kept across a restart on the state dir)."""
    # In this process (tests/cli_support.py): the command's own process is not what is tested here.
    completed = run_metalflow("sim", "power-log", host, "--json", "--state-dir", state_dir)
    assert completed.returncode == 0, completed.stderr
    return sum(1 for entry in json.loads(completed.stdout)[skip:] if entry["to"] == "Off")


def kept_power_log_lengths(state_dir: Path) -> dict[str, int]:
    """The entries of each host's power log the stopped simulator kept in its state dir (what a
    restarted one starts with: simulators/redfish/keep.py), by host id."""
    bmcs = json.loads((state_dir / "sim-store.json").read_text())["bmcs"]
    return {bmc_id: len(kept.get("log") or ()) for bmc_id, kept in bmcs.items()}


def worker_ready(metrics_port: int) -> bool:
    """Whether the dev stack's worker answers 200 on /readyz (METALFLOW_METRICS_ADDRESS's port)."""
    try:
        return sim_http().get(f"http://127.0.0.1:{metrics_port}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def run_console(
    *args: str, cwd: Path, timeout: float = 180, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The console script with `args` in `cwd`, its environment clean, as a user runs it."""
    process = subprocess.Popen(
        [METALFLOW, *args],
        cwd=cwd,
        env={**clean_env(), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    finally:
        # Interrupted or timed out: SIGTERM lets `metalflow dev` stop the server and worker it
        # started (a SIGKILL, what subprocess.run would send, would orphan them).
        if process.poll() is None:
            process.terminate()
            process.communicate(timeout=60)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def assert_one_stack_found_by_every_command(state_dir: Path, pid: int, ports: tuple[int, int, int]) -> None:
    """Issue 29 items 2 and 5: a second `metalflow dev` on a state dir in use is refused, naming
    the running stack's pid and ports, and changes none of its files; a Temporal command finds
    the stack (on non-default ports) from the state dir alone, and takes --address/--namespace."""
    port, ui_port, sim_port = ports
    kept = {name: (state_dir / name).read_bytes() for name in ("temporal.toml", "site.yaml", "kubeconfig")}
    other = [str(p) for p in three_ports()]
    second = run_console(
        "dev", "--no-demo", "--port", other[0], "--ui-port", other[1], "--sim-port", other[2],
        "--state-dir", str(state_dir), cwd=state_dir, timeout=60,
    )  # fmt: skip
    assert second.returncode == 2, second.stdout + second.stderr
    assert f"is in use by another metalflow dev (pid {pid}: Temporal 127.0.0.1:{port}" in second.stderr
    assert f"UI http://127.0.0.1:{ui_port}" in second.stderr and f"port {sim_port}" in second.stderr
    assert "starting" not in second.stdout  # nothing was started
    assert {name: (state_dir / name).read_bytes() for name in kept} == kept
    # No TEMPORAL_* at all (the environment is cleaned): the stack of METALFLOW_STATE_DIR.
    found = run_console(
        "campaign", "list", cwd=state_dir, timeout=60, env={"METALFLOW_STATE_DIR": str(state_dir)}
    )
    assert found.returncode == 0, found.stderr
    assert found.stdout == "no campaigns\n"
    found_line = f"Temporal 127.0.0.1:{port} from the metalflow dev of state dir {state_dir.resolve()}"
    assert found_line in found.stderr
    # --address and --namespace, like the Temporal CLI (a state dir with no stack in it).
    elsewhere = {"METALFLOW_STATE_DIR": str(state_dir / "none")}
    named = run_console(
        "host", "list", "--address", f"127.0.0.1:{port}", "--namespace", "default",
        cwd=state_dir, timeout=60, env=elsewhere,
    )  # fmt: skip
    assert named.returncode == 0, named.stderr
    wrong = run_console(
        "campaign", "list", "--address", f"127.0.0.1:{port}", "--namespace", "nope",
        cwd=state_dir, env=elsewhere,
    )  # fmt: skip
    assert wrong.returncode != 0 and "nope" in wrong.stderr
