"""Shipping a new version of a workflow while runs of the old one are in flight.

The policy is docs/VERSIONING.md; this module is its code. Host operations take minutes to hours
and campaigns days, so a deploy always finds work in flight. Three mechanisms keep it safe:

1. **Replay tests** (`tests/test_replay.py`): the histories in `tests/histories/`, recorded from
   the released code (0.1.0 is the first release), are replayed against today's code in CI, so a
   change that would make a running workflow non-deterministic fails before it ships.
2. **`workflow.patched("<why>")`**, only around a change of the command sequence of a RELEASED
   workflow that runs AUTO_UPGRADE (below): its open runs move to the new code at their next
   task. Pinned workflows finish on the build that started them and need none; code never
   released needs none. Every live patch is listed in `LIVE_PATCHES` (tests/test_versioning.py
   checks the list against the code), is retired with `workflow.deprecate_patch` once no run
   older than it can be open, and is removed a release later. Payload models accept fields a
   newer worker added (pydantic's default `extra="ignore"`), so an older worker of a mixed
   fleet, or a rollback, can read what a newer one wrote.
3. **Worker versioning** (Temporal Worker Deployments), when `METALFLOW_DEPLOYMENT_NAME` and
   `METALFLOW_BUILD_ID` are set for the worker: each worker polls as version
   `<deployment>.<build id>`, and an operator makes a version current (`temporal worker
   deployment set-current-version --deployment-name D --build-id B`) once its workers poll.
   Each workflow type moves between builds as `BEHAVIORS` says:

   - `PINNED`: the host operations, i.e. provision/reprovision (`HostOperationWorkflow`),
     `HostRebootWorkflow`, `HostResetWorkflow`, `FirmwareWorkflow`, `HostRemovalWorkflow`, and Grove rollouts
     (`RolloutWorkflow`). A run
     finishes on the build that started it, so a reboot sequence is never taken over by code
     that might cycle power differently; the old build's workers keep running until its pinned
     runs drain (`temporal worker deployment describe-version` shows the drainage status).
   - `AUTO_UPGRADE`: the long-lived entities and monitors (`HostWorkflow`,
     `HostMonitorWorkflow`, the BMC lease, the site watch, campaigns), which never finish (or run
     for days) and would otherwise keep an old build alive forever. Their next workflow task runs
     on the current version, so every released change to them must replay old histories: that is
     what (1) and (2) guarantee.

   A workflow type missing from `BEHAVIORS` is pinned (the safe default).

   Without those variables the worker is unversioned (the dev stack, `make demo`, the tests),
   and (1) and (2) alone carry every change.

Why the behaviours live here and not in `@workflow.defn(versioning_behavior=...)`: the SDK
(temporalio 1.35) sends a declared behaviour with every workflow task completion, also from an
unversioned worker, and the server (1.32) rejects those completions ("versioning behavior cannot
be specified without deployment options being set with versioned mode"): every unversioned
worker, `make demo` and each test's `Worker(...)`, would retry its workflow tasks forever. So
only a versioned worker stamps the behaviour, through `BehaviorStampingRunner`.

Cost per host: none. Versioning is per worker (one deployment version registered per build,
one poller set per task queue); the behaviour is one enum field in workflow task completions
that are sent anyway, and adds no history events, activities, watches or measurable CPU.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import temporalio.workflow
from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.converter import SerializationContext
from temporalio.worker import (
    WorkerDeploymentConfig,
    WorkflowInstance,
    WorkflowInstanceDetails,
    WorkflowRunner,
)
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

DEPLOYMENT_NAME_ENV: Final = "METALFLOW_DEPLOYMENT_NAME"
BUILD_ID_ENV: Final = "METALFLOW_BUILD_ID"

BEHAVIORS: Final[Mapping[str, VersioningBehavior]] = {
    # Host operations: a run ends on the build that started it.
    "HostOperationWorkflow": VersioningBehavior.PINNED,
    "HostRebootWorkflow": VersioningBehavior.PINNED,
    "FirmwareWorkflow": VersioningBehavior.PINNED,
    "HostRemovalWorkflow": VersioningBehavior.PINNED,
    # A reset sequence turns a host off and DPUs over: it ends on the build that began it.
    "HostResetWorkflow": VersioningBehavior.PINNED,
    # A rollout plans every step from what its build knows of Grove; it ends within hours, so it
    # may keep its build alive that long (a supersede starts the new code's rollout instead).
    "RolloutWorkflow": VersioningBehavior.PINNED,
    # Long-lived entities and monitors: the next task runs on the current version.
    "HostWorkflow": VersioningBehavior.AUTO_UPGRADE,
    "HostMonitorWorkflow": VersioningBehavior.AUTO_UPGRADE,
    # A BMC's lease serves every build's reboots; its state carries over continue-as-new.
    "BMCLeaseWorkflow": VersioningBehavior.AUTO_UPGRADE,
    # A site's one DPF watch never finishes and serves every build's operations.
    "SiteDPFWatchWorkflow": VersioningBehavior.AUTO_UPGRADE,
    # A campaign runs for days and continues-as-new: pinning would keep a build alive that long;
    # it replays old histories like the entities do (tests/test_replay.py).
    "CampaignWorkflow": VersioningBehavior.AUTO_UPGRADE,
    # The registry of campaign claims never finishes and serves every build's campaigns.
    "CampaignClaimsWorkflow": VersioningBehavior.AUTO_UPGRADE,
}
"""How each workflow type moves between builds on a versioned worker (tests/test_versioning.py
checks that every registered workflow is listed)."""

LIVE_PATCHES: Final[Mapping[str, str]] = {}
"""Every `workflow.patched` id in workflows/, with the released version whose open runs it
guards. Empty: no change to an auto-upgrading workflow has shipped since 0.1.0."""

# The server joins the two as `<deployment>.<build id>`, so a '.' in the deployment name would
# make the version ambiguous; both stay short and printable because they show in the UI and CLI.
_DEPLOYMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")
_BUILD_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")


def deployment_config_from_env(env: Mapping[str, str] | None = None) -> WorkerDeploymentConfig | None:
    """The worker's deployment version from `METALFLOW_DEPLOYMENT_NAME` and `METALFLOW_BUILD_ID`.

    Args:
        env: The environment to read (default: the process environment).

    Returns:
        A config that turns worker versioning on, or None (unversioned) when neither is set.

    Raises:
        ValueError: Only one of the two is set, or one is not a valid name.
    """
    env = os.environ if env is None else env
    name = env.get(DEPLOYMENT_NAME_ENV, "")
    build_id = env.get(BUILD_ID_ENV, "")
    if not name and not build_id:
        return None
    if not name or not build_id:
        given, missing = (DEPLOYMENT_NAME_ENV, BUILD_ID_ENV) if name else (BUILD_ID_ENV, DEPLOYMENT_NAME_ENV)
        raise ValueError(f"{given} is set but {missing} is not: set both for worker versioning, or neither")
    if not _DEPLOYMENT_NAME.fullmatch(name):
        raise ValueError(
            f"{DEPLOYMENT_NAME_ENV}={name!r} is not a deployment name: letters, digits, '_' and '-' "
            "(no '.'), at most 100"
        )
    if not _BUILD_ID.fullmatch(build_id):
        raise ValueError(
            f"{BUILD_ID_ENV}={build_id!r} is not a build id: letters, digits, '.', '_', '+' and '-', "
            "at most 100"
        )
    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(deployment_name=name, build_id=build_id),
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.PINNED,  # a type missing from BEHAVIORS
    )


def describe(config: WorkerDeploymentConfig | None) -> str:
    """The worker's versioning in words, for its start-up log line."""
    if config is None:
        return f"unversioned (set {DEPLOYMENT_NAME_ENV} and {BUILD_ID_ENV} for worker versioning)"
    return f"deployment version {config.version.to_canonical_string()}"


