"""An operation's end is counted once when a signal arrives while the run completes (issue 38).

Seen on main: one `reprovision/host-003` completed and `metalflow_operations_finished_total`
showed 2. A signal arrived while the workflow task that completes the run was being worked on;
the server refused the completion (`WorkflowTaskFailed`, cause `UNHANDLED_COMMAND`) and the
retried task ran the kernel's end path (`to_the_end`) again, for real, not as a replay.

Here a workflow on the kernel's `Runbook` finishes when told; its last task is held (a
`threading.Event`, at most 1.5 s, under the deadlock detector's 2 s) until the test has sent
another signal, so the server refuses that completion. The SDK's metrics are
read from a `MetricBuffer` of the worker's runtime.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from datetime import timedelta

import pytest
from takeover_support import sticky_timeout
from temporalio import workflow
from temporalio.api.enums.v1 import WorkflowTaskFailedCause
from temporalio.client import Client
from temporalio.runtime import MetricBuffer, Runtime, TelemetryConfig
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from workflows import kernel

UNHANDLED_COMMAND = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND
ENTERED, GO = threading.Event(), threading.Event()  # this module is passed through the sandbox


@workflow.defn(sandboxed=True)
class CountedOnceWorkflow(kernel.Runbook):
    def __init__(self) -> None:
        super().__init__()
        self.operation_kind = "reprovision"
        self.told = False

    @workflow.run
    async def run(self) -> str:
        return await self.to_the_end(self._runbook, self._clean_up)

    async def _runbook(self) -> str:
        await workflow.wait_condition(lambda: self.told)
        self.enter("finishing", "told to finish")  # its INFO line, in the task the server refuses
        if not workflow.unsafe.is_replaying():
            ENTERED.set()
            GO.wait(1.5)  # hold the completing task until the test's second signal arrived (below
            # the deadlock detector's 2 s)
        return "done"

    async def _clean_up(self, err: BaseException) -> str:
        return ""

    @workflow.signal
    def finish(self) -> None:
        self.told = True

    @workflow.signal
    def noise(self) -> None:
        pass


async def test_a_signal_while_the_run_completes_counts_its_end_once(
    local_env: WorkflowEnvironment, caplog: pytest.LogCaptureFixture
) -> None:
    """Its end counted once, and its final phase's INFO line printed once (it was printed twice:
    the refused task's lines were no replay, so the SDK's replay-safe logger printed them again)."""
    caplog.set_level(logging.INFO, logger=workflow.logger.name)
    buffer = MetricBuffer(10_000)
    runtime = Runtime(telemetry=TelemetryConfig(metrics=buffer))
    client = await Client.connect(
        local_env.client.service_client.config.target_host,
        namespace=local_env.client.namespace,
        runtime=runtime,
    )
    queue = f"counted-once-{uuid.uuid4()}"
    async with Worker(
        client,
        task_queue=queue,
        workflows=[CountedOnceWorkflow],
        sticky_queue_schedule_to_start_timeout=sticky_timeout(),
    ):
        handle = await client.start_workflow(
            CountedOnceWorkflow.run, id=f"counted-once-{uuid.uuid4()}", task_queue=queue,
            task_timeout=timedelta(seconds=30),
        )  # fmt: skip
        await handle.signal(CountedOnceWorkflow.finish)
        assert await _wait(ENTERED), "the completing task never started"
        await handle.signal(CountedOnceWorkflow.noise)  # arrives while the run completes
        GO.set()
        assert await handle.result() == "done"
    history = await handle.fetch_history()
    refused = [
        e for e in history.events
        if e.HasField("workflow_task_failed_event_attributes")
        and e.workflow_task_failed_event_attributes.cause == UNHANDLED_COMMAND
    ]  # fmt: skip
    kinds = [e.event_type for e in history.events]
    assert refused, f"the server took the completion: the case did not happen ({kinds})"
    finished = [
        u for u in buffer.retrieve_updates()
        if u.metric.name == "metalflow_operations_finished" and u.attributes.get("kind") == "reprovision"
    ]  # fmt: skip
    assert sum(int(u.value) for u in finished) == 1, [(u.value, u.attributes) for u in finished]
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("finishing: told to finish")]
    assert len(said) == 1, said


async def _wait(event: threading.Event) -> bool:
    for _ in range(300):
        if event.is_set():
            return True
        await asyncio.sleep(0.1)
    return False
