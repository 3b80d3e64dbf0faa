"""Shared helpers of the host workflow tests: start an operation, wait on conditions with
deadlines, count power cycles in the simulator's BMC log, save histories for the replay test, run
the product's worker in this process, and power cycle a host by hand (not through metalflow)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx
from sim_support import RunningSim, tls_context
from takeover_support import takeover_seconds
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle

from contracts import names
from contracts.models.control import STATUS_QUERY
from contracts.models.host import (
    HostOperationInput,
    HostOperationKind,
    HostOperationResult,
    HostOperationStatus,
    HostRebootInput,
    HostRebootResult,
    OperationPolicy,
)
from drivers.settings import Settings
from metalflow.runtime.worker import build_worker

HISTORIES = Path(__file__).parent / "histories"
RECORD_ENV = "METALFLOW_RECORD_HISTORIES"

FAST_POLICY = OperationPolicy(power_down_wait_seconds=0, reboot_wait_seconds=120, phase_timeout_seconds=300)


T = TypeVar("T")


async def start_operation(
    client: Client,
    task_queue: str,
    host_id: str,
    kind: HostOperationKind,
    *,
    dpu_ids: tuple[str, ...] | None = None,
    policy: OperationPolicy = FAST_POLICY,
    boot_generation: int = 0,
    id_suffix: str = "",
) -> WorkflowHandle[Any, HostOperationResult]:
    """Start a HostOperationWorkflow the way the host entity does (id, static summary)."""
    workflow_id = names.host_operation_workflow_id(kind.value, host_id) + id_suffix
    return await client.start_workflow(
        "HostOperationWorkflow",
        HostOperationInput(
            host_id=host_id,
            kind=kind,
            dpu_ids=dpu_ids,
            requested_by="pytest",
            reason="test",
            boot_generation=boot_generation,
            policy=policy,
        ),
        id=workflow_id,
        task_queue=task_queue,
        result_type=HostOperationResult,
        static_summary=f"{kind.value} {host_id} for pytest",
    )


async def start_reboot(
    client: Client, task_queue: str, host: str, generation: int = 1, policy: OperationPolicy = FAST_POLICY
) -> WorkflowHandle[object, HostRebootResult]:
    """The host's reboot to `generation`, its id suffixed with the task queue: the session's server
    is shared, and another test may reboot a host of the same name."""
    return await client.start_workflow(
        "HostRebootWorkflow",
        HostRebootInput(host_id=host, boot_generation=generation, requested_by="test", policy=policy),
        id=f"{names.host_reboot_workflow_id(host, generation)}-{task_queue}",
        task_queue=task_queue,
        result_type=HostRebootResult,
    )


async def status_of(handle: WorkflowHandle[Any, Any]) -> HostOperationStatus:
    result: HostOperationStatus = await handle.query(STATUS_QUERY, result_type=HostOperationStatus)
    return result


async def eventually(
    check: Callable[[], Awaitable[bool]], *, timeout: float = 60, what: str = "the condition"
) -> None:
    """Poll `check` until true; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if await check():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.1)


async def wait_for_query(
    query: Callable[[], Awaitable[T]], predicate: Callable[[T], bool], what: str, timeout: float
) -> T:
    """Poll `query` until its answer satisfies `predicate`; a timeout names the last answer."""
    seen: list[T] = []

    async def check() -> bool:
        seen.append(await query())
        return predicate(seen[-1])

    try:
        await eventually(check, timeout=timeout, what=what)
    except AssertionError as err:
        raise AssertionError(f"{err}; last status: {seen[-1] if seen else None}") from None
    return seen[-1]


async def wait_for_status(
    handle: WorkflowHandle[Any, Any],
    predicate: Callable[[HostOperationStatus], bool],
    what: str,
    timeout: float = 60,
) -> HostOperationStatus:
    """Wait until the operation's status satisfies `predicate`."""
    return await wait_for_query(lambda: status_of(handle), predicate, what, timeout)


async def wait_for_phase(
    handle: WorkflowHandle[Any, Any], phase: str, timeout: float = 60
) -> HostOperationStatus:
    """Wait until the operation's status reports `phase`."""
    return await wait_for_status(handle, lambda s: s.phase == phase, f"phase {phase}", timeout)


async def aborted_run(handle: WorkflowHandle[Any, Any], timeout: float = 60) -> str:
    """The words of a host operation an operator aborted (its result's `aborted`), after checking
    that it ended as asked for, not as a failure: Temporal's status COMPLETED, its Phase `aborted`."""
    result = await asyncio.wait_for(handle.result(), timeout)
    described = await handle.describe()
    assert described.status == WorkflowExecutionStatus.COMPLETED, described.status
    assert described.typed_search_attributes.get(names.PHASE) == "aborted"
    words = str(result["aborted"] if isinstance(result, dict) else result.aborted)
    assert "aborted" in words, words
    return words