def worker_versioning(
    config: WorkerDeploymentConfig | None,
    behaviors: Mapping[str, VersioningBehavior] = BEHAVIORS,
    runner: WorkflowRunner | None = None,
) -> dict[str, Any]:
    """The `Worker(...)` arguments that version a worker, or none for an unversioned one.

    Args:
        config: From `deployment_config_from_env`; None: unversioned.
        behaviors: The behaviour of each workflow type (default: metalflow's).
        runner: The workflow runner to wrap (default: the SDK's sandbox).
    """
    if config is None:
        return {}
    return {
        "deployment_config": config,
        "workflow_runner": BehaviorStampingRunner(runner or SandboxedWorkflowRunner(), behaviors),
    }


class BehaviorStampingRunner(WorkflowRunner):
    """Runs workflows with `inner` and stamps each successful workflow task completion with the
    versioning behaviour of its workflow type (unless the workflow declared one itself)."""

    def __init__(self, inner: WorkflowRunner, behaviors: Mapping[str, VersioningBehavior]) -> None:
        self._inner = inner
        self._behaviors = dict(behaviors)

    def prepare_workflow(self, defn: temporalio.workflow._Definition) -> None:
        self._inner.prepare_workflow(defn)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        instance = self._inner.create_instance(det)
        behavior = self._behaviors.get(det.defn.name or "", VersioningBehavior.UNSPECIFIED)
        if behavior == VersioningBehavior.UNSPECIFIED:
            return instance  # the worker's default behaviour applies
        return _Stamped(instance, behavior)

    def set_worker_level_failure_exception_types(self, types: Sequence[type[BaseException]]) -> None:
        self._inner.set_worker_level_failure_exception_types(types)


class _Stamped(WorkflowInstance):
    def __init__(self, inner: WorkflowInstance, behavior: VersioningBehavior) -> None:
        self._inner = inner
        self._behavior = behavior

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        completion = self._inner.activate(act)
        if completion.HasField("successful") and not completion.successful.versioning_behavior:
            completion.successful.versioning_behavior = self._behavior.value
        return completion

    def get_serialization_context(self, command_info: Any) -> SerializationContext | None:
        return self._inner.get_serialization_context(command_info)

    def get_external_store_context(self, command_info: Any) -> Any:
        return self._inner.get_external_store_context(command_info)

    def get_info(self) -> temporalio.workflow.Info:
        return self._inner.get_info()

    def get_thread_id(self) -> int | None:
        return self._inner.get_thread_id()
