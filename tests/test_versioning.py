"""Shipping new workflow code while runs are in flight (metalflow/runtime/versioning.py), on the real dev
server: a run started on old code finishes on new code behind `workflow.patched`; with worker
versioning a PINNED run stays on its build while an AUTO_UPGRADE one moves to the current one;
payload models read fields a newer worker added; the worker's versioning settings."""

from __future__ import annotations

import ast
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from host_operation_support import eventually
from pydantic import BaseModel
from sim_support import start_dev_server
from takeover_support import sticky_timeout
from temporalio import activity, workflow
from temporalio.api.enums.v1 import RoutingConfigUpdateState
from temporalio.api.workflowservice.v1 import (
    DescribeWorkerDeploymentRequest,
    SetWorkerDeploymentCurrentVersionRequest,
)
from temporalio.client import Client, WorkflowHandle
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.service import RPCError
from temporalio.worker import Replayer, Worker

import contracts.models.dpf
import contracts.models.host
import contracts.models.inventory
import contracts.models.redfish
import workflows
from contracts.models.host import OperationPolicy, OperationRequest
from drivers.settings import Settings
from metalflow.runtime import worker as metalflow_worker
from metalflow.runtime.versioning import (
    BEHAVIORS,
    BUILD_ID_ENV,
    DEPLOYMENT_NAME_ENV,
    LIVE_PATCHES,
    BehaviorStampingRunner,
    deployment_config_from_env,
    worker_versioning,
)

STEP_TIMEOUT = timedelta(seconds=30)
ROUTING_CONFIG_UPDATE_STATE_COMPLETED = RoutingConfigUpdateState.ROUTING_CONFIG_UPDATE_STATE_COMPLETED
RELEASE = "release"


@activity.defn(name="versioning_test_step")
async def step(name: str) -> str:
    return name


# -- one workflow, two versions: v2 inserts a step before the wait and one after it -------------


@workflow.defn(name="VersionedRunbook")
class RunbookV1:
    def __init__(self) -> None:
        self.released = False

    @workflow.signal(name=RELEASE)
    def release(self) -> None:
        self.released = True

    @workflow.run
    async def run(self) -> list[str]:
        done = [await workflow.execute_activity(step, "prepare", start_to_close_timeout=STEP_TIMEOUT)]
        await workflow.wait_condition(lambda: self.released)
        done.append(await workflow.execute_activity(step, "finish", start_to_close_timeout=STEP_TIMEOUT))
        return done


@workflow.defn(name="VersionedRunbook")
class RunbookV2:
    def __init__(self) -> None:
        self.released = False

    @workflow.signal(name=RELEASE)
    def release(self) -> None:
        self.released = True

    @workflow.run
    async def run(self) -> list[str]:
        done = []
        if workflow.patched("check-before-prepare"):
            done.append(await workflow.execute_activity(step, "check", start_to_close_timeout=STEP_TIMEOUT))
        done.append(await workflow.execute_activity(step, "prepare", start_to_close_timeout=STEP_TIMEOUT))
        await workflow.wait_condition(lambda: self.released)
        if workflow.patched("verify-before-finish"):
            done.append(await workflow.execute_activity(step, "verify", start_to_close_timeout=STEP_TIMEOUT))
        done.append(await workflow.execute_activity(step, "finish", start_to_close_timeout=STEP_TIMEOUT))
        return done


@workflow.defn(name="VersionedRunbook")
class RunbookV2Unpatched:
    """The same change made carelessly, without `workflow.patched`."""

    def __init__(self) -> None:
        self.released = False

    @workflow.signal(name=RELEASE)
    def release(self) -> None:
        self.released = True

    @workflow.run
    async def run(self) -> list[str]:
        done = [await workflow.execute_activity(step, "check", start_to_close_timeout=STEP_TIMEOUT)]
        done.append(await workflow.execute_activity(step, "prepare", start_to_close_timeout=STEP_TIMEOUT))
        await workflow.wait_condition(lambda: self.released)
        done.append(await workflow.execute_activity(step, "finish", start_to_close_timeout=STEP_TIMEOUT))
        return done


async def _prepared(handle: WorkflowHandle[Any, Any]) -> bool:
    history = await handle.fetch_history()
    return sum(1 for e in history.events if e.HasField("activity_task_completed_event_attributes")) >= 1


