"""Every new BMC profile through `metalflow bmc check|power` (run in the test's process,
`cli_support`) and through a workflow's power cycle, against the simulator as a separate process
(each BMC at the root of its own address, the site file as it writes it): exactly one Off and one
On in each BMC's power log, the multi-system refusal, the CLI's time limit, and the 501 fallback
with its worker SIGKILLed mid-fallback.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from cli_support import run_metalflow
from redfish_support import (
    CycleOptions,
    CyclePower,
    crash_options,
    cycle_worker,
    first_activity_started,
    wait_for,
)
from sim_support import RunningSim, running_sim
from temporalio.testing import WorkflowEnvironment
from worker_support import power_worker

from contracts.models.inventory import BMCAccess
from contracts.models.redfish import PowerCycleInput
from drivers.credentials import CredentialResolver
from drivers.redfish.client import RedfishClient

PROFILE_OF = {
    "host-basic": "basic-only",
    "host-lag": "power-lag",
    "host-501": "powercycle-501",
    "host-multi-a": "multi-system",
    "host-multi-b": "multi-system",
    "host-tls": "self-signed-tls",
    "host-501-kill": "powercycle-501",
}
PROFILE_CYCLE = CycleOptions(heartbeat=timedelta(seconds=5), retry_maximum=timedelta(seconds=1))
CYCLE_LOG = {
    "basic-only": ("ForceOff", "On"),
    "power-lag": ("ForceOff", "On"),
    "powercycle-501": ("ForceOff", "On"),
    "multi-system": ("PowerCycle", "PowerCycle"),
    "self-signed-tls": ("PowerCycle", "PowerCycle"),
}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    folder = tmp_path_factory.mktemp("profiles")
    site = {"name": "profiles", "hosts": [{"id": h, "bmc": {"profile": p}} for h, p in PROFILE_OF.items()]}
    (folder / "in.yaml").write_text(yaml.safe_dump(site))
    with running_sim(folder / "state", site_file=folder / "in.yaml", timings="zero") as running:
        yield running


def metalflow(*args: str | Path) -> subprocess.CompletedProcess[str]:
    # In this process: these tests are about the profiles, not the process (test_bmc_cli runs the
    # real `python -m metalflow bmc`); that saves ~1.5 s of import CPU per command.
    return run_metalflow(*args)


def log_of(sim: RunningSim, host_id: str, since: int = 0) -> list[tuple[str, str, str]]:
    return [(e["from"], e["to"], e["reset_type"]) for e in sim.power_log(host_id)[since:]]


def access(sim: RunningSim, host_id: str) -> BMCAccess:
    bmc = {k: v for k, v in sim.host(host_id)["bmc"].items() if k not in ("profile", "group")}
    return BMCAccess(bmc_id=host_id, **bmc)


def test_the_site_file_names_each_bmc_by_its_own_address(sim: RunningSim) -> None:
    bmcs = {h: sim.host(h)["bmc"] for h in PROFILE_OF}
    assert bmcs["host-multi-a"]["endpoint"] == bmcs["host-multi-b"]["endpoint"]
    assert (bmcs["host-multi-a"]["system"], bmcs["host-multi-b"]["system"]) == (
        "host-multi-a",
        "host-multi-b",
    )
    assert (
        bmcs["host-tls"]["endpoint"].startswith("https://") and Path(bmcs["host-tls"]["ca_bundle"]).exists()
    )
    others = [b["endpoint"] for h, b in bmcs.items() if h != "host-multi-b"]
    assert len(set(others)) == len(others)  # every other BMC has an address of its own
    assert all(not e.rstrip("/").endswith("redfish/v1") and e.count("/") == 2 for e in others)


@pytest.mark.parametrize("host_id", ["host-basic", "host-lag", "host-501", "host-multi-b", "host-tls"])
def test_each_profile_through_bmc_check_and_power_cycle(sim: RunningSim, host_id: str) -> None:
    profile = PROFILE_OF[host_id]
    check = metalflow("bmc", "check", host_id, "--site", sim.site_file)
    assert check.returncode == 0, check.stderr
    assert f"/redfish/v1/Systems/{'host-multi-b' if profile == 'multi-system' else ''}" in check.stdout
    assert ("(basic auth)" if profile == "basic-only" else "(session auth)") in check.stdout
    since = len(sim.power_log(host_id))
    cycled = metalflow("bmc", "power", host_id, "cycle", "--site", sim.site_file, "--power-down-wait", "0.2")
    assert cycled.returncode == 0, cycled.stderr
    off, on = CYCLE_LOG[profile]
    assert log_of(sim, host_id, since) == [("On", "Off", off), ("Off", "On", on)]
    if profile == "powercycle-501":
        assert "falling back to ForceOff+On" in cycled.stdout
    if profile == "multi-system":
        assert log_of(sim, "host-multi-a") == []  # the other System behind the same BMC


def test_multi_system_without_a_named_system_is_refused_naming_the_members(
    sim: RunningSim, tmp_path: Path
) -> None:
    site = yaml.safe_load(sim.site_file.read_text())
    for host in site["hosts"]:
        host["bmc"].pop("system", None)
    edited = tmp_path / "site.yaml"
    edited.write_text(yaml.safe_dump(site))
    refused = metalflow("bmc", "power", "host-multi-a", "cycle", "--site", edited)
    assert refused.returncode == 2
    assert (
        "/redfish/v1/Systems/host-multi-a" in refused.stderr
        and "/redfish/v1/Systems/host-multi-b" in refused.stderr
    )
    assert log_of(sim, "host-multi-a") == []


def test_the_cli_gives_up_at_its_time_limit_with_the_last_error(sim: RunningSim, tmp_path: Path) -> None:
    site = yaml.safe_load(sim.site_file.read_text())
    site["hosts"][0]["bmc"]["endpoint"] = "http://127.0.0.1:9"  # nothing listens (discard)
    edited = tmp_path / "site.yaml"
    edited.write_text(yaml.safe_dump(site))
    started = time.monotonic()
    gave_up = metalflow(
        "bmc", "power", "host-basic", "cycle", "--site", edited, "--timeout", "3", "--power-down-wait", "0.5"
    )
    assert gave_up.returncode == 3  # the BMC could not be reached in time
    assert time.monotonic() - started < 60  # not the activity's 17 minutes
    assert "gave up after 3.5 s (--timeout); last error: " in gave_up.stderr
    assert "cannot reach http://127.0.0.1:9" in gave_up.stderr
    assert "waiting: " in gave_up.stdout  # it said what it was doing while it waited


async def test_each_profile_through_a_workflow_power_cycle(
    local_env: WorkflowEnvironment, task_queue: str, sim: RunningSim
) -> None:
    redfish = RedfishClient(CredentialResolver())
    hosts = ["host-basic", "host-lag", "host-501", "host-multi-a", "host-tls"]
    since = {h: len(sim.power_log(h)) for h in hosts}
    try:
        async with cycle_worker(local_env.client, task_queue, redfish):
            results = await asyncio.gather(
                *(
                    local_env.client.execute_workflow(
                        CyclePower.run,
                        args=[
                            PowerCycleInput(
                                bmc=access(sim, h),
                                boot_generation=2,
                                requested_at=datetime.now(UTC),
                                power_down_wait_seconds=0.2,
                            ),
                            PROFILE_CYCLE,
                        ],
                        id=f"profile-{h}-{uuid.uuid4()}",
                        task_queue=task_queue,
                    )  # fmt: skip
                    for h in hosts
                )
            )
    finally:
        await redfish.aclose()
    for host_id, result in zip(hosts, results, strict=True):
        off, on = CYCLE_LOG[PROFILE_OF[host_id]]
        assert log_of(sim, host_id, since[host_id]) == [("On", "Off", off), ("Off", "On", on)], host_id
        assert result.steps[-1] == "done"
    assert sim.violations() == []


async def test_501_fallback_with_the_worker_killed_mid_fallback_cycles_once(
    local_env: WorkflowEnvironment, sim: RunningSim, tmp_path: Path
) -> None:
    host_id = "host-501-kill"
    client = local_env.client
    queue, activity_queue = f"crash-{uuid.uuid4()}", f"crash-activities-{uuid.uuid4()}"
    log_file = tmp_path / "power-worker.log"
    async with power_worker(client, activity_queue, log_file) as first:
        async with cycle_worker(client, queue):
            request = PowerCycleInput(
                bmc=access(sim, host_id), boot_generation=1, requested_at=datetime.now(UTC),
                power_down_wait_seconds=3.0, timeout_seconds=60,
            )  # fmt: skip
            handle = await client.start_workflow(
                CyclePower.run,
                args=[request, crash_options(activity_queue)],
                id=f"crash-{uuid.uuid4()}",
                task_queue=queue,
            )
            await wait_for(lambda: first_activity_started(handle), timeout=20)
            # PowerCycle was refused with 501 and the fallback's ForceOff took the host Off: the
            # worker dies during the power-down wait, before On.
            await wait_for(lambda: asyncio.to_thread(lambda: len(sim.power_log(host_id)) == 1), timeout=30)
            first.kill()  # SIGKILL: no cleanup, no last heartbeat
            assert log_of(sim, host_id) == [("On", "Off", "ForceOff")]
            async with power_worker(client, activity_queue, log_file):
                result = await asyncio.wait_for(handle.result(), timeout=90)
    assert log_of(sim, host_id) == [("On", "Off", "ForceOff"), ("Off", "On", "On")]
    assert result.attempts >= 2 and result.steps[-1] == "done"
