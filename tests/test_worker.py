"""worker.py and metalflow.client: one registration list, a connection from the environment, clean
exits, tracing. (Their configuration without a server: tests/fast/test_worker_config.py.)"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.testing import WorkflowEnvironment

import activities
import workflows
from contracts import names
from contracts.models.host import HostOperationInput, HostOperationKind
from metalflow.client import connect
from metalflow.devstack.temporal import has_poller

REPO = Path(__file__).resolve().parent.parent


def _modules(package: ModuleType) -> list[ModuleType]:
    # Every .py file, so a module in a folder that lacks __init__.py cannot hide an unregistered class.
    root = Path(package.__path__[0])
    dotted = [
        ".".join((package.__name__, *path.relative_to(root).with_suffix("").parts))
        for path in sorted(root.rglob("*.py"))
        if path.name != "__init__.py"
    ]
    return [importlib.import_module(name) for name in dotted]


def test_every_workflow_is_registered() -> None:
    defined = {
        obj
        for module in _modules(workflows)
        for _, obj in inspect.getmembers(module, inspect.isclass)
        if getattr(obj, "__temporal_workflow_definition", None) is not None
        and obj.__module__ == module.__name__
    }
    assert defined, "no workflow found: the scan is broken"
    assert defined == set(workflows.ALL)


async def test_every_activity_is_registered(client: Client) -> None:
    # By the function's own qualname: an activity a mixin defines (CampaignSelection's, which
    # CampaignActivities inherits) is the one function, registered once, under the mixin's name.
    defined = {
        member.__qualname__
        for module in _modules(activities)
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if cls.__module__ == module.__name__
        for _, member in inspect.getmembers(cls, inspect.isfunction)
        if getattr(member, "__temporal_activity_definition", None) is not None
    }
    # As the worker builds them: with a client, so the activities that signal workflows count too.
    registered = {method.__qualname__ for method in activities.build_activities(temporal_client=client)}
    assert defined, "no activity found: the scan is broken"
    assert defined == registered


async def test_connect_reaches_the_server_named_by_the_environment(local_env: WorkflowEnvironment) -> None:
    address = local_env.client.service_client.config.target_host
    client = await connect(env={"TEMPORAL_ADDRESS": address, "TEMPORAL_NAMESPACE": "default"})
    assert client.namespace == "default"
    assert await client.service_client.check_health()


async def _wait_for_poller(client: Client, task_queue: str, worker: asyncio.subprocess.Process) -> None:
    for _ in range(150):
        if worker.returncode is not None:
            raise AssertionError(f"worker exited early with {worker.returncode}")
        if await has_poller(client, task_queue, f"{worker.pid}@"):
            return
        await asyncio.sleep(0.2)
    raise AssertionError("worker never polled its task queue")


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
async def test_worker_script_runs_workflows_traces_them_and_exits_cleanly(
    local_env: WorkflowEnvironment, task_queue: str, stop_signal: signal.Signals, tmp_path: Path
) -> None:
    client = local_env.client
    site_file = tmp_path / "site.yaml"
    site_file.write_text("name: empty\nhosts: []\n")
    env = {key: value for key, value in os.environ.items() if not key.startswith(("TEMPORAL_", "OTEL_"))}
    # The worker refuses to start without a kubeconfig and a valid site file; this one needs neither
    # to reach anything (the demo workflow's activity only describes the worker).
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    (tmp_path / "site.yaml").write_text("name: empty\nhosts: []\n")
    env |= {
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": client.namespace,
        "OTEL_TRACES_EXPORTER": "console",
        "KUBECONFIG": str(kubeconfig),
        "METALFLOW_SITE_FILE": str(site_file),
        "METALFLOW_INVENTORY": "site",
    }
    # Started here, not with worker_support.worker_process: this test is about the script itself as
    # a user runs it (no lifeline argument), its exit status on SIGTERM and SIGINT, and what it
    # writes to stderr apart from stdout.
    worker = await asyncio.create_subprocess_exec(
        sys.executable,
        "worker.py",
        "--task-queue",
        task_queue,
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await _wait_for_poller(client, task_queue, worker)
        # A host the site does not know: the worker's inventory activity must say so, which
        # only a worker that read this test's site file can.
        handle = await client.start_workflow(
            "HostOperationWorkflow",
            HostOperationInput(host_id="host-404", kind=HostOperationKind.PROVISION, requested_by="test"),
            id=names.host_operation_workflow_id(names.PROVISION, f"host-404-{task_queue[-8:]}"),
            task_queue=task_queue,
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        cause = failed.value.cause  # the activity's error, in words (issue 40)
        assert isinstance(cause, ApplicationError) and cause.type == "InvalidInput"
        assert isinstance(cause.cause, ActivityError)
        assert "host-404" in cause.message and str(site_file) in cause.message
        worker.send_signal(stop_signal)
        stdout, stderr = await asyncio.wait_for(worker.communicate(), timeout=30)
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()
    log = stderr.decode()
    assert worker.returncode == 0, log
    assert "worker stopped" in log
    assert '"name": "RunActivity:resolve_host_inventory"' in log  # console exporter spans
    assert "PyGILState_Release" not in log


def test_worker_reports_bad_configuration_with_status_2() -> None:
    env = dict(os.environ, OTEL_TRACES_EXPORTER="nonsense")
    # The script's own exit status and stderr on a bad setting: run as a user runs it.
    completed = subprocess.run(
        [sys.executable, "worker.py"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert completed.returncode == 2
    assert "OTEL_TRACES_EXPORTER 'nonsense'" in completed.stderr
