"""`metalflow host firmware|remove|monitor` as a user runs them: subprocesses against a real
Temporal, a worker with every real workflow and activity, and the simulated site (DPUs already
provisioned, so there is firmware to update, DPUs to remove and Ready DPUs to watch)."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from cli_support import Result, metalflow, run_metalflow, use_site_file
from host_operation_support import worker_for
from kubernetes import client as kube_client
from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException
from ports_support import free_port
from sim_support import RunningSim, running_sim
from site_worker_support import eventually
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from contracts import names
from metalflow.devstack.demo import power_cycles
from simulators.site import BMC, DPU, Host, Site, dump_site

PREFIX = "clim"  # host ids no other test module's entities use (the dev server is shared)
TARGET = "32.45.1020"
IMAGE = f"http://firmware.example.test/bf-fw-{TARGET}.bfb"
DPF = ("provisioning.dpu.nvidia.com", "v1alpha1", "dpf-operator-system")


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    state = tmp_path_factory.mktemp("cli-more-sim")
    # Host BMCs with native PowerCycle: the entity's default policy waits 120 s between Off and On
    # on BMCs without it, and a firmware request carries no policy of its own.
    site = Site(
        name=f"{PREFIX}-site",
        hosts=[
            Host(
                id=f"{PREFIX}-{i:03d}",
                bmc=BMC(profile="powercycle"),
                dpus=[DPU(id=f"{PREFIX}-{i:03d}-dpu-{k}") for k in range(2)],
            )
            for i in range(1, 5)
        ],
    )
    site_file = state / "in" / "site.yaml"
    site_file.parent.mkdir()
    site_file.write_text(dump_site(site))
    with running_sim(state, site_file=site_file, timings="zero", initialised=True) as running:
        use_site_file(running.site_file)
        yield running


@pytest.fixture
async def queue(local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str) -> AsyncIterator[str]:
    async with worker_for(local_env.client, task_queue, sim):
        yield task_queue


@pytest.fixture(scope="module")
def dpf(sim: RunningSim) -> Iterator[Callable[[str, str], Awaitable[dict[str, Any] | None]]]:
    """Read a DPF object with the Kubernetes client, as an operator with the site's kubeconfig would."""
    api: Any = kube_config.new_client_from_config(config_file=str(sim.kubeconfig))  # type: ignore[no-untyped-call]
    custom: Any = kube_client.CustomObjectsApi(api)

    def read(plural: str, name: str) -> dict[str, Any] | None:
        group, version, namespace = DPF
        try:
            found: dict[str, Any] = custom.get_namespaced_custom_object(
                group, version, namespace, plural, name
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return found

    async def get(plural: str, name: str) -> dict[str, Any] | None:
        return await asyncio.to_thread(read, plural, name)

    yield get
    api.close()


async def firmware_wait(local_env: WorkflowEnvironment, host: str, queue: str, *more: str) -> Result:
    """`metalflow host firmware HOST --version TARGET --image IMAGE --wait [MORE] --task-queue QUEUE`."""
    return await metalflow(
        local_env, "host", "firmware", host, "--version", TARGET, "--image", IMAGE, "--wait", *more,
        "--task-queue", queue,
    )  # fmt: skip


async def test_firmware_wait_stages_both_dpus_and_power_cycles_once(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    host = f"{PREFIX}-001"
    done = await firmware_wait(local_env, host, queue, "--by", "fw@test")
    assert done.status == 0, done.stdout + done.stderr
    assert f"{host}: started firmware as firmware/{host}" in done.stdout
    assert (
        f"firmware/{host} completed (reboots 1, boot_generation 1, staged on {host}-dpu-0, {host}-dpu-1)"
        in done.stdout
    )
    assert power_cycles(sim.power_log(host)) == 1
    assert sim.violations() == []

    # Asked again: every DPU runs the target, nothing is staged or rebooted.
    again = await firmware_wait(local_env, host, queue)
    assert again.status == 0, again.stdout + again.stderr
    assert f"already running on {host}-dpu-0, {host}-dpu-1" in again.stdout
    assert power_cycles(sim.power_log(host)) == 1

    status = await metalflow(local_env, "host", "status", host)
    assert "firmware" in status.stdout and "completed  by fw@test" in status.stdout


async def test_remove_one_dpu_wait_deletes_its_objects_and_keeps_its_sibling(
    local_env: WorkflowEnvironment,
    sim: RunningSim,
    queue: str,
    dpf: Callable[[str, str], Awaitable[dict[str, Any] | None]],
) -> None:
    host = f"{PREFIX}-002"
    gone, kept = f"{host}-dpu-1", f"{host}-dpu-0"
    assert await dpf("dpus", f"node-{host}-device-{gone}") is not None
    done = await metalflow(
        local_env, "host", "remove", host, "--dpus", gone, "--wait", "--reason", "RMA", "--task-queue", queue
    )
    assert done.status == 0, done.stdout + done.stderr
    assert f"{host}: started remove as remove/{host}" in done.stdout
    assert f"removed DPUDevice/device-{gone}, DPU/node-{host}-device-{gone}" in done.stdout
    assert await dpf("dpus", f"node-{host}-device-{gone}") is None
    assert await dpf("dpudevices", f"device-{gone}") is None
    sibling = await dpf("dpus", f"node-{host}-device-{kept}")
    assert sibling is not None and sibling["status"]["phase"] == "Ready"
    node = await dpf("dpunodes", f"node-{host}")
    assert node is not None and [d["name"] for d in node["spec"]["dpus"]] == [f"device-{kept}"]
    assert sim.power_log(host) == [] and sim.violations() == []

    unknown = await metalflow(
        local_env, "host", "remove", host, "--dpus", "no-such-dpu", "--wait", "--task-queue", queue
    )
    # Refused against the inventory before anything is sent (the workflow's own check stays behind it).
    assert unknown.status == 2 and unknown.stdout == ""
    assert f"no-such-dpu is not a DPU of {host}; its DPUs: {host}-dpu-0, {host}-dpu-1" in unknown.stderr


async def test_monitor_starts_once_shows_the_pool_state_and_stops(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    host = f"{PREFIX}-003"
    workflow_id = names.monitor_workflow_id(host)
    started = await metalflow(local_env, "host", "monitor", host, "--by", "mon@test", "--task-queue", queue)
    assert started.status == 0, started.stdout + started.stderr
    assert (
        f"{host}: started monitor {workflow_id} (reprovision after 1800 s in Node Effect; after an "
        "operator's abort, none for 3600 s)" in started.stdout
    )
    assert f"{host}: in-pool (2 DPUs watched: Ready)" in started.stdout
    assert f"started its entity host/{host}" in started.stdout

    twice = await metalflow(
        local_env, "host", "monitor", host, "--no-auto-reprovision", "--task-queue", queue
    )
    assert twice.status == 0, twice.stderr
    assert f"monitor {workflow_id} already running" in twice.stdout
    assert "its policy stays reprovision after 1800 s in Node Effect" in twice.stdout

    async def runs() -> list[WorkflowExecutionStatus | None]:
        return [w.status async for w in local_env.client.list_workflows(f'WorkflowId = "{workflow_id}"')]

    assert await eventually(runs, bool) == [WorkflowExecutionStatus.RUNNING]  # visibility lags a little

    shown = await metalflow(local_env, "host", "monitor", host, "--status")
    assert shown.status == 0, shown.stderr
    assert f"monitor of {host} ({workflow_id}): in-pool" in shown.stdout
    assert "policy           reprovision after 1800 s in Node Effect" in shown.stdout

    sim.inject(f"dpus/node-{host}-device-{host}-dpu-1/node-effect")
    out = await eventually(
        lambda: metalflow(local_env, "host", "monitor", host, "--status"),
        lambda r: f"({workflow_id}): out-of-pool" in r.stdout,
    )
    assert "degraded (Node Effect)" in out.stdout
    assert f"{host}-dpu-1" in out.stdout and "reprovision due" in out.stdout
    entity = await metalflow(local_env, "host", "status", host)
    assert entity.status == 0, entity.stderr
    assert f"monitor          out-of-pool: critical DPU services down on {host}-dpu-1 since" in entity.stdout

    stopped = await metalflow(local_env, "host", "monitor", host, "--stop", "--by", "mon@test")
    assert stopped.status == 0, stopped.stderr
    assert f"monitor {workflow_id} stopped by mon@test; pool state out-of-pool (" in stopped.stdout
    assert "DPF changes seen, 1 run)" in stopped.stdout
    after = await metalflow(local_env, "host", "monitor", host, "--status")
    assert after.status == 1
    assert f"no monitor runs for host {host} (the last one ended: completed)" in after.stderr
    again = await metalflow(local_env, "host", "monitor", host, "--stop")
    assert again.status == 1 and "no monitor runs" in again.stderr
    assert "monitor " not in (await metalflow(local_env, "host", "status", host)).stdout


async def test_monitor_of_an_unknown_host_is_refused_before_it_starts(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    """Checked against the inventory first, as every request is (README's exit-status table: an
    unknown host is exit 2 in every command); before, a monitor was started and then stopped."""
    host = f"{PREFIX}-999"
    refused = await metalflow(local_env, "host", "monitor", host, "--task-queue", queue)
    assert refused.status == 2 and refused.stdout == ""
    assert f"unknown host '{host}': not in the site file" in refused.stderr
    shown = await metalflow(local_env, "host", "monitor", host, "--status")
    assert shown.status == 2 and f"unknown host '{host}'" in shown.stderr
    with pytest.raises(RPCError):  # no monitor was started
        await local_env.client.get_workflow_handle(names.monitor_workflow_id(host)).describe()
    never = await metalflow(local_env, "host", "status", host)
    assert never.status == 2 and f"unknown host '{host}'" in never.stderr  # no entity was created

    firmware = await firmware_wait(local_env, host, queue)
    # The CLI refuses it against the inventory before anything is sent: no firmware workflow.
    assert firmware.status == 2 and firmware.stdout == ""
    assert f"unknown host '{host}': not in the site file" in firmware.stderr


def test_usage_errors_exit_2_before_anything_is_asked() -> None:
    # In this process (tests/cli_support.py): argparse refuses these before any client is made,
    # so ten interpreters (~1.3 s of CPU each) would test nothing more.
    def usage(*args: str) -> subprocess.CompletedProcess[str]:
        result = run_metalflow("host", *args)
        assert result.returncode == 2, result
        return result

    bad_version = usage("firmware", "h1", "--version", "32 45", "--image", IMAGE)
    assert "invalid firmware version '32 45'" in bad_version.stderr
    ftp = usage("firmware", "h1", "--version", TARGET, "--image", "ftp://x.test/bf.bfb")
    assert (
        "invalid image URI 'ftp://x.test/bf.bfb': give the URL of the image file (http, https or scp)"
        in ftp.stderr
    )
    no_file = usage("firmware", "h1", "--version", TARGET, "--image", "https://x.test/")
    assert "invalid image URI" in no_file.stderr
    secret = usage("firmware", "h1", "--version", TARGET, "--image", "https://u:hunter2@x.test/bf.bfb")
    assert "carries credentials" in secret.stderr and "hunter2" not in secret.stderr
    missing = usage("firmware", "h1", "--version", TARGET)
    assert "--image" in missing.stderr
    empty = usage("remove", "h1", "--dpus", "")
    assert "invalid DPU list ''" in empty.stderr
    both = usage("monitor", "h1", "--status", "--stop")
    assert "not allowed with argument" in both.stderr
    never = usage("monitor", "h1", "--reprovision-after", "0")
    assert "argument --reprovision-after: '0': Input should be greater than 0" in never.stderr
    assert "invalid host id" in (usage("remove", "h1/x")).stderr


async def test_no_monitor_and_temporal_unreachable(local_env: WorkflowEnvironment, sim: RunningSim) -> None:
    never = f"{PREFIX}-004"  # a host of the site no test monitors
    none = await metalflow(local_env, "host", "monitor", never, "--status")
    assert none.status == 1
    assert f"no monitor runs for host {never} (no monitor was ever started)" in none.stderr
    assert f"metalflow host monitor {never}" in none.stderr
    stranger = await metalflow(local_env, "host", "monitor", "clim-never", "--status")
    assert stranger.status == 2 and "unknown host 'clim-never'" in stranger.stderr
    dead = f"127.0.0.1:{free_port()}"
    known = f"{PREFIX}-001"  # a host of the site: the inventory check passes, then Temporal is needed
    for args in (
        ("firmware", known, "--version", TARGET, "--image", IMAGE),
        ("remove", known),
        ("monitor", known),
        ("monitor", known, "--status"),
    ):
        unreachable = await metalflow(local_env, "host", *args, address=dead)
        assert unreachable.status == 3, (args, unreachable)
        assert f"cannot reach Temporal at {dead}" in unreachable.stderr


def test_remove_help_says_the_default_is_the_whole_node() -> None:
    shown = run_metalflow("host", "remove", "--help")
    assert shown.returncode == 0, shown.stderr
    assert "(default: the whole DPU node)" in " ".join(shown.stdout.split())
