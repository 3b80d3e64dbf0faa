"""`metalflow bmc check|power` as an operator runs it: a real process against the simulated site."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from cli_support import clean_env, run_console_script, run_metalflow
from ports_support import free_port
from sim_support import RunningSim, running_sim
from temporalio.testing import WorkflowEnvironment

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with running_sim(tmp_path_factory.mktemp("sim"), hosts=5, dpus_per_host=0, timings="zero") as running:
        yield running


def metalflow(*args: str | Path) -> subprocess.CompletedProcess[str]:
    # In this process (tests/cli_support.py): the commands' output and effects, not the process.
    return run_metalflow(*args)


def password(sim: RunningSim, host_id: str) -> str:
    return str(json.loads(Path(sim.host(host_id)["bmc"]["credentials"]["file"]).read_text())["password"])


def test_check_prints_system_power_reset_types_and_cycle_method(sim: RunningSim) -> None:
    native = metalflow("bmc", "check", "host-001", "--site", sim.site_file)
    assert native.returncode == 0, native.stderr
    assert "/redfish/v1/Systems/System.Embedded.1" in native.stdout
    assert "power state:  On" in native.stdout
    assert "PowerCycle" in native.stdout and "native PowerCycle" in native.stdout
    fallback = metalflow("bmc", "check", "host-002", "--site", sim.site_file, "--auth", "basic")
    assert fallback.returncode == 0, fallback.stderr
    assert (
        "ForceOff, wait for Off, wait power_down_wait, On, wait for On (PowerCycle is not offered)"
        in fallback.stdout
    )
    cooldown = metalflow("bmc", "check", "host-005", "--site", sim.site_file)
    assert "(LastResetTime is not exposed)" in cooldown.stdout
    for run, host in ((native, "host-001"), (fallback, "host-002")):
        assert password(sim, host) not in run.stdout + run.stderr
    assert sim.violations() == []


def test_power_cycle_prints_each_transition_and_cycles_once(sim: RunningSim) -> None:
    since = len(sim.power_log("host-002"))
    run = metalflow("bmc", "power", "host-002", "cycle", "--site", sim.site_file, "--power-down-wait", "0.2")
    assert run.returncode == 0, run.stderr
    for text in (
        "PowerState Off",
        "off_reached",
        "PowerState On",
        "power cycled by ForceOff+On (ForceOff, On)",
    ):
        assert text in run.stdout
    log = [(e["from"], e["to"], e["reset_type"]) for e in sim.power_log("host-002")[since:]]
    assert log == [("On", "Off", "ForceOff"), ("Off", "On", "On")]
    off = metalflow("bmc", "power", "host-002", "off", "--site", sim.site_file)
    status = metalflow("bmc", "power", "host-002", "status", "--site", sim.site_file)
    on = metalflow("bmc", "power", "host-002", "on", "--site", sim.site_file)
    assert (off.returncode, status.stdout.strip(), on.returncode) == (0, "host-002: Off", 0)
    assert "PowerState On" in on.stdout


def test_unknown_host_names_the_site_file(sim: RunningSim) -> None:
    run = metalflow("bmc", "check", "host-999", "--site", sim.site_file)
    assert run.returncode == 2
    assert "unknown host 'host-999'" in run.stderr and str(sim.site_file) in run.stderr


def test_unreachable_bmc_and_rejected_credentials_fail_clearly(sim: RunningSim, tmp_path: Path) -> None:
    site = yaml.safe_load(sim.site_file.read_text())
    closed_port = free_port()  # of the test's own block: no server of the suite binds it
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"username": "admin", "password": "hunter2-wrong"}')
    site["hosts"][0]["bmc"]["endpoint"] = f"http://127.0.0.1:{closed_port}"
    site["hosts"][1]["bmc"]["credentials"] = {"file": str(wrong)}
    edited = tmp_path / "site.yaml"
    edited.write_text(yaml.safe_dump(site))
    unreachable = metalflow("bmc", "check", "host-001", "--site", edited)
    assert unreachable.returncode == 3  # cannot reach (README's exit-status table)
    assert (
        "BMCUnavailable" in unreachable.stderr
        and f"cannot reach http://127.0.0.1:{closed_port}" in unreachable.stderr
    )
    rejected = metalflow("bmc", "power", "host-002", "status", "--site", edited)
    assert rejected.returncode == 1
    assert "BMCAuthenticationFailed" in rejected.stderr and str(wrong) in rejected.stderr
    assert "hunter2-wrong" not in rejected.stderr + rejected.stdout


def test_help_explains_the_commands() -> None:
    run = metalflow("bmc", "power", "--help")
    assert run.returncode == 0
    assert "on,off,cycle,status" in run.stdout.replace(" ", "") or "{on,off,cycle,status}" in run.stdout
    assert "--power-down-wait" in run.stdout


async def test_power_on_ends_cleanly_whether_temporal_answers_or_not(
    sim: RunningSim, local_env: WorkflowEnvironment
) -> None:
    """`metalflow bmc power HOST on`, the installed command in a process of its own, tells the
    entity and exits with the power action's status, never `Fatal Python error: PyGILState_Release`
    (exit 134; 8 of 10 runs when Temporal was not reached, now and then when it was: the SDK's
    default runtime outlived the command). Three runs not reaching Temporal, one reaching it,
    side by side."""
    temporal = ["--address", local_env.client.service_client.config.target_host]
    nowhere = ["--address", f"127.0.0.1:{free_port()}"]  # nothing listens: "Temporal not reached"
    base = ["bmc", "power", "host-003", "on", "--site", str(sim.site_file), "--settle", "0"]
    runs = await asyncio.gather(
        *(run_console_script([*base, *where], clean_env()) for where in [temporal, nowhere, nowhere, nowhere])
    )
    for status, stdout, stderr in runs:
        assert "Fatal Python error" not in stderr and status == 0, (status, stdout, stderr)
        assert "PowerState On" in stdout, stdout
    assert ["Temporal not reached" in stderr for _, _, stderr in runs] == [False, True, True, True]
