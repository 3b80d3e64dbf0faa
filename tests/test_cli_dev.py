"""`metalflow dev` for real, as a user runs it: a subprocess on free ports and a temporary state dir."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from metalflow.devstack.ports import free_port

METALFLOW = shutil.which("metalflow", path=str(Path(sys.executable).parent)) or "metalflow"


def _clean_env() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if not key.startswith(("TEMPORAL_", "OTEL_"))}


def _run(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    process = subprocess.Popen(
        [METALFLOW, *args],
        cwd=cwd,
        env=_clean_env(),
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


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_dev_exit_runs_the_demo_and_leaves_nothing_running(tmp_path: Path) -> None:
    port, ui_port = free_port(), free_port()
    state_dir = tmp_path / "state"
    completed = _run(
        "dev",
        "--exit",
        "--port",
        str(port),
        "--ui-port",
        str(ui_port),
        "--state-dir",
        str(state_dir),
        cwd=tmp_path,
    )
    output = completed.stdout
    assert completed.returncode == 0, output + completed.stderr
    assert f"Temporal UI:      http://127.0.0.1:{ui_port}" in output
    assert re.search(r"demo: activity describe_worker ran in worker pid \d+", output)
    assert "demo: sent signal approve" in output
    assert "phases InspectingWorker -> AwaitingApproval -> Completed" in output
    assert (state_dir / "temporal.db").exists() and (state_dir / "worker.log").exists()

    started = [int(pid) for pid in re.findall(r"starting .* \(pid (\d+),", output)]
    assert len(started) == 2
    assert not any(_alive(pid) for pid in started)
    assert not _listening(port) and not _listening(ui_port)

    # A second run on the same state dir reuses the database and its registered search attributes.
    again = _run(
        "dev",
        "--exit",
        "--port",
        str(port),
        "--ui-port",
        str(ui_port),
        "--state-dir",
        str(state_dir),
        cwd=tmp_path,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert "registered search attributes" not in again.stdout


def test_busy_port_is_a_clear_error_naming_the_flag(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        completed = _run(
            "dev", "--exit", "--port", str(port), "--state-dir", str(tmp_path), cwd=tmp_path, timeout=30
        )
        ui = _run(
            "dev",
            "--exit",
            "--port",
            str(free_port()),
            "--ui-port",
            str(port),
            "--state-dir",
            str(tmp_path),
            cwd=tmp_path,
            timeout=30,
        )
    assert completed.returncode == 2
    assert f"port {port} on 127.0.0.1 (Temporal gRPC) is already in use" in completed.stderr
    assert "--port" in completed.stderr
    assert ui.returncode == 2 and "--ui-port" in ui.stderr
    assert not (tmp_path / "temporal.db").exists()  # nothing was started


def test_help_and_usage_errors() -> None:
    here = Path.cwd()
    assert _run("--help", cwd=here).returncode == 0
    dev_help = _run("dev", "--help", cwd=here)
    assert dev_help.returncode == 0 and "--no-demo" in dev_help.stdout and "--state-dir" in dev_help.stdout
    assert _run(cwd=here).returncode == 2
    assert _run("dev", "--exit", "--no-demo", cwd=here).returncode == 2
    assert _run("dev", "--port", "70000", cwd=here).returncode == 2


@pytest.mark.slow
@pytest.mark.parametrize("stop_signal", ["SIGINT", "SIGTERM"])
def test_no_demo_waits_and_a_signal_stops_everything(tmp_path: Path, stop_signal: str) -> None:
    port, ui_port = free_port(), free_port()
    env = _clean_env()
    args = ["dev", "--no-demo", "--port", str(port), "--ui-port", str(ui_port), "--state-dir", str(tmp_path)]
    process = subprocess.Popen(
        [METALFLOW, *args], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: list[str] = []
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "press Ctrl-C to stop" in line:
                break
        assert _listening(port) and _listening(ui_port), "".join(lines)
        assert not any(line.startswith("demo:") for line in lines)
        process.send_signal(getattr(signal, stop_signal))
        rest, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.terminate()
            process.communicate(timeout=60)
    output = "".join(lines) + rest
    assert process.returncode == 0, output
    assert "everything stopped" in output
    started = [int(pid) for pid in re.findall(r"starting .* \(pid (\d+),", output)]
    assert len(started) == 2 and not any(_alive(pid) for pid in started)
    assert not _listening(port) and not _listening(ui_port)
