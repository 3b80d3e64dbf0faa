"""`metalflow dev` shows durability: the worker killed in the middle of a reprovision is restarted,
and the reprovision finishes with exactly one power cycle per reboot DPF asked for."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

from cli_support import METALFLOW, clean_env
from dev_support import alive, power_cycles, read_until, ready, three_ports


def test_a_worker_killed_mid_reprovision_is_restarted_and_the_reprovision_cycles_once(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    port, ui_port, sim_port = three_ports()
    ports = ["--port", str(port), "--ui-port", str(ui_port), "--sim-port", str(sim_port)]
    process = subprocess.Popen(
        [METALFLOW, "dev", *ports, "--state-dir", str(state_dir), "--hosts", "1"],
        cwd=tmp_path, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines: list[str] = []
    killed = None
    try:

        def watch(line: str) -> bool:
            nonlocal killed
            # Kill the worker (SIGKILL: no goodbye) once the reprovision has asked for its reboot.
            if killed is None and re.search(r"demo: reprovision host-001: .*rebooting-host", line):
                output = "".join(lines)
                killed = int(re.findall(r"starting metalflow worker \(pid (\d+),", output)[-1])
                os.kill(killed, signal.SIGKILL)
            return ready(line) or "FAILED" in line

        read_until(process, lines, watch, timeout=300)
        output = "".join(lines)
        assert killed is not None, output
        assert f"metalflow worker (pid {killed}) exited with status -9; restarting it" in output
        assert len(re.findall(r"starting metalflow worker \(pid (\d+),", output)) == 2
        assert "press Ctrl-C to stop" in output, output
        assert "demo: reprovision host-001: completed (reboots 1, boot_generation 2)" in output, output
        # Provision and reprovision each asked for one reboot: two power cycles, not three.
        assert power_cycles("host-001", state_dir) == 2
        assert "demo: host-001 BMC power log: 2 power cycles (DPF asked for 2)" in output
        assert not alive(killed)
        process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.terminate()
            process.communicate(timeout=60)
    assert process.returncode == 0, output + rest