async def test_a_run_started_on_old_code_finishes_on_new_code_behind_patches(
    client: Client, task_queue: str
) -> None:
    run_id = f"runbook-{uuid.uuid4()}"
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[RunbookV1],
        activities=[step],
        sticky_queue_schedule_to_start_timeout=sticky_timeout(),
    ):
        handle = await client.start_workflow(RunbookV1.run, id=run_id, task_queue=task_queue)
        await eventually(lambda: _prepared(handle), timeout=60, what="v1 to complete its first step")
    # The v1 worker is gone; the run waits in the middle. v2 replays its start, then carries on.
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[RunbookV2],
        activities=[step],
        sticky_queue_schedule_to_start_timeout=sticky_timeout(),
    ):
        await handle.signal(RELEASE)
        assert await handle.result() == ["prepare", "verify", "finish"]
        fresh = await client.start_workflow(RunbookV2.run, id=f"{run_id}-fresh", task_queue=task_queue)
        await fresh.signal(RELEASE)
        assert await fresh.result() == ["check", "prepare", "verify", "finish"]

    # The history of the mixed run replays on v2, and would not on the unpatched change: that is
    # what the patch bought, and what tests/test_replay.py catches for the real workflows.
    history = await handle.fetch_history()
    patched = await Replayer(workflows=[RunbookV2]).replay_workflow(history, raise_on_replay_failure=False)
    assert patched.replay_failure is None
    careless = await Replayer(workflows=[RunbookV2Unpatched]).replay_workflow(
        history, raise_on_replay_failure=False
    )
    assert careless.replay_failure is not None
    assert "nondeterminism" in str(careless.replay_failure).lower()


# -- worker versioning: a pinned operation and an auto-upgrading entity across two builds --------


class _Released:
    def __init__(self) -> None:
        self.released = False

    @workflow.signal(name=RELEASE)
    def release(self) -> None:
        self.released = True


@workflow.defn(name="VersionedOperation")
class OperationV1(_Released):
    @workflow.run
    async def run(self) -> str:
        await workflow.wait_condition(lambda: self.released)
        return "v1"


@workflow.defn(name="VersionedOperation")
class OperationV2(_Released):
    @workflow.run
    async def run(self) -> str:
        await workflow.wait_condition(lambda: self.released)
        return "v2"


@workflow.defn(name="VersionedEntity")
class EntityV1(_Released):
    @workflow.run
    async def run(self) -> str:
        await workflow.wait_condition(lambda: self.released)
        return "v1"


@workflow.defn(name="VersionedEntity")
class EntityV2(_Released):
    @workflow.run
    async def run(self) -> str:
        await workflow.wait_condition(lambda: self.released)
        return "v2"


BUILDS: dict[str, list[type]] = {"v1": [OperationV1, EntityV1], "v2": [OperationV2, EntityV2]}
TEST_BEHAVIORS = {
    "VersionedOperation": VersioningBehavior.PINNED,
    "VersionedEntity": VersioningBehavior.AUTO_UPGRADE,
}


def _versioned_worker(client: Client, task_queue: str, version: WorkerDeploymentVersion) -> Worker:
    """A worker of one build, versioned the way metalflow.runtime.worker versions the real one."""
    config = deployment_config_from_env(
        {DEPLOYMENT_NAME_ENV: version.deployment_name, BUILD_ID_ENV: version.build_id}
    )
    return Worker(
        client,
        task_queue=task_queue,
        workflows=BUILDS[version.build_id],
        **worker_versioning(config, behaviors=TEST_BEHAVIORS),
        sticky_queue_schedule_to_start_timeout=sticky_timeout(),
    )


async def _describe(client: Client, deployment_name: str) -> Any:
    return await client.workflow_service.describe_worker_deployment(
        DescribeWorkerDeploymentRequest(namespace=client.namespace, deployment_name=deployment_name)
    )


async def _make_current(client: Client, version: WorkerDeploymentVersion) -> None:
    """Make `version` current once the server has seen its pollers, and wait until every task
    queue knows (what an operator does with `temporal worker deployment set-current-version`,
    then `describe`): until then the matching service may still route to the old current."""

    async def polled() -> bool:
        try:
            info = (await _describe(client, version.deployment_name)).worker_deployment_info
        except RPCError:
            return False  # the deployment is created when its first poller arrives
        return any(v.deployment_version.build_id == version.build_id for v in info.version_summaries)

    seen: list[Any] = []

    async def propagated() -> bool:
        info = (await _describe(client, version.deployment_name)).worker_deployment_info
        seen[:] = [info.routing_config, info.routing_config_update_state]
        return (
            info.routing_config.current_deployment_version.build_id == version.build_id
            and info.routing_config_update_state == ROUTING_CONFIG_UPDATE_STATE_COMPLETED
        )

    name = version.to_canonical_string()
    await eventually(polled, timeout=60, what=f"the server to see pollers of {name}")
    await client.workflow_service.set_worker_deployment_current_version(
        SetWorkerDeploymentCurrentVersionRequest(
            namespace=client.namespace,
            deployment_name=version.deployment_name,
            build_id=version.build_id,
            identity="test_versioning",
        )
    )
    try:
        # 200 s, not 120: a full run (5 workers, load ~10 with other jobs) saw the server take
        # longer, once in ~10 runs: current already v2 (revision 2) but the update state still
        # IN_PROGRESS at 120 s. The server propagates a routing change to the task queues
        # asynchronously (its own deployment workflows); nothing the test does can speed that.
        await eventually(propagated, timeout=200, what=f"{name} to be current on every task queue")
    except AssertionError as err:
        raise AssertionError(f"{err}; last routing config and update state: {seen}") from None


