"""The host CLI's inventory check in cluster mode (`METALFLOW_INVENTORY=cluster`): the DPF objects
metalflow registered are the inventory; an unknown host, a DPU not the host's, and a reprovision
of DPUs DPF does not have are refused before anything is sent, with nothing written to the API
and no entity workflow created."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cli_support import command_env, entity_exists, run_in_few_processes
from dpf_activities_support import Api, dpf_activities, run, settings_for
from host_operation_support import worker_for
from sim_support import RunningSim, running_sim
from site_worker_support import FAST_POLICY
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from contracts.models.dpf import RegisterHostInput
from contracts.models.host import FirmwareInput, FirmwareResult
from drivers.inventory import Inventory

FIRMWARE = ("--version", "32.45.1020", "--image", "https://f.example/bf-fw-32.45.1020.bfb")


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with running_sim(tmp_path_factory.mktemp("cluster-inventory"), hosts=2, dpus_per_host=2) as running:
        yield running


async def test_cluster_mode_refuses_unknown_hosts_dpus_and_a_reprovision_dpf_cannot_do(
    client: Client, sim: RunningSim, tmp_path: Path
) -> None:
    # host-001 registered (DPUNode and DPUDevices), but no DPUDeployment: DPF made no DPU objects.
    inventory = await Inventory(settings_for(sim)).resolve("host-001")
    await run(dpf_activities(sim).register_host_dpus, RegisterHostInput(inventory=inventory))
    api = Api(sim)
    before = {(kind, o["metadata"]["name"]): o["metadata"]["resourceVersion"]
              for kind in ("DPUNode", "DPUDevice", "DPU") for o in api.list(kind)}  # fmt: skip
    # The session's dev server is shared by the modules of this xdist worker: one may have made
    # host/host-001 before; what counts is that no refused request made an entity.
    entities_before = {h: await entity_exists(client, h) for h in ("host-001", "host-002", "host-999")}
    env = command_env(client, tmp_path) | {
        "METALFLOW_INVENTORY": "cluster",
        "KUBECONFIG": str(sim.kubeconfig),
    }
    # Exit statuses (README's table): 2 an unknown host or DPU, 1 what DPF has now refuses it, 3
    # no worker polls the queue (metalflow could not ask).
    rows: list[tuple[list[str], int, str]] = [
        (["host", "provision", "host-002"], 2,
         "unknown host 'host-002': no DPUNode node-host-002 in namespace dpf-operator-system"),
        (["host", "assign", "host-999", "inst-1"], 2, "unknown host 'host-999': no DPUNode node-host-999"),
        (["host", "reboot", "host-001", "--by", "t"], 3, ""),  # known: passes the check, no worker
        (["host", "provision", "host-001", "--dpus", "host-002-dpu-0"], 2,
         "host-002-dpu-0 is not a DPU of host-001; its DPUs: host-001-dpu-0, host-001-dpu-1"),
        (["host", "reprovision", "host-001"], 1,
         "cannot reprovision host-001: DPF has no DPU node-host-001-device-host-001-dpu-0, "
         "node-host-001-device-host-001-dpu-1 in namespace dpf-operator-system "
         "(provision it first: metalflow host provision host-001)"),
        (["host", "reprovision", "host-001", "--dpus", "host-001-dpu-1"], 1,
         "cannot reprovision host-001: DPF has no DPU node-host-001-device-host-001-dpu-1 "
         "in namespace dpf-operator-system (provision it first: metalflow host provision host-001 "
         "--dpus host-001-dpu-1)"),
    ]  # fmt: skip
    queue = ["--task-queue", "nobody-polls-this"]
    # In command servers (tests/cli_support.py): the check's answers are the subject, not the process.
    results = await run_in_few_processes([([*args, *queue], {}) for args, _, _ in rows], env)
    problems = []
    for (args, status, words), (code, out, err) in zip(rows, results, strict=True):
        lines = err.splitlines()
        expected = words or "no worker polls task queue 'nobody-polls-this'"
        if code != status or out or len(lines) != 1 or not lines[0].startswith(f"metalflow: {expected}"):
            problems.append(f"{args}: exit {code}, stdout {out!r}, stderr {err!r}")
    assert problems == [], "\n".join(problems)
    after = {(kind, o["metadata"]["name"]): o["metadata"]["resourceVersion"]
             for kind in ("DPUNode", "DPUDevice", "DPU") for o in api.list(kind)}  # fmt: skip
    assert after == before, "a refused request wrote to the DPF API"
    for host in ("host-001", "host-002", "host-999"):
        assert await entity_exists(client, host) == entities_before[host], host
    api.close()


async def test_site_mode_refuses_a_reprovision_dpf_cannot_do_and_an_unreadable_cluster(
    client: Client, sim: RunningSim, tmp_path: Path
) -> None:
    # The site file names host-001 and host-002; the cluster DPF runs in has no DPU of either.
    began = datetime.now(UTC)
    api = Api(sim)
    before = {(kind, o["metadata"]["name"]): o["metadata"]["resourceVersion"]
              for kind in ("DPUNode", "DPUDevice", "DPU") for o in api.list(kind)}  # fmt: skip
    site_mode = command_env(client, tmp_path) | {
        "METALFLOW_INVENTORY": "site", "METALFLOW_SITE_FILE": str(sim.site_file),
    }  # fmt: skip
    rows: list[tuple[list[str], dict[str, str], int, str]] = [
        (["host", "reprovision", "host-002"], {"KUBECONFIG": str(sim.kubeconfig)}, 1,
         "cannot reprovision host-002: DPF has no DPU node-host-002-device-host-002-dpu-0, "
         "node-host-002-device-host-002-dpu-1 in namespace dpf-operator-system "
         "(provision it first: metalflow host provision host-002)"),
        (["host", "reprovision", "host-002", "--dpus", "host-002-dpu-1"], {"KUBECONFIG": str(sim.kubeconfig)},
         1, "cannot reprovision host-002: DPF has no DPU node-host-002-device-host-002-dpu-1 in "
         "namespace dpf-operator-system (provision it first: metalflow host provision host-002 "
         "--dpus host-002-dpu-1)"),
        # A firmware update's power cycle ends once every DPU is Ready again: DPUs DPF has no
        # object of never are (issue 40: it waited an hour in waiting-for-dpus).
        (["host", "firmware", "host-002", *FIRMWARE], {"KUBECONFIG": str(sim.kubeconfig)}, 1,
         "cannot update the DPU firmware of host-002: DPF has no DPU node-host-002-device-host-002-dpu-0, "
         "node-host-002-device-host-002-dpu-1 in namespace dpf-operator-system "
         "(provision it first: metalflow host provision host-002)"),
        (["host", "reprovision", "host-002"], {"KUBECONFIG": str(tmp_path / "missing-kubeconfig")}, 2,
         "cannot check that DPF has the DPUs of host-002: no usable Kubernetes configuration "
         f"({tmp_path / 'missing-kubeconfig'})"),
        # Only a reprovision needs DPF's DPUs: a provision is checked against the site file alone.
        (["host", "provision", "host-002"], {"KUBECONFIG": str(tmp_path / "missing-kubeconfig")}, 3,
         "no worker polls task queue 'nobody-polls-this'"),
    ]  # fmt: skip
    queue = ["--task-queue", "nobody-polls-this"]
    results = await run_in_few_processes([([*args, *queue], extra) for args, extra, _, _ in rows], site_mode)
    problems = []
    for (args, _, status, words), (code, out, err) in zip(rows, results, strict=True):
        lines = err.splitlines()
        if code != status or out or len(lines) != 1 or not lines[0].startswith(f"metalflow: {words}"):
            problems.append(f"{args}: exit {code}, stdout {out!r}, stderr {err!r}")
    assert problems == [], "\n".join(problems)
    after = {(kind, o["metadata"]["name"]): o["metadata"]["resourceVersion"]
             for kind in ("DPUNode", "DPUDevice", "DPU") for o in api.list(kind)}  # fmt: skip
    assert after == before, "a refused request wrote to the DPF API"
    assert not await entity_exists(client, "host-002", since=began)
    api.close()


async def test_a_firmware_run_on_dpus_dpf_has_not_ends_before_its_power_cycle_naming_them(
    client: Client, sim: RunningSim, task_queue: str
) -> None:
    """Whoever asks (a script, a campaign): the run itself ends before it reboots anything, naming
    the DPUs, instead of power-cycling the host and waiting for DPUs that never come (before: an
    hour in `waiting-for-dpus`, here the policy's 60 s, then PhaseTimeout)."""
    request = FirmwareInput(
        host_id="host-002", target_version="32.45.1020", image_uri=FIRMWARE[3], requested_by="test",
        policy=FAST_POLICY,
    )  # fmt: skip
    workflow_id = f"firmware/host-002-{uuid.uuid4().hex[:6]}"
    async with worker_for(client, task_queue, sim):
        handle = await client.start_workflow(
            "FirmwareWorkflow", request, id=workflow_id, task_queue=task_queue, result_type=FirmwareResult
        )
        with pytest.raises(WorkflowFailureError) as failure:
            await asyncio.wait_for(handle.result(), timeout=30)
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "DPUsNotInDPF", cause
    assert cause.message.startswith(
        "DPF has no DPU object of host-002-dpu-0, host-002-dpu-1 of host host-002 (no DPUNode; DPUs: none)"
    ), cause.message
    assert "the host was not rebooted" in cause.message, cause.message
    assert sim.power_log("host-002") == [], "the host was power-cycled"
