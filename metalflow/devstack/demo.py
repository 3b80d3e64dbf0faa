"""The demo job `metalflow dev` runs: one `DemoWorkflow` through worker, activity, signal and query."""

from __future__ import annotations

import asyncio
import getpass
import time
from collections.abc import Callable
from datetime import UTC, datetime

from temporalio.client import Client, WorkflowHandle
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from metalflow import names
from metalflow.models.demo import DemoApproval, DemoInput, DemoPhase, DemoResult, DemoStatus
from workflows.demo import DemoWorkflow

STATUS_POLL_SECONDS = 0.2
AWAIT_PHASE_TIMEOUT = 60.0


def _operator() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers)
        return "metalflow-dev"


async def _await_phase(handle: WorkflowHandle[DemoWorkflow, DemoResult], phase: DemoPhase) -> DemoStatus:
    deadline = time.monotonic() + AWAIT_PHASE_TIMEOUT
    while True:
        status = await handle.query(DemoWorkflow.status)
        if status.phase == phase:
            return status
        if time.monotonic() > deadline:
            raise TimeoutError(f"workflow {handle.id} did not reach phase {phase} (it is in {status.phase})")
        await asyncio.sleep(STATUS_POLL_SECONDS)


async def run_demo(
    client: Client,
    workflow_url: Callable[[str], str],
    say: Callable[[str], None] = print,
    task_queue: str = names.TASK_QUEUE,
) -> DemoResult:
    """Start a demo run, query it, approve it by signal, and report its result.

    Args:
        client: A client of the stack's Temporal.
        workflow_url: Maps a workflow id to its page in the Temporal UI.
        say: Where the plain-language account goes.
        task_queue: The worker's task queue.
    """
    operator = _operator()
    workflow_id = names.demo_workflow_id(datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ"))
    began = time.monotonic()
    handle = await client.start_workflow(
        DemoWorkflow.run,
        DemoInput(requested_by=operator),
        id=workflow_id,
        task_queue=task_queue,
        search_attributes=TypedSearchAttributes([SearchAttributePair(names.OPERATION, "demo")]),
        static_summary="metalflow dev demo: worker, activity, signal, query",
    )
    say(f"demo: started workflow {workflow_id}")
    say(f"demo: watch it at {workflow_url(workflow_id)}")
    status = await _await_phase(handle, DemoPhase.AWAITING_APPROVAL)
    worker = status.worker
    if worker is not None:
        say(
            f"demo: activity describe_worker ran in worker pid {worker.pid} on {worker.hostname} "
            f"(Python {worker.python_version}, temporalio {worker.temporalio_version}, "
            f"attempt {worker.activity_attempt})"
        )
    say(f"demo: query status -> phase {status.phase.value}, requested by {status.requested_by}")
    await handle.signal(
        DemoWorkflow.approve, DemoApproval(approved_by=operator, note="approved by metalflow dev")
    )
    say(f"demo: sent signal approve as {operator}")
    result = await handle.result()
    phases = " -> ".join(phase.value for phase in result.phases)
    say(
        f"demo: workflow completed in {time.monotonic() - began:.2f} s; "
        f"phases {phases}; approved by {result.approval.approved_by}"
    )
    return result