async def _versioning(handle: WorkflowHandle[Any, Any]) -> tuple[int, str]:
    info = (await handle.describe()).raw_description.workflow_execution_info.versioning_info
    return info.behavior, info.deployment_version.build_id


@pytest.fixture
async def own_client(lifeline_bin: Path) -> AsyncIterator[Client]:
    """A dev server of this test's own. On the session's server, late in a full run (the 5-worker
    runs put this module at 99%, after ~1,800 tests), the routing change to v2 stayed
    IN_PROGRESS past 120 s twice, though current was v2 at once: the server propagates it through
    its own system workflows, which by then share the server with everything the session left
    (every test's task queues and runs). Earlier in the run (35%) it took 3-4 s in ten runs. A
    fresh server costs ~2 s and makes the wait the test's alone."""
    env = await start_dev_server(lifeline_bin)
    try:
        yield env.client
    finally:
        await env.shutdown()


async def test_pinned_run_stays_on_its_build_while_auto_upgrade_moves(
    own_client: Client, task_queue: str
) -> None:
    client = own_client
    deployment = f"metalflow-test-{uuid.uuid4().hex[:12]}"
    v1 = WorkerDeploymentVersion(deployment_name=deployment, build_id="v1")
    v2 = WorkerDeploymentVersion(deployment_name=deployment, build_id="v2")
    async with _versioned_worker(client, task_queue, v1):
        await _make_current(client, v1)
        operation = await client.start_workflow(
            "VersionedOperation", id=f"op-{deployment}", task_queue=task_queue
        )
        entity = await client.start_workflow(
            "VersionedEntity", id=f"entity-{deployment}", task_queue=task_queue
        )

        async def both_on_v1() -> bool:
            return [await _versioning(operation), await _versioning(entity)] == [
                (VersioningBehavior.PINNED.value, "v1"),
                (VersioningBehavior.AUTO_UPGRADE.value, "v1"),
            ]

        await eventually(both_on_v1, timeout=60, what="both runs to take their first task on v1")
        async with _versioned_worker(client, task_queue, v2):
            await _make_current(client, v2)
            await operation.signal(RELEASE)
            await entity.signal(RELEASE)
            assert await operation.result() == "v1", (
                "a pinned operation must end on the build that started it"
            )
            assert await entity.result() == "v2", "an auto-upgrade entity must move to the current build"
            fresh = await client.start_workflow(
                "VersionedOperation", id=f"op2-{deployment}", task_queue=task_queue
            )
            await fresh.signal(RELEASE)
            assert await fresh.result() == "v2", "a new operation starts on the current build"


# -- every workflow declares its behaviour; the worker's settings ------------------------------


def test_every_registered_workflow_has_a_behaviour_and_declares_none_itself() -> None:
    definitions = [workflow._Definition.must_from_class(cls) for cls in workflows.ALL]
    assert {str(defn.name) for defn in definitions} == set(BEHAVIORS)
    assert {BEHAVIORS[name] for name in ("HostWorkflow", "HostMonitorWorkflow")} == {
        VersioningBehavior.AUTO_UPGRADE
    }
    # A behaviour in @workflow.defn would make every unversioned worker's task completions fail.
    assert [d.name for d in definitions if d.versioning_behavior] == []


def _patch_ids(source: str) -> set[str]:
    """The patch ids a module's `workflow.patched(...)` and `workflow.deprecate_patch(...)` name,
    literally or through a module-level constant."""
    tree = ast.parse(source)
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Constant)
        for target in ([node.target] if isinstance(node, ast.AnnAssign) else node.targets)
        if isinstance(target, ast.Name) and isinstance(node.value.value, str)
    }
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("patched", "deprecate_patch") and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant):
                    found.add(str(arg.value))
                elif isinstance(arg, ast.Name):
                    found.add(constants.get(arg.id, f"<unresolved {arg.id}>"))
                else:
                    found.add(f"<unresolved {ast.unparse(arg)}>")
    return found