def power_cycles(log: list[dict[str, Any]]) -> int:
    """Completed Off -> On cycles in a simulated BMC's power log (each reboot goes Off, then On)."""
    return sum(1 for entry in log if entry.get("to") == "Off")


async def until_powered_off(sim: RunningSim, host: str) -> None:
    """Until the host's simulated BMC has turned it Off (60 s at most)."""
    for _ in range(600):
        if any(entry.get("to") == "Off" for entry in sim.power_log(host)):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{host} was never powered off: {sim.power_log(host)}")


async def save_history(handle: WorkflowHandle[Any, Any], name: str) -> None:
    """Record the workflow's history for tests/test_replay.py when METALFLOW_RECORD_HISTORIES=1."""
    if os.environ.get(RECORD_ENV) != "1":
        return
    history = await handle.fetch_history()
    HISTORIES.mkdir(exist_ok=True)
    (HISTORIES / f"{name}.json").write_text(history.to_json())


@asynccontextmanager
async def worker_for(client: Client, task_queue: str, sim: RunningSim) -> AsyncIterator[None]:
    """The product's worker (`build_worker`: every workflow and activity) in this process, for the
    block, pointed at the simulated site."""
    settings = Settings(
        site_file=sim.site_file, kubeconfig=sim.kubeconfig, worker_takeover_seconds=takeover_seconds()
    )
    async with build_worker(client, task_queue, settings):
        yield


async def reset_by_hand(sim: RunningSim, host_id: str, reset_type: str) -> httpx.Response:
    """One Redfish `ComputerSystem.Reset` of the host's system, sent at its BMC as a person or
    another actor would (not metalflow): the BMC's answer, unchecked."""
    host = sim.host(host_id)
    user = json.loads(Path(host["bmc"]["credentials"]["file"]).read_text())
    base = host["bmc"]["endpoint"]
    async with httpx.AsyncClient(
        auth=(user["username"], user["password"]), timeout=10, verify=tls_context()
    ) as http:
        system = (await http.get(f"{base}/redfish/v1/Systems")).json()["Members"][0]["@odata.id"]
        return await http.post(f"{base}{system}/Actions/ComputerSystem.Reset", json={"ResetType": reset_type})


async def cycle_by_hand(sim: RunningSim, host_id: str) -> None:
    """Power cycle the host as someone at its BMC would (Redfish ForceOff, then On), not metalflow."""
    host = sim.host(host_id)
    user = json.loads(Path(host["bmc"]["credentials"]["file"]).read_text())
    base = host["bmc"]["endpoint"]
    async with httpx.AsyncClient(
        auth=(user["username"], user["password"]), timeout=10, verify=tls_context()
    ) as http:
        systems = (await http.get(f"{base}/redfish/v1/Systems")).json()
        system = systems["Members"][0]["@odata.id"]
        action = f"{base}{system}"  # each BMC is at the root of its own address
        for reset in ("ForceOff", "On"):
            await http.post(f"{action}/Actions/ComputerSystem.Reset", json={"ResetType": reset})

            async def reached(target: str = "Off" if reset == "ForceOff" else "On") -> bool:
                state: object = (await http.get(action)).json().get("PowerState")
                return state == target

            await eventually(reached, timeout=20, what=f"{host_id} {reset}")


async def inject_error_when_recreated(
    handle: WorkflowHandle[Any, Any], sim: RunningSim, dpu: str, body: dict[str, Any]
) -> None:
    """Put `dpu` (its DPF object's name) in Error with `body` once the operation has deleted the
    host's DPUs and DPF recreates them: the error belongs in the DPU DPF recreates."""

    async def deleted_and_recreated() -> bool:
        status = await status_of(handle)
        return status.phase not in ("resolving-inventory", "deleting-dpus", "starting")

    await eventually(deleted_and_recreated, what="the DPUs deleted")

    async def injected() -> bool:
        # 409 while the deleted one is still being deleted (the site refuses it: its deletion
        # goes on), 404 before DPF created the next.
        try:
            sim.inject(f"dpus/{dpu}/error", body)
        except httpx.HTTPStatusError as err:
            if err.response.status_code in (404, 409):
                return False
            raise
        return True

    await eventually(injected, what=f"an error injected into the recreated {dpu}")
