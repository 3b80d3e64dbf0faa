"""Support for the tests of the Redfish side: the workflow that runs the real `power_cycle_host`
once, as a host workflow would, and waits on its progress; and clients of in-process simulated
BMCs (`simulators.redfish.standalone.serve_bmcs`).

`CyclePower` runs in the test's own worker; `CycleOptions` are the activity's timeouts and
retries each test chooses, and its task queue: a crash test's `crash_options(activity_queue)`
sends it to a `worker_support.power_worker` process, the one the test SIGKILLs mid-cycle.

In-process BMCs hand out one account per BMC: `credentials_env` names them in variables
(`U_<bmc>`, `P_<bmc>`) for a `CredentialResolver(env=...)`, `env_access` is a `BMCAccess` that
refers to them, `basic_client` talks to a BMC as an observer would (basic auth).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict
from takeover_support import sticky_timeout
from temporalio import workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.redfish import power_activities
from activities.redfish.power import PowerActivities
from contracts.models.inventory import BMCAccess, CredentialRef, EnvCredentials
from contracts.models.redfish import PowerCycleInput, PowerCycleResult
from drivers.redfish.client import RedfishClient
from simulators.redfish.standalone import RunningBMCs


class CycleOptions(BaseModel):
    """How `CyclePower` calls `power_cycle_host` (the retry defaults are Temporal's)."""

    model_config = ConfigDict(frozen=True)

    heartbeat: timedelta
    start_to_close: timedelta = timedelta(minutes=2)
    retry_initial: timedelta = timedelta(seconds=1)
    retry_maximum: timedelta | None = None  # 100 x the initial interval
    maximum_attempts: int = 0  # unlimited
    task_queue: str | None = None  # the workflow's own


def crash_options(activity_queue: str) -> CycleOptions:
    """The crash tests': the activity on the power worker's queue, its attempt retried within
    seconds of the worker's death (a 2 s heartbeat timeout, retries at most a second apart)."""
    return CycleOptions(
        heartbeat=timedelta(seconds=2),
        start_to_close=timedelta(minutes=5),
        retry_initial=timedelta(milliseconds=200),
        retry_maximum=timedelta(seconds=1),
        task_queue=activity_queue,
    )


@workflow.defn(sandboxed=False)
class CyclePower:
    """Runs `power_cycle_host` once, as a host workflow would, with the test's options."""

    @workflow.run
    async def run(self, request: PowerCycleInput, options: CycleOptions) -> PowerCycleResult:
        result: PowerCycleResult = await workflow.execute_activity(
            "power_cycle_host",
            request,
            result_type=PowerCycleResult,
            task_queue=options.task_queue,
            start_to_close_timeout=options.start_to_close,
            heartbeat_timeout=options.heartbeat,
            retry_policy=RetryPolicy(
                initial_interval=options.retry_initial,
                maximum_interval=options.retry_maximum,
                maximum_attempts=options.maximum_attempts,
            ),
        )
        return result


def cycle_worker(
    client: Client, task_queue: str, redfish: RedfishClient | None = None, **options: Any
) -> Worker:
    """A worker of `CyclePower`, and of the real power activities over `redfish` when given (else
    another worker serves them: `crash_options`); unsandboxed, as the workflow is defined here.
    `options` go to `Worker`."""
    activities = power_activities(PowerActivities(redfish)) if redfish is not None else []
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[CyclePower],
        activities=activities,
        workflow_runner=UnsandboxedWorkflowRunner(),
        **options,
        sticky_queue_schedule_to_start_timeout=sticky_timeout(),
    )


async def first_activity_started(handle: Any) -> bool:
    """Whether the workflow's (first) pending activity has been started by a worker."""
    description = await handle.describe()
    pending = description.raw_description.pending_activities
    return bool(pending) and pending[0].state == 2  # PENDING_ACTIVITY_STATE_STARTED


async def wait_for(check: Callable[[], Any], timeout: float) -> None:
    """Await `check()` every 20 ms until it is true; fail after `timeout` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("the expected step was not reached in time")
        await asyncio.sleep(0.02)


def credentials_env(bmcs: RunningBMCs) -> dict[str, str]:
    """Each BMC's account as the variables `U_<bmc>` and `P_<bmc>` (`env_access` refers to them)."""
    env: dict[str, str] = {}
    for bmc_id, (username, password) in bmcs.credentials.items():
        env[f"U_{bmc_id}"], env[f"P_{bmc_id}"] = username, password
    return env


def env_access(bmcs: RunningBMCs, bmc_id: str, /, **changes: Any) -> BMCAccess:
    """How to reach the BMC: its address, its account in `credentials_env`'s variables, its CA for
    a TLS BMC; `changes` replace fields (a wrong `endpoint`, another `bmc_id`)."""
    ref = CredentialRef(env=EnvCredentials(username=f"U_{bmc_id}", password=f"P_{bmc_id}"))
    fields: dict[str, Any] = {"bmc_id": bmc_id, "endpoint": bmcs.base(bmc_id), "credentials": ref}
    if bmcs.bmcs.service_of(bmc_id).tls:
        fields["ca_bundle"] = str(bmcs.bmcs.ca_path)
    return BMCAccess(**{**fields, **changes})


def basic_client(bmcs: RunningBMCs, bmc_id: str) -> httpx.AsyncClient:
    """An HTTP client of the BMC with its account (basic auth), as an observer reads it."""
    return httpx.AsyncClient(base_url=bmcs.base(bmc_id), auth=bmcs.credentials[bmc_id], timeout=10)


async def reset_the_host(bmcs: RunningBMCs, reset_types: tuple[str, ...]) -> None:
    """Send each reset to host-001's System (`default_site`'s first host, a `powercycle` BMC), the
    next once the host's power settled On or Off."""
    async with httpx.AsyncClient(auth=bmcs.credentials["host-001"], timeout=10) as client:
        uri = bmcs.base("host-001") + "/redfish/v1/Systems/System.Embedded.1"
        for reset_type in reset_types:
            response = await client.post(
                f"{uri}/Actions/ComputerSystem.Reset", json={"ResetType": reset_type}
            )
            assert response.status_code == 204
            for _ in range(100):
                if bmcs.bmcs.power_state("host-001") in ("On", "Off"):
                    break
                await asyncio.sleep(0.02)