def test_patches_follow_the_versioning_policy() -> None:
    """docs/VERSIONING.md: a patch only guards a released, auto-upgrading workflow, and each is
    listed in LIVE_PATCHES. Pinned workflows and code never released carry none."""
    root = Path(__file__).resolve().parent.parent / "workflows"
    used = {path.name: _patch_ids(path.read_text()) for path in sorted(root.glob("*.py"))}
    assert set().union(*used.values()) == set(LIVE_PATCHES), used
    pinned = {name for name, behavior in BEHAVIORS.items() if behavior == VersioningBehavior.PINNED}
    for cls in workflows.ALL:
        name = str(workflow._Definition.must_from_class(cls).name)
        module = Path(sys.modules[cls.__module__].__file__ or "").name
        if name in pinned:
            assert not used.get(module), f"{name} runs PINNED: its patches {used[module]} guard nothing"


def test_the_policy_check_sees_a_patch() -> None:
    """The check above can fail: a module with a patch the list does not hold is found."""
    source = 'from temporalio import workflow\nX = "new-step"\nif workflow.patched(X):\n    pass\n'
    assert _patch_ids(source) == {"new-step"}
    assert _patch_ids(source) - set(LIVE_PATCHES) == {"new-step"}


async def test_the_real_worker_is_versioned_only_when_configured(client: Client, task_queue: str) -> None:
    plain = metalflow_worker.build_worker(client, task_queue, Settings())
    assert plain.config().get("deployment_config") is None
    config = deployment_config_from_env({DEPLOYMENT_NAME_ENV: "metalflow", BUILD_ID_ENV: "b1"})
    versioned = metalflow_worker.build_worker(client, task_queue, Settings(), config)
    assert versioned.config().get("deployment_config") == config
    assert isinstance(versioned.config().get("workflow_runner"), BehaviorStampingRunner)


def test_deployment_settings_from_the_environment() -> None:
    assert deployment_config_from_env({}) is None
    config = deployment_config_from_env({DEPLOYMENT_NAME_ENV: "metalflow", BUILD_ID_ENV: "2026.11.22-abc123"})
    assert config is not None and config.use_worker_versioning
    assert config.version.to_canonical_string() == "metalflow.2026.11.22-abc123"
    for env, words in (
        ({BUILD_ID_ENV: "b1"}, f"{BUILD_ID_ENV} is set but {DEPLOYMENT_NAME_ENV} is not"),
        ({DEPLOYMENT_NAME_ENV: "metalflow"}, f"{DEPLOYMENT_NAME_ENV} is set but {BUILD_ID_ENV} is not"),
        ({DEPLOYMENT_NAME_ENV: "meta.flow", BUILD_ID_ENV: "b1"}, "is not a deployment name"),
        ({DEPLOYMENT_NAME_ENV: "metalflow", BUILD_ID_ENV: "b\x1b[31m"}, "is not a build id"),
        ({DEPLOYMENT_NAME_ENV: "metalflow", BUILD_ID_ENV: "b" * 101}, "is not a build id"),
    ):
        with pytest.raises(ValueError, match=words.replace(".", r"\.")):
            deployment_config_from_env(env)


def test_worker_refuses_half_a_versioning_setting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(BUILD_ID_ENV, "b1")
    monkeypatch.delenv(DEPLOYMENT_NAME_ENV, raising=False)
    monkeypatch.setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")  # never reached: the setting stops it first
    assert metalflow_worker.main([]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"worker: configuration error: {BUILD_ID_ENV} is set but {DEPLOYMENT_NAME_ENV} is not: "
        "set both for worker versioning, or neither"
    ]


# -- payloads written by a newer worker ----------------------------------------------------------


def _payload_models() -> list[type[BaseModel]]:
    modules = (contracts.models.dpf, contracts.models.host,
               contracts.models.inventory, contracts.models.redfish)  # fmt: skip
    return [
        cls
        for module in modules
        for cls in vars(module).values()
        if isinstance(cls, type) and issubclass(cls, BaseModel) and cls.__module__ == module.__name__
    ]


def test_no_payload_model_forbids_fields_a_newer_worker_adds() -> None:
    models = _payload_models()
    assert len(models) > 30, "the scan found too few models: it is broken"
    strict = [cls.__qualname__ for cls in models if cls.model_config.get("extra") == "forbid"]
    assert strict == []


def test_an_older_worker_reads_a_request_with_a_newer_field() -> None:
    written_by_newer = {
        "requested_by": "ops@site",
        "reason": "firmware 32.45",
        "policy": {"power_down_wait_seconds": 30, "added_in_a_later_release": {"x": 1}},
        "also_new": True,
    }
    request = OperationRequest.model_validate(written_by_newer)
    assert request.requested_by == "ops@site"
    assert request.policy == OperationPolicy(power_down_wait_seconds=30)
