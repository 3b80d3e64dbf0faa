"""Commands find the state dir from anywhere (METALFLOW_STATE_DIR, else the checkout's
.metalflow) and say which one they used."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from cli_support import METALFLOW, clean_env
from ports_support import free_port

from drivers.statedir import find_state_dir

CHECKOUT = Path(__file__).resolve().parents[1]


def _metalflow(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([METALFLOW, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=180)


def test_the_state_dir_comes_from_the_flag_the_variable_then_the_checkout(tmp_path: Path) -> None:
    assert find_state_dir(tmp_path / "x", {"METALFLOW_STATE_DIR": "/elsewhere"}) == (
        tmp_path / "x",
        "--state-dir",
    )
    assert find_state_dir(None, {"METALFLOW_STATE_DIR": "/elsewhere"}) == (
        Path("/elsewhere"),
        "METALFLOW_STATE_DIR",
    )
    assert find_state_dir(None, {}) == (CHECKOUT / ".metalflow", "the metalflow checkout")


def test_sim_commands_outside_the_checkout_find_the_simulator_through_the_variable(tmp_path: Path) -> None:
    state = tmp_path / "state"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = clean_env() | {"METALFLOW_STATE_DIR": str(state)}
    up = _metalflow(
        "sim", "up", "--detach", "--hosts", "1", "--sim-port", str(free_port()), cwd=tmp_path, env=env
    )
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        assert f"metalflow sim up: state dir {state} (from METALFLOW_STATE_DIR)" in up.stderr
        found = _metalflow("sim", "violations", "--json", cwd=elsewhere, env=env)
        assert found.returncode == 0, found.stderr
        assert json.loads(found.stdout) == []
        assert f"metalflow sim violations: state dir {state} (from METALFLOW_STATE_DIR)" in found.stderr
        # Without the variable, from elsewhere: the checkout's state dir, named, where none runs.
        other = _metalflow("sim", "violations", cwd=elsewhere, env=clean_env() | {"METALFLOW_STATE_DIR": ""})
        assert f"state dir {CHECKOUT / '.metalflow'} (from the metalflow checkout)" in other.stderr
    finally:
        down = _metalflow("sim", "down", cwd=elsewhere, env=env)
    assert down.returncode == 0, down.stderr
